"""Rotated RoIAlign (mmcv roi_align_rotated, CPU forward) of checked inputs, from each box's
geometry (geometry.ROTATED_ROW): the strategies "regular" (a few boxes at once, every sample
of every bin, from an NHWC copy of X; the steps shared by the cores) and "clipped" (a box whose grid holds more than
strategies.SAMPLES_PER_BOX samples is sampled only where its samples can fall on the map: the
rows and columns of each bin's grid are clipped to the rotated map's extent, so its cost is
bounded by the map's size, not by the box's).
"""

from __future__ import annotations

import numpy as np

from ...errors import BoxError
from ...geometry import bilinear_weights, rotated_samples
from . import strategies, workspace
from .parallel import for_ranges

#: Samples x channels gathered per step (bounds the scratch memory).
STEP = 1 << 20
#: The most samples one box may need on the map (a fixed sampling_ratio so large that a box
#: would need more is refused rather than run for hours).
MAX_SAMPLES = 1 << 28


def align_rotated(X: np.ndarray, rows: np.ndarray, ph: int, pw: int) -> np.ndarray:
    """Rotated RoIAlign of checked inputs from their per-box geometry ``rows``."""
    N, C, H, W = X.shape
    R = rows.shape[0]
    out = workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    Xn = workspace.nhwc(X)
    grid = rows[:, 9:11].astype(np.int64)
    big = strategies.rotated_clipped(ph * pw * grid[:, 0].astype(np.float64) * grid[:, 1])
    if big.any():
        _clipped(Xn, rows[big], ph, pw, out, np.flatnonzero(big))
    small = np.flatnonzero(~big)
    # boxes of similar grids together, so each step's padding to its largest grid is small
    small = small[np.lexsort((grid[small, 1], grid[small, 0]))]
    steps, i = [], 0  # (boxes, their largest grid): each step's work, made first
    while i < small.size:
        gy, gx = max(1, int(grid[small[i], 0])), max(1, int(grid[small[i], 1]))
        n = max(1, STEP // (ph * pw * gy * gx * max(C, 1)))  # by the first (smallest) grid
        # halved while the largest grid in the step makes it exceed 4 * STEP
        rs = small[i:i + n]
        Gy, Gx = max(1, int(grid[rs, 0].max())), max(1, int(grid[rs, 1].max()))
        while rs.size > 1 and rs.size * ph * pw * Gy * Gx * C > 4 * STEP:
            rs = rs[:rs.size // 2]
            Gy, Gx = max(1, int(grid[rs, 0].max())), max(1, int(grid[rs, 1].max()))
        steps.append((rs, Gy, Gx))
        i += rs.size

    def work(a: int, b: int) -> None:  # steps a..b-1: each writes its own boxes' rows
        for rs, Gy, Gx in steps[a:b]:
            _regular(Xn, rows[rs], ph, pw, Gy, Gx, out, rs)

    for_ranges(len(steps), work, min_chunk=1)
    return out


def _values(Xn, rows, y, x, use):
    """Each sample's value w1*v1 + w2*v2 + w3*v3 + w4*v4 (0 off the map or past the grid):
    [..., C]."""
    N, H, W, C = Xn.shape
    keep, pos, w = bilinear_weights(y, x, H, W, use)
    base = (rows[:, 0].astype(np.intp) * (H * W)).reshape((-1,) + (1,) * (y.ndim - 1))
    pixels = Xn.reshape(N * H * W, C)
    val = None
    for wk, pk in zip(w, pos):
        v = wk[..., None] * pixels.take(np.where(keep, base + pk, 0), axis=0)
        val = v if val is None else val + v
    return val


def _regular(Xn, rows, ph: int, pw: int, Gy: int, Gx: int, out, which) -> None:
    """Boxes ``which`` (grids at most Gy x Gx): every sample at once."""
    y, x, use = rotated_samples(rows, ph, pw, Gy, Gx)
    val = _values(Xn, rows, y, x, use)  # [n, ph, Gy, pw, Gx, C]
    total = val.sum(axis=(2, 4))  # [n, ph, pw, C]
    count = np.maximum(rows[:, 9] * rows[:, 10], 1).astype(Xn.dtype)
    out[which] = (total / count[:, None, None, None]).transpose(0, 3, 1, 2)


def _clipped(Xn, rows, ph: int, pw: int, out, which=None) -> None:
    """Boxes with huge grids, one at a time: per bin only the grid rows and columns whose
    samples can fall within one pixel of the map (found from the map's corners mapped into
    the box's frame, widened by one sample), those samples computed exactly."""
    N, H, W, C = Xn.shape
    t = Xn.dtype.type
    which = np.arange(rows.shape[0]) if which is None else which
    corners = np.array([[-1, -1], [-1, W], [H, -1], [H, W]], np.float64)
    for j, r in enumerate(which):
        row = rows[j:j + 1]
        cy, cx, sh, sw, bh, bw, c, s, gh, gw = (float(v) for v in row[0, 1:])
        dy, dx = corners[:, 0] - cy, corners[:, 1] - cx
        spans = []  # per axis: for each bin, the grid indices that can hold map samples
        for start, b, g, pooled, proj in ((sh, bh, gh, ph, dy * c + dx * s),
                                          (sw, bw, gw, pw, -dy * s + dx * c)):
            g = int(g)
            step = b / g if g else 0.0
            lo, hi = proj.min(), proj.max()
            ks = []
            for p in range(pooled):
                a = start + p * b
                if g <= 0:
                    ks.append(np.zeros(0, np.int64))
                    continue
                if step > 0:
                    k0 = int(np.clip(np.floor((lo - a) / step - 0.5) - 1, 0, g))
                    k1 = int(np.clip(np.ceil((hi - a) / step - 0.5) + 2, 0, g))
                elif lo - 1 <= a <= hi + 1:
                    k0, k1 = 0, g
                else:
                    k0 = k1 = 0
                ks.append(np.arange(k0, k1, dtype=np.int64))
            spans.append(ks)
        n_samples = sum(a.size for a in spans[0]) * sum(a.size for a in spans[1])
        if n_samples > MAX_SAMPLES:
            raise BoxError("MMCVRoIAlignRotated", "input 'rois'", int(r),
                           f"box {{box}} needs {n_samples:.3g} samples on the map "
                           f"(grid {int(gh)} x {int(gw)} per bin): more than "
                           f"{MAX_SAMPLES}; lower sampling_ratio")
        total = np.zeros((ph, pw, C), np.float64)
        for p, ky in enumerate(spans[0]):
            for q, kx in enumerate(spans[1]):
                if ky.size == 0 or kx.size == 0:
                    continue
                rows_per_step = max(1, STEP // max(1, kx.size * C))
                for k0 in range(0, ky.size, rows_per_step):
                    iy = ky[k0:k0 + rows_per_step]
                    y, x = _bin_samples(row, p, q, iy, kx)
                    total[p, q] += _values(Xn, row, y, x, np.ones(y.shape, bool)).sum(
                        axis=(0, 1, 2, 3, 4), dtype=np.float64)
        count = max(gh * gw, 1.0)
        out[r] = (total / count).astype(t).transpose(2, 0, 1)


def _bin_samples(row, p: int, q: int, iy, ix):
    """The samples (iy x ix) of bin (p, q) of one box: y, x [1, 1, |iy|, 1, |ix|]."""
    t = row.dtype.type
    cy, cx, sh, sw, bh, bw, c, s, gh, gw = row[0, 1:]
    yy = ((sh + t(p) * bh) + (iy.astype(row.dtype) + t(0.5)) * bh / gh)[None, None, :, None, None]
    xx = ((sw + t(q) * bw) + (ix.astype(row.dtype) + t(0.5)) * bw / gw)[None, None, None, None, :]
    y = (yy * c - xx * s) + cy
    x = (yy * s + xx * c) + cx
    return y, x
