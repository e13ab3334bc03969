"""RoIAlign on the CPU: the mean of bilinear samples (RoIAlign, MMCVRoiAlign avg, ONNX
RoiAlign avg, Caffe2), the max (MMCVRoiAlign max, ONNX RoiAlign max in both readings) and
several feature-pyramid levels at once. Boxes arrive checked, as their bins (geometry.align_bins:
each box's first bin's start and bin size), with the op's ``sampling_ratio`` attribute as it
resolved it; each step makes the bins' samples per side (``grid``) from it once
(geometry.sampling_grid).

The mean of samples is separable: for box r,
    out[r, c] = Ay[r] @ X[b, c] @ Ax[r].T
where Ay[r] [PH, H] and Ax[r] [PW, W] hold each bin's summed 1-D bilinear weights divided
by its sample count (geometry.axis_weights). The strategies (strategies.py) apply it over an
NHWC copy of X:
- "crops": from each box's crop of the map, two GEMMs; the weights built from the samples
  themselves for ordinary grids and in closed form for huge adaptive grids, so a giant box
  costs O(pooled * size), not O(samples); where the crops cover less than the map
  (strategies.align_crops_in_place), each crop is read from X as it is (NCHW), every
  channel in one batched product, and no copy of the map is made (the same dot products,
  rows first; OpenBLAS picks its kernels by shape, so the last bits may differ);
- "taps", for a fixed sampling_ratio (> 0): bin p's weights are nonzero on at most
  2 * sampling_ratio rows (each sample's two neighbours), so a box needs only
  ph * 2 * sampling_ratio rows by pw * 2 * sampling_ratio columns of pixels, gathered and
  reduced a few boxes at a time;
- "planes": the crops' weights applied to X as it is (NCHW), no copy: per box and crop row
  T[y] = Ax[crop cols] @ X[b][:, y, crop cols]^T, then Ay[crop rows] @ T; for a few boxes
  on a map, where the NHWC copy would cost more than the boxes;
- "small": a small problem in one pass over dense weights (a handful of NumPy calls).
"""

from __future__ import annotations

import numpy as np

from ...geometry import (MMCV_EMPTY_MAX, bilinear_weights, crop_weights,
                         max_sample_positions, neighbours, sample_positions, sample_taps,
                         sampling_grid)
from ...geometry.few import align_weights_few
from . import strategies, workspace
from .parallel import for_ranges


def align(X: np.ndarray, batch: np.ndarray, start: np.ndarray, bin_size: np.ndarray,
          ph: int, pw: int, sampling_ratio: int,
          out: np.ndarray | None = None, rows: np.ndarray | None = None) -> np.ndarray:
    """RoIAlign's mean over the bins the op computed on the host (geometry.align_bins: start
    and bin size [R, 2] each, y then x) with ``sampling_ratio`` samples per bin side (<= 0:
    adaptive; the grid, geometry.sampling_grid), over an NHWC copy of X, boxes shared among
    the cores; each call (or box) by the strategy strategies.py picks. Box i is written to
    out[rows[i]] when ``out`` is given (several levels into one output), else to a new
    [R, C, ph, pw] array (rows 0 .. R-1)."""
    N, C, H, W = X.shape
    R = start.shape[0]
    grid = sampling_grid(bin_size, sampling_ratio)
    if R and C and strategies.align_is_small(R, C, H, W, ph, pw, int(grid.max())):
        small = _align_small(X, batch, start, bin_size, grid, ph, pw)  # a new [R, C, ph, pw]
        if out is None:
            return small
        out[rows] = small
        return out
    if out is None:
        out, rows = workspace.output((R, C, ph, pw), X.dtype), np.arange(R)
    if R == 0 or C == 0:
        return out
    if strategies.align_by_planes(sampling_ratio, bin_size, ph, pw, H, W):
        _align_planes(X, batch, start, bin_size, grid, ph, pw, out, rows)
        return out
    by_taps = strategies.align_by_taps(sampling_ratio, bin_size, ph, pw, H, W, C)
    if not by_taps.any() and strategies.align_crops_in_place(start, bin_size, ph, pw, H, W):
        # every box from its crop of X as it is (no NHWC copy of the whole map)
        _align_crops_in_place(X, batch, start, bin_size, grid, ph, pw, out, rows)
        return out
    Xn = workspace.nhwc(X)
    if not by_taps.all():
        _align_crops(Xn, batch, start, bin_size, grid, ph, pw, out, rows,
                     np.flatnonzero(~by_taps))
    if by_taps.any():
        _align_taps(Xn, batch, start, bin_size, sampling_ratio, ph, pw, out, rows,
                    np.flatnonzero(by_taps))
    return out


def _axis_taps(start, bin_size, sampling_ratio: int, pooled: int, size: int, dtype):
    """sample_taps() of ``sampling_ratio`` samples per bin as indices
    [R, pooled * 2 * sampling_ratio] and weights over sampling_ratio
    [R, pooled, 2 * sampling_ratio] of ``dtype``."""
    idx, w = sample_taps(start, bin_size, sampling_ratio, pooled, size, sampling_ratio)
    R, t = start.shape[0], w.dtype.type
    k = 2 * sampling_ratio  # taps per bin side: each sample's two neighbours
    return idx.reshape(R, pooled * k), (w / t(sampling_ratio)).astype(dtype).reshape(R, pooled, k)


def _align_taps(Xn, batch, start, bin_size, sampling_ratio: int, ph: int, pw: int, out, rows,
                which):
    """Boxes ``which`` from their taps, k = 2 * sampling_ratio a bin side: with the taps'
    pixels G [ph, k, pw, k, C], out[c, p, q] = sum_ij wy[p, i] wx[q, j] G[p, i, q, j, c], as
    two batched products (over i for each row of bins, then over j for each bin), a few boxes
    per step."""
    N, H, W, C = Xn.shape
    pixels = Xn.reshape(N * H * W, C)
    k = 2 * sampling_ratio  # taps per bin side
    ny, nx = ph * k, pw * k  # taps per box along y and x
    step = max(1, strategies.taps_step() // (ny * nx * C))
    block = max(step, strategies.taps_step() // 8 // (ny + nx))  # boxes whose taps are made together

    def work(a: int, b: int) -> None:
        for b0 in range(a, b, block):
            rs = which[b0:min(b, b0 + block)]
            ty, wy = _axis_taps(start[rs, 0], bin_size[rs, 0], sampling_ratio, ph, H, Xn.dtype)
            tx, wx = _axis_taps(start[rs, 1], bin_size[rs, 1], sampling_ratio, pw, W, Xn.dtype)
            ty += (batch[rs] * H)[:, None]
            for s0 in range(0, rs.size, step):
                s1 = min(rs.size, s0 + step)
                n = s1 - s0
                idx = (ty[s0:s1, :, None] * W + tx[s0:s1, None, :]).ravel()
                # into a reused buffer, mode "clip" (the indices are on the map): take()
                # with mode "raise" and out= buffers the whole gather (3x slower)
                G = pixels.take(idx, axis=0, mode="clip",
                                out=workspace.scratch("taps", (idx.size, C), Xn.dtype))
                G = G.reshape(n * ph, k, nx * C)
                V = np.matmul(wy[s0:s1].reshape(n * ph, 1, k), G)
                T = np.matmul(wx[s0:s1, None, :, None, :], V.reshape(n, ph, pw, k, C))
                out[rows[rs[s0:s1]]] = T.reshape(n, ph * pw, C).transpose(0, 2, 1).reshape(
                    n, C, ph, pw)

    for_ranges(which.size, work, min_chunk=step)


def _weight_chunks(start, bin_size, grid, ph: int, pw: int, size: tuple[int, int], dtype,
                   rows_y: int, which, rows, batch):
    """Boxes ``which`` a chunk at a time, the weights of a chunk made at once and bounded by
    ``strategies.WEIGHTS_MAX`` entries: yields (A, boxes), A the chunk's crop weights
    [n, 2, max(rows_y, ph, pw), S] (geometry.crop_weights) and boxes[i] = (output row, image,
    y0, hc, x0, wc), the crop of the chunk's i-th box."""
    H, W = size
    chunk = max(16, strategies.WEIGHTS_MAX // (max(rows_y, ph, pw) * (H + W)))
    explicit = strategies.explicit_grid_max()
    for c0 in range(0, which.size, chunk):
        part = which[c0:c0 + chunk]
        first, stop, A = crop_weights(start[part], bin_size[part], grid[part], (ph, pw), size,
                                      dtype, rows_y, explicit)
        n = stop - first
        yield A, list(zip(rows[part].tolist(), batch[part].tolist(), first[:, 0].tolist(),
                          n[:, 0].tolist(), first[:, 1].tolist(), n[:, 1].tolist()))


def _align_crops(Xn, batch, start, bin_size, grid, ph: int, pw: int, out, rows, which):
    """Boxes ``which`` from their crops, a box at a time, the crop a strided view of the NHWC
    copy Xn (no copy): U = Ay[crop rows] @ crop ([PH, wc*C]), then per row of bins
    out[r][:, p, :] = U[p]^T @ Ax[crop cols]^T, written straight into the NCHW output (one
    batched call).

    The weights of a chunk of boxes are made first, at the crops' size
    (geometry.crop_weights), then the threads run only the products, which release the GIL
    (W8's 78 boxes on P3: the weights made in each thread took 3 of the call's 7 ms). The
    first product is cut into calls of at most 8 rows and ``strategies.GEMM_MAX``
    multiply-adds: OpenBLAS runs such small products 2-3x faster than one larger call
    (measured; see strategies.py)."""
    N, H, W, C = Xn.shape
    rows_y = -(-ph // 8) * 8
    gemm_max = strategies.gemm_max()
    for A, boxes in _weight_chunks(start, bin_size, grid, ph, pw, (H, W), Xn.dtype, rows_y,
                                   which, rows, batch):
        Ay, AxT = A[:, 0], A[:, 1, :pw].transpose(0, 2, 1)
        U_cols = max([1] + [box[5] for box in boxes]) * C

        def work(a: int, b: int) -> None:
            U = np.empty((rows_y, U_cols), Xn.dtype)
            for i in range(a, b):
                r, n, y0, hc, x0, wc = boxes[i]
                if hc == 0 or wc == 0:
                    out[r] = 0  # no sample on the map
                    continue
                crop = Xn[n, y0:y0 + hc, x0:x0 + wc]
                step = max(1, gemm_max // (8 * hc * C))  # crop columns per product
                for p0 in range(0, rows_y, 8):
                    for s0 in range(0, wc, step):
                        s1 = min(wc, s0 + step)
                        np.matmul(Ay[i, p0:p0 + 8, :hc], crop[:, s0:s1].reshape(hc, -1),
                                  out=U[p0:p0 + 8, s0 * C:s1 * C])
                np.matmul(U[:ph, :wc * C].reshape(ph, wc, C).transpose(0, 2, 1), AxT[i, :wc],
                          out=out[r].transpose(1, 0, 2))

        for_ranges(len(boxes), work, min_chunk=1)


def _align_crops_in_place(X, batch, start, bin_size, grid, ph: int, pw: int, out, rows):
    """Every box from its crop of the NCHW map as it comes, nothing of X copied: per box,
    T = Ay[:, crop rows] @ X[b][c, crop] for every channel in one batched product
    ([C, PH, wc]; each channel's crop is a strided matrix BLAS reads as it is), then
    out[r] = T @ Ax[:, crop cols]^T as one product over the channels and bin rows
    ([C*PH, wc] @ [wc, PW]), straight into the output. The dot products of the NHWC crops'
    (rows first, then columns) without either layout change: for few boxes on a large map
    (the mask heads' 100 boxes on P2) the copies, channel-last in and channel-first out,
    cost more than the products (detectron2's Mask R-CNN mask stage, one thread: 25 ms with
    the crops copied, 13 ms in place). The weights of a chunk of boxes are made at once
    (_weight_chunks). ``out`` is C-contiguous (each box's rows reshaped in place)."""
    N, C, H, W = X.shape
    if not out.flags.c_contiguous:  # a reshape of out[r] would write into a copy
        raise ValueError("_align_crops_in_place: out must be C-contiguous")
    for A, boxes in _weight_chunks(start, bin_size, grid, ph, pw, (H, W), X.dtype, 0,
                                   np.arange(rows.size), rows, batch):
        T_max = C * ph * max([1] + [box[5] for box in boxes])

        def work(a: int, b: int) -> None:
            T = workspace.scratch("crop_rows", (T_max,), X.dtype)
            for i in range(a, b):
                r, n, y0, hc, x0, wc = boxes[i]
                if hc == 0 or wc == 0:
                    out[r] = 0  # no sample on the map
                    continue
                t = T[:C * ph * wc].reshape(C, ph, wc)
                np.matmul(A[i, 0, :ph, :hc], X[n, :, y0:y0 + hc, x0:x0 + wc], out=t)
                np.matmul(t.reshape(C * ph, wc), A[i, 1, :pw, :wc].T,
                          out=out[r].reshape(C * ph, pw))

        for_ranges(len(boxes), work, min_chunk=1)


def _align_planes(X, batch, start, bin_size, grid, ph: int, pw: int, out, rows):
    """Every box from the NCHW planes of its image, no copy of X: with the crop's weights
    (geometry.crop_weights), per crop row y T[y] = Ax[:, crop cols] @ X[b][:, y, crop cols]^T
    ([pw, C]: a crop row of every channel is a strided 2-D view; one batched product over
    the crop's rows), then U = Ay[:, crop rows] @ T ([ph, pw*C]), copied into out[r]
    transposed. Only the crop's rows and columns are read: the same dot products as over
    every row of the planes (T = Ax @ X[b][:, :, crop cols]^T, [pw, C*H]), which is how
    the other boxes (``strategies.planes_rows_only`` False: NumPy / OpenBLAS run other
    kernels for those shapes, whose last bits differ) are still computed. The weights of a
    chunk of boxes are made at once (_weight_chunks)."""
    N, C, H, W = X.shape
    for A, boxes in _weight_chunks(start, bin_size, grid, ph, pw, (H, W), X.dtype, 0,
                                   np.arange(rows.size), rows, batch):
        by_rows = [strategies.planes_rows_only(C, ph, pw, box[3], box[5]) for box in boxes]
        hc_max = max([1] + [box[3] for box, r in zip(boxes, by_rows) if r])

        def work(a: int, b: int) -> None:
            T = np.empty((hc_max, pw, C), X.dtype)
            T_all = None  # [pw, C*H], for a box over every row
            U = np.empty((ph, pw * C), X.dtype)
            for i in range(a, b):
                r, n, y0, hc, x0, wc = boxes[i]
                if hc == 0 or wc == 0:
                    out[r] = 0  # no sample on the map
                    continue
                if by_rows[i]:
                    np.matmul(A[i, 1, :pw, :wc],
                              X[n, :, y0:y0 + hc, x0:x0 + wc].transpose(1, 2, 0), out=T[:hc])
                    np.matmul(A[i, 0, :ph, :hc], T[:hc].reshape(hc, pw * C), out=U)
                else:
                    if T_all is None:
                        T_all = np.empty((pw, C * H), X.dtype)
                    np.matmul(A[i, 1, :pw, :wc], X[n].reshape(C * H, W)[:, x0:x0 + wc].T,
                              out=T_all)
                    np.matmul(A[i, 0, :ph, :hc], T_all.reshape(pw * C, H)[:, y0:y0 + hc].T,
                              out=U)
                out[r] = U.reshape(ph, pw, C).transpose(2, 0, 1)

        for_ranges(len(boxes), work, min_chunk=1)


def _align_small(X, batch, start, bin_size, grid, ph: int, pw: int):
    """align() for a small problem: every sample's weights on every row / column at once
    (A [R, 2, max(ph, pw), max(H, W)], y then x: bin p's mean 1-D weights over the map's
    rows and columns), then ``small_product``."""
    N, C, H, W = X.shape
    A = _small_weights_few(start, bin_size, grid, max(ph, pw), (H, W), X.dtype)
    if A is None:
        A = _small_weights(start, bin_size, grid, max(ph, pw), (H, W), X.dtype)
    return small_product(X, batch, A, ph, pw)


def small_product(X, batch, A: np.ndarray, ph: int, pw: int) -> np.ndarray:
    """The small strategy's output from its weights A [R, 2, P, S] of X's dtype:
    out[r] = Ay[r] @ X[b] @ Ax[r].T, a new [R, C, ph, pw]. X is made C-contiguous first:
    OpenBLAS picks its routine by the operands' layout, and a channels-last view gave other
    last bits than its contiguous copy (every map the bridge hands over is contiguous); one
    image is read as it is (``batch`` a list or array of each box's image): the same
    products of the same matrices as its copy per box."""
    X = np.ascontiguousarray(X)
    H, W = X.shape[2:]
    Ay, Ax = A[:, 0, :ph, :H], A[:, 1, :pw, :W]
    return np.matmul(Ay[:, None] @ (X[0] if X.shape[0] == 1 else X[batch]),
                     Ax.transpose(0, 2, 1)[:, None])


def _small_weights(start, bin_size, grid, P: int, size: tuple[int, int], dtype):
    """_align_small's weights A [R, 2, P, max(size)] of ``dtype``: per box, axis and bin the
    sum over its samples (geometry.sample_positions, geometry.neighbours) of their 1-D
    bilinear weights on each index, in float64 sample by sample, divided by the grid."""
    t = np.dtype(dtype).type
    G = max(1, int(grid.max()))
    y = sample_positions(start, bin_size, grid, P, G)  # [R, 2, P, G]
    inside, low, high, frac = neighbours(y, np.array(size)[:, None, None])
    use = inside & (np.arange(G) < grid[:, :, None, None])
    s = np.arange(max(size))
    w = (np.where(low[..., None] == s, (t(1) - frac)[..., None], t(0))
         + np.where(high[..., None] == s, frac[..., None], t(0)))  # [R, 2, P, G, S]
    A = np.where(use[..., None], w, t(0)).sum(axis=3, dtype=np.float64)
    return (A / np.maximum(grid, 1)[:, :, None, None]).astype(dtype)


#: _small_weights_few: at most this many samples (boxes x 2 axes x bins x grid) a call and
#: weights (boxes x 2 axes x bins x map side): beyond, the arrays cost less (measured, CPU
#: time: 8 samples 13-17 us against 41 us, 16 samples and 256 weights 34-38 against 45-46,
#: 24 samples or 512 weights level, 64 samples 64 against 49).
FEW_SAMPLES = 16
FEW_WEIGHTS = 256


def _small_weights_few(start, bin_size, grid, P: int, size: tuple[int, int], dtype):
    """_small_weights, bit for bit, with scalars (geometry.align_weights_few) for a few
    samples of float32 boxes (a call of W6's size: a dozen NumPy scalars per sample instead
    of ~40 array calls a call). None (the caller takes _small_weights) for float64 (whose
    sums could round otherwise in another order), beyond FEW_SAMPLES samples or FEW_WEIGHTS
    weights, or where align_weights_few declines."""
    if dtype != np.float32:
        return None
    R = start.shape[0]
    grids = [tuple(g) for g in grid.tolist()]
    G = max(1, max(max(g) for g in grids))
    if R * 2 * P * G > FEW_SAMPLES or R * 2 * P * max(size) > FEW_WEIGHTS:
        return None
    A = align_weights_few(list(zip(start[:, 0], start[:, 1], bin_size[:, 0], bin_size[:, 1])),
                          grids, P, size)
    return None if A is None else np.array(A, dtype).reshape(R, 2, P, max(size))


#: Samples x channels gathered per step of the max (bounds the scratch memory).
MAX_STEP = 1 << 20


def align_max(X, batch, start, bin_size, ph: int, pw: int, sampling_ratio: int,
              empty: float | None = MMCV_EMPTY_MAX) -> np.ndarray:
    """Max pooling of bilinear samples over the host's bins and ``sampling_ratio``
    (``align``): per box, the samples of each bin
    from an NHWC copy; of samples with the same taps one (geometry.max_sample_positions), so
    a huge box costs in proportion to the map, not to its samples.

    ``empty`` a number (mmcv, mmdeploy): a sample's value is w1*v1 + w2*v2 + w3*v3 + w4*v4
    and the bin's is a running maximum from ``empty``, replaced only by a larger value.
    ``empty`` None (onnxruntime's RoiAlign max): a sample's value is the largest of its
    weighted corners max(w1*v1, w2*v2, w3*v3, w4*v4), the bin's the largest of its samples
    (0 for a bin without samples)."""
    corners = empty is None
    N, C, H, W = X.shape
    R = start.shape[0]
    t = X.dtype.type
    out = workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    grid = sampling_grid(bin_size, sampling_ratio)
    Xn = workspace.nhwc(X).reshape(N * H * W, C)

    def work(a: int, b: int) -> None:
        for r in range(a, b):
            gy, gx = int(grid[r, 0]), int(grid[r, 1])
            if gy <= 0 or gx <= 0:
                out[r] = t(0 if corners else empty)
                continue
            # of samples with the same taps one: at most ~4 per pixel of the map a bin side
            ys = max_sample_positions(start[r, 0], bin_size[r, 0], gy, ph, H)
            xs = max_sample_positions(start[r, 1], bin_size[r, 1], gx, pw, W)
            gy, gx = ys.shape[1], xs.shape[1]
            ys, xs = ys.ravel(), xs.ravel()
            base = batch[r] * H * W
            rows = max(1, MAX_STEP // max(1, gx * pw * C))  # y samples per step
            res = np.empty((ph * gy, pw, C), X.dtype)
            for s0 in range(0, ph * gy, rows):
                s = slice(s0, min(ph * gy, s0 + rows))
                # mmcv: samples off the map have all weights 0 and positions 0
                on, pos, w = bilinear_weights(ys[s][:, None], xs[None, :], H, W)
                val = w[0][..., None] * Xn.take(np.where(on, base + pos[0], 0), axis=0)
                for wk, pk in zip(w[1:], pos[1:]):
                    v = wk[..., None] * Xn.take(np.where(on, base + pk, 0), axis=0)
                    if corners:
                        np.maximum(val, v, out=val)
                    else:
                        val += v
                # max over each bin's x samples: [n_y, pw, gx, C] -> [n_y, pw, C]
                res[s] = np.fmax.reduce(val.reshape(-1, pw, gx, C), axis=2)
            # mmcv: a running maximum from -10000 that only a larger value replaces (a NaN
            # sample never does)
            best = np.fmax.reduce(res.reshape(ph, gy, pw, C), axis=1)
            if not corners:
                best = np.fmax(best, t(empty))
            out[r] = best.transpose(2, 0, 1)

    for_ranges(R, work)
    return out


def align_levels(X: list, batch, start, bin_size, level, ph: int, pw: int,
                 sampling_ratio: int, mode: int, empty: float | None = 0.0):
    """Each box pooled from its level X[level[r]] over the host's bins (computed at its
    level's scale) with RoIAlign's arithmetic, the mean (mode 0) or the max from ``empty``
    (mode 1); a box on no level (level outside [0, len(X))) gives 0. Each level's mean is
    written straight into the boxes' rows of the output."""
    shape = (start.shape[0], X[0].shape[1], ph, pw)
    # the max's levels come back in their own output arrays (workspace.output): not that one
    out = workspace.output(shape, X[0].dtype) if mode == 0 else np.empty(shape, X[0].dtype)
    out[(level < 0) | (level >= len(X))] = 0
    for i in range(len(X)):
        which = np.flatnonzero(level == i)
        if which.size:
            args = (X[i], batch[which], start[which], bin_size[which], ph, pw, sampling_ratio)
            if mode == 0:
                align(*args, out=out, rows=which)
            else:
                out[which] = align_max(*args, empty=empty)
    return out
