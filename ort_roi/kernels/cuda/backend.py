"""The CUDA backend: the kernels' compute steps on NVIDIA GPUs through CuPy, from the CUDA
source ``roi_ops.cu`` next to this file.

Each step takes checked inputs with X on the device (boxes, batch indices and the boxes'
geometry on the host) and returns (output on the device, the boxes it left to the host): the
backend table (kernels/dispatch.py) computes those with the NumPy step, where a box's samples
exceed what one GPU thread should loop over (huge adaptive grids of the max and of rotated
boxes). The CUDA kernels (one thread per bin and block of channels, compiled once per process
with --fmad=false through cupy.RawModule) do the arithmetic in T; the geometry of the
RoIAlign family comes from the host (ort_roi.geometry), computed once for both backends, and
goes to the device in one copy per call, as the rows named below.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from ...geometry import (ALIGNED, EXPLICIT_GRID_MAX, align_bins, axis_weights, box_extent,
                         sampling_grid, torchvision_sample_grid)
from ...spec import MAX_LEVELS
from . import staging

KERNELS = ("max_pool", "bilinear_pool", "psroi_pool", "roi_align", "roi_align_levels",
           "roi_align_rotated")
_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_THREADS = 256
#: Channels per thread (CB in roi_ops.cu) that the kernels are built for.
BLOCKS = (8, 4, 2)
#: The largest block is taken that leaves at least this many work items (threads): on an
#: H100, W1/W3 ran fastest with 8 channels per thread, W2 (1000 boxes of 256 channels) with
#: 4 and W4 (300 boxes of 21) with 2 (kernel time, 1 to 16 measured).
MIN_ITEMS = 1 << 21


def source() -> str:
    """The CUDA source of the kernels."""
    return resources.files("ort_roi.kernels.cuda").joinpath("roi_ops.cu").read_text()


@functools.lru_cache(maxsize=None)
def _module():
    import cupy

    names = [f"{k}<{t}, {cb}>" for k in KERNELS for t in _CTYPE.values() for cb in BLOCKS]
    return cupy.RawModule(code=source(), options=("--fmad=false", "-std=c++14"),
                          name_expressions=names)


@functools.lru_cache(maxsize=None)
def _function(kernel: str, ctype: str, cb: int):
    return _module().get_function(f"{kernel}<{ctype}, {cb}>")


def channel_block(R: int, C: int, PH: int, PW: int) -> int:
    """Channels per thread: the largest of BLOCKS that leaves MIN_ITEMS work items, else the
    smallest."""
    for cb in BLOCKS:
        if R * -(-C // cb) * PH * PW >= MIN_ITEMS:
            return cb
    return BLOCKS[-1]


def launch(kernel: str, out, *args) -> None:
    """Run ``kernel`` over the work items of ``out`` [R, C, PH, PW] (one per bin and block of
    CB channels); args follow X ... out, n in the kernel's signature."""
    R, C, PH, PW = out.shape
    cb = channel_block(R, C, PH, PW)
    n = R * -(-C // cb) * PH * PW
    if n == 0:
        return
    f = _function(kernel, _CTYPE[np.dtype(out.dtype)], cb)
    blocks = int(min((n + _THREADS - 1) // _THREADS, 1 << 20))  # grid-stride beyond that
    f((blocks,), (_THREADS,), (*args[:-1], out, np.int64(n), *args[-1]))


NONE = np.zeros(0, np.intp)  # no box left to the host


def _i(*v) -> tuple:
    return tuple(np.int32(x) for x in v)


def _inputs(X, batch: np.ndarray, boxes: np.ndarray):
    """X on the device (contiguous) and the boxes as rows [batch, x1, y1, x2, y2] of X's
    dtype, in one copy (each copy to the device costs a synchronisation)."""
    import cupy

    rows = np.empty((boxes.shape[0], 5), X.dtype)
    rows[:, 0] = batch
    rows[:, 1:] = boxes
    return cupy.ascontiguousarray(X), staging.to_device(rows)


def _empty(X, R: int, C: int, ph: int, pw: int):
    import cupy

    return cupy.empty((R, C, ph, pw), X.dtype)


def max_pool(X, batch, boxes, ph: int, pw: int, spatial_scale: float):
    N, C, H, W = X.shape
    out = _empty(X, boxes.shape[0], C, ph, pw)
    launch("max_pool", out, *_inputs(X, batch, boxes),
           (*_i(C, H, W, ph, pw), X.dtype.type(spatial_scale)))
    return out, NONE


def bilinear_pool(X, batch, boxes, ph: int, pw: int):
    N, C, H, W = X.shape
    out = _empty(X, boxes.shape[0], C, ph, pw)
    launch("bilinear_pool", out, *_inputs(X, batch, boxes), _i(C, H, W, ph, pw))
    return out, NONE


#: The psroi_pool kernel's rows: each box's integer bins, computed on the host.
PS_ROW = ("batch", "row lo[PH]", "row hi[PH]", "column lo[PW]", "column hi[PW]")


def pool_bins(X, batch, hlo, hhi, wlo, whi, oc: int, ph: int, pw: int):
    """The psroi_pool kernel over bins the host computed: rows [batch, row lo[ph], row
    hi[ph], column lo[pw], column hi[pw]] (PS_ROW)."""
    import cupy

    N, C, H, W = X.shape
    out = _empty(X, batch.shape[0], oc, ph, pw)
    rows = np.concatenate([batch[:, None], hlo, hhi, wlo, whi], 1).astype(X.dtype)
    launch("psroi_pool", out, cupy.ascontiguousarray(X), staging.to_device(rows),
           _i(C, oc, H, W, ph, pw))
    return out, NONE




#: The RoIAlign kernels' rows: each box's geometry, computed once on the host in T by
#: geometry.align_bins (the op computes them on the host), a grid of -1 marking a box the host
#: computes; roi_align_levels adds the level (-1: none) and its map's H and W.
ALIGN_ROW = ("batch", "y0", "x0", "bin_h", "bin_w", "grid_h", "grid_w")
LEVELS_ROW = ALIGN_ROW + ("level", "H", "W")
#: RoIAlign's max: boxes with more samples than this per bin side are computed on the host.
#: (The kernel reads only the samples within a pixel of the map, and a neighbour each side.)
MAX_MODE_SAMPLES = 1 << 16


def align_rows(batch, start, bin_size, grid, limit: int, level=None, sizes=None):
    """Rows of ALIGN_ROW (LEVELS_ROW with ``level`` and the maps' ``sizes``) for the boxes'
    bins (geometry.align_bins), in their dtype, and the boxes whose grid exceeds ``limit``
    (marked -1: the caller computes them)."""
    big = (grid > limit).any(axis=1)
    rows = np.empty((start.shape[0], len(ALIGN_ROW if level is None else LEVELS_ROW)),
                    start.dtype)
    rows[:, 0] = batch
    rows[:, 1:3], rows[:, 3:5] = start, bin_size
    rows[:, 5:7] = np.where(big[:, None], -1, grid)
    if level is not None:
        rows[:, 7] = level
        rows[:, 8:10] = np.asarray(sizes)[np.maximum(level, 0)]
    return rows, np.flatnonzero(big)


def _roi_align(X, batch, start, bin_size, grid, ph: int, pw: int, mode: int, limit: int,
               empty: float = 0.0, ps: int = 0):
    """The roi_align kernel (mode 0: mean, 1: running max from ``empty``, 2: onnxruntime's
    max of weighted corners; ps 1: position-sensitive channels) over every box whose grid is
    at most ``limit`` per side: (output, X on the device, the boxes left)."""
    import cupy

    N, C, H, W = X.shape
    C_out = C // (ph * pw) if ps else C
    out = _empty(X, start.shape[0], C_out, ph, pw)
    rows, left = align_rows(batch, start, bin_size, grid, limit)
    Xg = cupy.ascontiguousarray(X)
    launch("roi_align", out, Xg, staging.to_device(rows),
           (*_i(C_out, H, W, ph, pw, mode), X.dtype.type(empty), np.int32(ps)))
    return out, Xg, left


def align(X, batch, start, bin_size, ph: int, pw: int, sampling_ratio: int):
    """RoIAlign's mean over the host's bins and ``sampling_ratio`` (the grid:
    geometry.sampling_grid); boxes with huge grids in closed form (two GEMMs on the
    device)."""
    import cupy

    N, C, H, W = X.shape
    grid = sampling_grid(bin_size, sampling_ratio)
    out, Xg, big = _roi_align(X, batch, start, bin_size, grid, ph, pw, 0, EXPLICIT_GRID_MAX)
    if big.size:  # closed-form weights: O(pooled * size), not O(samples)
        s, b, big_grid = start[big], bin_size[big], grid[big]
        Ay = cupy.asarray(axis_weights(s[:, 0], b[:, 0], big_grid[:, 0], ph, H, X.dtype))
        Ax = cupy.asarray(axis_weights(s[:, 1], b[:, 1], big_grid[:, 1], pw, W, X.dtype))
        for i, r in enumerate(big):
            out[r] = cupy.matmul(cupy.matmul(Ay[i], Xg[batch[r]]), Ax[i].T)
    return out, NONE


def align_max(X, batch, start, bin_size, ph: int, pw: int, sampling_ratio: int,
              empty: float | None = -10000.0):
    """Max of bilinear samples (a running maximum from ``empty``, or onnxruntime's max of
    weighted corners when ``empty`` is None); boxes with more than MAX_MODE_SAMPLES samples
    per bin side are left to the host."""
    mode = 2 if empty is None else 1
    grid = sampling_grid(bin_size, sampling_ratio)
    out, _, left = _roi_align(X, batch, start, bin_size, grid, ph, pw, mode, MAX_MODE_SAMPLES,
                              0.0 if empty is None else empty)
    return out, left


def ps_align(X, batch, boxes, ph: int, pw: int, spatial_scale: float, sampling_ratio: int):
    """torchvision's ps_roi_align: the roi_align kernel's mean over position-sensitive
    channels; a box whose grid torchvision counts as 0 samples gives NaN (0 / 0), one whose
    grid is negative (inverted) 0; huge grids are left to the host."""
    start, bin_size = align_bins(boxes, spatial_scale, ALIGNED, ph, pw)
    out, _, left = _roi_align(X, batch, start, bin_size, sampling_grid(bin_size, sampling_ratio),
                              ph, pw, 0, EXPLICIT_GRID_MAX, ps=1)
    grid, count = torchvision_sample_grid(box_extent(boxes, spatial_scale, ALIGNED), (ph, pw),
                                          sampling_ratio)
    bad = np.flatnonzero((grid <= 0).any(axis=1))
    if bad.size:
        t = X.dtype.type
        out[bad] = np.where(count[bad] == 0, t(np.nan), t(0)).astype(X.dtype)[:, None, None, None]
    return out, left


def align_levels(Xs: list, batch, start, bin_size, level, ph: int, pw: int,
                 sampling_ratio: int, mode: int, empty: float | None = 0.0):
    """Multi-level RoIAlign in one launch (roi_align_levels): box r pooled from
    Xs[level[r]] over its host bins, mean (mode 0) or max from ``empty`` (mode 1); a box on
    no level (level outside [0, len(Xs))) gives 0. Boxes past the kernel's grid limits are
    left to the host."""
    import cupy

    X0 = Xs[0]
    R, C = start.shape[0], X0.shape[1]
    out = cupy.zeros((R, C, ph, pw), X0.dtype)
    limit = EXPLICIT_GRID_MAX if mode == 0 else MAX_MODE_SAMPLES
    lv = np.where((level >= 0) & (level < len(Xs)), level, -1)
    rows, big = align_rows(batch, start, bin_size, sampling_grid(bin_size, sampling_ratio),
                           limit, level=lv,
                           sizes=[x.shape[2:] for x in Xs])
    Xg = [cupy.ascontiguousarray(x) for x in Xs]
    launch("roi_align_levels", out, *Xg, *Xg[:1] * (MAX_LEVELS - len(Xg)), staging.to_device(rows),
           (*_i(C, ph, pw, mode), X0.dtype.type(0.0 if empty is None else empty)))
    return out, big[lv[big] >= 0]


def align_rotated(X, rows: np.ndarray, ph: int, pw: int):
    """Rotated RoIAlign from the host's per-box rows (geometry.ROTATED_ROW). Boxes with more
    than SAMPLES_PER_BOX samples (huge adaptive grids: one thread would visit a whole bin's
    grid) go to the kernel with a grid of -1, which skips them, and are left to the host."""
    import cupy

    N, C, H, W = X.shape
    out = _empty(X, rows.shape[0], C, ph, pw)
    samples = ph * pw * rows[:, 9].astype(np.float64) * rows[:, 10]
    big = np.flatnonzero(samples > SAMPLES_PER_BOX)
    dev = rows.astype(X.dtype)  # a copy
    dev[big, 9:] = -1
    launch("roi_align_rotated", out, cupy.ascontiguousarray(X), staging.to_device(dev),
           _i(C, H, W, ph, pw))
    return out, big


#: Rotated boxes with more samples than this (bins x grid) are left to the host.
SAMPLES_PER_BOX = 1 << 16
