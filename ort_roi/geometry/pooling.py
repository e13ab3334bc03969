"""Integer bins: max pooling (ROIPooling max, RoIPool) and Paddle's position-sensitive
pooling, in T then clipped to the map as intp; and ROIPooling's bilinear method (OpenVINO:
one sample per bin, normalized boxes): its sample positions and their neighbours."""

from __future__ import annotations

import numpy as np


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round(): halves go away from zero (NumPy's np.round goes to even). Exact in x's type."""
    t = np.trunc(x)
    frac = x - t  # exact: |x - trunc(x)| < 1 has no rounding error
    return t + np.where(np.abs(frac) >= 0.5, np.sign(x), 0).astype(x.dtype)


def clip_edges(edges: np.ndarray, size) -> np.ndarray:
    """Bin edges in T clipped to [0, size], as intp.

    An edge is NaN only when a box so large that its size overflows T meets 0 * inf; the
    C++ references cast it to INT_MIN (x86), which clips to 0: so does this.
    """
    return np.minimum(np.fmax(edges, 0), size).astype(np.intp)  # fmax(NaN, 0) = 0


def max_pool_bins(start: np.ndarray, end: np.ndarray, pooled, size):
    """Integer bins of max pooling, for every box and axis at once.

    start/end [R, A] are the already scaled and rounded box edges (in T) along A axes with
    ``pooled`` bins over ``size`` pixels each (ints or length-A sequences). Returns int
    arrays lo, hi [R, A, max(pooled)]: bin p covers [lo, hi), clipped to [0, size]; entries
    past an axis's own pooled count are meaningless. All arithmetic before the clip is done
    in T, as the reference kernels do.
    """
    t = start.dtype.type
    pooled = np.asarray(pooled, dtype=start.dtype)
    length = np.maximum(end - start + t(1), t(1))
    bin_size = (length / pooled)[:, :, None]
    p = np.arange(int(pooled.max()), dtype=start.dtype)
    lo = np.floor(p * bin_size) + start[:, :, None]
    hi = np.ceil((p + t(1)) * bin_size) + start[:, :, None]
    size = np.asarray(size)[..., None]
    return clip_edges(lo, size), clip_edges(hi, size)


def roi_pool_bins(boxes: np.ndarray, spatial_scale: float, ph: int, pw: int, H: int, W: int):
    """ROIPooling max / RoIPool bins of boxes [R, 4]: (row lo, row hi) [R, ph] and (column
    lo, column hi) [R, pw], from the edges round(corner * scale)."""
    e = round_half_away(boxes * boxes.dtype.type(spatial_scale))[:, ::-1]  # y2, x2, y1, x1
    lo, hi = max_pool_bins(e[:, 2:], e[:, :2], (ph, pw), (H, W))
    return (lo[:, 0, :ph], hi[:, 0, :ph]), (lo[:, 1, :pw], hi[:, 1, :pw])


def psroi_bins(lo: np.ndarray, hi: np.ndarray, scale, pooled: int, size: int):
    """Paddle psroi_pool's bins [lo, hi) [R, pooled] along one axis, in T: from round(x1)*s
    to (round(x2) + 1)*s, size at least 0.1."""
    t = lo.dtype.type
    start = round_half_away(lo) * scale
    end = (round_half_away(hi) + t(1)) * scale
    bin_size = np.maximum(end - start, t(0.1)) / t(pooled)
    p = np.arange(pooled, dtype=lo.dtype)
    a = np.floor(bin_size[:, None] * p + start[:, None])
    b = np.ceil(bin_size[:, None] * (p + t(1)) + start[:, None])
    return clip_edges(a, size), clip_edges(b, size)


def psroi_box_bins(boxes: np.ndarray, spatial_scale: float, ph: int, pw: int, H: int, W: int):
    """Paddle psroi_pool's bins of boxes [R, 4] = [x1, y1, x2, y2] (``psroi_bins`` per axis,
    the scale in T): (row lo, row hi) [R, ph] and (column lo, column hi) [R, pw]."""
    s = boxes.dtype.type(spatial_scale)
    return (psroi_bins(boxes[:, 1], boxes[:, 3], s, ph, H),
            psroi_bins(boxes[:, 0], boxes[:, 2], s, pw, W))


# --- bilinear ROIPooling (OpenVINO): one sample per bin, normalized boxes ----------------------

def bilinear_pool_positions(lo: np.ndarray, hi: np.ndarray, pooled: int, size: int) -> np.ndarray:
    """Sample coordinates [R, pooled] along one axis, in T, as OpenVINO computes them."""
    t = lo.dtype.type
    extent = t(size - 1)
    if pooled == 1:
        return ((lo + hi) * t(0.5) * extent)[:, None]
    step = (hi - lo) * extent / t(pooled - 1)
    c = np.arange(pooled, dtype=lo.dtype) * step[:, None] + (lo * extent)[:, None]
    c[:, -1] = hi * extent  # the last sample sits exactly on the box edge
    return c


def bilinear_pool_neighbours(c: np.ndarray, size: int):
    """OpenVINO's neighbours of coordinates c: (on the map, low, high, fraction of high)."""
    valid = (c >= 0) & (c <= size - 1)
    cc = np.where(valid, c, 0)
    low = np.floor(cc)
    frac = cc - low
    low = low.astype(np.intp)
    high = np.minimum(np.ceil(cc).astype(np.intp), size - 1)
    return valid, low, high, frac
