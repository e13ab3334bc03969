"""RoIAlign (Paddle roi_align; detectron2 / torchvision semantics).

The mean of bilinear samples is separable: for box r,
    out[r, c] = Ay[r] @ X[b, c] @ Ax[r].T
where Ay[r] [PH, H] and Ax[r] [PW, W] hold each bin's summed 1-D bilinear weights divided
by its sample count. Two ways to apply it, over an NHWC copy of X:
- from the crop (_align_dense): the weights are built from the samples themselves for
  ordinary grids and in closed form for huge adaptive grids, so a giant box costs
  O(pooled * size), not O(samples); two GEMMs per box over its crop;
- from the taps (_align_taps), for a fixed sampling ratio g: bin p's weights are nonzero on
  at most 2g rows (each sample's two neighbours), so a box needs only ph*2g rows by pw*2g
  columns of pixels, gathered and reduced a few boxes at a time. Chosen per box where the
  taps are not many more than the crop's pixels.
"""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..specs import ROI_ALIGN
from ._cupy import on_gpu
from ._boxes import quiet, batch_from_counts, check_boxes, check_features
from . import _workspace
from ._parallel import for_ranges

#: Grids larger than this use the closed form (sample count per axis per bin).
EXPLICIT_GRID_MAX = 64
#: Problems whose X rows per box, and whose samples x pixels per axis, fit in this many
#: elements are computed in one pass over dense weights (a handful of NumPy calls).
SMALL = 1 << 14


@quiet
def roi_align(X: np.ndarray, boxes: np.ndarray, boxes_num: np.ndarray, *,
              pooled_height: int = 1, pooled_width: int = 1, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: int = 1) -> np.ndarray:
    """Average of bilinear samples over each bin of each box [x1, y1, x2, y2].

    Box edges are scaled by ``spatial_scale`` and shifted by -0.5 when ``aligned``; without
    ``aligned`` boxes are at least 1x1. Each bin holds ``sampling_ratio`` x
    ``sampling_ratio`` samples, or ceil(bin size) per side when ``sampling_ratio`` <= 0.
    Samples beyond one pixel outside the map contribute 0; a bin with no samples gives 0.
    Returns [R, C, pooled_height, pooled_width] of X's dtype.
    """
    op = ROI_ALIGN.name
    a = ROI_ALIGN.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                               spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                               aligned=aligned))
    X = check_features(op, X)
    boxes = check_boxes(op, "boxes", boxes, X, 4)
    batch = batch_from_counts(op, "boxes_num", boxes_num, X.shape[0], boxes.shape[0])
    check_box_sizes(op, "boxes", boxes, a["spatial_scale"])
    return align(X, batch, boxes, a["pooled_height"], a["pooled_width"], a["spatial_scale"],
                 a["sampling_ratio"], bool(a["aligned"]))


def check_box_sizes(op: str, name: str, boxes: np.ndarray, spatial_scale: float) -> None:
    """Samples of a box whose scaled size overflows T are undefined: reject it."""
    s = boxes.dtype.type(spatial_scale)
    size = boxes[:, 2:] * s - boxes[:, :2] * s
    if not np.isfinite(size).all():
        r = int(np.flatnonzero(~np.isfinite(size).all(axis=1))[0])
        raise RoiOpError(op, f"input '{name}'",
                         f"row {r}: the scaled box size overflows {boxes.dtype} "
                         f"({boxes[r].tolist()} x {spatial_scale!r})")


#: The box geometry of the RoIAlign variants (the ``aligned`` argument of ``align``): the
#: offset of the scaled corners and the least box size. 0 and 1 are RoIAlign's aligned=0/1;
#: OpenVINO's ROI feature extractor keeps sizes at least 1 also when aligned, mmdeploy's
#: multi-level plugin at least 0.
GEOMETRY = {0: (0.0, 1.0), 1: (0.5, None), 2: (0.5, 1.0), 3: (0.5, 0.0)}
OPENVINO_ALIGNED, MMDEPLOY_ALIGNED = 2, 3


def _geometry(boxes: np.ndarray, spatial_scale: float, pooled_h: int, pooled_w: int,
              sampling_ratio: int, aligned: int):
    """Per box and axis (y, x): start, bin size and grid [R, 2], in T, as the reference
    computes them (``aligned``: a key of GEOMETRY)."""
    t = boxes.dtype.type
    offset, least = GEOMETRY[int(aligned)]
    scale = np.asarray(spatial_scale, boxes.dtype)  # one, or one per box ([R, 1])
    c = boxes[:, [1, 0, 3, 2]] * scale - t(offset)  # y1 x1 y2 x2
    size = c[:, 2:] - c[:, :2]
    if least is not None:
        size = np.maximum(size, t(least))
    pooled = np.array([pooled_h, pooled_w], boxes.dtype)
    bin_size = size / pooled
    if sampling_ratio > 0:
        grid = np.full(size.shape, sampling_ratio, np.int64)
    else:
        # ceil of a huge float is clipped before the cast; a grid <= 0 means no samples.
        grid = np.minimum(np.maximum(np.ceil(size / pooled), 0), 2**62).astype(np.int64)
    return c[:, :2], bin_size, grid


def align_geometry(boxes: np.ndarray, spatial_scale: float, pooled_h: int, pooled_w: int,
                   sampling_ratio: int, aligned: bool):
    """Per-box start, bin size and grid along y and x, in T, as the reference computes them."""
    start, bin_size, grid = _geometry(boxes, spatial_scale, pooled_h, pooled_w,
                                      sampling_ratio, aligned)
    return tuple((start[:, i], bin_size[:, i], grid[:, i]) for i in range(2))


def axis_weights(start: np.ndarray, bin_size: np.ndarray, grid: np.ndarray, pooled: int,
                 size: int, dtype) -> np.ndarray:
    """Weights [R, pooled, size]: row p is bin p's mean 1-D bilinear weight over the map."""
    R = start.shape[0]
    A = np.zeros((R, pooled, size), np.float64)
    big = grid > EXPLICIT_GRID_MAX
    small = np.flatnonzero(~big & (grid > 0))
    if small.size:
        A[small] = _explicit(start[small], bin_size[small], grid[small], pooled, size)
    for r in np.flatnonzero(big):
        A[r] = _closed_form(float(start[r]), float(bin_size[r]), int(grid[r]), pooled, size)
    A /= np.maximum(grid, 1)[:, None, None]
    return A.astype(dtype)


def neighbours(y: np.ndarray, size: int):
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


def sample_positions(start, bin_size, grid, pooled: int, G: int) -> np.ndarray:
    """Sample coordinates [..., pooled, G] along one axis, in T, placed as the reference
    does: y = start + p*bin_size + (k + 0.5)*bin_size/grid for bin p and sample k (only
    k < grid are samples of the bin). start, bin_size and grid broadcast together."""
    start = np.asarray(start)
    t = start.dtype.type
    b = np.asarray(bin_size)[..., None, None]
    g = np.asarray(grid).astype(start.dtype)[..., None, None]
    p = np.arange(pooled, dtype=start.dtype)[:, None]
    k = np.arange(G, dtype=start.dtype)
    return (start[..., None, None] + p * b) + (k + t(0.5)) * b / g


def sample_taps(start, bin_size, grid, pooled: int, size: int, G: int):
    """Each sample's two bilinear neighbours along an axis, the samples placed exactly as
    the reference does: indices and weights [R, pooled, G, 2] (low, high), in T; a sample
    outside the map or past its bin's grid (k >= grid) weighs 0."""
    inside, low, high, frac = neighbours(sample_positions(start, bin_size, grid, pooled, G), size)
    t = frac.dtype.type
    use = inside & (np.arange(G) < np.asarray(grid)[..., None, None])
    return np.stack([low, high], -1), np.stack([t(1) - frac, frac], -1) * use[..., None]


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


@on_gpu
def align(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int, pw: int,
          spatial_scale: float, sampling_ratio: int, aligned: bool) -> np.ndarray:
    """RoIAlign of checked inputs, over an NHWC copy of X, boxes shared among the cores.

    A fixed ``sampling_ratio`` g samples each box at only ph*2g rows and pw*2g columns (each
    sample's two bilinear neighbours); where that grid of taps holds at most TAPS_RATIO
    times the pixels of the box's crop, the box is computed from its taps (_align_taps),
    else from its whole crop (_align_dense).
    """
    N, C, H, W = X.shape
    R = boxes.shape[0]
    out = _workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    start, bin_size, grid = _geometry(boxes, spatial_scale, ph, pw, sampling_ratio, aligned)
    if R * C * H * W <= SMALL and R * max(ph, pw) * int(grid.max()) * max(H, W) <= SMALL:
        return _align_small(X, batch, start, bin_size, grid, ph, pw, out)
    Xn = _workspace.nhwc(X)
    by_taps = np.zeros(R, bool)
    if sampling_ratio > 0:
        n_taps = 2 * sampling_ratio * np.array([ph, pw])
        span = np.clip(np.ceil(bin_size * [ph, pw]) + 2, 1, [H, W])  # the crop, about
        by_taps = ((n_taps.prod() <= TAPS_RATIO * span.prod(axis=1))
                   & (n_taps.prod() * C <= TAPS_MAX))
    if by_taps.any():
        _align_taps(Xn, batch, start, bin_size, sampling_ratio, ph, pw, out,
                    np.flatnonzero(by_taps))
    if not by_taps.all():
        _align_dense(Xn, batch, start, bin_size, grid, ph, pw, out, np.flatnonzero(~by_taps))
    return out


#: A box is computed from its taps when they number at most this times its crop's pixels
#: (the taps path has no per-box Python work: W2, 1000 boxes, 72-75 ms at 8 or more,
#: 86 ms at 2, 134 ms at 0; measured interleaved).
TAPS_RATIO = 8.0
#: ... and they hold at most this many elements (taps x channels).
TAPS_MAX = 1 << 22
#: Elements of gathered taps per step (a few boxes, about the size of a core's L2 cache).
TAPS_STEP = 1 << 19


def _axis_taps(start, bin_size, g: int, pooled: int, size: int, dtype):
    """sample_taps() of ``g`` samples per bin as indices [R, pooled * 2g] and weights over g
    [R, pooled, 2g] of ``dtype``."""
    idx, w = sample_taps(start, bin_size, g, pooled, size, g)
    R, t = start.shape[0], w.dtype.type
    return idx.reshape(R, pooled * 2 * g), (w / t(g)).astype(dtype).reshape(R, pooled, 2 * g)


def _align_taps(Xn, batch, start, bin_size, g: int, ph: int, pw: int, out, which):
    """Boxes ``which`` from their taps: with the taps' pixels G [ph, 2g, pw, 2g, C],
    out[c, p, q] = sum_ij wy[p, i] wx[q, j] G[p, i, q, j, c], as two batched products
    (over i for each row of bins, then over j for each bin), a few boxes per step."""
    N, H, W, C = Xn.shape
    pixels = Xn.reshape(N * H * W, C)
    k = 2 * g
    ny, nx = ph * k, pw * k  # taps per box along y and x
    step = max(1, TAPS_STEP // (ny * nx * C))
    block = max(step, TAPS_STEP // 8 // (ny + nx))  # boxes whose taps are made together

    def work(a: int, b: int) -> None:
        for b0 in range(a, b, block):
            rs = which[b0:min(b, b0 + block)]
            ty, wy = _axis_taps(start[rs, 0], bin_size[rs, 0], g, ph, H, Xn.dtype)
            tx, wx = _axis_taps(start[rs, 1], bin_size[rs, 1], g, pw, W, Xn.dtype)
            ty += (batch[rs] * H)[:, None]
            for s0 in range(0, rs.size, step):
                s1 = min(rs.size, s0 + step)
                n = s1 - s0
                idx = (ty[s0:s1, :, None] * W + tx[s0:s1, None, :]).ravel()
                G = np.take(pixels, idx, axis=0).reshape(n * ph, k, nx * C)
                V = np.matmul(wy[s0:s1].reshape(n * ph, 1, k), G)
                T = np.matmul(wx[s0:s1, None, :, None, :], V.reshape(n, ph, pw, k, C))
                out[rs[s0:s1]] = T.reshape(n, ph * pw, C).transpose(0, 2, 1).reshape(
                    n, C, ph, pw)

    for_ranges(which.size, work, min_chunk=step)


def _align_dense(Xn, batch, start, bin_size, grid, ph: int, pw: int, out, which):
    """Boxes ``which`` from their crops: U = Ay[:, crop rows] @ crop ([PH, wc*C]), then for
    each output row out[r][:, ph, :] = U[ph]^T @ Ax[:, crop cols]^T, written straight into
    the NCHW output."""
    N, H, W, C = Xn.shape
    (y1, x1), (bin_h, bin_w), (gh, gw) = start[which].T, bin_size[which].T, grid[which].T
    chunk = max(1, (1 << 20) // (ph * H + pw * W))  # boxes whose weights are made together
    rows_y = _gemm_rows(ph)

    def work(start: int, stop: int) -> None:
        for c0 in range(start, stop, chunk):
            c1 = min(stop, c0 + chunk)
            Ay = np.zeros((c1 - c0, rows_y, H), Xn.dtype)
            Ay[:, :ph] = axis_weights(y1[c0:c1], bin_h[c0:c1], gh[c0:c1], ph, H, Xn.dtype)
            Ax = axis_weights(x1[c0:c1], bin_w[c0:c1], gw[c0:c1], pw, W, Xn.dtype)
            used_h, used_w = Ay.any(axis=1), Ax.any(axis=1)
            for i in range(c1 - c0):
                r = which[c0 + i]
                rows, cols = np.flatnonzero(used_h[i]), np.flatnonzero(used_w[i])
                if rows.size == 0 or cols.size == 0:
                    out[r] = 0
                    continue
                h0, h1, w0, w1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
                crop = Xn[batch[r], h0:h1, w0:w1].reshape(h1 - h0, (w1 - w0) * C)
                U = (Ay[i, :, h0:h1] @ crop).reshape(rows_y, w1 - w0, C)[:ph]
                np.matmul(U.transpose(0, 2, 1), Ax[i, :, w0:w1].T, out=out[r].transpose(1, 0, 2))

    for_ranges(which.size, work)


def _gemm_rows(rows: int) -> int:
    """Rows of the first GEMM's weights: OpenBLAS's sgemm ran a 7-row product over a large
    crop 1.3-1.5x slower than the same product with a zero 8th row (measured, C = 256 and
    1024; 14 rows gained nothing from 16), so such counts get one zero row."""
    return rows + 1 if rows % 8 == 7 else rows


def _align_small(X, batch, start, bin_size, grid, ph: int, pw: int, out):
    """align() for a small problem: every sample's weights on every row / column at once."""
    N, C, H, W = X.shape
    t = X.dtype.type
    G = max(1, int(grid.max()))
    y = sample_positions(start, bin_size, grid, max(ph, pw), G)  # [R, 2, P, G]
    inside, low, high, frac = neighbours(y, np.array([H, W])[:, None, None])
    use = inside & (np.arange(G) < grid[:, :, None, None])
    s = np.arange(max(H, W))
    w = (np.where(low[..., None] == s, (t(1) - frac)[..., None], t(0))
         + np.where(high[..., None] == s, frac[..., None], t(0)))  # [R, 2, P, G, S]
    A = np.where(use[..., None], w, t(0)).sum(axis=3, dtype=np.float64)
    A = (A / np.maximum(grid, 1)[:, :, None, None]).astype(X.dtype)
    Ay, Ax = A[:, 0, :ph, :H], A[:, 1, :pw, :W]
    np.matmul(Ay[:, None] @ X[batch], Ax.transpose(0, 2, 1)[:, None], out=out)
    return out
