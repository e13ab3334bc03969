"""Integer bins: max pooling (ROIPooling max, RoIPool) and Paddle's position-sensitive
pooling, in T then clipped to the map as intp; and ROIPooling's bilinear method (OpenVINO:
one sample per bin, normalized boxes): its sample positions and their neighbours."""

from __future__ import annotations

import math

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


def roi_pool_bins_few(boxes: np.ndarray, spatial_scale: float, ph: int, pw: int, H: int,
                      W: int):
    """roi_pool_bins, bit for bit, with Python's numbers (a few boxes: a W6 call), as lists:
    per box ((row lo, row hi) per bin row, (column lo, column hi) per bin column).

    The edges corner * scale (one NumPy product, in T) rounded half away from zero are
    integers; while they are below 2**22 every sum and difference after is an integer
    below 2**24, exact in T and in float64, so only the T roundings of bin = length / pooled
    and of p * bin are made (each a float64 result rounded to T once: double rounding
    cannot differ for one operation of T values). None (the caller takes roi_pool_bins)
    where an edge is not finite or 2**22 or more."""
    t = boxes.dtype.type
    out = []
    for x1, y1, x2, y2 in (boxes * t(spatial_scale)).tolist():
        bins = []
        for lo, hi, pooled, size in ((y1, y2, ph, H), (x1, x2, pw, W)):
            if not (abs(lo) < _EXACT_EDGE and abs(hi) < _EXACT_EDGE):  # NaN too
                return None
            a, b = _round_half_away(lo), _round_half_away(hi)
            length = max(b - a + 1.0, 1.0)
            bin_size = float(t(length / pooled))
            # fl(p * bin) for p = 0 .. pooled (bin p spans [floor(p*bin), ceil((p+1)*bin)))
            ends = [0.0, bin_size] + [float(t(p * bin_size)) for p in range(2, pooled + 1)]
            bins.append([(_clip_edge(math.floor(ends[p]) + a, size),
                          _clip_edge(math.ceil(ends[p + 1]) + a, size)) for p in range(pooled)])
        out.append(bins)
    return out


#: roi_pool_bins_few: scaled box edges below this are exact integers all the way.
_EXACT_EDGE = float(2 ** 22)


def _round_half_away(x: float) -> float:
    """round_half_away of one finite value below 2**22 (exact: an integer)."""
    i = math.trunc(x)
    if abs(x - i) >= 0.5:
        i += 1 if x > 0 else -1
    return float(i)


def _clip_edge(e: float, size: int) -> int:
    """clip_edges of one finite integer edge: into [0, size]."""
    return 0 if e <= 0 else min(int(e), size)


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
