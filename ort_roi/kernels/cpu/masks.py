"""PasteMasks on the host: each box's mask resized with onnxruntime's linear Resize (bit for
bit) where it lands inside the image, and written there."""

from __future__ import annotations

import numpy as np

from ...resize import linear_resize_taps
from .parallel import for_ranges


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


def paste_masks(X: np.ndarray, rows: list[list[int]], height: int, width: int) -> np.ndarray:
    """Checked inputs: masks X [R, C, M_h, M_w] (channel 0 pasted), integer boxes ``rows``
    (Python ints), the image size. Returns [R, height, width]."""
    R = X.shape[0]
    out = np.zeros((R, height, width), X.dtype)

    def work(first: int, last: int) -> None:
        for r in range(first, last):
            pasted = paste_one(X[r, 0], rows[r], height, width)
            if pasted is not None:
                out[(r, *pasted[0])] = pasted[1]

    for_ranges(R, work, min_chunk=4)
    return out
