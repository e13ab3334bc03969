"""Rotated boxes (mmcv roi_align_rotated): each box's row of geometry (``ROTATED_ROW``: centre,
bins laid out from (-h/2, -w/2), cos and sin of its angle, grid) and its rotated samples,
placed as RoIAlign places them (``sample_positions``), then rotated about the centre. The
only np.cos / np.sin of the package outside ort_roi.libm: RoIAlignRotated is held to a
tolerance, not bit for bit."""

from __future__ import annotations

import numpy as np

from .sampling import sample_positions


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
    # mmcv's adaptive grid: ceilf(size / pooled), the quotient rounded to float32
    return _rows(batch, cx, cy, w, h, -rois[:, 5] if clockwise else rois[:, 5], ph, pw,
                 sampling_ratio, lambda size, pooled: np.ceil(
                     (size / t(pooled)).astype(np.float32)).astype(np.float64))


def _rows(batch, cx, cy, w, h, theta, ph: int, pw: int, sampling_ratio: int,
          grid) -> np.ndarray:
    """ROTATED_ROW from a box's scaled centre, size and angle in T: the bins laid out from
    (-h/2, -w/2), cos and sin of theta, the grid sampling_ratio or ``grid(size, pooled)``
    (float64, clipped to [0, 2**62])."""
    t = cx.dtype.type
    rows = np.empty((cx.shape[0], len(ROTATED_ROW)), cx.dtype)
    rows[:, 0] = batch
    rows[:, 1], rows[:, 2] = cy, cx
    rows[:, 3], rows[:, 4] = -h / t(2), -w / t(2)
    rows[:, 5], rows[:, 6] = h / t(ph), w / t(pw)
    rows[:, 7], rows[:, 8] = np.cos(theta), np.sin(theta)
    for col, size, pooled in ((9, h, ph), (10, w, pw)):
        rows[:, col] = sampling_ratio if sampling_ratio > 0 else np.clip(grid(size, pooled),
                                                                          0, 2.0 ** 62)
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


def mmdeploy_rotated_rows(rois: np.ndarray, batch: np.ndarray, scale: np.ndarray, ph: int,
                          pw: int, sampling_ratio: int, aligned: bool,
                          clockwise: bool) -> np.ndarray:
    """Per rotated box [batch, cx, cy, w, h, theta] (its sizes already multiplied by
    roi_scale_factor), ROTATED_ROW as mmdeploy's MMCVMultiLevelRotatedRoiAlign plugin
    computes it, each box at its level's ``scale`` [R] (trt_multi_level_rotated_roi_align_
    kernel.cu): the centre fma(c, scale, -0.5 when aligned) (one rounding, where mmcv rounds
    twice), the size scaled and at least 1 also when aligned (where mmcv keeps it), theta
    negated when clockwise, the grid sampling_ratio or ceil(size / pooled) in T (the plugin
    runs in float32). Sizes must be checked finite by the caller."""
    t = rois.dtype.type
    s = np.asarray(scale, rois.dtype)
    off = -0.5 if aligned else 0.0
    # fma: the product exact in float64 (float32 operands), one rounding to T
    cx = (rois[:, 1].astype(np.float64) * s + off).astype(rois.dtype)
    cy = (rois[:, 2].astype(np.float64) * s + off).astype(rois.dtype)
    w, h = np.fmax(rois[:, 3] * s, t(1)), np.fmax(rois[:, 4] * s, t(1))  # CUDA's max: fmaxf
    return _rows(batch, cx, cy, w, h, -rois[:, 5] if clockwise else rois[:, 5], ph, pw,
                 sampling_ratio,  # the plugin's grid: ceil(size / pooled) in T
                 lambda size, pooled: np.ceil(size / t(pooled)).astype(np.float64))
