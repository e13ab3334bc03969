"""CropAndResize: TensorFlow's tf.image.crop_and_resize (TF Object Detection API's Faster /
Mask R-CNN RoI pooling), exact: NHWC image, normalized [y1, x1, y2, x2] boxes, float32 out."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..definitions.crop_and_resize import crop_and_resize as definition
from ..errors import RoiOpError
from ..geometry import crop_and_resize_nearest_index, crop_and_resize_neighbours, \
    crop_and_resize_positions
from ..kernels.checks import batch_from_indices, check_finite, float_input, quiet
from ..kernels.dispatch import compute, is_cupy, steps
from ..spec import DOMAIN, MAX_OUTPUT_ELEMENTS, TYPES, Attr, Dims, Input, NodeForm, Op, \
    OpSpec, Output

F32 = np.float32


def crop_shapes(spec: OpSpec, dims: Sequence[Dims], attrs: Mapping[str, Any],
                values: Mapping[int, np.ndarray]) -> list[list]:
    """[R, crop_height, crop_width, C] from image [N, H, W, C], boxes [R, 4] and
    box_indices [R]; RoiOpError where known dimensions contradict the op."""
    image, boxes, idx = dims[0], dims[1], dims[2]
    if image is not None and len(image) != 4:
        raise RoiOpError(spec.name, "input 'image'",
                         f"must have rank 4 [N, H, W, C], got rank {len(image)}")
    if boxes is not None and (len(boxes) != 2 or (isinstance(boxes[1], int) and boxes[1] != 4)):
        shown = [d if d is not None else "?" for d in boxes]
        raise RoiOpError(spec.name, "input 'boxes'", f"must have shape [R, 4], got {shown}")
    if idx is not None and len(idx) != 1:
        raise RoiOpError(spec.name, "input 'box_indices'",
                         f"must have rank 1 [R], got rank {len(idx)}")
    r = boxes[0] if boxes is not None else (idx[0] if idx is not None else None)
    c = image[3] if image is not None else None
    return [[r, attrs.get("crop_height"), attrs.get("crop_width"), c]]


SPEC = OpSpec(
    name="CropAndResize",
    source="TensorFlow tf.image.crop_and_resize (CropAndResize, CPU kernel)",
    doc="Each box [y1, x1, y2, x2] (normalized: 0 and 1 are the first and last pixel "
        "centres) of image box_indices[r] resampled to crop_height x crop_width in NHWC, in "
        "float32 as TensorFlow computes it: sample y at y1*(H-1) + y*((y2-y1)*(H-1)/"
        "(crop_height-1)) (the centre when crop_height = 1), rows and columns off [0, H-1] "
        "/ [0, W-1] the extrapolation value; bilinear (x first, then y) or nearest (half "
        "away from zero). The output is float32 for a float64 image too (as TensorFlow).",
    inputs=(Input("image", "T", "[N, H, W, C]", "images, NHWC"),
            Input("boxes", "T", "[R, 4]", "rows [y1, x1, y2, x2], normalized (taken as float32)"),
            Input("box_indices", "I", "[R]", "the image of each box, in [0, N)")),
    attrs=(Attr("crop_height", int, None, min=1, doc="output height (TF's crop_size[0])"),
           Attr("crop_width", int, None, min=1, doc="output width (TF's crop_size[1])"),
           Attr("method", str, "bilinear", choices=("bilinear", "nearest"),
                doc="bilinear, or nearest (roundf: half away from zero)"),
           Attr("extrapolation_value", float, 0.0,
                doc="the value of rows and columns off the image")),
    outputs=(Output("crops", "[R, crop_height, crop_width, C]", "float32"),),
    shapes=crop_shapes,
    pooled=("crop_height", "crop_width"),
)


def _check_image(op: str, image) -> Any:
    if not is_cupy(image) and not isinstance(image, np.ndarray):
        try:
            image = np.asarray(image)
        except Exception as e:  # noqa: BLE001 - any conversion failure is a bad input
            raise RoiOpError(op, "input 'image'", f"is not an array: {e}") from None
    if image.dtype not in TYPES["T"]:
        raise RoiOpError(op, "input 'image'", f"must be float32 or float64, got {image.dtype}")
    if image.ndim != 4:
        raise RoiOpError(op, "input 'image'",
                         f"must have rank 4 [N, H, W, C], got shape {list(image.shape)}")
    if image.shape[1] < 1 or image.shape[2] < 1:
        raise RoiOpError(op, "input 'image'",
                         f"must have H >= 1 and W >= 1, got shape {list(image.shape)}")
    return image


def _check_boxes(op: str, boxes) -> np.ndarray:
    """float32/float64 [R, 4], finite as float32 (TensorFlow's boxes are float32)."""
    boxes = float_input(op, "boxes", boxes)
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise RoiOpError(op, "input 'boxes'", f"must have shape [R, 4], got {list(boxes.shape)}")
    b32 = boxes.astype(F32)
    check_finite(op, "boxes", b32, unit="row", shown=boxes)
    return b32


@quiet
def crop_and_resize(image: np.ndarray, boxes: np.ndarray, box_indices: np.ndarray, *,
                    crop_height: int, crop_width: int, method: str = "bilinear",
                    extrapolation_value: float = 0.0) -> np.ndarray:
    """TensorFlow's tf.image.crop_and_resize, bit for bit (its CPU kernel).

    Box r = [y1, x1, y2, x2] of image box_indices[r]: output row y samples image row
    y1*(H-1) + y*(y2-y1)*(H-1)/(crop_height-1) (the centre 0.5*(y1+y2)*(H-1) when
    crop_height = 1), columns likewise, in float32; a row or column off the image is
    ``extrapolation_value``; bilinear interpolates x first, then y; nearest rounds half
    away from zero. Boxes may be flipped (y1 > y2) or reach outside [0, 1].

    Args:
        image: [N, H, W, C] float32 or float64, NHWC (NumPy; CuPy computes on the GPU).
        boxes: [R, 4] float32 or float64 rows [y1, x1, y2, x2], normalized (rounded to
            float32, as TensorFlow takes them).
        box_indices: [R] int32 or int64, each in [0, N).
        crop_height: the output's rows (>= 1; TF's crop_size[0]).
        crop_width: its columns (>= 1; TF's crop_size[1]).
        method: "bilinear" or "nearest".
        extrapolation_value: the value off the image.

    Returns:
        [R, crop_height, crop_width, C] float32 (a float64 image's values are rounded to
        float32 first, as TensorFlow's kernel does). Raises RoiOpError on bad input.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(crop_height=crop_height, crop_width=crop_width, method=method,
                          extrapolation_value=extrapolation_value))
    ch, cw = a["crop_height"], a["crop_width"]
    image = _check_image(op, image)
    boxes = _check_boxes(op, boxes)
    N, H, W, C = image.shape
    R = boxes.shape[0]
    batch = batch_from_indices(op, "box_indices", box_indices, N, R)
    # each side <= MAX_OUTPUT_SIDE and ch * cw <= MAX_OUTPUT_ELEMENTS: checked by resolve
    if R * ch * cw * C > MAX_OUTPUT_ELEMENTS:
        where = "input 'boxes'" if ch * cw * C <= MAX_OUTPUT_ELEMENTS else "attribute 'crop_height'"
        raise RoiOpError(op, where,
                         f"the output [R, crop_height, crop_width, C] = [{R}, {ch}, {cw}, {C}] "
                         f"would have more than {MAX_OUTPUT_ELEMENTS} elements")
    ys = crop_and_resize_positions(boxes[:, 0], boxes[:, 2], H, ch)
    xs = crop_and_resize_positions(boxes[:, 1], boxes[:, 3], W, cw)
    if a["method"] == "nearest":
        return compute(steps.crop_nearest, image, batch=batch,
                       y=crop_and_resize_nearest_index(ys, H),
                       x=crop_and_resize_nearest_index(xs, W),
                       extrapolation_value=a["extrapolation_value"])
    y0, y1, fy = crop_and_resize_neighbours(ys, H)
    x0, x1, fx = crop_and_resize_neighbours(xs, W)
    return compute(steps.crop_bilinear, image, batch=batch, y0=y0, y1=y1, fy=fy, x0=x0, x1=x1,
                   fx=fx, extrapolation_value=a["extrapolation_value"])


ENTRY = Op(
    specs=(SPEC,), kernel=crop_and_resize, definition=definition,
    steps=(steps.crop_bilinear, steps.crop_nearest),
    forms=(NodeForm(DOMAIN, "CropAndResize", SPEC,
                    "ort-roi convert (tf2onnx's crop_and_resize Loop and "
                    "com.microsoft::CropAndResize)", "TensorFlow tf.image.crop_and_resize"),),
)
