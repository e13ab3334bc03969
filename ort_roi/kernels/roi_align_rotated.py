"""MMCVRoIAlignRotated (mmcv roi_align_rotated, CPU forward; mmrotate through mmdeploy).

Per box [batch, cx, cy, w, h, theta], in T as mmcv computes it: the centre scaled and shifted
by -0.5 when ``aligned``, the size scaled (at least 1 when not aligned), theta negated when
``clockwise``. Bin (ph, pw) holds gh x gw samples laid out about the centre,
    yy = -h/2 + ph*bin_h + (iy + 0.5)*bin_h/gh      (xx likewise)
and rotated:  y = yy*cos - xx*sin + cy,  x = yy*sin + xx*cos + cx.  Each sample is RoIAlign's
bilinear sample (0 beyond one pixel off the map); the output is the mean over max(gh*gw, 1).
The adaptive grid is mmcv's ceilf(h / pooled_h): the quotient is rounded to float32 first,
also for float64 inputs.

Boxes are computed a few at a time from an NHWC copy of X (every sample of every bin at
once). A box whose grid holds more than SAMPLES_PER_BOX samples is sampled only where its
samples can fall on the map: the rows and columns of each bin's grid are clipped to the
rotated map's extent, so its cost is bounded by the map's size, not by the box's.
"""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..specs import MMCV_ROI_ALIGN_ROTATED
from . import _workspace
from ._boxes import batch_from_column, check_boxes, check_features, quiet
from ._cupy import on_gpu
from .roi_align import neighbours, sample_positions

#: Boxes with more samples than this (pooled bins x grid) use the clipped sampling.
SAMPLES_PER_BOX = 1 << 16
#: Samples x channels gathered per step (bounds the scratch memory).
STEP = 1 << 20
#: The most samples one box may need on the map (a fixed sampling_ratio so large that a box
#: would need more is refused rather than run for hours).
MAX_SAMPLES = 1 << 28


@quiet
def mmcv_roi_align_rotated(input: np.ndarray, rois: np.ndarray, *, output_height: int = 1,
                           output_width: int = 1, spatial_scale: float = 1.0,
                           sampling_ratio: int = 0, aligned: int = 1,
                           clockwise: int = 0) -> np.ndarray:
    """Rotated RoIAlign over rows [batch_id, cx, cy, w, h, theta] (theta in radians,
    counter-clockwise unless ``clockwise``). Returns [R, C, output_height, output_width]."""
    op = MMCV_ROI_ALIGN_ROTATED.name
    a = MMCV_ROI_ALIGN_ROTATED.resolve(dict(
        output_height=output_height, output_width=output_width, spatial_scale=spatial_scale,
        sampling_ratio=sampling_ratio, aligned=aligned, clockwise=clockwise))
    X = check_features(op, input, "input")
    rois = check_boxes(op, "rois", rois, X, 6)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    ph, pw = a["output_height"], a["output_width"]
    rows = geometry(op, rois, batch, a["spatial_scale"], ph, pw, a["sampling_ratio"],
                    bool(a["aligned"]), bool(a["clockwise"]))
    return align_rotated(X, rows, ph, pw, _host(X, rows, ph, pw))


def geometry(op: str, rois: np.ndarray, batch: np.ndarray, spatial_scale: float, ph: int,
             pw: int, sampling_ratio: int, aligned: bool, clockwise: bool) -> np.ndarray:
    """Per box, in T: [batch, cy, cx, start_h, start_w, bin_h, bin_w, cos, sin, gh, gw]."""
    t = rois.dtype.type
    s, off = t(spatial_scale), t(0.5 if aligned else 0.0)
    cx, cy = rois[:, 1] * s - off, rois[:, 2] * s - off
    w, h = rois[:, 3] * s, rois[:, 4] * s
    bad = ~(np.isfinite(w) & np.isfinite(h))
    if aligned:  # mmcv asserts "ROIs in ROIAlignRotated do not have non-negative size"
        bad |= (w < 0) | (h < 0)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        why = "overflows" if not (np.isfinite(w[r]) and np.isfinite(h[r])) else "is negative"
        raise RoiOpError(op, "input 'rois'",
                         f"row {r}: the scaled size (w, h) = ({w[r].item()!r}, {h[r].item()!r}) "
                         f"{why} (mmcv requires w, h >= 0 when aligned=1)")
    if not aligned:
        w, h = np.maximum(w, t(1)), np.maximum(h, t(1))
    theta = -rois[:, 5] if clockwise else rois[:, 5]
    rows = np.empty((rois.shape[0], 11), rois.dtype)
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


def _host(X, rows, ph: int, pw: int):
    """The NumPy computation of boxes ``which`` (the GPU path hands it the huge grids)."""
    def compute(which: np.ndarray):
        from . import _boxes
        Xh = _boxes.host(X)
        out = np.empty((which.size, Xh.shape[1], ph, pw), Xh.dtype)
        _clipped(_workspace.nhwc(Xh), rows[which], ph, pw, out)
        return out
    return compute


@on_gpu
def align_rotated(X: np.ndarray, rows: np.ndarray, ph: int, pw: int, host=None) -> np.ndarray:
    """Rotated RoIAlign of checked inputs from their per-box geometry ``rows``."""
    N, C, H, W = X.shape
    R = rows.shape[0]
    out = _workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    Xn = _workspace.nhwc(X)
    grid = rows[:, 9:11].astype(np.int64)
    samples = ph * pw * grid[:, 0].astype(np.float64) * grid[:, 1]
    big = samples > SAMPLES_PER_BOX
    if big.any():
        _clipped(Xn, rows[big], ph, pw, out, np.flatnonzero(big))
    small = np.flatnonzero(~big)
    # boxes of similar grids together, so each step's padding to its largest grid is small
    small = small[np.lexsort((grid[small, 1], grid[small, 0]))]
    i = 0
    while i < small.size:
        gy, gx = max(1, int(grid[small[i], 0])), max(1, int(grid[small[i], 1]))
        n = max(1, STEP // (ph * pw * gy * gx * max(C, 1)))  # by the first (smallest) grid
        # halved while the largest grid in the step makes it exceed 4 * STEP
        rs = small[i:i + n]
        Gy, Gx = max(1, int(grid[rs, 0].max())), max(1, int(grid[rs, 1].max()))
        while rs.size > 1 and rs.size * ph * pw * Gy * Gx * C > 4 * STEP:
            rs = rs[:rs.size // 2]
            Gy, Gx = max(1, int(grid[rs, 0].max())), max(1, int(grid[rs, 1].max()))
        _regular(Xn, rows[rs], ph, pw, Gy, Gx, out, rs)
        i += rs.size
    return out


def _samples(rows, ph: int, pw: int, Gy: int, Gx: int, iy=None, ix=None):
    """Rotated sample coordinates of boxes ``rows``: y, x [n, ph, Gy, pw, Gx] in T, and
    whether each is a sample of its bin (k < grid). ``iy`` / ``ix``: the grid indices to
    place (default 0..G-1)."""
    cy, cx, sh, sw, bh, bw, c, s = (rows[:, k] for k in range(1, 9))
    gh, gw = rows[:, 9], rows[:, 10]
    yy = _positions(sh, bh, gh, ph, Gy, iy)[:, :, :, None, None]
    xx = _positions(sw, bw, gw, pw, Gx, ix)[:, None, None, :, :]
    e = (slice(None),) + (None,) * 4
    y = (yy * c[e] - xx * s[e]) + cy[e]
    x = (yy * s[e] + xx * c[e]) + cx[e]
    ky = np.arange(Gy) if iy is None else iy
    kx = np.arange(Gx) if ix is None else ix
    use = ((ky < gh[:, None])[:, None, :, None, None] & (kx < gw[:, None])[:, None, None, None, :])
    return y, x, use


def _positions(start, bin_size, grid, pooled: int, G: int, k=None):
    """sample_positions() (start + p*bin) + (k + 0.5)*bin/grid, for grid indices k."""
    if k is None:
        return sample_positions(start, bin_size, grid, pooled, G)
    t = start.dtype.type
    b = bin_size[:, None, None]
    p = np.arange(pooled, dtype=start.dtype)[:, None]
    kk = np.asarray(k, dtype=start.dtype)
    return (start[:, None, None] + p * b) + (kk + t(0.5)) * b / grid.astype(start.dtype)[:, None, None]


def _values(Xn, rows, y, x, use):
    """Each sample's value w1*v1 + w2*v2 + w3*v3 + w4*v4 (0 off the map or past the grid):
    [..., C]."""
    N, H, W, C = Xn.shape
    t = Xn.dtype.type
    in_y, yl, yh, ly = neighbours(y, H)
    in_x, xl, xh, lx = neighbours(x, W)
    keep = use & in_y & in_x
    hy, hx = t(1) - ly, t(1) - lx
    base = (rows[:, 0].astype(np.intp) * (H * W)).reshape((-1,) + (1,) * (y.ndim - 1))
    pixels = Xn.reshape(N * H * W, C)
    val = None
    for wy, wx, py, px in ((hy, hx, yl, xl), (hy, lx, yl, xh), (ly, hx, yh, xl),
                           (ly, lx, yh, xh)):
        w = np.where(keep, wy * wx, t(0))
        v = w[..., None] * pixels.take(np.where(keep, base + py * W + px, 0), axis=0)
        val = v if val is None else val + v
    return val


def _regular(Xn, rows, ph: int, pw: int, Gy: int, Gx: int, out, which) -> None:
    """Boxes ``which`` (grids at most Gy x Gx): every sample at once."""
    y, x, use = _samples(rows, ph, pw, Gy, Gx)
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
            raise RoiOpError(MMCV_ROI_ALIGN_ROTATED.name, "input 'rois'",
                             f"box {int(r)} needs {n_samples:.3g} samples on the map "
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
                    y, x, use = _bin_samples(row, p, q, iy, kx)
                    total[p, q] += _values(Xn, row, y, x, use).sum(axis=(0, 1, 2, 3, 4),
                                                                    dtype=np.float64)
        count = max(gh * gw, 1.0)
        out[r] = (total / count).astype(t).transpose(2, 0, 1)


def _bin_samples(row, p: int, q: int, iy, ix):
    """The samples (iy x ix) of bin (p, q) of one box: y, x, use [1, 1, |iy|, 1, |ix|]."""
    t = row.dtype.type
    cy, cx, sh, sw, bh, bw, c, s, gh, gw = row[0, 1:]
    yy = ((sh + t(p) * bh) + (iy.astype(row.dtype) + t(0.5)) * bh / gh)[None, None, :, None, None]
    xx = ((sw + t(q) * bw) + (ix.astype(row.dtype) + t(0.5)) * bw / gw)[None, None, None, None, :]
    y = (yy * c - xx * s) + cy
    x = (yy * s + xx * c) + cx
    return y, x, np.ones(y.shape, bool)
