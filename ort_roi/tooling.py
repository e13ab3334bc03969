"""Graph tooling behind the CLI: ``validate`` a model, ``convert`` MaxRoiPool nodes, compare a
model's onnxruntime run with onnx.reference."""

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
    ref = ReferenceEvaluator(model, new_ops=reference.OPS).run(None, inputs)
    for name, a, b in zip(names, got, ref):
        if a.shape != b.shape:
            rep.fail(f"output {name!r}: shape {list(a.shape)} vs reference {list(b.shape)}")
            continue
        if a.size:
            rep.max_diff = max(rep.max_diff, float(np.nanmax(np.abs(a - b))))
        if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            rep.fail(f"output {name!r} differs from the reference by {rep.max_diff:.3g}")
    return rep


def validate(model: onnx.ModelProto | str, r: int = 6, seed: int = 0) -> list[tuple[str, str]]:
    """Check a model that uses ort_roi (or mmdeploy) ops; returns (step, problem) pairs.

    Steps: the ONNX checker (full), our attribute rules (node and attribute named), strict
    shape inference, and a run in onnxruntime with generated inputs compared with the NumPy
    kernels through onnx.reference. An empty list means the model is clean.
    """
    from .examples import generate_inputs
    from .session import prepare_model

    try:
        m = onnx.load(model) if isinstance(model, str) else model
    except Exception as e:  # noqa: BLE001 - any load failure is the finding
        return [("load", f"cannot read the model: {e}")]
    steps = [  # our rules first: they name the node; the first failing step is reported
        ("attributes", lambda: prepare_model(_copy(m), exact_floats=False)),
        ("checker", lambda: onnx.checker.check_model(m, full_check=True)),
        ("shapes", lambda: onnx.shape_inference.infer_shapes(m, check_type=True,
                                                             strict_mode=True)),
    ]
    for step, fn in steps:
        try:
            fn()
        except Exception as e:  # noqa: BLE001 - the first failure is the finding
            return [(step, _first_line(e))]
    rep = compare_with_reference(m, generate_inputs(m, r, seed))
    return [("run", p) for p in rep.problems]


def _copy(m: onnx.ModelProto) -> onnx.ModelProto:
    c = onnx.ModelProto()
    c.CopyFrom(m)
    return c


def _first_line(e: Exception) -> str:
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    context = [ln for ln in lines if "node" in ln.lower() and ln is not lines[0]]
    return "; ".join(lines[:1] + context[:1]) or type(e).__name__


def convert(model: onnx.ModelProto, to: str = "ort_roi") -> tuple[onnx.ModelProto, int]:
    """Rewrite ONNX MaxRoiPool nodes as ort_roi ROIPooling(method=max) (``to="ort_roi"``),
    or ROIPooling max nodes back to MaxRoiPool (``to="onnx"``); the arithmetic is the same,
    so outputs are identical. Bilinear ROIPooling has no ONNX equivalent and is left as is.
    Returns the new model and the number of nodes rewritten."""
    from . import builders
    from .session import iter_nodes, node_attrs
    from .specs import DOMAIN, ROI_POOLING

    if to not in ("ort_roi", "onnx"):
        raise ValueError(f"convert: 'to' must be 'ort_roi' or 'onnx', got {to!r}")
    m = _copy(model)
    count = 0
    for node in iter_nodes(m.graph):
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if to == "ort_roi" and node.op_type == "MaxRoiPool" and node.domain in ("", "ai.onnx"):
            if len(attrs.get("pooled_shape", ())) != 2:
                raise ValueError(f"MaxRoiPool node {node.name!r}: attribute 'pooled_shape' "
                                 f"must hold 2 ints, got {attrs.get('pooled_shape')!r}")
            ph, pw = attrs["pooled_shape"]
            new = builders.roi_pooling(*node.input, *node.output, name=node.name or None,
                                       pooled_h=ph, pooled_w=pw,
                                       spatial_scale=attrs.get("spatial_scale", 1.0),
                                       method="max")
        elif (to == "onnx" and node.op_type == "ROIPooling" and node.domain == DOMAIN
              and attrs.get("method", b"max") in (b"max", "max")):
            a = node_attrs(node, ROI_POOLING)  # checked as the front door checks it
            new = onnx.helper.make_node(
                "MaxRoiPool", list(node.input), list(node.output), name=node.name or None,
                pooled_shape=[a["pooled_h"], a["pooled_w"]], spatial_scale=a["spatial_scale"])
        else:
            continue
        node.CopyFrom(new)
        count += 1
    used = {n.domain for n in iter_nodes(m.graph)}
    imports = [o for o in m.opset_import if o.domain in used or o.domain in ("", "ai.onnx")]
    if DOMAIN in used and all(o.domain != DOMAIN for o in imports):
        imports.append(onnx.helper.make_opsetid(DOMAIN, builders.OPSET_VERSION))
    del m.opset_import[:]
    m.opset_import.extend(imports)
    return m, count


def cmd_validate(args: argparse.Namespace) -> int:
    """Check MODEL: ONNX checker, attributes, shape inference, a run vs the NumPy kernels."""
    bad = 0
    for path in args.models:
        problems = validate(path, r=args.rois)
        print(f"{path}: {'OK' if not problems else 'FAILED'}")
        for step, msg in problems:
            print(f"  {step}: {msg}")
        bad += bool(problems)
    return 1 if bad else 0


def cmd_convert(args: argparse.Namespace) -> int:
    """Rewrite MaxRoiPool nodes as ort_roi ROIPooling (or back with --to onnx)."""
    try:
        m = onnx.load(args.input)
    except Exception as e:  # noqa: BLE001 - a missing file or not a model: say which
        print(f"ort-roi convert: cannot read the model {args.input}: {_first_line(e)}",
              file=sys.stderr)
        return 1
    try:
        m, n = convert(m, to=args.to)
        onnx.save(m, args.output)
    except (ValueError, OSError) as e:
        print(f"ort-roi convert: {e}", file=sys.stderr)
        return 1
    print(f"{args.input} -> {args.output}: {n} node(s) rewritten "
          f"({'MaxRoiPool -> ort_roi.ROIPooling' if args.to == 'ort_roi' else 'ROIPooling -> MaxRoiPool'})")
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
                   help="ort_roi: MaxRoiPool -> ROIPooling (default); onnx: the reverse")
    p.set_defaults(fn=cmd_convert)
    bench.add_command(sub)
