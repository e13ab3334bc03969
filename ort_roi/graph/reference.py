"""ort_roi ops for ``onnx.reference.ReferenceEvaluator``, computed by the readable
definitions (ort_roi.definitions), not by the fast kernels: a graph's run in onnxruntime
compared with this is the kernels compared with the definitions.

    from onnx.reference import ReferenceEvaluator
    from ort_roi.graph import reference
    ref = ReferenceEvaluator(model, new_ops=reference.ops_for(model))

ReferenceEvaluator needs op names unique across domains, so it is handed the classes of
the node forms a model uses (``OPS``: those of the ort_roi domain).

One node at a time (``ort-roi validate``): ``node_definition`` says which op and attributes
define what a node computes (ours as it is; a node onnxruntime runs natively as ``ort-roi
convert`` would rewrite it), ``select_rows`` takes some boxes' rows of its inputs (the
outputs' rows are those boxes' rows) and ``run_definition`` computes them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.reference.op_run import OpRun

from ..ops import FORMS, define, form
from ..spec import DOMAIN, NodeForm, OpSpec
from .nodes import iter_nodes, node_attrs, plain
from .rewrite import rewrite


def _op_class(f: NodeForm) -> type[OpRun]:
    spec = f.spec

    def _run(self, *inputs, **attrs):
        attrs = spec.resolve({k: plain(v) for k, v in attrs.items() if v is not None})
        return run_definition(spec, attrs, list(inputs))

    return type(f.op_type, (OpRun,), {"op_domain": f.domain, "_run": _run,
                                      "__doc__": f"{f.domain}::{f.op_type}: {spec.doc}"})


_CLASSES = {f.key: _op_class(f) for f in FORMS if f.registered}

#: One OpRun class per op of the ort_roi domain.
OPS: list[type[OpRun]] = [c for (d, _), c in _CLASSES.items() if d == DOMAIN]


def ops_for(model: onnx.ModelProto) -> list[type[OpRun]]:
    """The OpRun classes of the registered node forms ``model`` uses."""
    used = {(n.domain, n.op_type) for n in iter_nodes(model.graph)}
    classes = [c for key, c in _CLASSES.items() if key in used]
    names = [c.__name__ for c in classes]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"onnx.reference cannot evaluate a model that uses {sorted(dup)[0]} "
                         f"of two domains")
    return classes


def run_definition(spec: OpSpec, attrs: dict[str, Any],
                   inputs: list[np.ndarray]) -> tuple[np.ndarray, ...]:
    """What ``spec``'s definition (ort_roi.definitions) computes.

    Args:
        spec: the op.
        attrs: its attributes, checked and complete (``spec.resolve``).
        inputs: its inputs in the spec's order.

    Returns:
        its outputs, in the spec's order.
    """
    y = define(spec, *inputs, **attrs)
    return y if isinstance(y, tuple) else (y,)


def node_definition(node: onnx.NodeProto, onnx_opset: int) -> tuple[OpSpec, dict[str, Any]]:
    """The op and attributes that define what a RoI node computes.

    A node the bridge runs (a registered form) is its own spec; a node onnxruntime runs on
    its own kernel (ONNX RoiAlign, MaxRoiPool) is what ``ort-roi convert`` rewrites it into,
    with ONNX RoiAlign's mode "max" read as onnxruntime computes it (``roialign_max="onnx"``).

    Args:
        node: a node of a form ort_roi knows (``ops.form``).
        onnx_opset: the model's default-domain opset (some attributes depend on it).

    Returns:
        (spec, attributes checked and complete). Raises RoiOpError naming the node.
    """
    f = form(node.domain, node.op_type)
    if f is None:
        raise ValueError(f"{node.domain or 'onnx'}::{node.op_type} is no RoI node")
    if f.registered:
        return f.spec, node_attrs(node, f.spec)
    one = helper.make_model(helper.make_graph([node], "one", [], []),
                            opset_imports=[helper.make_opsetid("", onnx_opset)])
    rewrite(one, "ort_roi", roialign_max="onnx", fuse=False)
    ours = one.graph.node[0]
    spec = form(ours.domain, ours.op_type).spec
    return spec, node_attrs(ours, spec)


def select_rows(spec: OpSpec, inputs: list[np.ndarray], rows: np.ndarray) -> list[np.ndarray]:
    """The inputs of ``spec`` for the boxes ``rows`` only (in increasing order): every input
    with a row per box ([R, ...]: boxes, batch indices, levels, per-box maps) those rows, a
    count per image ([N]) the counts of those rows, the others (feature maps, the image size)
    whole. Each output row of a RoI op depends on its box's rows alone, so the outputs for
    these inputs are the full outputs' ``rows``.

    Args:
        spec: the op.
        inputs: its inputs, in the spec's order.
        rows: indices of boxes, increasing.

    Returns:
        the inputs for those boxes.
    """
    out = []
    for inp, a in zip(spec.inputs, inputs):
        if inp.shape.startswith("[R"):
            out.append(a[rows])
        elif inp.shape == "[N]":  # counts per image, boxes in image order
            image = np.repeat(np.arange(len(a)), np.asarray(a, np.int64))
            out.append(np.bincount(image[rows], minlength=len(a)).astype(a.dtype))
        else:
            out.append(a)
    return out
