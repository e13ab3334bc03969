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
    """A node ``domain::op`` (any registered node form, e.g. ``mmcv::MMCVRoiAlign``) with
    every attribute explicit (checked against the spec)."""
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
    """ROIPooling node: pooled_h, pooled_w, spatial_scale, method."""
    return make_node("ROIPooling", [X, rois], [Y], name=name, **attrs)


def roi_pool(X: str, boxes: str, boxes_num: str, Y: str, *, name: str | None = None,
             **attrs: Any) -> onnx.NodeProto:
    """RoIPool node: pooled_height, pooled_width, spatial_scale."""
    return make_node("RoIPool", [X, boxes, boxes_num], [Y], name=name, **attrs)


def psroi_pool(X: str, rois: str, rois_num: str, Y: str, *, name: str | None = None,
               **attrs: Any) -> onnx.NodeProto:
    """PSROIPool node: output_channels, spatial_scale, pooled_height, pooled_width."""
    return make_node("PSROIPool", [X, rois, rois_num], [Y], name=name, **attrs)


def roi_align(X: str, boxes: str, boxes_num: str, Y: str, *, name: str | None = None,
              **attrs: Any) -> onnx.NodeProto:
    """RoIAlign node: pooled_height, pooled_width, spatial_scale, sampling_ratio, aligned."""
    return make_node("RoIAlign", [X, boxes, boxes_num], [Y], name=name, **attrs)


def tensor(name: str, dtype: Any, shape: Sequence[int | str | None] | None
           ) -> onnx.ValueInfoProto:
    """A graph input/output description; dtype is anything np.dtype accepts."""
    elem = helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    return helper.make_tensor_value_info(name, elem, shape)


def make_model(nodes: Iterable[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], *,
               initializers: Sequence[onnx.TensorProto] = (), name: str = "ort_roi_graph",
               doc: str = "") -> onnx.ModelProto:
    """A model with the opset imports of every domain it uses and an IR version
    onnxruntime reads."""
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
    """A one-node model of ``op`` with inputs named after the spec's inputs and output Y."""
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
