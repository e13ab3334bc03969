"""ONNX schemas for the ort_roi ops, derived from the spec table and registered on import.

With them ``onnx.checker.check_model(m, full_check=True)`` checks ort_roi nodes (required
attributes, types) and ``onnx.shape_inference.infer_shapes`` gives [R, C_out, PH, PW]. Shape
inference needs onnx >= 1.19 (``OpSchema.set_type_and_shape_inference_function``); on older onnx
the schemas are registered without it (``SHAPE_INFERENCE`` is False): the checker still checks
ort_roi nodes, and shape inference leaves their outputs untyped.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TypeProto, numpy_helper
from onnx.defs import OpSchema

from ..errors import RoiOpError
from ..ops import FORMS
from ..spec import OPSET_VERSION, TYPES, OpSpec
from .nodes import attribute_value

_TENSOR = {"float32": "tensor(float)", "float64": "tensor(double)",
           "int32": "tensor(int32)", "int64": "tensor(int64)"}
#: Whether this onnx can run a Python shape inference function (onnx >= 1.19).
SHAPE_INFERENCE = hasattr(OpSchema, "set_type_and_shape_inference_function")
_ATTR = {int: OpSchema.AttrType.INT, float: OpSchema.AttrType.FLOAT,
         str: OpSchema.AttrType.STRING}


def _dims(t: TypeProto) -> list | None:
    """A tensor type's shape as far as it is known: ints, symbolic names, None."""
    if not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in t.tensor_type.shape.dim]


def _infer(spec: OpSpec):
    def infer(ctx) -> None:
        attrs = {}
        for a in spec.attrs:
            proto = ctx.get_attribute(a.name)
            attrs[a.name] = a.default if proto is None else attribute_value(proto)
        n = len(spec.inputs)
        types = [ctx.get_input_type(i) for i in range(n)]
        values = {}
        for i in range(n):
            data = ctx.get_input_data(i) if ctx.has_input(i) else None
            if data is not None:
                values[i] = numpy_helper.to_array(data)
        try:
            attrs = spec.resolve(attrs)
            shapes = spec.output_shapes([_dims(t) for t in types], attrs, values)
        except RoiOpError as e:
            raise onnx.shape_inference.InferenceError(str(e)) from None
        elem = types[spec.features[0]].tensor_type.elem_type
        for i, (out, shape) in enumerate(zip(spec.outputs, shapes)):
            t = TypeProto()
            t.tensor_type.elem_type = (elem if out.type == "T" else
                                       onnx.helper.np_dtype_to_tensor_dtype(np.dtype(out.type)))
            for d in shape:
                new = t.tensor_type.shape.dim.add()
                if isinstance(d, int):
                    new.dim_value = d
                elif isinstance(d, str):
                    new.dim_param = d
            ctx.set_output_type(i, t)

    return infer


def schema(spec: OpSpec, domain: str | None = None, name: str | None = None) -> OpSchema:
    """The OpSchema of one op (as node ``domain::name`` of a form, default the spec's own)."""
    attrs = []
    for a in spec.attrs:
        if a.required:
            attrs.append(OpSchema.Attribute(a.name, _ATTR[a.type], a.doc, required=True))
        else:
            attrs.append(OpSchema.Attribute(a.name, onnx.helper.make_attribute(a.name, a.default),
                                            a.doc))
    used = dict.fromkeys(i.type for i in spec.inputs)
    s = OpSchema(name or spec.name, domain or spec.domain, OPSET_VERSION, f"{spec.doc} Source: {spec.source}.",
                 inputs=[OpSchema.FormalParameter(i.name, i.type, f"{i.shape} {i.doc}")
                         for i in spec.inputs],
                 outputs=[OpSchema.FormalParameter(o.name, o.type if o.type == "T" else
                                                   _TENSOR[o.type], f"{o.shape} {o.doc}".strip())
                          for o in spec.outputs],
                 type_constraints=[(t, [_TENSOR[d.name] for d in TYPES[t]], "")
                                   for t in used],
                 attributes=attrs)
    if SHAPE_INFERENCE:
        s.set_type_and_shape_inference_function(_infer(spec))
    return s


def register() -> None:
    """Register the schema of every registered node form with onnx (once).

    onnx.reference builds its table of schemas on first import and refuses an op name that
    two domains share (mmcv::/mmdeploy::MMCVRoiAlign, ort_roi::/Caffe2 RoIAlign): it is
    imported first, so its table holds onnx's own schemas and ReferenceEvaluator still works.
    """
    import onnx.reference.op_run  # noqa: F401 - see above

    for f in FORMS:
        if f.registered and not onnx.defs.has(f.op_type, f.domain):
            onnx.defs.register_schema(schema(f.spec, f.domain, f.op_type))
