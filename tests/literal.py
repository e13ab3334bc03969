"""Transcriptions, loop for loop, of the reference kernels of nodes that have no runnable
oracle here: mmcv's RoIAlign (avg and max) and rotated RoIAlign CPU forwards, mmdeploy's
MMCVMultiLevelRoiAlign TensorRT plugin. Read from their sources, not from ort_roi: they are
the second reading the tests hold ort_roi's kernels and definitions to. Arithmetic in T with
NumPy scalars; float attributes are ONNX FLOAT (float32), as in a graph.
"""

from __future__ import annotations

import math

import numpy as np


def _taps(t, H, W, y, x):
    """pre_calc's taps of an on-map sample: rows yl, yh, columns xl, xh and the fractions
    ly, lx, hy = 1 - ly, hx = 1 - lx, in T (a sample at or past the last row/column clamps)."""
    y, x = max(y, t(0)), max(x, t(0))
    yl, xl = int(y), int(x)
    if yl >= H - 1:
        yl = yh = H - 1
        y = t(yl)
    else:
        yh = yl + 1
    if xl >= W - 1:
        xl = xh = W - 1
        x = t(xl)
    else:
        xh = xl + 1
    ly, lx = y - t(yl), x - t(xl)
    hy, hx = t(1) - ly, t(1) - lx
    return yl, yh, xl, xh, ly, lx, hy, hx


def _mmcv_sample(X, b, c, y, x):
    """mmcv's pre_calc bilinear sample, in T: w1*v1 + w2*v2 + w3*v3 + w4*v4 (0 off the map)."""
    t = X.dtype.type
    _, _, H, W = X.shape
    if y < -1 or y > H or x < -1 or x > W:
        return t(0)
    yl, yh, xl, xh, ly, lx, hy, hx = _taps(t, H, W, y, x)
    v = X[b, c]
    return hy * hx * v[yl, xl] + hy * lx * v[yl, xh] + ly * hx * v[yh, xl] + ly * lx * v[yh, xh]


def _mmcv_bins(t, row, spatial_scale, aligned, PH, PW, sampling_ratio):
    """A row [batch, x1, y1, x2, y2] as mmcv's ROIAlignForward places its bins, in T: (its
    image, the box's top y1 and left x1, the bin height and width, the samples per bin side
    gh, gw)."""
    s, off = t(np.float32(spatial_scale)), t(0.5 if aligned else 0.0)
    x1, y1, x2, y2 = (v * s - off for v in row[1:])
    rw, rh = x2 - x1, y2 - y1
    if not aligned:
        rw, rh = max(rw, t(1)), max(rh, t(1))
    bh, bw = rh / t(PH), rw / t(PW)
    gh = sampling_ratio if sampling_ratio > 0 else max(int(math.ceil(rh / t(PH))), 0)
    gw = sampling_ratio if sampling_ratio > 0 else max(int(math.ceil(rw / t(PW))), 0)
    return int(row[0]), y1, x1, bh, bw, gh, gw


def mmcv_roi_align(X, rois, *, output_height=1, output_width=1, spatial_scale=1.0,
                   sampling_ratio=0, mode="avg", aligned=1):
    """mmcv's ROIAlignForward (mmcv/ops/csrc/pytorch/cpu/roi_align.cpp), loop for loop, in T:
    "avg" the mean of the samples over max(count, 1), "max" the largest (-10000 if none)."""
    R = rois.shape[0]
    t = X.dtype.type
    PH, PW = output_height, output_width
    out = np.zeros((R, X.shape[1], PH, PW), X.dtype)
    for r in range(R):
        b, y1, x1, bh, bw, gh, gw = _mmcv_bins(t, rois[r], spatial_scale, aligned, PH, PW,
                                               sampling_ratio)
        count = t(max(gh * gw, 1))
        for c in range(X.shape[1]):
            for ph in range(PH):
                for pw in range(PW):
                    best, total = t(-10000), t(0)
                    for iy in range(gh):
                        y = y1 + t(ph) * bh + (t(iy) + t(0.5)) * bh / t(gh)
                        for ix in range(gw):
                            x = x1 + t(pw) * bw + (t(ix) + t(0.5)) * bw / t(gw)
                            v = _mmcv_sample(X, b, c, y, x)
                            best, total = max(best, v), total + v
                    out[r, c, ph, pw] = best if mode == "max" else total / count
    return out


def mmcv_roi_align_rotated(X, rois, *, output_height=1, output_width=1, spatial_scale=1.0,
                           sampling_ratio=0, aligned=1, clockwise=0):
    """mmcv's ROIAlignRotatedForward (mmcv/ops/csrc/pytorch/cpu/roi_align_rotated.cpp),
    loop for loop, in T: pre_calc_for_bilinear_interpolate's samples, then the mean."""
    t = X.dtype.type
    _, C, H, W = X.shape
    PH, PW = output_height, output_width
    out = np.zeros((rois.shape[0], C, PH, PW), X.dtype)
    s = t(np.float32(spatial_scale))
    for n in range(rois.shape[0]):
        b = int(rois[n, 0])
        offset = t(0.5) if aligned else t(0.0)
        cw, ch = rois[n, 1] * s - offset, rois[n, 2] * s - offset
        rw, rh = rois[n, 3] * s, rois[n, 4] * s
        theta = -rois[n, 5] if clockwise else rois[n, 5]
        cos_t, sin_t = t(np.cos(theta)), t(np.sin(theta))
        if not aligned:
            rw, rh = max(rw, t(1)), max(rh, t(1))
        bh, bw = rh / t(PH), rw / t(PW)
        # ceilf(roi_height / pooled_height): the quotient as a float32
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(np.float32(rh / t(PH))))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(np.float32(rw / t(PW))))
        count = t(max(gh * gw, 1))
        sh, sw = t(-rh / 2.0), t(-rw / 2.0)
        for c in range(C):
            for ph in range(PH):
                for pw in range(PW):
                    val = t(0)
                    for iy in range(gh):
                        yy = sh + t(ph) * bh + t(iy + 0.5) * bh / t(gh)
                        for ix in range(gw):
                            xx = sw + t(pw) * bw + t(ix + 0.5) * bw / t(gw)
                            y = yy * cos_t - xx * sin_t + ch
                            x = yy * sin_t + xx * cos_t + cw
                            val += _mmcv_sample(X, b, c, y, x)
                    out[n, c, ph, pw] = val / count
    return out


def mmdeploy_multi_level_roi_align(rois, *feats, output_height=7, output_width=7,
                                   sampling_ratio=0, pool_mode=1, aligned=1,
                                   roi_scale_factor=-1.0, finest_scale=56,
                                   featmap_strides=(4.0, 8.0, 16.0, 32.0)):
    """mmdeploy's roi_extractor_kernel (TensorRT plugin MMCVMultiLevelRoiAlign), loop for
    loop, in T (its fma's as one rounding, its sqrtf/log2f in float32)."""
    X0 = feats[0]
    t = X0.dtype.type
    f32 = np.float32
    PH, PW = output_height, output_width
    out = np.zeros((rois.shape[0], X0.shape[1], PH, PW), X0.dtype)

    def fma(a, b, c):
        return t(np.float64(a) * np.float64(b) + np.float64(c))

    for n in range(rois.shape[0]):
        b = int(rois[n, 0])
        x0, y0, x1, y1 = (t(v) for v in rois[n, 1:])
        scale = np.sqrt(f32((y1 - y0) * (x1 - x0)))
        v = np.floor(np.log2(f32(np.float64(scale / f32(finest_scale)) + 1e-6)))
        lvl = 0 if np.isnan(v) else min(len(feats) - 1, max(0, int(v)))
        if roi_scale_factor > 0:
            cx, cy = (x0 + x1) * t(0.5), (y0 + y1) * t(0.5)
            half = t(f32(roi_scale_factor) * f32(0.5))
            hw, hh = fma(x1 - x0 + t(1), half, -0.5), fma(y1 - y0 + t(1), half, -0.5)
            x0, x1, y0, y1 = cx - hw, cx + hw, cy - hh, cy + hh
        X = feats[lvl]
        H, W = X.shape[2:]
        s = t(f32(1.0 / f32(featmap_strides[lvl])))
        off = -0.5 if aligned else 0.0
        sw, sh = fma(x0, s, off), fma(y0, s, off)
        ew, eh = fma(x1, s, off), fma(y1, s, off)
        rw = max(ew - sw, t(0 if aligned else 1))
        rh = max(eh - sh, t(0 if aligned else 1))
        bh, bw = rh / t(PH), rw / t(PW)
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / t(PH)))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / t(PW)))
        for c in range(X.shape[1]):
            for ph in range(PH):
                for pw in range(PW):
                    val = t(-np.finfo(np.float32).max) if pool_mode == 0 else t(0)
                    for iy in range(gh):
                        y = fma(t(iy) + t(0.5), bh / t(gh), sh + t(ph) * bh)
                        for ix in range(gw):
                            x = fma(t(ix) + t(0.5), bw / t(gw), sw + t(pw) * bw)
                            v = _mmcv_sample(X, b, c, y, x)
                            val = max(val, v) if pool_mode == 0 else val + v
                    if pool_mode != 0:
                        val = val / t(max(gh * gw, 1))
                    out[n, c, ph, pw] = val
    return out


def _ort_corner_max(X, b, c, y, x):
    """onnxruntime's RoiAlign max of one sample, in T: std::max (a < b ? b : a) of the weighted
    corners w1*v1, w2*v2, w3*v3, w4*v4 (pre_calc's taps: 0 weights at pixel 0 off the map)."""
    t = X.dtype.type
    _, _, H, W = X.shape
    v = X[b, c]
    if y < -1 or y > H or x < -1 or x > W:
        return t(0) * v[0, 0]
    yl, yh, xl, xh, ly, lx, hy, hx = _taps(t, H, W, y, x)
    best = hy * hx * v[yl, xl]
    for w, p in ((hy * lx, v[yl, xh]), (ly * hx, v[yh, xl]), (ly * lx, v[yh, xh])):
        best = w * p if best < w * p else best
    return best


def _normalized(y: np.ndarray, size: int) -> np.ndarray:
    """Sample coordinates as mmcv's and onnxruntime's samplers first rewrite them: NaN beyond
    one pixel off the map (every such sample is 0 weights at pixel 0), else max(y, 0), and
    the last index for y at or past it. A sample's value depends on these alone."""
    t = y.dtype.type
    y = np.where((y < -1) | (y > size), t(np.nan), np.maximum(y, t(0)))
    return np.where(np.floor(y) >= size - 1, t(size - 1), y)


def align_max_every_sample(X, rois, *, output_height=1, output_width=1, spatial_scale=1.0,
                           sampling_ratio=0, aligned=1, reading="mmcv"):
    """RoIAlign's max over every sample of each bin, for boxes with huge grids: the samples
    placed as mmcv places them (all gh x gw of them, in T), each bin's samples grouped by their
    normalized coordinates (equal ones give equal values: _normalized), then the max of the
    values of the groups (mmcv's sample from -10000, or onnxruntime's largest weighted corner).
    Rows [batch, x1, y1, x2, y2]."""
    t = X.dtype.type
    _, C, H, W = X.shape
    PH, PW = output_height, output_width
    out = np.zeros((rois.shape[0], C, PH, PW), X.dtype)
    for r in range(rois.shape[0]):
        b, y1, x1, bh, bw, gh, gw = _mmcv_bins(t, rois[r], spatial_scale, aligned, PH, PW,
                                               sampling_ratio)
        for ph in range(PH):
            ys = (y1 + t(ph) * bh) + (np.arange(gh).astype(X.dtype) + t(0.5)) * bh / t(gh)
            ys = np.unique(_normalized(ys, H))  # (NaNs as one)
            for pw in range(PW):
                xs = (x1 + t(pw) * bw) + (np.arange(gw).astype(X.dtype) + t(0.5)) * bw / t(gw)
                xs = np.unique(_normalized(xs, W))
                for c in range(C):
                    best = t(-10000) if reading == "mmcv" else None
                    for y in ys:
                        for x in xs:
                            y_, x_ = (t(-2) if np.isnan(y) else y), (t(-2) if np.isnan(x) else x)
                            if reading == "mmcv":
                                best = max(best, _mmcv_sample(X, b, c, y_, x_))
                            else:
                                v = _ort_corner_max(X, b, c, y_, x_)
                                best = v if best is None or best < v else best
                    out[r, c, ph, pw] = t(0) if best is None else best
    return out
