"""PasteMasks: torchvision's mask pasting (roi_heads.paste_masks_in_image) in one op, with
onnxruntime's linear Resize bit for bit, so that a converted Mask R-CNN gives the native
graph's image masks exactly while skipping its per-box Loop and the Concat that grows its
result box by box (ort-roi convert, ort_roi.torch_export)."""

from __future__ import annotations

import numpy as np

from ..definitions.torchvision import paste_masks as definition
from ..errors import RoiOpError
from ..kernels.checks import check_features, int_vector, quiet
from ..kernels.dispatch import compute, host, steps
from ..spec import DOMAIN, TYPES, Input, NodeForm, Op, OpSpec, Output

#: The largest image PasteMasks pastes into (height * width; 8192 x 8192), and the most
#: pixels of all its masks together (2 GiB of float32): the image size is an input.
MAX_MASK_IMAGE = 1 << 26
MAX_MASK_OUTPUT = 1 << 29
#: Box coordinates PasteMasks accepts: [-2^31, 2^31) (image pixels).
MAX_MASK_COORD = 1 << 31


def mask_shapes(spec: OpSpec, dims, attrs, values) -> list[list]:
    """[R, height, width]: R the rows of boxes; (height, width) the value of image_size
    where it is known."""
    boxes = dims[1]
    r = boxes[0] if boxes is not None and len(boxes) == 2 else None
    size = np.asarray(values[2]).ravel().tolist() if 2 in values else []
    return [[r, *([int(v) for v in size] if len(size) == 2 else [None, None])]]


SPEC = OpSpec(
    name="PasteMasks",
    source="torchvision paste_masks_in_image (Mask R-CNN's mask pasting, one fused op: "
           "ort-roi convert, ort_roi.torch_export)",
    doc="Each box's mask pasted into an image of zeros, as torchvision's exported graph "
        "computes it: box r [x1, y1, x2, y2] (integer, inclusive) has w = max(x2 - x1 + 1, 1), "
        "h = max(y2 - y1 + 1, 1); channel 0 of its mask is resized to h x w with onnxruntime's "
        "Resize (linear, half_pixel; bit for bit) and its part inside the image, rows "
        "max(y1, 0) .. min(y2 + 1, height) and columns max(x1, 0) .. min(x2 + 1, width), is "
        "written there; nothing where that part is empty.",
    inputs=(Input("masks", "T", "[R, C, M_h, M_w]", "one mask per box (channel 0 is pasted)"),
            Input("boxes", "I", "[R, 4]", "integer boxes [x1, y1, x2, y2] in image pixels"),
            Input("image_size", "I", "[2]", "(height, width) of the image")),
    attrs=(),
    outputs=(Output("image_masks", "[R, height, width]"),),
    shapes=mask_shapes,
    same_types=True,
    per_box=True,
)


def mask_boxes(op: str, name: str, boxes, r: int) -> list[list[int]]:
    """Integer boxes [R, 4] (int32/int64, one per mask), each coordinate in
    [-2^31, 2^31), as Python ints (their differences cannot overflow)."""
    b = host(boxes)
    b = b if isinstance(b, np.ndarray) else np.asarray(b)
    if b.dtype not in TYPES["I"]:
        raise RoiOpError(op, f"input '{name}'", f"must be int32 or int64, got {b.dtype}")
    if b.ndim != 2 or b.shape[1] != 4:
        raise RoiOpError(op, f"input '{name}'", f"must have shape [R, 4], got {list(b.shape)}")
    if b.shape[0] != r:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have one row per mask (R = {r}), got {b.shape[0]}")
    bad = (b < -MAX_MASK_COORD) | (b >= MAX_MASK_COORD)
    if bad.any():
        i = int(np.argwhere(bad)[0][0])
        raise RoiOpError(op, f"input '{name}'", f"row {i} {b[i].tolist()} has a coordinate "
                         f"outside [-2^31, 2^31) pixels")
    return b.tolist()


def image_shape(op: str, name: str, image_size, r: int) -> tuple[int, int]:
    """(height, width) from an int32/int64 [2] input: each >= 1, the image at most
    MAX_MASK_IMAGE pixels and the r masks at most MAX_MASK_OUTPUT together."""
    size = int_vector(op, name, image_size, 2, "[2] = (height, width)").tolist()
    height, width = size
    if height < 1 or width < 1:
        raise RoiOpError(op, f"input '{name}'", f"must be at least 1 x 1, got {size}")
    if height * width > MAX_MASK_IMAGE or r * height * width > MAX_MASK_OUTPUT:
        raise RoiOpError(op, f"input '{name}'",
                         f"asks for {r} masks of {height} x {width}, over the limit of "
                         f"{MAX_MASK_IMAGE} pixels a mask, {MAX_MASK_OUTPUT} in all")
    return height, width


@quiet
def paste_masks(masks: np.ndarray, boxes: np.ndarray, image_size: np.ndarray) -> np.ndarray:
    """Each box's mask pasted into an image of zeros, as torchvision's exported Mask R-CNN
    computes it (PasteMasks in docs/semantics.md). Computed on the host (CuPy input is
    copied).

    Args:
        masks: [R, C, M_h, M_w] float32 or float64 (channel 0 is pasted).
        boxes: [R, 4] int32 or int64 rows [x1, y1, x2, y2] (inclusive, image pixels).
        image_size: [2] int32 or int64, (height, width).

    Returns:
        [R, height, width] of masks' dtype.
    """
    op = SPEC.name
    X = check_features(op, masks, "masks")
    R = X.shape[0]
    if X.shape[1] < 1:  # torchvision indexes channel 0 too (an IndexError there)
        raise RoiOpError(op, "input 'masks'", f"must have at least one channel (channel 0 is "
                         f"pasted), got shape {list(X.shape)}")
    height, width = image_shape(op, "image_size", image_size, R)
    return compute(steps.paste_masks, X, rows=mask_boxes(op, "boxes", boxes, R), height=height,
                   width=width)


ENTRY = Op(
    specs=(SPEC,), kernel=paste_masks, definition=definition, steps=(steps.paste_masks,),
    forms=(NodeForm(DOMAIN, SPEC.name, SPEC,
                    "ort-roi convert (torchvision's exported mask pasting Loop), "
                    "ort_roi.torch_export", "onnxruntime's Resize + the Loop's slices "
                    "(torchvision's exported Loop, bit for bit); eager torchvision "
                    "paste_masks_in_image"),),
)
