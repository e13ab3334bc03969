"""torchvision's position-sensitive ops (ps_roi_pool, ps_roi_align): their C++ kernels' integer
arithmetic, C ints as on x86 and int32 wrap-around included."""

from __future__ import annotations

import numpy as np

from .pooling import round_half_away

INT_MIN = -(2 ** 31)


def c_int(x: np.ndarray) -> np.ndarray:
    """A float converted to a C int as on x86: truncated toward zero; NaN or a value out of
    the int32 range gives INT_MIN (cvttss2si's "integer indefinite")."""
    x = np.asarray(x, np.float64)
    ok = np.isfinite(x) & (x >= INT_MIN) & (x < 2.0 ** 31)
    return np.where(ok, np.trunc(np.where(ok, x, 0)), INT_MIN).astype(np.int64)


def wrap_int32(a: np.ndarray) -> np.ndarray:
    """int32 arithmetic's result (two's complement wrap) of an int64 computation."""
    return (np.asarray(a, np.int64) + 2 ** 31) % 2 ** 32 - 2 ** 31


def torchvision_psroi_bins(boxes: np.ndarray, spatial_scale: float, ph: int, pw: int, H: int,
                           W: int):
    """torchvision ps_roi_pool's integer bins of boxes [R, 4]: corners round(x * scale) (in T,
    then a C int), the box at least 1 x 1, bin p over [floor(p * bin), ceil((p + 1) * bin))
    from the start, clipped to [0, H - 1] (the kernel's forward clips to the last index, not
    past it: the last row and column are never read). Returns (lo, hi) [R, ph] for rows and
    for columns [R, pw]."""
    t = boxes.dtype.type
    start = c_int(round_half_away(boxes[:, [1, 0]] * t(spatial_scale)))  # y1 x1
    end = c_int(round_half_away(boxes[:, [3, 2]] * t(spatial_scale)))
    size = np.maximum(wrap_int32(end - start), 1)
    out = []
    for axis, pooled, limit in ((0, ph, H), (1, pw, W)):
        bin_size = size[:, axis].astype(boxes.dtype) / t(pooled)
        p = np.arange(pooled, dtype=boxes.dtype)
        lo = c_int(np.floor(p * bin_size[:, None]))
        hi = c_int(np.ceil((p + t(1)) * bin_size[:, None]))
        s = start[:, axis, None]
        out.append((np.clip(wrap_int32(lo + s), 0, limit - 1).astype(np.intp),
                    np.clip(wrap_int32(hi + s), 0, limit - 1).astype(np.intp)))
    return tuple(out)


def torchvision_sample_grid(size: np.ndarray, pooled, sampling_ratio: int):
    """torchvision ps_roi_align's samples per bin side, as its C ints: sampling_ratio, or
    ceil(size / pooled) (negative for an inverted box; INT_MIN past the int range); and its
    count gh * gw (int32, so 0 when either side is 0: the kernel divides by it)."""
    pooled = np.asarray(pooled, size.dtype)
    if sampling_ratio > 0:
        grid = np.full(size.shape, sampling_ratio, np.int64)
    else:
        grid = c_int(np.ceil(size / pooled))
    return grid, wrap_int32(grid[:, 0] * grid[:, 1])
