"""Builders for ONNX graphs that use the ort_roi ops.

    from ort_roi import builders as B
    node = B.roi_align("X", "boxes", "boxes_num", "Y", pooled_height=7, pooled_width=7,
                       spatial_scale=0.25, sampling_ratio=2)
    model = B.make_model([node], inputs=[B.tensor("X", "float32", [1, 256, "H", "W"]), ...],
                         outputs=[B.tensor("Y", "float32", None)])

Nodes always carry every attribute explicitly (defaults filled from the spec), so plain
onnxruntime sessions, which require every attribute, accept them.
"""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np
import onnx
from onnx import helper

from ..ops import all_specs, spec
from ..spec import DOMAIN, OPSET_VERSION, OpSpec

#: IR version of the models we write: onnxruntime 1.17+ reads it (onnx 1.23 writes 14).
IR_VERSION = 9
#: Default-domain opset of the models we write.
ONNX_OPSET = 17


def make_node(op: str | OpSpec, inputs: Sequence[str], outputs: Sequence[str], *,
              name: str | None = None, domain: str = DOMAIN, **attrs: Any) -> onnx.NodeProto:
    """A ``domain::op`` node (ONNX NodeProto) of any registered node form, every attribute
    explicit.

    Attributes left out take the spec's defaults, so plain onnxruntime sessions (which
    require every attribute) accept the node; the values are checked against the spec.

    Args:
        op: the node's op type (``"RoIAlign"``, ``"MMCVRoiAlign"``, ...), or an ``OpSpec``
            (its own name and domain).
        inputs: the names of the graph values the node reads, one per spec input, in order.
        outputs: the names of the values it writes, one per spec output.
        name: the node's name, or None for none.
        domain: the node's domain when ``op`` is a name (``"ort_roi"``, ``"mmcv"``, ...).
        **attrs: its attributes, by the spec's names.

    Returns:
        The ``onnx.NodeProto``.

    Raises:
        KeyError: no registered node form ``domain::op``.
        RoiOpError: an unknown, missing required or out-of-range attribute.
        ValueError: the wrong number of inputs or outputs.
    """
    s = op if isinstance(op, OpSpec) else spec(op, domain)
    values = s.resolve(attrs)
    if len(inputs) != len(s.inputs):
        raise ValueError(f"{s.name} takes {len(s.inputs)} inputs "
                         f"({', '.join(i.name for i in s.inputs)}), got {len(inputs)}")
    n_out = len(s.outputs)
    if len(outputs) != n_out:
        raise ValueError(f"{s.name} has {n_out} output(s), got {len(outputs)}")
    op_type, domain = (s.name, s.domain) if isinstance(op, OpSpec) else (op, domain)
    return helper.make_node(op_type, list(inputs), list(outputs), name=name or None,
                            domain=domain, **values)


def roi_pooling(X: str, rois: str, Y: str, *, name: str | None = None,
                **attrs: Any) -> onnx.NodeProto:
    """An ``ort_roi::ROIPooling`` node (ONNX NodeProto): it builds a graph, computes nothing.

    The kernel that computes it is ``ort_roi.ops.roi_pooling``.

    Args:
        X: the name of the feature map, [N, C, H, W] float32 or float64.
        rois: the name of the boxes, [R, 5] rows [batch_id, x1, y1, x2, y2], X's dtype.
        Y: the name of the output, [R, C, pooled_h, pooled_w], X's dtype.
        name: the node's name, or None.
        **attrs: ``pooled_h``, ``pooled_w`` (required, >= 1), ``spatial_scale`` (required
            for ``method="max"``), ``method`` ("max", the default, or "bilinear").

    Returns:
        The ``onnx.NodeProto``, every attribute explicit.

    Raises:
        RoiOpError: an unknown, missing required or out-of-range attribute.
    """
    return make_node("ROIPooling", [X, rois], [Y], name=name, **attrs)


def roi_pool(X: str, boxes: str, boxes_num: str, Y: str, *, name: str | None = None,
             **attrs: Any) -> onnx.NodeProto:
    """An ``ort_roi::RoIPool`` node (ONNX NodeProto): it builds a graph, computes nothing.

    The kernel that computes it is ``ort_roi.ops.roi_pool``.

    Args:
        X: the name of the feature map, [N, C, H, W] float32 or float64.
        boxes: the name of the boxes, [R, 4] rows [x1, y1, x2, y2], X's dtype.
        boxes_num: the name of the counts, [N] int32 or int64 (boxes per image; sums to R).
        Y: the name of the output, [R, C, pooled_height, pooled_width], X's dtype.
        name: the node's name, or None.
        **attrs: ``pooled_height``, ``pooled_width`` (default 1), ``spatial_scale``
            (default 1.0).

    Returns:
        The ``onnx.NodeProto``, every attribute explicit.

    Raises:
        RoiOpError: an unknown or out-of-range attribute.
    """
    return make_node("RoIPool", [X, boxes, boxes_num], [Y], name=name, **attrs)


def psroi_pool(X: str, rois: str, rois_num: str, Y: str, *, name: str | None = None,
               **attrs: Any) -> onnx.NodeProto:
    """An ``ort_roi::PSROIPool`` node (ONNX NodeProto): it builds a graph, computes nothing.

    The kernel that computes it is ``ort_roi.ops.psroi_pool``.

    Args:
        X: the name of the score maps, [N, output_channels * PH * PW, H, W] float32 or
            float64.
        rois: the name of the boxes, [R, 4] rows [x1, y1, x2, y2], X's dtype.
        rois_num: the name of the counts, [N] int32 or int64 (boxes per image; sums to R).
        Y: the name of the output, [R, output_channels, PH, PW], X's dtype.
        name: the node's name, or None.
        **attrs: ``output_channels`` (required), ``spatial_scale`` (default 1.0),
            ``pooled_height``, ``pooled_width`` (PH, PW; default 1).

    Returns:
        The ``onnx.NodeProto``, every attribute explicit.

    Raises:
        RoiOpError: an unknown, missing required or out-of-range attribute.
    """
    return make_node("PSROIPool", [X, rois, rois_num], [Y], name=name, **attrs)


def roi_align(X: str, boxes: str, boxes_num: str, Y: str, *, name: str | None = None,
              **attrs: Any) -> onnx.NodeProto:
    """An ``ort_roi::RoIAlign`` node (ONNX NodeProto): it builds a graph, computes nothing.

    The kernel that computes it is ``ort_roi.ops.roi_align``; its readable definition is
    ``ort_roi.definitions.align.roi_align``.

    Args:
        X: the name of the feature map, [N, C, H, W] float32 or float64.
        boxes: the name of the boxes, [R, 4] rows [x1, y1, x2, y2], X's dtype.
        boxes_num: the name of the counts, [N] int32 or int64 (boxes per image; sums to R).
        Y: the name of the output, [R, C, pooled_height, pooled_width], X's dtype.
        name: the node's name, or None.
        **attrs: ``pooled_height``, ``pooled_width`` (default 1), ``spatial_scale``
            (default 1.0), ``sampling_ratio`` (default -1: adaptive), ``aligned`` (1, the
            default: half-pixel offset; 0: legacy).

    Returns:
        The ``onnx.NodeProto``, every attribute explicit.

    Raises:
        RoiOpError: an unknown or out-of-range attribute.
    """
    return make_node("RoIAlign", [X, boxes, boxes_num], [Y], name=name, **attrs)


def tensor(name: str, dtype: Any, shape: Sequence[int | str | None] | None
           ) -> onnx.ValueInfoProto:
    """A graph input or output description (ONNX ValueInfoProto) of a tensor.

    Args:
        name: the value's name.
        dtype: its element type, anything ``np.dtype`` accepts (``"float32"``,
            ``np.int64``, ...).
        shape: its dimensions, each an int, a symbolic name (``"R"``) or None (unknown);
            None for an unknown rank.

    Returns:
        The ``onnx.ValueInfoProto``.
    """
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(nodes: Iterable[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], *,
               initializers: Sequence[onnx.TensorProto] = (), name: str = "ort_roi_graph",
               doc: str = "") -> onnx.ModelProto:
    """A model (ONNX ModelProto) of ``nodes``, importing every domain it uses.

    The default domain at opset ``ONNX_OPSET`` (17), every other domain the nodes use at
    ort_roi's opset (1), IR version ``IR_VERSION`` (9, which onnxruntime 1.17+ reads).

    Args:
        nodes: the graph's nodes, in a topological order.
        inputs: the graph's inputs (``tensor(...)``).
        outputs: the graph's outputs (``tensor(...)``).
        initializers: constant tensors (``onnx.numpy_helper.from_array(...)``).
        name: the graph's name.
        doc: the graph's doc string.

    Returns:
        The ``onnx.ModelProto``, not checked (``onnx.checker`` is the caller's choice).
    """
    nodes = list(nodes)
    graph = helper.make_graph(nodes, name, list(inputs), list(outputs),
                              initializer=list(initializers), doc_string=doc)
    domains = {"": ONNX_OPSET}
    for n in nodes:
        if n.domain not in ("", "ai.onnx"):
            domains.setdefault(n.domain, OPSET_VERSION)
    model = helper.make_model(graph, producer_name="ort_roi",
                              opset_imports=[helper.make_opsetid(d, v)
                                             for d, v in sorted(domains.items())])
    model.ir_version = IR_VERSION
    return model


def _symbolic(doc: str) -> list:
    """The dimensions a shape doc names ("[R, C, 7, PW]"): ints, names, None for an
    expression."""
    dims = []
    for d in doc.strip().split("]")[0].lstrip("[").split(","):
        d = d.strip()
        dims.append(int(d) if d.isdigit() else d if d.isidentifier() else None)
    return dims


def single_op_model(op: str, dtype: Any = np.float32, count_dtype: Any = np.int32, *,
                    domain: str = DOMAIN, **attrs: Any) -> onnx.ModelProto:
    """A one-node model (ONNX ModelProto) of the registered node form ``domain::op``.

    Its inputs and outputs are named after the spec's (``X``, ``boxes``, ``boxes_num`` ->
    ``Y`` for RoIAlign), of unknown shape; the outputs' shapes are the spec's, symbolic
    (``[R, C, 7, 7]`` for pooled_height = pooled_width = 7).

    Args:
        op: the node's op type (``"RoIAlign"``, ...).
        dtype: the float type of the features and boxes (float32 or float64).
        count_dtype: the type of the count inputs (int32 or int64).
        domain: the node's domain.
        **attrs: its attributes, by the spec's names (defaults filled in).

    Returns:
        The ``onnx.ModelProto``.

    Raises:
        KeyError: no registered node form ``domain::op``.
        RoiOpError: an unknown, missing required or out-of-range attribute.
    """
    s = spec(op, domain)
    outputs = [o.name for o in s.outputs]
    node = make_node(op, [i.name for i in s.inputs], outputs, domain=domain, **attrs)
    types = {"T": dtype, "I": count_dtype}
    inputs = [tensor(i.name, types[i.type], None) for i in s.inputs]
    shapes = s.output_shapes([_symbolic(i.shape) for i in s.inputs], s.resolve(attrs))
    outs = [tensor(o.name, o.dtype(dtype),
                   [d if d is not None else name for d, name in zip(shape, _symbolic(o.shape))])
            for o, shape in zip(s.outputs, shapes)]
    return make_model([node], inputs, outs, name=f"{s.name}_graph")


__all__ = ["IR_VERSION", "ONNX_OPSET", "make_model", "make_node", "psroi_pool", "roi_align",
           "roi_pool", "roi_pooling", "single_op_model", "tensor", "all_specs"]
