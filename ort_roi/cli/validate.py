"""``ort-roi validate`` (does a plain onnxruntime session with ort_roi.session_options() run
the file as it is?) and ``ort-roi convert`` (the rewrite pass, graph/rewrite.py)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field

import onnx

from ..errors import RoiOpError, node_label
from ..graph.inputs import generate_inputs
from ..graph.nodes import given_attrs, iter_nodes, node_attrs
from ..graph.rewrite import rewrite
from ..runtime.probe import plain_session_error
from ..specs import form
from .compare import compare_with_reference


PLAIN = "a plain onnxruntime session with ort_roi.session_options()"


@dataclass
class Validation:
    """The answer of ``ort-roi validate``: does a plain onnxruntime session with
    ``ort_roi.session_options()`` run the file as it is, and does it compute what it should.

    ``problems``: (step, message) pairs, empty when the answer is yes; ``notes``: what is
    worth knowing but no failure; ``runnable``: whether a plain session runs it as it is;
    ``roi_nodes``: the RoI nodes (of any form) in it; ``after_convert``: when a plain session
    cannot run it, the same check of what ``ort-roi convert`` makes of it.
    """

    problems: list[tuple[str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    runnable: bool = True
    roi_nodes: int = 0
    after_convert: "Validation | None" = None

    @property
    def ok(self) -> bool:
        return not self.problems


def validate(model: onnx.ModelProto | str, r: int = 6, seed: int = 0) -> Validation:
    """Check a model: can a plain onnxruntime session with ``ort_roi.session_options()`` run
    it as it is (every RoI node named with what to do when not), do our attribute rules,
    onnx's checker (full) and strict shape inference accept it, and does a run with generated
    inputs (following the declared shapes) match onnx.reference with ort_roi's ops. Graph
    outputs that carry no shape (onnxruntime runs such graphs; onnx's full check refuses
    them) are checked with their inferred shapes, said in a note. A graph a plain session
    cannot run is also checked as ``ort-roi convert`` rewrites it (``after_convert``)."""
    v = Validation()
    try:
        m = onnx.load(model) if isinstance(model, str) else model
    except Exception as e:  # noqa: BLE001 - any load failure is the finding
        v.problems.append(("load", f"cannot read the model: {_first_line(e)}"))
        v.runnable = False
        return v
    v.roi_nodes = _plain_session_check(m, v)
    if v.roi_nodes == 0:
        v.notes.append("no RoI node (no node of a form ort_roi runs): nothing here for ort_roi")
    if not v.runnable:
        c = _copy(m)
        try:
            done = rewrite(c, "ort_roi")
        except Exception as e:  # noqa: BLE001 - the rewrite's refusal names the node
            v.after_convert = Validation(problems=[("convert", _first_line(e))], runnable=False)
            return v
        v.after_convert = Validation(roi_nodes=v.roi_nodes, notes=list(done.notes))
        _check_and_run(c, v.after_convert, r, seed)
        return v
    _check_and_run(m, v, r, seed)
    return v


def _plain_session_check(m: onnx.ModelProto, v: Validation) -> int:
    """Name every RoI node a plain session cannot run as it is and what to do; then ask
    onnxruntime itself. Returns the number of RoI nodes."""
    fix = "run `ort-roi convert IN OUT` (or use ort_roi.InferenceSession)"
    n = 0
    for node in iter_nodes(m.graph):
        f = form(node.domain, node.op_type)
        if f is None:
            continue
        n += 1
        what = f"node {node_label(node)!r} ({f.domain or 'onnx'}::{f.op_type})"
        if f.registered:
            try:
                node_attrs(node, f.spec)
            except RoiOpError as e:
                v.problems.append(("attributes", str(e)))
                continue
            missing = [a.name for a in f.spec.attrs if a.name not in given_attrs(node)]
            if missing:
                v.problems.append(("plain session", f"{what} omits the attribute(s) "
                                   f"{', '.join(missing)}; onnxruntime requires every "
                                   f"attribute of a Python op: {fix}, which writes their "
                                   f"defaults"))
        elif f.guard_levels:
            v.problems.append(("plain session", f"{what}: the exported node has a variable "
                               f"number of inputs and list attributes, which a Python op "
                               f"cannot declare; {fix}, which rewrites it as ort_roi's "
                               f"fixed-arity op"))
        else:
            v.notes.append(f"{what} runs on onnxruntime's own kernel; `ort-roi convert` moves "
                           f"it into ort_roi")
            if f.two_maxes and given_attrs(node).get("mode") == "max":
                v.notes.append(f"{what}: onnxruntime computes mode=max as the largest weighted "
                               f"corner of any sample (onnxruntime issue 6146), not the largest "
                               f"sample that mmcv and OpenVINO compute")
    if not v.problems:
        why = plain_session_error(m)
        if why is not None:
            v.problems.append(("plain session", f"onnxruntime refuses it: {why}" +
                               (f"; {fix}" if n else "")))
    v.runnable = not v.problems
    return n


def _check_and_run(m: onnx.ModelProto, v: Validation, r: int, seed: int) -> None:
    steps = [("checker", lambda: _check(m, v.notes)),
             ("shapes", lambda: onnx.shape_inference.infer_shapes(m, check_type=True,
                                                                  strict_mode=True))]
    for step, fn in steps:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the first failure is the finding
            v.problems.append((step, _first_line(e)))
            return
    try:
        rep = compare_with_reference(m, generate_inputs(m, r, seed), plain=True)
    except Exception as e:  # noqa: BLE001 - any failure of the run step is a message
        v.problems.append(("run", f"{type(e).__name__}: {_first_line(e)}"))
        return
    v.problems += [("run", p) for p in rep.problems]
    if rep.ok:
        v.notes.append(f"generated inputs ({', '.join(f'{k} {list(a.shape)}' for k, a in rep.inputs.items())}): "
                       f"every output matches onnx.reference, max |diff| {rep.max_diff:.2g}")


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
    """Does a plain onnxruntime session with ort_roi.session_options() run MODEL as it is?
    Every RoI node it cannot run is named with what to do; then onnx's checker, shape
    inference and a run with generated inputs against onnx.reference."""
    bad = 0
    for path in args.models:
        v = validate(path, r=args.rois)
        _print_validation(path, v)
        bad += not v.ok
    return 1 if bad else 0


def _print_validation(path: str, v: Validation) -> None:
    if v.ok:
        print(f"{path}: OK: {PLAIN} runs it as it is")
    elif not v.runnable:
        print(f"{path}: FAILED: {PLAIN} cannot run it as it is")
    else:
        print(f"{path}: FAILED")
    for step, msg in v.problems:
        print(f"  {step}: {msg}")
    for msg in v.notes:
        print(f"  note: {msg}")
    a = v.after_convert
    if a is not None:
        verdict = "OK, a plain session runs it" if a.ok else "FAILED"
        print(f"  after `ort-roi convert`: {verdict}")
        for step, msg in a.problems:
            print(f"    {step}: {msg}")
        for msg in a.notes:
            print(f"    note: {msg}")


def cmd_convert(args: argparse.Namespace) -> int:
    """Rewrite a graph so that a plain onnxruntime session with ort_roi runs it: ONNX
    RoiAlign / MaxRoiPool into ort_roi, torchvision's exported MultiScaleRoIAlign stages
    into one PyramidRoIAlign node each, exporters' nodes with every attribute (--to onnx: ort_roi
    RoiAlign / ROIPooling max and the fused stages back to standard ONNX)."""
    try:
        m = onnx.load(args.input)
    except Exception as e:  # noqa: BLE001 - a missing file or not a model: say which
        print(f"ort-roi convert: cannot read the model {args.input}: {_first_line(e)}",
              file=sys.stderr)
        return 1
    try:
        done = rewrite(m, to=args.to, roialign_max=args.roialign_max, fuse=args.fuse)
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
    """Attach validate and convert to the ort-roi parser."""
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
    p.add_argument("--no-fuse", dest="fuse", action="store_false",
                   help="leave torchvision's MultiScaleRoIAlign stages node by node (each "
                        "RoiAlign still moved) instead of one PyramidRoIAlign node")
    p.set_defaults(fn=cmd_convert)
