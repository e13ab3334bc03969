"""How ``ort-roi validate`` says its answer (``print_validation``): the verdict line of each
model (OK, DIFFERS, UNCHECKED, FAILED: ``Validation.verdict``), its findings, and what convert
would change, measured (``effect.Effect``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .compare import ATOL, RTOL
from .effect import Effect

if TYPE_CHECKING:
    from .validate import Validation

PLAIN = "a plain onnxruntime session with ort_roi.session_options()"


def print_validation(path: str, v: "Validation") -> None:
    """Print ``ort-roi validate``'s answer for one model: the verdict line, then each problem,
    each node compared, the notes, what convert would change (measured) and, for a graph a
    plain session cannot run, the same of the converted graph."""
    verdict = v.verdict
    load = [msg for step, msg in v.problems if step == "load"]
    if load:  # the file itself: no such file, not a model, ...
        print(f"{path}: FAILED: {load[0].removeprefix(path + ': ')}")
        return
    if verdict == "OK":
        print(f"{path}: OK: {PLAIN} runs it as it is")
    elif verdict == "UNCHECKED":
        print(f"{path}: UNCHECKED: the generated inputs cannot satisfy this graph (no finding "
              f"about the model): give your own with --inputs FILE.npz")
    elif verdict == "DIFFERS":
        print(f"{path}: DIFFERS: {PLAIN} runs it as it is, but not as its exporter's framework "
              f"computes it: run `ort-roi convert {path} OUT`")
    elif not v.runnable:
        print(f"{path}: FAILED: {PLAIN} cannot run it as it is")
    else:
        print(f"{path}: FAILED")
    _print_lines(v, "  ")
    if v.effect is not None:
        _print_effect(v.effect, "  ")
    a = v.after_convert
    if a is not None:
        verdict = "OK, a plain session runs it" if a.ok else "FAILED"
        print(f"  after `ort-roi convert`: {verdict}")
        _print_lines(a, "    ")


def _print_effect(e: Effect, indent: str) -> None:
    """What convert changes: the moves, the repairs and the measured differences and speed."""
    done = e.rewrite
    print(f"{indent}convert would: {done.summary()}")
    for line in done.repairs:
        print(f"{indent}  changes what it computes: {line}")
    if e.error is not None:
        print(f"{indent}  the converted graph could not be compared on these inputs: {e.error} "
              f"(a defect of ort_roi's: please report it; the model as it is is not affected)")
    elif e.differs:
        print(f"{indent}  on these inputs the converted graph's outputs differ: "
              + "; ".join(e.differs))
        if not done.repairs:
            print(f"{indent}  (a rewrite that should compute the same changed them: a defect of "
                  f"ort_roi's, please report it; the model as it is is not affected)")
    else:
        print(f"{indent}  on these inputs the converted graph's outputs are the same (max "
              f"|diff| {e.max_diff:.3g}, within {ATOL:g} + {RTOL:g} x |value|)"
              + ("; they differ where the readings part (the inputs did not reach it)"
                 if done.repairs else ""))
    if e.speedup is not None:
        print(f"{indent}  speed on these inputs: {e.native_s * 1e3:.3g} ms as it is, "
              f"{e.converted_s * 1e3:.3g} ms converted ({e.speedup:.2f}x)")
    for note in done.notes:
        print(f"{indent}  note: {note}")


def _print_lines(v: "Validation", indent: str) -> None:
    for step, msg in v.problems:  # a message of several lines (onnxruntime's) stays whole
        print(f"{indent}{step}: " + msg.replace("\n", "\n" + indent + "  "))
    for msg in v.compared:
        print(f"{indent}{msg}")
    for msg in v.notes:
        print(f"{indent}note: {msg}")
