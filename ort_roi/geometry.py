"""The geometry of RoI pooling: where a box lies on the map, its bins, the sample positions in
a bin and each sample's bilinear taps. Written once, in T (the input's float type, as the
reference kernels compute), and used by the definitions (``ort_roi.definitions``), the NumPy
kernels and the CUDA backend's rows. Every function takes arrays of boxes; a definition passes
one box at a time.

The semantics each op builds from these pieces: docs/semantics.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np

from .levels import mmdeploy_levels, openvino_levels  # noqa: F401 - defined in levels.py


# --- where a box lies: the RoIAlign family's variants ----------------------------------------


@dataclass(frozen=True)
class BoxGeometry:
    """How an op of the RoIAlign family places a box [x1, y1, x2, y2] on the map: corners
    scaled, then shifted by ``-offset``; the box's size (per axis) at least ``least`` (None:
    any size, even negative)."""

    name: str
    offset: float
    least: float | None


#: Paddle / torchvision / detectron2 aligned=True (ROIAlignV2); ONNX RoiAlign half_pixel.
ALIGNED = BoxGeometry("aligned", 0.5, None)
#: aligned=False (torchvision's default, Caffe2's and detectron2's legacy); ONNX RoiAlign
#: output_half_pixel (opset 10's only rule): no shift, boxes at least 1 x 1.
LEGACY = BoxGeometry("legacy", 0.0, 1.0)
#: OpenVINO's ExperimentalDetectronROIFeatureExtractor aligned=1: shifted, sizes at least 1.
OPENVINO_ALIGNED = BoxGeometry("OpenVINO aligned", 0.5, 1.0)
#: mmdeploy's MMCVMultiLevelRoiAlign plugin aligned=1: shifted, sizes at least 0.
MMDEPLOY_ALIGNED = BoxGeometry("mmdeploy aligned", 0.5, 0.0)

#: mmcv's RoIAlign max starts each bin from -10000 (a bin without samples keeps it).
MMCV_EMPTY_MAX = -10000.0
#: mmdeploy's multi-level max pooling starts from -FLT_MAX.
FLT_MAX = float(np.finfo(np.float32).max)

ONNX_HALF_PIXEL, ONNX_OUTPUT_HALF_PIXEL = ALIGNED, LEGACY


def roi_align_geometry(aligned: int | bool) -> BoxGeometry:
    """RoIAlign's ``aligned`` attribute (Paddle, torchvision, mmcv, Caffe2): 1 ALIGNED,
    0 LEGACY."""
    return ALIGNED if aligned else LEGACY


def onnx_geometry(coordinate_transformation_mode: str) -> BoxGeometry:
    """ONNX RoiAlign's coordinate_transformation_mode."""
    return ONNX_HALF_PIXEL if coordinate_transformation_mode == "half_pixel" else LEGACY


class AlignBins(NamedTuple):
    """Per box and axis (columns y, x): the first bin's start, the bin size and the samples
    per bin side (0: none), in T (grid int64)."""

    start: np.ndarray  # [R, 2]
    size: np.ndarray  # [R, 2]
    grid: np.ndarray  # [R, 2]


def align_bins(boxes: np.ndarray, spatial_scale, geometry: BoxGeometry, pooled_h: int,
               pooled_w: int, sampling_ratio: int) -> AlignBins:
    """The bins of boxes [R, 4] = [x1, y1, x2, y2], in T, as the references compute them:
    start = corner * scale - offset, size = end - start (at least ``geometry.least``),
    bin = size / pooled, grid = sampling_ratio, or ceil(size / pooled) when it is <= 0.
    ``spatial_scale``: one scale, or one per box ([R, 1])."""
    t = boxes.dtype.type
    scale = np.asarray(spatial_scale, boxes.dtype)
    c = boxes[:, [1, 0, 3, 2]] * scale - t(geometry.offset)  # y1 x1 y2 x2
    size = c[:, 2:] - c[:, :2]
    if geometry.least is not None:
        size = np.maximum(size, t(geometry.least))
    pooled = np.array([pooled_h, pooled_w], boxes.dtype)
    bin_size = size / pooled
    if sampling_ratio > 0:
        grid = np.full(size.shape, sampling_ratio, np.int64)
    else:
        # ceil of a huge float is clipped before the cast; a grid <= 0 means no samples.
        grid = np.minimum(np.maximum(np.ceil(size / pooled), 0), 2**62).astype(np.int64)
    return AlignBins(c[:, :2], bin_size, grid)


def level_scales(scales, level: np.ndarray, dtype) -> np.ndarray:
    """Each box's scale [R, 1] (for ``align_bins``) from its level's; a box on no level
    (outside 0 .. L-1: its output is 0) takes level 0's."""
    ok = (level >= 0) & (level < len(scales))
    return np.asarray(scales, dtype)[np.where(ok, level, 0)][:, None]


def box_extent(boxes: np.ndarray, spatial_scale, geometry: BoxGeometry) -> np.ndarray:
    """The boxes' sizes [R, 2] (y, x) in T, before the geometry's least size: (end * scale
    - offset) - (start * scale - offset), as the references subtract them."""
    t = boxes.dtype.type
    c = boxes[:, [1, 0, 3, 2]] * np.asarray(spatial_scale, boxes.dtype) - t(geometry.offset)
    return c[:, 2:] - c[:, :2]


def sample_positions(start, bin_size, grid, pooled: int, G: int, k=None) -> np.ndarray:
    """Sample coordinates [..., pooled, G] along one axis, in T, placed as the references do:
    y = (start + p*bin_size) + (k + 0.5)*bin_size/grid for bin p and sample k (only k < grid
    are samples of the bin); ``k`` the sample indices to place (default 0 .. G-1). start,
    bin_size and grid broadcast together."""
    start = np.asarray(start)
    t = start.dtype.type
    b = np.asarray(bin_size)[..., None, None]
    g = np.asarray(grid).astype(start.dtype)[..., None, None]
    p = np.arange(pooled, dtype=start.dtype)[:, None]
    k = np.arange(G, dtype=start.dtype) if k is None else np.asarray(k, start.dtype)
    return (start[..., None, None] + p * b) + (k + t(0.5)) * b / g


def neighbours(y: np.ndarray, size):
    """Bilinear neighbours of sample coordinates y along an axis of ``size``, as the
    references compute them: (inside, low, high, fraction of high), in y's type. A sample
    is inside when -1 <= y <= size; it is clamped to >= 0, and one at or past the last
    index uses the last index alone. Samples outside are also clamped to [0, size] (NaN to
    0), so every index is on the map, even for a huge box's samples."""
    t = y.dtype.type
    inside = (y >= -1) & (y <= size)
    y = np.fmin(np.fmax(y, t(0)), np.asarray(size, y.dtype))
    low = np.floor(y).astype(np.intp)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    return inside, low, high, np.where(at_end, t(0), y - low.astype(y.dtype))


def sample_taps(start, bin_size, grid, pooled: int, size: int, G: int):
    """Each sample's two bilinear neighbours along an axis, the samples placed exactly as
    the reference does: indices and weights [R, pooled, G, 2] (low, high), in T; a sample
    outside the map or past its bin's grid (k >= grid) weighs 0."""
    inside, low, high, frac = neighbours(sample_positions(start, bin_size, grid, pooled, G), size)
    t = frac.dtype.type
    use = inside & (np.arange(G) < np.asarray(grid)[..., None, None])
    return np.stack([low, high], -1), np.stack([t(1) - frac, frac], -1) * use[..., None]


#: RoIAlign's max takes every sample of a bin side up to this many per pixel of the map's
#: side (plus 2): an ordinary box's grid, and any adaptive grid on the map. Beyond, one
#: sample per distinct taps (max_sample_positions).
SAMPLES_PER_PIXEL = 4


def max_sample_positions(start, bin_size, grid: int, pooled: int, size: int) -> np.ndarray:
    """The sample coordinates [pooled, K] of one box's bins along an axis of ``size`` pixels
    (``grid`` >= 1 samples per bin side) that a max over the bin's samples needs: every
    value the max can take is taken by one of them, so the max over them is the max over
    all the bin's samples, bit for bit.

    A sample's taps (neighbours(): which pixels, which weights) depend only on its position
    clamped to [0, size - 1], and every sample beyond one pixel off the map reads 0 weights
    at pixel 0: samples of equal ``clamped`` position, or all off the map, give the same value
    in any channel, whatever the other axis's sample. Positions are monotone in the sample
    index, so a bin side's samples form runs of equal taps, one sample each is kept (the
    first; later columns repeat a bin's last one). Up to ``SAMPLES_PER_PIXEL * (size + 2)``
    samples per side every sample is kept (sample_positions): that covers every adaptive
    grid whose samples lie no closer than 1/4 pixel; beyond, the runs are found by binary
    search, so a huge box costs O(pooled * size * log(grid)), not O(pooled * grid)."""
    if grid <= SAMPLES_PER_PIXEL * (size + 2):
        return sample_positions(start, bin_size, grid, pooled, grid)
    t = np.asarray(start).dtype.type

    def taps_key(k):  # [pooled] sample indices: what their taps depend on, monotone in k
        y = sample_positions(start, bin_size, grid, pooled, 1, k[:, None])[:, 0]
        on = np.clip(y, t(0), t(size - 1))
        return np.where(y >= -1, np.where(y <= size, on, t(size + 1)), t(-2))  # NaN: off

    k = np.zeros(pooled, np.int64)
    kept = [k]
    while True:
        key = taps_key(k)
        nxt = k + 1  # most often the next sample has other taps: no search
        same = (nxt < grid) & (taps_key(np.minimum(nxt, grid - 1)) == key)
        nxt = _first_true(lambda j: taps_key(j) != key, np.where(same, nxt + 1, nxt),
                          np.where(same, grid, nxt))
        if (nxt >= grid).all():
            return sample_positions(start, bin_size, grid, pooled, 1, np.stack(kept, 1))
        k = np.where(nxt < grid, nxt, k)
        kept.append(k)


def _first_true(pred, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per element, the first k in [lo, hi) where pred(k) holds, for a predicate false then
    true along k (binary search); hi where it holds nowhere."""
    lo, hi = lo.copy(), hi.copy()
    while (open_ := lo < hi).any():
        mid = lo + (hi - lo) // 2
        p = pred(np.where(open_, mid, lo))
        hi = np.where(open_ & p, mid, hi)
        lo = np.where(open_ & ~p, mid + 1, lo)
    return lo


def bilinear_weights(y: np.ndarray, x: np.ndarray, H: int, W: int, use=None):
    """The four taps of samples (y, x) as mmcv's pre_calc and onnxruntime compute them:
    (kept, positions, weights): positions [4 x ...] in the plane (low-low, low-high,
    high-low, high-high: y * W + x) and weights hy*hx, hy*lx, ly*hx, ly*lx [4 x ...] in T. A
    sample beyond one pixel off the map (or not in ``use``) is not kept: weights 0 at
    position 0."""
    t = y.dtype.type
    in_y, yl, yh, ly = neighbours(y, H)
    in_x, xl, xh, lx = neighbours(x, W)
    keep = in_y & in_x if use is None else use & in_y & in_x
    hy, hx = t(1) - ly, t(1) - lx
    pos = [np.where(keep, a * W + b, 0) for a, b in ((yl, xl), (yl, xh), (yh, xl), (yh, xh))]
    w = [np.where(keep, a * b, t(0)) for a, b in ((hy, hx), (hy, lx), (ly, hx), (ly, lx))]
    return keep, pos, w


# --- a bin's mean 1-D weights: the separable form of RoIAlign's average -----------------------

#: Grids larger than this (samples per bin side) are summed in closed form.
EXPLICIT_GRID_MAX = 64


def axis_weights(start: np.ndarray, bin_size: np.ndarray, grid: np.ndarray, pooled: int,
                 size: int, dtype, explicit_max: int = EXPLICIT_GRID_MAX) -> np.ndarray:
    """Weights [R, pooled, size]: row p is bin p's mean 1-D bilinear weight over the map, so
    that a bin's mean of samples is Ay[p] @ X @ Ax[q].T. Grids above ``explicit_max`` are
    summed in closed form, O(pooled * size) whatever the grid."""
    R = start.shape[0]
    A = np.zeros((R, pooled, size), np.float64)
    big = grid > explicit_max
    small = np.flatnonzero(~big & (grid > 0))
    if small.size:
        A[small] = _explicit(start[small], bin_size[small], grid[small], pooled, size)
    for r in np.flatnonzero(big):
        A[r] = _closed_form(float(start[r]), float(bin_size[r]), int(grid[r]), pooled, size)
    A /= np.maximum(grid, 1)[:, None, None]
    return A.astype(dtype)


def crop_weights(start: np.ndarray, bin_size: np.ndarray, grid: np.ndarray, pooled, size,
                 dtype, rows: int = 0, explicit_max: int = EXPLICIT_GRID_MAX):
    """``axis_weights`` of every axis at once, cut to each box's crop.

    start, bin_size, grid: [R, A] (A axes, e.g. y and x); ``pooled`` and ``size``: one per
    axis. Returns (first, stop, A): first/stop [R, A] the map indices where a box's weights
    along an axis begin and end (first == stop: none) and A [R, A, rows', S] (rows' =
    max(rows, pooled), S the longest crop; rows past an axis's pooled count are zero) with
    A[r, a, p, j] the weight of index first[r, a] + j. The same sums as axis_weights
    (float64, then ``dtype``), at the crops' size and in one pass over both axes (W8's 10
    boxes on a 20-pixel map: 60 us against 220 us for two calls of the map-sized weights)."""
    R, n_ax = start.shape
    pooled = np.array(pooled if np.ndim(pooled) else [pooled] * n_ax, np.intp)
    size = np.array(size if np.ndim(size) else [size] * n_ax, np.intp)
    P = int(pooled.max())
    rows = max(rows, P)
    big = grid > explicit_max
    huge = list(zip(*np.nonzero(big))) if big.any() else []  # grids summed in closed form
    g = np.where(big, 0, grid) if huge else grid
    G = max(1, int(g.max(initial=0)))
    y = sample_positions(start, bin_size, g, P, G)  # [R, A, P, G]
    inside, low, high, frac = neighbours(y, size[:, None, None])
    t = frac.dtype.type
    use = inside & (np.arange(G) < g[..., None, None])
    if (pooled < P).any():
        use &= np.arange(P)[:, None] < pooled[:, None, None]
    first = np.where(use, low, size[:, None, None]).min(axis=(2, 3))
    stop = np.where(use, high + 1, 0).max(axis=(2, 3))
    for r, ax in huge:  # huge grids: the closed form over the whole axis
        on = axis_weights(start[r:r + 1, ax], bin_size[r:r + 1, ax], grid[r:r + 1, ax],
                          int(pooled[ax]), int(size[ax]), np.float64, explicit_max)[0].any(0)
        first[r, ax] = on.argmax() if on.any() else size[ax]
        stop[r, ax] = size[ax] - on[::-1].argmax() if on.any() else 0
    stop = np.maximum(stop, first)  # no weight at all: an empty crop
    first = np.minimum(first, stop)
    S = max(1, int((stop - first).max(initial=1)))
    base = ((np.arange(R * n_ax) * rows).reshape(R, n_ax, 1) + np.arange(P))[..., None] * S
    base = base - first[:, :, None, None]
    # every low neighbour, then every high one (the order of the sums); a sample not used
    # weighs 0 where it lands (clipped into the box's own rows)
    cells = np.empty((2, *low.shape), np.intp)
    np.add(base, low, out=cells[0])
    np.add(base, high, out=cells[1])
    np.clip(cells, 0, R * n_ax * rows * S - 1, out=cells)
    weights = np.zeros((2, *frac.shape), np.float64)  # 1 - frac and frac in T, as float64
    np.subtract(t(1), frac, out=weights[0], where=use)
    np.copyto(weights[1], frac, where=use)
    A = np.bincount(cells.ravel(), weights.ravel(), minlength=R * n_ax * rows * S).reshape(
        R, n_ax, rows, S)
    for r, ax in huge:
        f0, f1, p = first[r, ax], stop[r, ax], int(pooled[ax])
        A[r, ax, :p, :f1 - f0] = axis_weights(start[r:r + 1, ax], bin_size[r:r + 1, ax],
                                              grid[r:r + 1, ax], p, int(size[ax]), np.float64,
                                              explicit_max)[0, :, f0:f1] * grid[r, ax]
    A /= np.maximum(grid, 1)[:, :, None, None]
    return first, stop, A.astype(dtype)


def _explicit(start, bin_size, grid, pooled: int, size: int) -> np.ndarray:
    """Sum of the samples' 1-D weights, per bin over the map [R, pooled, size]."""
    R = start.shape[0]
    idx, w = sample_taps(start, bin_size, grid, pooled, size, int(grid.max()))
    row = (np.arange(R)[:, None] * pooled + np.arange(pooled)) * size
    idx = idx + row[:, :, None, None]
    # every low neighbour, then every high one (the order of the sums)
    return np.bincount(np.moveaxis(idx, -1, 0).ravel(),
                       np.moveaxis(w, -1, 0).astype(np.float64).ravel(),
                       minlength=R * pooled * size).reshape(R, pooled, size)


def _closed_form(start: float, bin_size: float, grid: int, pooled: int, size: int) -> np.ndarray:
    """Summed 1-D weights of ``grid`` evenly spaced samples per bin, in O(pooled * size).

    Samples of bin p sit at y_k = a + (k + 0.5) d with a = start + p*bin_size and
    d = bin_size / grid. In [-1, 0) a sample weighs 1 on row 0, in [size-1, size] 1 on the
    last row, and in [j, j+1) it splits (1 - f, f) between rows j and j+1 (f = y - j).
    Counts and sums of samples per unit interval come from arithmetic series.
    """
    a = start + np.arange(pooled)[:, None] * bin_size
    d = bin_size / grid

    def below(e, inclusive=False):  # number of k in [0, grid) with y_k < e (or <= e)
        q = (e - a) / d - 0.5
        n = np.floor(q) + 1 if inclusive else np.ceil(q)
        return np.clip(n, 0, grid)

    edges = np.arange(-1, size, dtype=np.float64)[None, :]  # -1, 0, ..., size-1
    K = below(edges)  # [pooled, size+1]
    k_end = below(np.float64(size), inclusive=True)[:, 0]
    A = np.zeros((pooled, size))
    A[:, 0] += K[:, 1] - K[:, 0]  # samples in [-1, 0)
    A[:, size - 1] += k_end - K[:, size]  # samples in [size-1, size]
    if size > 1:
        k0, k1 = K[:, 1:size], K[:, 2:size + 1]  # samples in [j, j+1), j = 0..size-2
        n = k1 - k0
        j = np.arange(size - 1)[None, :]
        frac = n * (a + d * (k0 + k1) / 2) - n * j  # sum of (y_k - j)
        A[:, :size - 1] += n - frac
        A[:, 1:] += frac
    return A


# --- integer bins: max pooling (ROIPooling, RoIPool) and position-sensitive pooling ------------

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


# --- bilinear ROIPooling (OpenVINO): one sample per bin, normalized boxes ----------------------

def bilinear_coords(lo: np.ndarray, hi: np.ndarray, pooled: int, size: int) -> np.ndarray:
    """Sample coordinates [R, pooled] along one axis, in T, as OpenVINO computes them."""
    t = lo.dtype.type
    extent = t(size - 1)
    if pooled == 1:
        return ((lo + hi) * t(0.5) * extent)[:, None]
    step = (hi - lo) * extent / t(pooled - 1)
    c = np.arange(pooled, dtype=lo.dtype) * step[:, None] + (lo * extent)[:, None]
    c[:, -1] = hi * extent  # the last sample sits exactly on the box edge
    return c


def bilinear_axis(c: np.ndarray, size: int):
    """OpenVINO's neighbours of coordinates c: (on the map, low, high, fraction of high)."""
    valid = (c >= 0) & (c <= size - 1)
    cc = np.where(valid, c, 0)
    low = np.floor(cc)
    frac = cc - low
    low = low.astype(np.intp)
    high = np.minimum(np.ceil(cc).astype(np.intp), size - 1)
    return valid, low, high, frac


# --- rotated boxes (mmcv roi_align_rotated) ---------------------------------------------------

#: The columns of ``rotated_rows`` (also the CUDA kernel's rows).
ROTATED_ROW = ("batch", "cy", "cx", "start_h", "start_w", "bin_h", "bin_w", "cos", "sin",
               "grid_h", "grid_w")


def rotated_rows(rois: np.ndarray, batch: np.ndarray, spatial_scale: float, ph: int, pw: int,
                 sampling_ratio: int, aligned: bool, clockwise: bool) -> np.ndarray:
    """Per rotated box [batch, cx, cy, w, h, theta], in T as mmcv computes it, ROTATED_ROW:
    the centre scaled (and shifted by -0.5 when aligned), the size scaled (at least 1 when
    not aligned), the bins laid out from (-h/2, -w/2), theta negated when clockwise, the grid
    sampling_ratio or mmcv's ceilf(size / pooled) (the quotient rounded to float32 first,
    also for float64). Sizes must be checked finite (and >= 0 when aligned) by the caller."""
    t = rois.dtype.type
    s, off = t(spatial_scale), t(0.5 if aligned else 0.0)
    cx, cy = rois[:, 1] * s - off, rois[:, 2] * s - off
    w, h = rois[:, 3] * s, rois[:, 4] * s
    if not aligned:
        w, h = np.maximum(w, t(1)), np.maximum(h, t(1))
    theta = -rois[:, 5] if clockwise else rois[:, 5]
    rows = np.empty((rois.shape[0], len(ROTATED_ROW)), rois.dtype)
    rows[:, 0] = batch
    rows[:, 1], rows[:, 2] = cy, cx
    rows[:, 3], rows[:, 4] = -h / t(2), -w / t(2)
    rows[:, 5], rows[:, 6] = h / t(ph), w / t(pw)
    rows[:, 7], rows[:, 8] = np.cos(theta), np.sin(theta)
    for col, size, pooled in ((9, h, ph), (10, w, pw)):
        if sampling_ratio > 0:
            rows[:, col] = sampling_ratio
        else:  # mmcv: ceilf(size / pooled), the quotient rounded to float32
            g = np.ceil((size / t(pooled)).astype(np.float32)).astype(np.float64)
            rows[:, col] = np.clip(g, 0, 2.0 ** 62)
    return rows


def rotated_samples(rows: np.ndarray, ph: int, pw: int, Gy: int, Gx: int, iy=None, ix=None):
    """Rotated sample coordinates of boxes ``rows`` (ROTATED_ROW): y, x [n, ph, Gy, pw, Gx]
    in T, and whether each is a sample of its bin (k < grid). ``iy`` / ``ix``: the grid
    indices to place (default 0 .. G-1). yy, xx as RoIAlign places them from (start_h,
    start_w); y = yy*cos - xx*sin + cy, x = yy*sin + xx*cos + cx."""
    cy, cx, sh, sw, bh, bw, c, s = (rows[:, k] for k in range(1, 9))
    gh, gw = rows[:, 9], rows[:, 10]
    yy = sample_positions(sh, bh, gh, ph, Gy, iy)[:, :, :, None, None]
    xx = sample_positions(sw, bw, gw, pw, Gx, ix)[:, None, None, :, :]
    e = (slice(None),) + (None,) * 4
    y = (yy * c[e] - xx * s[e]) + cy[e]
    x = (yy * s[e] + xx * c[e]) + cx[e]
    ky = np.arange(Gy) if iy is None else np.asarray(iy)
    kx = np.arange(Gx) if ix is None else np.asarray(ix)
    use = ((ky < gh[:, None])[:, None, :, None, None] & (kx < gw[:, None])[:, None, None, None, :])
    return y, x, use


# --- mmdeploy's box rescale (its levels: ort_roi.levels) ---------------------------------------

def mmdeploy_rescale(boxes: np.ndarray, factor: float) -> np.ndarray:
    """mmdeploy's rescale about the centre: half size = fma(size + 1, factor / 2, -1/2)."""
    t = boxes.dtype.type
    x0, y0, x1, y1 = boxes.T
    cx, cy = (x0 + x1) * t(0.5), (y0 + y1) * t(0.5)
    half = t(factor) * t(0.5)

    def fma(a):  # one rounding, as the plugin's fma
        return (a.astype(np.float64) * np.float64(half) - 0.5).astype(boxes.dtype)
    hw, hh = fma(x1 - x0 + t(1)), fma(y1 - y0 + t(1))
    return np.stack([cx - hw, cy - hh, cx + hw, cy + hh], 1)


# --- torchvision's position-sensitive ops (their C++ kernels' integer arithmetic) ---------------

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
