"""ONNX schemas for the ort_roi ops, derived from the spec table and registered on import.

With them ``onnx.checker.check_model(m, full_check=True)`` checks ort_roi nodes (required
attributes, types) and ``onnx.shape_inference.infer_shapes`` gives [R, C_out, PH, PW]. Shape
inference needs onnx >= 1.19 (``OpSchema.set_type_and_shape_inference_function``); on older onnx
the schemas are registered without it (``SHAPE_INFERENCE`` is False): the checker still checks
ort_roi nodes, and shape inference leaves their outputs untyped.
"""

from __future__ import annotations

import onnx
from onnx import TypeProto, numpy_helper
from onnx.defs import OpSchema

from ..errors import RoiOpError
from ..kernels.checks import check_channels, check_channels_per_bin
from ..specs import FORMS, OPSET_VERSION, TYPES, OpSpec
from .nodes import attribute_value

_TENSOR = {"float32": "tensor(float)", "float64": "tensor(double)",
           "int32": "tensor(int32)", "int64": "tensor(int64)"}
#: Whether this onnx can run a Python shape inference function (onnx >= 1.19).
SHAPE_INFERENCE = hasattr(OpSchema, "set_type_and_shape_inference_function")
_ATTR = {int: OpSchema.AttrType.INT, float: OpSchema.AttrType.FLOAT,
         str: OpSchema.AttrType.STRING}


def _infer(spec: OpSpec):
    def infer(ctx) -> None:
        attrs = {}
        for a in spec.attrs:
            proto = ctx.get_attribute(a.name)
            if proto is None:
                attrs[a.name] = a.default
                continue
            attrs[a.name] = attribute_value(proto)
        try:
            attrs = spec.resolve(attrs)
        except RoiOpError as e:
            raise onnx.shape_inference.InferenceError(str(e)) from None
        x, boxes = ctx.get_input_type(spec.features[0]), ctx.get_input_type(spec.boxes_input)
        out = TypeProto()
        out.tensor_type.elem_type = x.tensor_type.elem_type
        xdims = list(x.tensor_type.shape.dim) if x.tensor_type.HasField("shape") else None
        bdims = list(boxes.tensor_type.shape.dim) if boxes.tensor_type.HasField("shape") else None
        _check_dims(spec, attrs, xdims, bdims)
        r = bdims[0] if bdims else None
        if spec.kind != "pooled":  # keypoints, image masks: as the spec says
            shapes = spec.output_shapes(xdims, bdims, attrs)
            if spec.kind == "image":  # (height, width) where the image size is a constant
                shapes[0][1:] = _image_size(ctx, spec)
            for i, shape in enumerate(shapes):
                t = TypeProto()
                t.tensor_type.elem_type = x.tensor_type.elem_type
                for d in shape:
                    _copy_dim(t.tensor_type.shape.dim.add(), d)
                ctx.set_output_type(i, t)
            return
        c = None if spec.channels_attr else (xdims[1] if xdims and len(xdims) == 4 else None)
        if spec.channels_per_bin:  # position-sensitive: C / (PH * PW), where C is known
            bins = attrs[spec.pooled[0]] * attrs[spec.pooled[1]]
            c = c.dim_value // bins if c is not None and c.HasField("dim_value") else None
        dims = out.tensor_type.shape.dim
        for i, d in enumerate([r, c, attrs[spec.pooled[0]], attrs[spec.pooled[1]]]):
            new = dims.add()
            if i == 1 and spec.channels_attr:
                new.dim_value = attrs[spec.channels_attr]
            else:
                _copy_dim(new, d)
        ctx.set_output_type(0, out)
        if spec.extra_output:  # the rois, as they came in
            ctx.set_output_type(1, boxes)

    return infer


def _image_size(ctx, spec: OpSpec) -> list:
    """The value of an image op's image_size input, where the graph holds it (else unknown)."""
    i = next(k for k, inp in enumerate(spec.inputs) if inp.name == "image_size")
    data = ctx.get_input_data(i) if ctx.has_input(i) else None
    size = numpy_helper.to_array(data).ravel().tolist() if data is not None else []
    return [int(v) for v in size] if len(size) == 2 else [None, None]


def _copy_dim(new, d) -> None:
    """Set a new dimension from an int or a known dimension (unknown: left unset)."""
    if isinstance(d, int):
        new.dim_value = d
    elif d is not None and d.HasField("dim_value"):
        new.dim_value = d.dim_value
    elif d is not None and d.HasField("dim_param"):
        new.dim_param = d.dim_param


def _check_dims(spec: OpSpec, attrs: dict, xdims, bdims) -> None:
    """Known dimensions that contradict the op: X of rank 4, boxes [R, box_cols], and for
    position-sensitive pooling C = output_channels * PH * PW."""
    def fail(name: str, msg: str):
        raise onnx.shape_inference.InferenceError(f"{spec.name}: input '{name}': {msg}")

    def known(d):
        return d.dim_value if d.HasField("dim_value") else None

    x_name, b_name = spec.feature.name, spec.boxes.name
    if xdims is not None and len(xdims) != 4:
        fail(x_name, f"must have rank 4 [N, C, H, W], got rank {len(xdims)}")
    cols = spec.box_cols if isinstance(spec.box_cols, tuple) else (spec.box_cols,)
    if bdims is not None and (len(bdims) != 2 or known(bdims[1]) not in (None, *cols)):
        shape = [known(d) or (d.dim_param or "?") for d in bdims]
        fail(b_name, f"must have shape [R, {' or '.join(map(str, cols))}], got {shape}")
    if xdims is not None and len(xdims) == 4 and known(xdims[1]) is not None:
        try:
            if spec.channels_attr:
                check_channels(spec.name, known(xdims[1]), attrs[spec.channels_attr],
                               attrs[spec.pooled[0]], attrs[spec.pooled[1]])
            elif spec.channels_per_bin:
                check_channels_per_bin(spec.name, known(xdims[1]), attrs[spec.pooled[0]],
                                       attrs[spec.pooled[1]])
        except RoiOpError as e:
            raise onnx.shape_inference.InferenceError(str(e)) from None


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
                 outputs=[OpSchema.FormalParameter(spec.output, "T", spec.output_shape_doc)]
                 + ([OpSchema.FormalParameter(spec.extra_output[0], "T", spec.extra_output[1])]
                    if spec.extra_output else []),
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
