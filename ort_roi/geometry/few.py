"""A few boxes in scalars (a W6-sized call), bit for bit what the array functions give:
RoIAlign's bins (``align_bins_few``) and its mean 1-D weights over the map
(``align_weights_few``; ``boxes.align_bins``, ``boxes.sampling_grid``,
``sampling.sample_positions``, ``sampling.neighbours``) of float32 boxes, T's arithmetic on
NumPy float32 scalars (a few tens of ns an operation, where a NumPy call on an array costs
~1 us), the weights' sums in Python floats; max pooling's integer bins (``roi_pool_bins_few``;
``pooling.roi_pool_bins``) in Python floats. ``kernels/small.py`` and the small strategies of
``kernels/cpu`` use them."""

from __future__ import annotations

import math
import struct

import numpy as np

from .boxes import BoxGeometry

_T = np.float32

#: align_weights_few: at most this many samples per bin side: with every nonzero weight
#: >= 2**-24, a float64 sum of at most 32 float32 weights in [2**-24, 1] is exact in any
#: order (its terms are multiples of 2**-47 below 2**6: 53 bits), so it does not depend on
#: NumPy's order of sums.
FEW_GRID_MAX = 32
_LEAST_WEIGHT = 2.0 ** -24
#: k + 0.5 (sample k < FEW_GRID_MAX) and p (a bin index < 257 or a grid) in T, made once.
_K_HALF = [_T(k) + _T(0.5) for k in range(FEW_GRID_MAX)]
_P = [_T(p) for p in range(257)]


def align_bins_few(boxes: np.ndarray, spatial_scale: float, geometry: BoxGeometry,
                   pooled_h: int, pooled_w: int) -> list[tuple]:
    """``align_bins`` of float32 boxes [R, 4] with one scale, as scalars: per box
    (start y, start x, bin y, bin x), NumPy float32 scalars. The same operations in T:
    start = corner * scale - offset, size = end - start (at least ``geometry.least``),
    bin = size / pooled. Boxes whose scaled sizes overflow are the caller's to refuse."""
    b = boxes.ravel()
    s, off, py, px = _t(spatial_scale), _t(geometry.offset), _t(pooled_h), _t(pooled_w)
    least = None if geometry.least is None else _t(geometry.least)
    out = []
    for i in range(0, b.shape[0], 4):
        y0, x0 = b[i + 1] * s - off, b[i] * s - off
        hy, hx = (b[i + 3] * s - off) - y0, (b[i + 2] * s - off) - x0
        if least is not None:  # np.maximum: the size unless the least is larger (no NaN here)
            hy, hx = (least if least > hy else hy), (least if least > hx else hx)
        out.append((y0, x0, hy / py, hx / px))
    return out


_T_OF: dict[float, np.float32] = {}  # a node's attributes in T (a NumPy scalar costs 0.2 us)


def _t(v: float) -> np.float32:
    """v in T, made once per value (not zeros: 0.0 and -0.0 are one key)."""
    try:
        return _T_OF[v]
    except KeyError:
        t = _T(v)
        if v and len(_T_OF) < 1024:  # (NaN is never found again: no attribute is NaN)
            _T_OF[v] = t
        return t


def sampling_grid_few(bin_size, sampling_ratio: int) -> int:
    """``sampling_grid`` of one finite bin size: ``sampling_ratio`` when > 0, else
    ceil(bin size), 0 for an empty or inverted bin."""
    if sampling_ratio > 0:
        return sampling_ratio
    return math.ceil(float(bin_size)) if bin_size > 0 else 0


def align_weights_few(bins: list[tuple], grids: list[tuple[int, int]], P: int,
                      size: tuple[int, int]) -> list[float] | None:
    """RoIAlign's mean 1-D weights of float32 boxes, as ``separable``'s small weights
    (``kernels.cpu.align._small_weights``) give them, bit for bit: per box, axis (y, x) and
    bin p < P, over the map's max(size) indices, the sum in float64 of each sample's
    (1 - frac, frac) on its low and high index (k in order), divided by the grid. Samples as
    ``sample_positions`` places them, y = (start + p*bin) + (k + 0.5)*bin/grid in T, their
    neighbours as ``neighbours`` clamps them.

    Args:
        bins: per box (start y, start x, bin y, bin x), float32 scalars (``align_bins_few``).
        grids: per box the samples per bin side (y, x) (``sampling_grid_few``).
        P: the bins per axis to make (max(pooled_h, pooled_w), at most 256; bins past an
            axis's own count are made too, as the arrays make them).
        size: the map's (H, W).

    Returns:
        The weights [R, 2, P, max(size)] as a flat list of floats (the caller casts them to
        float32), or None where a grid exceeds FEW_GRID_MAX or a weight is under 2**-24
        (a sample within 2**-24 past an index: its sums could round in another order).
    """
    S = max(size)
    out = [0.0] * (len(bins) * 2 * P * S)
    at = 0  # where this box and axis's bins start in out
    for box, grid in zip(bins, grids):
        for ax in (0, 1):
            g, n, row = grid[ax], size[ax], at
            at += P * S
            if g > FEW_GRID_MAX:
                return None
            if g <= 0:
                continue
            a0, b, tg, hit = box[ax], box[2 + ax], _P[g], False
            for p in range(P):
                a, i = a0 + _P[p] * b, row + p * S
                for k in range(g):
                    y = float(a + _K_HALF[k] * b / tg)
                    if not -1 <= y <= n:  # outside (NaN too): no weight
                        continue
                    hit = True
                    y = min(y, n) if y > 0 else 0.0  # fmin(fmax(y, 0), size)
                    low = math.floor(y)
                    if low >= n - 1:  # at or past the last index: it alone, weight 1
                        out[i + n - 1] += 1.0
                        continue
                    frac = y - low  # exact in T: y and low are within one of each other
                    if frac < _LEAST_WEIGHT:
                        if frac > 0:
                            return None
                        out[i + low] += 1.0
                        continue
                    # 1 - frac: exact in float64 (frac >= 2**-24), rounded to T (below 1/2
                    # only where y < 1: from low = 1 on frac's bits are T's at 1)
                    out[i + low] += _to_float32(1.0 - frac) if low == 0 else 1.0 - frac
                    out[i + low + 1] += frac
            if hit and g > 1:  # / max(grid, 1) in float64 (then cast to T by the caller)
                out[row:at] = [v / g for v in out[row:at]]
    return out


def roi_pool_bins_few(values: list[float], dtype, spatial_scale: float, ph: int, pw: int,
                      H: int, W: int) -> list | None:
    """roi_pool_bins, bit for bit, with Python's numbers (a few boxes: a W6 call), as lists:
    per box ((row lo, row hi) per bin row, (column lo, column hi) per bin column).

    ``values``: the boxes [x1, y1, x2, y2] row by row, Python floats holding T's (``dtype``)
    values. The edges corner * scale (in T: the float64 product of two T values rounded to
    T once; none for a scale of 1) rounded half away from zero are integers; while they are
    below 2**22 every sum and difference after is an integer below 2**24, exact in T and in
    float64, so only the T roundings of bin = length / pooled and of p * bin are made (each
    a float64 result rounded to T once: double rounding cannot differ for one operation of
    T values). None (the caller takes roi_pool_bins) where an edge is not finite or 2**22
    or more."""
    to_t = _to_float32 if dtype == np.float32 else float
    if spatial_scale != 1.0:
        s = to_t(spatial_scale)
        if not (abs(s) < _EXACT_EDGE and all(abs(v) < _EXACT_EDGE for v in values)):
            return None  # (no product of float32's range can overflow to_t then)
        values = [to_t(v * s) for v in values]
    out = []
    for i in range(0, len(values), 4):
        x1, y1, x2, y2 = values[i:i + 4]
        if not (abs(x1) < _EXACT_EDGE and abs(y1) < _EXACT_EDGE and abs(x2) < _EXACT_EDGE
                and abs(y2) < _EXACT_EDGE):  # NaN too
            return None
        out.append((_pool_edges(y1, y2, ph, H, to_t), _pool_edges(x1, x2, pw, W, to_t)))
    return out


#: roi_pool_bins_few: scaled box edges below this are exact integers all the way.
_EXACT_EDGE = float(2 ** 22)
_FLOAT32 = struct.Struct("f")


def _to_float32(x: float, pack=_FLOAT32.pack, unpack=_FLOAT32.unpack) -> float:
    """x (within float32's range) rounded to float32 (to nearest, ties to even), as a
    Python float."""
    return unpack(pack(x))[0]


def _pool_edges(lo: float, hi: float, pooled: int, size: int, to_t) -> list[tuple[int, int]]:
    """One axis's bins [lo, hi) of max pooling, clipped to [0, size]: from the edges rounded
    half away from zero (C's round(), exact for values below 2**22), bin p spans
    [floor(p*bin), ceil((p+1)*bin)) from the start, fl(p * bin) in T (``to_t``); one bin
    is the whole box, [start, start + length)."""
    a, b = math.trunc(lo), math.trunc(hi)
    if abs(lo - a) >= 0.5:
        a += 1 if lo > 0 else -1
    if abs(hi - b) >= 0.5:
        b += 1 if hi > 0 else -1
    length = b - a + 1 if b >= a else 1
    if pooled == 1:
        e = a + length
        return [(0 if a <= 0 else min(a, size), 0 if e <= 0 else min(e, size))]
    bin_size = to_t(length / pooled)
    edges, end = [], 0.0
    for p in range(pooled):
        start, end = end, (bin_size if p == 0 else to_t((p + 1) * bin_size))
        e0, e1 = math.floor(start) + a, math.ceil(end) + a
        edges.append((0 if e0 <= 0 else min(e0, size), 0 if e1 <= 0 else min(e1, size)))
    return edges
