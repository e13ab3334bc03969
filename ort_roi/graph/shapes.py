"""The inferred shapes of ort_roi's nodes written into a converted model (``value_info``).

onnxruntime runs a graph whose custom nodes' outputs carry no type, but execution providers
that compile subgraphs need the rank of each tensor fed to them: onnxruntime's OpenVINO
execution provider refuses a subgraph fed by a custom op's output of unknown rank
("Parameter operation with dynamic rank"). ``convert`` (and ``ort-roi convert``,
``paddle_export``) therefore write, for every output of a node the bridge runs (a registered
form: ort_roi's own ops and the exporters' nodes it runs as they are), the type onnx's shape
inference gives it through the ops' schemas (``graph/schemas.py``): element type, rank, the
dims it knows, a symbolic name (``unk__N``) for the others. That needs onnx >= 1.19
(``schemas.SHAPE_INFERENCE``); with an older onnx, or where inference fails, nothing is
written.
"""

from __future__ import annotations

from typing import Iterator

import numpy as np
import onnx
from onnx import numpy_helper, shape_inference

from ..errors import RoiOpError, node_label
from ..ops import form
from . import schemas
from .nodes import iter_nodes, node_attrs, spec_of


def _ours(node: onnx.NodeProto) -> bool:
    return spec_of(node) is not None


def _subgraphs(node: onnx.NodeProto) -> Iterator[onnx.GraphProto]:
    for a in node.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            yield a.g
        elif a.type == onnx.AttributeProto.GRAPHS:
            yield from a.graphs


def _typed(t: onnx.TypeProto) -> bool:
    """A tensor type with an element type and a shape (a rank)."""
    return (t.HasField("tensor_type") and t.tensor_type.elem_type != 0
            and t.tensor_type.HasField("shape"))


def _strip(graph: onnx.GraphProto) -> None:
    """Drop the value_info of our nodes' outputs (an exporter's may be wrong: tf2onnx's
    CropAndResize), so that inference writes ours."""
    outs = {o for n in graph.node if _ours(n) for o in n.output if o}
    keep = [v for v in graph.value_info if v.name not in outs]
    del graph.value_info[:]
    graph.value_info.extend(keep)
    for n in graph.node:
        for g in _subgraphs(n):
            _strip(g)


def _copy_types(graph: onnx.GraphProto, inferred: onnx.GraphProto) -> int:
    """Write the inferred types of our nodes' outputs from ``inferred`` (the same graph after
    inference) into ``graph``; returns how many were written."""
    written = 0
    outs = [o for n in graph.node if _ours(n) for o in n.output if o]
    if outs:
        found = {v.name: v for v in inferred.value_info}
        found.update({v.name: v for v in inferred.output})
        declared = {v.name: v for v in graph.output}
        index = {v.name: i for i, v in enumerate(graph.value_info)}
        for name in dict.fromkeys(outs):
            v = found.get(name)
            if v is None or not _typed(v.type):
                continue  # inference found nothing: leave what the model says
            if name in declared:  # a graph output: typed only where it says no rank
                if not _typed(declared[name].type):
                    declared[name].type.CopyFrom(v.type)
                    written += 1
                continue
            if name in index:
                graph.value_info[index[name]].type.CopyFrom(v.type)
            else:
                graph.value_info.add().CopyFrom(v)
            written += 1
    for n, m in zip(graph.node, inferred.node):
        for g, h in zip(_subgraphs(n), _subgraphs(m)):
            written += _copy_types(g, h)
    return written


def annotate(model: onnx.ModelProto) -> int:
    """Write the inferred type (element type, rank, known dims; symbolic names for the
    others) of every output of ort_roi's nodes into ``model``'s value_info, in place.

    Args:
        model: a model as convert writes it (changed in place).

    Returns:
        How many outputs were given a type: 0 with onnx < 1.19 (no shape inference for
        custom domains), and where inference fails (the model is left as it was).
    """
    if not schemas.SHAPE_INFERENCE:
        return 0
    if not any(_ours(n) for n in iter_nodes(model.graph)):
        return 0
    work = without_weights(model)
    _strip(work.graph)
    try:
        inferred = shape_inference.infer_shapes(work, strict_mode=False)
    except Exception:  # noqa: BLE001 - an op onnx cannot infer (strict elsewhere): no types
        return 0
    return _copy_types(model.graph, inferred.graph)


#: Initializers with more elements than this go to inference as typed inputs, without data
#: (weights); smaller ones (shapes, counts, scales) keep their values.
SMALL = 1024


def without_weights(model: onnx.ModelProto, small: int = SMALL) -> onnx.ModelProto:
    """A copy of ``model`` whose initializers of more than ``small`` elements are graph inputs
    of the same type and shape: inference reads no weights (torchvision's 167 MB Faster
    R-CNN: 3.0 s with them, 0.4-0.8 s without, 2 busy cores) and a model over 2 GB still fits
    a protobuf."""
    work = onnx.ModelProto()
    _copy_fields(model, work, skip="graph")
    _weightless(model.graph, work.graph, small)
    return work


def _weightless(graph: onnx.GraphProto, into: onnx.GraphProto, small: int) -> None:
    """``graph`` copied into ``into`` with its initializers of more than ``small`` elements as
    typed graph inputs (``without_weights``)."""
    _copy_fields(graph, into, skip="initializer")  # the weights are not copied
    inputs = {i.name for i in into.input}
    for t in graph.initializer:
        n = 1
        for d in t.dims:
            n *= d
        if n <= small:
            into.initializer.add().CopyFrom(t)
        elif t.name not in inputs:
            into.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type,
                                                                 list(t.dims)))


def inferred_shapes(graph: onnx.GraphProto, onnx_opset: int | None
                    ) -> dict[str, tuple[int | None, ...]]:
    """The shape of each tensor of ``graph`` that onnx's shape inference (not strict: it goes
    on past ops it cannot infer) tells, its weights not read (``without_weights``); {} where
    inference fails.

    Args:
        graph: a main graph.
        onnx_opset: the model's ONNX opset (None: the newest).

    Returns:
        {tensor name: its dims, None for a dim inference does not know} for the tensors whose
        rank inference knows.
    """
    work = onnx.ModelProto(ir_version=10)
    work.opset_import.add(domain="", version=onnx_opset or onnx.defs.onnx_opset_version())
    for d in sorted({n.domain for n in graph.node} - {"", "ai.onnx"}):
        work.opset_import.add(domain=d, version=1)
    _weightless(graph, work.graph, SMALL)
    try:  # data_prop: Shape -> Concat -> ConstantOfShape, as exporters build rows, is known
        inferred = shape_inference.infer_shapes(work, strict_mode=False, data_prop=True)
    except Exception:  # noqa: BLE001 - what inference cannot tell is unknown
        return {}
    g = inferred.graph
    return {v.name: tuple(d.dim_value if d.HasField("dim_value") else None
                          for d in v.type.tensor_type.shape.dim)
            for v in list(g.input) + list(g.value_info) + list(g.output)
            if v.type.HasField("tensor_type") and v.type.tensor_type.HasField("shape")}


def _copy_fields(src, dst, skip: str) -> None:
    """Every field ``src`` has set but ``skip`` copied into ``dst`` (a message of its type)."""
    for field, value in src.ListFields():
        if field.name == skip:
            continue
        if hasattr(value, "extend"):  # a repeated field
            getattr(dst, field.name).extend(value)
        elif hasattr(value, "ListFields"):  # a message
            getattr(dst, field.name).CopyFrom(value)
        else:
            setattr(dst, field.name, value)


def declared_shape_errors(model: onnx.ModelProto) -> list[str]:
    """ort_roi's nodes (top level) whose inputs' shapes, as declared or inferred, contradict
    the op (boxes declared ``[R, 3]`` for an op that reads ``[R, 4]``): what onnx's checker
    says of them with ort_roi's schemas, and what their kernel would refuse at every run.

    Args:
        model: the graph.

    Returns:
        one line per such node, naming it, its op, the input and the shape; empty where none.
    """
    nodes = [(n, form(n.domain, n.op_type)) for n in model.graph.node]
    nodes = [(n, f) for n, f in nodes if f is not None and f.registered]
    if not nodes:
        return []
    try:
        inferred = onnx.shape_inference.infer_shapes(without_weights(model), strict_mode=False)
    except Exception:  # noqa: BLE001 - what inference cannot tell stays unknown
        inferred = model
    g = inferred.graph
    types = {v.name: v.type for v in [*g.input, *g.value_info, *g.output]}
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
               if np.prod(i.dims) <= 1024}
    found = []
    for node, f in nodes:
        spec = f.target(len(node.input)) or f.spec
        try:
            attrs = node_attrs(node, spec)
            dims = [schemas._dims(types[x]) if x in types else None for x in node.input]
            values = {i: weights[x] for i, x in enumerate(node.input) if x in weights}
            spec.output_shapes(dims, attrs, values)
        except RoiOpError as e:
            found.append(f"node {node_label(node)!r} ({f.domain}::{f.op_type}): {e}")
    return found
