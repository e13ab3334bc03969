"""RoIAlign on the CPU: the mean of bilinear samples (RoIAlign, MMCVRoiAlign avg, ONNX
RoiAlign avg, Caffe2), the max (MMCVRoiAlign max, ONNX RoiAlign max in both readings) and
several feature-pyramid levels at once. Boxes arrive checked, with their geometry variant
(geometry.BoxGeometry).

The mean of samples is separable: for box r,
    out[r, c] = Ay[r] @ X[b, c] @ Ax[r].T
where Ay[r] [PH, H] and Ax[r] [PW, W] hold each bin's summed 1-D bilinear weights divided
by its sample count (geometry.axis_weights). The strategies (strategies.py) apply it over an
NHWC copy of X:
- "crops": from each box's crop of the map, two GEMMs; the weights built from the samples
  themselves for ordinary grids and in closed form for huge adaptive grids, so a giant box
  costs O(pooled * size), not O(samples);
- "taps", for a fixed sampling ratio g: bin p's weights are nonzero on at most 2g rows (each
  sample's two neighbours), so a box needs only ph*2g rows by pw*2g columns of pixels,
  gathered and reduced a few boxes at a time;
- "small": a small problem in one pass over dense weights (a handful of NumPy calls).
"""

from __future__ import annotations

import numpy as np

from ...geometry import (BoxGeometry, align_bins, axis_weights, bilinear_weights, neighbours,
                         sample_positions, sample_taps)
from . import strategies, workspace
from .parallel import for_ranges

#: mmcv's initial running maximum: what a bin without samples returns in its mode "max".
MMCV_EMPTY_MAX = -10000.0


def align(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int, pw: int,
          spatial_scale: float, sampling_ratio: int, geometry: BoxGeometry) -> np.ndarray:
    """RoIAlign's mean of checked inputs, over an NHWC copy of X, boxes shared among the
    cores; each call (or box) by the strategy strategies.py picks."""
    N, C, H, W = X.shape
    R = boxes.shape[0]
    out = workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    start, bin_size, grid = align_bins(boxes, spatial_scale, geometry, ph, pw, sampling_ratio)
    if strategies.align_is_small(R, C, H, W, ph, pw, int(grid.max())):
        return _align_small(X, batch, start, bin_size, grid, ph, pw, out)
    Xn = workspace.nhwc(X)
    by_taps = strategies.align_by_taps(sampling_ratio, bin_size, ph, pw, H, W, C)
    if by_taps.any():
        _align_taps(Xn, batch, start, bin_size, sampling_ratio, ph, pw, out,
                    np.flatnonzero(by_taps))
    if not by_taps.all():
        _align_crops(Xn, batch, start, bin_size, grid, ph, pw, out, np.flatnonzero(~by_taps))
    return out


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
    step = max(1, strategies.taps_step() // (ny * nx * C))
    block = max(step, strategies.taps_step() // 8 // (ny + nx))  # boxes whose taps are made together

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


def _align_crops(Xn, batch, start, bin_size, grid, ph: int, pw: int, out, which):
    """Boxes ``which`` from their crops: U = Ay[:, crop rows] @ crop ([PH, wc*C]), then for
    each output row out[r][:, ph, :] = U[ph]^T @ Ax[:, crop cols]^T, written straight into
    the NCHW output."""
    N, H, W, C = Xn.shape
    (y1, x1), (bin_h, bin_w), (gh, gw) = start[which].T, bin_size[which].T, grid[which].T
    chunk = max(1, (1 << 20) // (ph * H + pw * W))  # boxes whose weights are made together
    rows_y = _gemm_rows(ph)
    explicit = strategies.explicit_grid_max()

    def work(start: int, stop: int) -> None:
        for c0 in range(start, stop, chunk):
            c1 = min(stop, c0 + chunk)
            Ay = np.zeros((c1 - c0, rows_y, H), Xn.dtype)
            Ay[:, :ph] = axis_weights(y1[c0:c1], bin_h[c0:c1], gh[c0:c1], ph, H, Xn.dtype,
                                      explicit)
            Ax = axis_weights(x1[c0:c1], bin_w[c0:c1], gw[c0:c1], pw, W, Xn.dtype, explicit)
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


#: Samples x channels gathered per step of the max (bounds the scratch memory).
MAX_STEP = 1 << 20


def align_max(X, batch, boxes, ph: int, pw: int, spatial_scale: float, sampling_ratio: int,
              geometry: BoxGeometry, empty: float | None = MMCV_EMPTY_MAX) -> np.ndarray:
    """Max pooling of bilinear samples, of checked inputs: per box, the samples of each bin
    from an NHWC copy.

    ``empty`` a number (mmcv, mmdeploy): a sample's value is w1*v1 + w2*v2 + w3*v3 + w4*v4
    and the bin's is a running maximum from ``empty``, replaced only by a larger value.
    ``empty`` None (onnxruntime's RoiAlign max): a sample's value is the largest of its
    weighted corners max(w1*v1, w2*v2, w3*v3, w4*v4), the bin's the largest of its samples
    (0 for a bin without samples)."""
    corners = empty is None
    N, C, H, W = X.shape
    R = boxes.shape[0]
    t = X.dtype.type
    out = workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    start, bin_size, grid = align_bins(boxes, spatial_scale, geometry, ph, pw, sampling_ratio)
    Xn = workspace.nhwc(X).reshape(N * H * W, C)

    def work(a: int, b: int) -> None:
        for r in range(a, b):
            gy, gx = int(grid[r, 0]), int(grid[r, 1])
            if gy <= 0 or gx <= 0:
                out[r] = t(0 if corners else empty)
                continue
            ys = sample_positions(start[r, 0], bin_size[r, 0], gy, ph, gy).ravel()
            xs = sample_positions(start[r, 1], bin_size[r, 1], gx, pw, gx).ravel()
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


def align_levels(X: list, batch, boxes, level, ph: int, pw: int, scales, sampling_ratio: int,
                 geometry: BoxGeometry, mode: int, empty: float | None = 0.0):
    """Each box pooled from its level X[level[r]] at scales[level[r]] with RoIAlign's
    arithmetic, the mean (mode 0) or the max from ``empty`` (mode 1); a box on no level
    (level outside [0, len(X))) gives 0."""
    out = np.zeros((boxes.shape[0], X[0].shape[1], ph, pw), X[0].dtype)
    for i in range(len(X)):
        which = np.flatnonzero(level == i)
        if which.size:
            args = (X[i], batch[which], boxes[which], ph, pw, scales[i], sampling_ratio,
                    geometry)
            out[which] = align(*args) if mode == 0 else align_max(*args, empty=empty)
    return out
