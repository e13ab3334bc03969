"""PasteMasks: torchvision's mask pasting (roi_heads.paste_masks_in_image) in one op, with
onnxruntime's linear Resize bit for bit, so that a converted Mask R-CNN gives the native
graph's image masks exactly while skipping its per-box Loop and the Concat that grows its
result box by box (ort-roi convert, ort_roi.torch_export)."""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..geometry import linear_resize_taps
from ..specs import MAX_MASK_COORD, MAX_MASK_IMAGE, MAX_MASK_OUTPUT, PASTE_MASKS, TYPES
from .checks import check_features, int_vector, quiet
from .cpu.parallel import for_ranges
from .dispatch import host


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


def paste_one(mask: np.ndarray, box: list[int], height: int, width: int):
    """Where box [x1, y1, x2, y2] pastes ``mask`` [M_h, M_w]: ((rows, columns) of the image,
    the pasted pixels), or None when no pixel of it is inside the image. The mask is resized
    to h x w (onnxruntime's linear Resize) only at the rows and columns inside: each pixel
    dx2*dy2*X11 + dx1*dy2*X21 + dx2*dy1*X12 + dx1*dy1*X22, weights multiplied in float32,
    summed in that order in T, as onnxruntime's UpsampleBilinear."""
    x1, y1, x2, y2 = box
    w, h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
    top, bottom = max(y1, 0), min(y2 + 1, height)
    left, right = max(x1, 0), min(x2 + 1, width)
    if bottom <= top or right <= left:
        return None
    iy1, iy2, dy1, dy2 = linear_resize_taps(h, mask.shape[0], np.arange(top - y1, bottom - y1))
    ix1, ix2, dx1, dx2 = linear_resize_taps(w, mask.shape[1], np.arange(left - x1, right - x1))
    t = mask.dtype
    above, below = mask[iy1], mask[iy2]  # [rows, M_w]
    dy1, dy2 = dy1[:, None], dy2[:, None]
    pixels = (dx2 * dy2).astype(t) * above[:, ix1]
    pixels += (dx1 * dy2).astype(t) * above[:, ix2]
    pixels += (dx2 * dy1).astype(t) * below[:, ix1]
    pixels += (dx1 * dy1).astype(t) * below[:, ix2]
    return (slice(top, bottom), slice(left, right)), pixels


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
def paste_masks(masks, boxes, image_size):
    """Each box's mask pasted into an image of zeros, as torchvision's exported Mask R-CNN
    computes it (PasteMasks in docs/semantics.md). ``masks`` [R, C, M_h, M_w] (channel 0 is
    pasted), ``boxes`` int [R, 4] = [x1, y1, x2, y2] (inclusive), ``image_size`` int [2] =
    (height, width). Returns [R, height, width]. Computed on the host (CuPy input is
    copied)."""
    op = PASTE_MASKS.name
    X = host(check_features(op, masks, "masks"))
    R = X.shape[0]
    if X.shape[1] < 1:  # torchvision indexes channel 0 too (an IndexError there)
        raise RoiOpError(op, "input 'masks'", f"must have at least one channel (channel 0 is "
                         f"pasted), got shape {list(X.shape)}")
    height, width = image_shape(op, "image_size", image_size, R)
    rows = mask_boxes(op, "boxes", boxes, R)
    out = np.zeros((R, height, width), X.dtype)

    def work(first: int, last: int) -> None:
        for r in range(first, last):
            pasted = paste_one(X[r, 0], rows[r], height, width)
            if pasted is not None:
                out[(r, *pasted[0])] = pasted[1]

    for_ranges(R, work, min_chunk=4)
    return out
