"""``ort-roi validate``'s answer (``Validation``: its verdict OK, DIFFERS, UNCHECKED or FAILED
and their exit statuses, ``EXIT``) and how it is said (``print_validation``): the verdict
line of each model, its findings, and what convert would change, measured
(``effect.Effect``)."""

from __future__ import annotations

from dataclasses import dataclass, field

from .compare import ATOL, RTOL
from .effect import Effect

PLAIN = "a plain onnxruntime session with ort_roi.session_options()"

#: The verdicts, worst first, and the exit status of each (several models: the worst's).
#: DEFECT: the model runs as it is, but what ``ort-roi convert`` makes of it fails or computes
#: otherwise (a defect of ort_roi's, or a difference it could not clear): keep the original.
EXIT = {"FAILED": 1, "DEFECT": 5, "DIFFERS": 3, "UNCHECKED": 4, "OK": 0}


@dataclass
class Validation:
    """The answer of ``ort-roi validate``: does a plain onnxruntime session with
    ``ort_roi.session_options()`` run the file as it is, does it compute what it should, and
    what would ``ort-roi convert`` change.

    ``problems``: (step, message) pairs, empty when the answer is yes (step "inputs": the
    generated inputs could not satisfy the graph, which is no finding about the model);
    ``notes``: what is worth knowing but no failure; ``compared``: one line per RoI node whose
    output equals its definition (what was compared); ``runnable``: whether a plain session
    runs it as it is; ``roi_nodes``: the RoI nodes (of any form) in it; ``after_convert``:
    when a plain session cannot run it, the same check of what ``ort-roi convert`` makes of
    it; ``effect``: when it runs as it is and convert would change it, what convert changes,
    measured on the same inputs (``effect.Effect``).
    """

    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    compared: list[str] = field(default_factory=list)
    runnable: bool = True
    roi_nodes: int = 0
    after_convert: "Validation | None" = None
    effect: Effect | None = None
    given: list[str] = field(default_factory=list)
    unexercised: list[str] = field(default_factory=list)

    @property
    def exercised(self) -> str:
        """"K of N RoI node(s) exercised" (those the run gave boxes, compared with their
        definitions), or "" where no node was to be compared."""
        failed = sum(step == "definition" for step, _ in self.problems)
        n = len(self.compared) + failed + len(self.unexercised)
        return f"{len(self.compared) + failed} of {n} RoI node(s) exercised" if n else ""

    @property
    def ok(self) -> bool:
        return not self.problems

    @property
    def verdict(self) -> str:
        """FAILED (the model fails a check), UNCHECKED (the generated inputs could not satisfy
        the graph: give your own), DEFECT (the model runs as it is, but what convert makes of
        it fails or computes otherwise, and no rewritten node was cleared of it), DIFFERS (a plain session runs it, but convert would change
        what it computes: the exporter's form read otherwise than its framework computes it)
        or OK."""
        if any(step != "inputs" for step, _ in self.problems):
            return "FAILED"
        if self.problems or (self.unexercised and not self.compared):  # nothing compared
            return "UNCHECKED"
        if self.effect is not None and self.effect.defect:
            return "DEFECT"
        if self.effect is not None and self.effect.rewrite.repairs:
            return "DIFFERS"
        return "OK"



def print_validation(path: str, v: Validation, inputs_file: str | None = None) -> None:
    """Print ``ort-roi validate``'s answer for one model: the verdict line, then each problem,
    each node compared, the notes, what convert would change (measured) and, for a graph a
    plain session cannot run, the same of the converted graph.

    Args:
        path: the model's file, as named.
        v: the answer.
        inputs_file: the ``--inputs`` file, where one was given (named in the verdict line
            where its arrays do not fit the graph).
    """
    verdict = v.verdict
    load = [msg for step, msg in v.problems if step == "load"]
    if load:  # the file itself: no such file, not a model, ...
        print(f"{path}: FAILED: {load[0].removeprefix(path + ': ')}")
        return
    counted = f" ({v.exercised})" if v.exercised else ""
    if verdict == "OK":
        print(f"{path}: OK: {PLAIN} runs it as it is{counted}"
              + ("; the RoI nodes the run gave no boxes are not checked" if v.unexercised
                 else ""))
    elif verdict == "UNCHECKED" and not v.problems:
        print(f"{path}: UNCHECKED: {PLAIN} runs it, but no RoI node got a box from these "
              f"inputs ({v.exercised}): nothing was compared (no finding about the model): "
              f"give inputs that reach them with --inputs FILE.npz")
    elif verdict == "UNCHECKED" and inputs_file and any(
            step == "inputs" and msg.startswith("--inputs") for step, msg in v.problems):
        print(f"{path}: UNCHECKED: the inputs given ({inputs_file}) do not fit this graph "
              f"(no finding about the model)")
    elif verdict == "UNCHECKED":
        print(f"{path}: UNCHECKED: the generated inputs cannot satisfy this graph (no finding "
              f"about the model): give your own with --inputs FILE.npz")
    elif verdict == "DEFECT":
        e = v.effect
        why = ("fails" if e.error is not None else
               "computes otherwise" + (" at a rewritten node" if e.at_rewrite else
                                       ", and not every rewritten node could be judged"))
        print(f"{path}: DEFECT: {PLAIN} runs it as it is{counted}, but what `ort-roi convert` "
              f"makes of it {why}: a defect of ort_roi's (please report it): keep the graph as "
              f"it is")
    elif verdict == "DIFFERS":
        print(f"{path}: DIFFERS: {PLAIN} runs it as it is{counted}, but not as its exporter's "
              f"framework computes it: run `ort-roi convert {path} OUT`")
    elif not v.runnable:
        print(f"{path}: FAILED: {PLAIN} cannot run it as it is")
    else:
        print(f"{path}: FAILED")
    _print_lines(v, "  ")
    if v.effect is not None:
        _print_effect(v.effect, "  ")
    a = v.after_convert
    if a is not None:
        counted = f" ({a.exercised})" if a.exercised else ""
        verdict = {"OK": f"OK, a plain session runs it{counted}",  # (no effect: no DIFFERS)
                   "UNCHECKED": (f"UNCHECKED (no RoI node got a box{counted}: nothing compared)"
                                 if not a.problems else
                                 "UNCHECKED (the generated inputs cannot satisfy it: give your "
                                 "own with --inputs FILE.npz)")}.get(a.verdict, "FAILED")
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
        if e.rounding is not None:
            print(f"{indent}  ({e.rounding})")
        elif e.at_rewrite:
            print(f"{indent}  (a rewrite that should compute the same changed them: "
                  + "; ".join(e.at_rewrite) + ": a defect of ort_roi's, please report it; the "
                  "model as it is is not affected)")
        elif not done.repairs:
            print(f"{indent}  (a rewrite that should compute the same changed them, and which "
                  f"rewritten node did could not be told: a defect of ort_roi's until shown "
                  f"otherwise, please report it; the model as it is is not affected)")
        for line in e.untraced:
            print(f"{indent}  not judged: {line}")
    else:
        print(f"{indent}  on these inputs the converted graph's outputs are the same (max "
              f"|diff| {e.max_diff:.3g}, within {ATOL:g} + {RTOL:g} x |value|)"
              + ("; they differ where the readings part (the inputs did not reach it)"
                 if done.repairs else ""))
    if e.speedup is not None:
        slower = (": convert it for what it computes, not for speed" if done.repairs else
                  ": it computes the same, so convert gains nothing here")
        how = (f"the converted graph ran {e.speedup:.2f}x as fast" if e.speedup >= 1.05 else
               f"the converted graph ran {1 / e.speedup:.2f}x slower{slower}"
               if e.speedup <= 1 / 1.05 else "about as fast")
        print(f"{indent}  speed on these inputs: {seconds(e.native_s)} as it is, "
              f"{seconds(e.converted_s)} converted ({how}; "
              + ("one round each: a rough measure" if e.rounds == 1 else
                 f"median of {e.rounds} interleaved rounds") + ")")
    for note in done.notes:
        print(f"{indent}  note: {note}")


def seconds(t: float) -> str:
    """A time in words people read: "0.148 ms", "12.4 ms", "10.2 s".

    Args:
        t: seconds.

    Returns:
        the words.
    """
    if t >= 1:
        return f"{t:.3g} s" if t < 1000 else f"{t:.0f} s"
    return f"{t * 1e3:.3g} ms"


def _print_lines(v: Validation, indent: str) -> None:
    for step, msg in v.problems:  # a message of several lines (onnxruntime's) stays whole
        print(f"{indent}{step}: " + msg.replace("\n", "\n" + indent + "  "))
    for msg in v.compared + v.unexercised:
        print(f"{indent}{msg}")
    for msg in v.notes:
        print(f"{indent}note: {msg}")
