"""CropAndResize (TensorFlow's tf.image.crop_and_resize): where each crop's rows and columns
sample the image, in float32 as TensorFlow's CPU kernel computes them, and their bilinear
neighbours or nearest pixel. Its own arithmetic, not RoIAlign's: normalized boxes whose 0 and
1 are the first and last pixel centres, one sample per output pixel, and a position off
[0, size - 1] marked -1 (the extrapolation value) rather than clamped."""

from __future__ import annotations

import numpy as np

F32 = np.float32


def crop_and_resize_positions(lo: np.ndarray, hi: np.ndarray, size: int,
                              crop: int) -> np.ndarray:
    """Sample positions [R, crop] along an axis of ``size`` pixels, float32 in TensorFlow's
    order: lo*(size-1) + i*((hi-lo)*(size-1)/(crop-1)); crop 1: 0.5*(lo+hi)*(size-1) in
    double, rounded to float32."""
    s1 = F32(size - 1)
    if crop == 1:
        return (0.5 * (lo + hi).astype(np.float64) * (size - 1)).astype(F32)[:, None]
    scale = (hi - lo) * s1 / F32(crop - 1)
    return lo[:, None] * s1 + np.arange(crop, dtype=F32)[None, :] * scale[:, None]


def crop_and_resize_neighbours(pos: np.ndarray, size: int):
    """Bilinear neighbours of positions [R, crop]: (floor, ceil, fraction of ceil); floor -1
    where off [0, size-1] (NaN too)."""
    on = (pos >= 0) & (pos <= F32(size - 1))
    p = np.where(on, pos, F32(0))
    f = np.floor(p)
    lo = np.where(on, f.astype(np.intp), -1)
    return lo, np.ceil(p).astype(np.intp), (p - f).astype(F32)


def crop_and_resize_nearest_index(pos: np.ndarray, size: int) -> np.ndarray:
    """The nearest pixel of positions [R, crop]: roundf (half away from zero; they are >= 0);
    -1 off the map."""
    on = (pos >= 0) & (pos <= F32(size - 1))
    p = np.where(on, pos, F32(0))
    f = np.floor(p)
    near = f.astype(np.intp) + ((p - f) >= F32(0.5))
    return np.where(on, near, -1)
