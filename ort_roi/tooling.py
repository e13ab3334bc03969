"""Graph tooling behind the CLI: ``validate`` a model, ``convert`` it (``graph.rewrite``),
compare a model's onnxruntime run with onnx.reference."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import numpy as np
import onnx

from .errors import RoiOpError


@dataclass
class Report:
    """The outcome of running a model in onnxruntime and in onnx.reference."""

    ok: bool = True
    problems: list[str] = field(default_factory=list)
    max_diff: float = 0.0
    outputs: dict = field(default_factory=dict)

    def fail(self, msg: str) -> None:
        self.ok = False
        self.problems.append(msg)

    def summary(self) -> str:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in self.outputs.items())
        if self.ok:
            return f"OK  ({shapes}; max |onnxruntime - reference| {self.max_diff:.2g})"
        return "FAILED: " + "; ".join(self.problems)


def compare_with_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
                           rtol: float = 1e-4, atol: float = 1e-4) -> Report:
    """Run ``model`` in onnxruntime (ort_roi front door) and in onnx.reference with
    ort_roi's kernels, and compare every output."""
    from onnx.reference import ReferenceEvaluator

    from . import reference
    from .session import InferenceSession

    rep = Report()
    try:
        sess = InferenceSession(model)
        got = sess.run(None, inputs)
    except RoiOpError as e:
        rep.fail(str(e))
        return rep
    names = [o.name for o in sess.get_outputs()]
    rep.outputs = dict(zip(names, got))
    ref = ReferenceEvaluator(model, new_ops=reference.ops_for(model)).run(None, inputs)
    for name, a, b in zip(names, got, ref):
        if a.shape != b.shape:
            rep.fail(f"output {name!r}: shape {list(a.shape)} vs reference {list(b.shape)}")
            continue
        if a.size:
            rep.max_diff = max(rep.max_diff, float(np.nanmax(np.abs(a - b))))
        if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            rep.fail(f"output {name!r} differs from the reference by {rep.max_diff:.3g}")
    return rep


def validate(model: onnx.ModelProto | str, r: int = 6, seed: int = 0,
             notes: list[str] | None = None) -> list[tuple[str, str]]:
    """Check a model that uses ort_roi ops or nodes of other exporters; returns (step,
    problem) pairs, and appends to ``notes`` what is worth knowing but no failure.

    Steps: our attribute rules (node and attribute named), the ONNX checker (full), strict
    shape inference, and a run in onnxruntime with generated inputs compared with the NumPy
    kernels through onnx.reference. Graph outputs that carry no shape (onnxruntime runs
    such graphs; onnx's full check refuses them) are checked with their inferred shapes, and
    said so in a note. An empty list means the model is clean.
    """
    from .examples import generate_inputs
    from .session import prepare_model

    notes = [] if notes is None else notes
    try:
        m = onnx.load(model) if isinstance(model, str) else model
    except Exception as e:  # noqa: BLE001 - any load failure is the finding
        return [("load", f"cannot read the model: {e}")]
    try:  # our rules first: they name the node
        c = _copy(m)
        done = prepare_model(c, exact_floats=False)  # the rewrite pass: what will run
    except Exception as e:  # noqa: BLE001 - the first failure is the finding
        return [("attributes", _first_line(e))]
    if done.moved:
        notes.append(f"checked as ort-roi convert rewrites it ({len(done.moved)} node(s) of "
                     f"onnxruntime's or of exporters moved into ort_roi)")
    steps = [("checker", lambda: _check(c, notes)),
             ("shapes", lambda: onnx.shape_inference.infer_shapes(c, check_type=True,
                                                                  strict_mode=True))]
    for step, fn in steps:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the first failure is the finding
            return [(step, _first_line(e))]
    rep = compare_with_reference(c, generate_inputs(c, r, seed))
    return [("run", p) for p in rep.problems]


def _check(m: onnx.ModelProto, notes: list[str]) -> None:
    """The ONNX checker (full); outputs that carry no shape take their inferred shapes."""
    bare = [o.name for o in m.graph.output if not o.type.tensor_type.HasField("shape")]
    if not bare:
        onnx.checker.check_model(m, full_check=True)
        return
    inferred = onnx.shape_inference.infer_shapes(m)
    still = [o.name for o in inferred.graph.output if not o.type.tensor_type.HasField("shape")]
    head = (f"graph output(s) {', '.join(bare)} carry no shape (onnxruntime runs such a "
            f"graph; onnx's full check refuses it)")
    if still:
        notes.append(f"{head}: none could be inferred for {', '.join(still)}, so the "
                     f"checker ran without its full check")
        onnx.checker.check_model(inferred)
    else:
        notes.append(f"{head}: checked with the inferred shapes")
        onnx.checker.check_model(inferred, full_check=True)


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    context = [ln for ln in lines if "node" in ln.lower() and ln is not lines[0]]
    return "; ".join(lines[:1] + context[:1]) or type(e).__name__


def cmd_validate(args: argparse.Namespace) -> int:
    """Check MODEL: ONNX checker, attributes, shape inference, a run vs the NumPy kernels."""
    bad = 0
    for path in args.models:
        notes: list[str] = []
        problems = validate(path, r=args.rois, notes=notes)
        print(f"{path}: {'OK' if not problems else 'FAILED'}")
        for step, msg in problems:
            print(f"  {step}: {msg}")
        for msg in notes:
            print(f"  note: {msg}")
        bad += bool(problems)
    return 1 if bad else 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Rewrite a graph so that a plain onnxruntime session with ort_roi runs it: ONNX
    RoiAlign / MaxRoiPool into ort_roi, exporters' nodes with every attribute (--to onnx:
    ort_roi RoiAlign / ROIPooling max back to ONNX)."""
    try:
        m = onnx.load(args.input)
    except Exception as e:  # noqa: BLE001 - a missing file or not a model: say which
        print(f"ort-roi convert: cannot read the model {args.input}: {_first_line(e)}",
              file=sys.stderr)
        return 1
    from .graph import rewrite

    try:
        done = rewrite(m, to=args.to, roialign_max=args.roialign_max)
        onnx.save(m, args.output)
    except (ValueError, OSError) as e:
        print(f"ort-roi convert: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a defect of ours: still a message, not a traceback
        print(f"ort-roi convert: internal error {type(e).__name__}: {e} (please report it)",
              file=sys.stderr)
        return 1
    print(f"{args.input} -> {args.output}: {len(done.moved)} node(s) rewritten "
          f"({done.summary()}); every node of ort_roi or another exporter has its attributes "
          f"explicit")
    for note in done.notes:
        print(f"  note: {note}")
    return 0


def add_commands(sub) -> None:
    """Attach the tooling commands (validate, convert, bench) to the ort-roi parser."""
    from . import bench

    p = sub.add_parser("validate", help=cmd_validate.__doc__)
    p.add_argument("models", nargs="+", metavar="MODEL")
    p.add_argument("--rois", type=int, default=6, help="boxes in the generated inputs")
    p.set_defaults(fn=cmd_validate)
    p = sub.add_parser("convert", help=cmd_convert.__doc__)
    p.add_argument("input", metavar="IN")
    p.add_argument("output", metavar="OUT")
    p.add_argument("--to", choices=("ort_roi", "onnx"), default="ort_roi",
                   help="ort_roi: RoiAlign / MaxRoiPool -> ort_roi (default); onnx: the reverse")
    p.add_argument("--roialign-max", choices=("sample", "onnx"), default="sample",
                   help="ONNX RoiAlign mode=max as the largest bilinear sample (sample, the "
                        "default: mmcv, OpenVINO) or as onnxruntime computes it (onnx)")
    p.set_defaults(fn=cmd_convert)
    bench.add_command(sub)
