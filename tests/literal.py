"""Slow, literal implementations of CONTRACT.md: one Python loop per output element.

Written from the contract's text, not from the kernels, so the property tests compare two
independent readings. Arithmetic on coordinates is done in T with NumPy scalars. Float attributes are ONNX FLOAT
(float32) attributes: spatial_scale is rounded to float32 before use, as in a graph.
"""

from __future__ import annotations

import math

import numpy as np


def c_round(v):
    """C's round(): half away from zero, exact for every float."""
    t = type(v)
    a = abs(float(v))
    f = math.floor(a)
    f += 1 if a - f >= 0.5 else 0
    return t(math.copysign(f, float(v)))


def edge(v, size):
    """A bin edge clipped to [0, size]; NaN (0 * inf on an overflowing box) acts as 0, as the
    C++ references' cast to int gives INT_MIN on x86."""
    return 0 if np.isnan(v) else int(min(max(float(v), 0.0), size))


def _max_region(X, b, c, h0, h1, w0, w1):
    if h1 <= h0 or w1 <= w0:
        return 0
    best = X[b, c, h0, w0]
    for h in range(h0, h1):
        for w in range(w0, w1):
            best = max(best, X[b, c, h, w])
    return best


def _max_pool_box(X, b, x1, y1, x2, y2, PH, PW, s, out_r):
    with np.errstate(all="ignore"):  # huge boxes overflow T, as in the references
        _max_pool_box_(X, b, x1, y1, x2, y2, PH, PW, s, out_r)


def _max_pool_box_(X, b, x1, y1, x2, y2, PH, PW, s, out_r):
    t = X.dtype.type
    _, C, H, W = X.shape
    xs, ys, xe, ye = (c_round(v * t(np.float32(s))) for v in (x1, y1, x2, y2))
    rh, rw = max(ye - ys + t(1), t(1)), max(xe - xs + t(1), t(1))
    bh, bw = rh / t(PH), rw / t(PW)
    for ph in range(PH):
        h0 = edge(np.floor(t(ph) * bh) + ys, H)
        h1 = edge(np.ceil(t(ph + 1) * bh) + ys, H)
        for pw in range(PW):
            w0 = edge(np.floor(t(pw) * bw) + xs, W)
            w1 = edge(np.ceil(t(pw + 1) * bw) + xs, W)
            for c in range(C):
                out_r[c, ph, pw] = _max_region(X, b, c, h0, h1, w0, w1)


def _bilinear_sample(t, p, pooled, lo, hi, size):
    """Sample coordinate of output row / column p (CONTRACT.md, method=bilinear)."""
    if pooled == 1:
        return (lo + hi) * t(0.5) * t(size - 1)
    if p == pooled - 1:
        return hi * t(size - 1)
    return t(p) * ((hi - lo) * t(size - 1)) / t(pooled - 1) + lo * t(size - 1)


def roi_pooling(X, rois, *, pooled_h, pooled_w, spatial_scale, method="max"):
    R, (_, C, H, W) = rois.shape[0], X.shape
    out = np.zeros((R, C, pooled_h, pooled_w), X.dtype)
    t = X.dtype.type
    for r in range(R):
        b = int(rois[r, 0])
        x1, y1, x2, y2 = rois[r, 1:]
        if method == "max":
            _max_pool_box(X, b, x1, y1, x2, y2, pooled_h, pooled_w, spatial_scale, out[r])
            continue
        for ph in range(pooled_h):
            y = _bilinear_sample(t, ph, pooled_h, y1, y2, H)
            for pw in range(pooled_w):
                x = _bilinear_sample(t, pw, pooled_w, x1, x2, W)
                if y < 0 or y > H - 1 or x < 0 or x > W - 1:
                    continue
                y0, x0 = int(np.floor(y)), int(np.floor(x))
                y1_, x1_ = min(int(np.ceil(y)), H - 1), min(int(np.ceil(x)), W - 1)
                dy, dx = y - t(y0), x - t(x0)
                for c in range(C):
                    tl, tr = X[b, c, y0, x0], X[b, c, y0, x1_]
                    bl, br = X[b, c, y1_, x0], X[b, c, y1_, x1_]
                    top = tl + (tr - tl) * dx
                    bottom = bl + (br - bl) * dx
                    out[r, c, ph, pw] = top + (bottom - top) * dy
    return out


def _batches(counts):
    return [i for i, n in enumerate(counts) for _ in range(int(n))]


def roi_pool(X, boxes, boxes_num, *, pooled_height=1, pooled_width=1, spatial_scale=1.0):
    R, C = boxes.shape[0], X.shape[1]
    out = np.zeros((R, C, pooled_height, pooled_width), X.dtype)
    for r, b in enumerate(_batches(boxes_num)):
        _max_pool_box(X, b, *boxes[r], pooled_height, pooled_width, spatial_scale, out[r])
    return out


def psroi_pool(X, rois, rois_num, *, output_channels, spatial_scale=1.0, pooled_height=1,
               pooled_width=1):
    t = X.dtype.type
    _, _, H, W = X.shape
    R, PH, PW = rois.shape[0], pooled_height, pooled_width
    out = np.zeros((R, output_channels, PH, PW), X.dtype)
    s = t(np.float32(spatial_scale))
    for r, b in enumerate(_batches(rois_num)):
        x1, y1, x2, y2 = rois[r]
        sx, sy = c_round(x1) * s, c_round(y1) * s
        ex, ey = (c_round(x2) + t(1)) * s, (c_round(y2) + t(1)) * s
        rh, rw = max(ey - sy, t(0.1)), max(ex - sx, t(0.1))
        bh, bw = rh / t(PH), rw / t(PW)
        for ph in range(PH):
            h0 = edge(np.floor(t(ph) * bh + sy), H)
            h1 = edge(np.ceil(t(ph + 1) * bh + sy), H)
            for pw in range(PW):
                w0 = edge(np.floor(t(pw) * bw + sx), W)
                w1 = edge(np.ceil(t(pw + 1) * bw + sx), W)
                if h1 <= h0 or w1 <= w0:
                    continue
                for c in range(output_channels):
                    ch = (c * PH + ph) * PW + pw
                    total = 0.0
                    for h in range(h0, h1):
                        for w in range(w0, w1):
                            total += float(X[b, ch, h, w])
                    out[r, c, ph, pw] = total / ((h1 - h0) * (w1 - w0))
    return out


def _bilinear(X, b, c, y, x):
    _, _, H, W = X.shape
    if y < -1 or y > H or x < -1 or x > W:
        return 0.0
    y, x = max(float(y), 0.0), max(float(x), 0.0)
    yl, xl = int(math.floor(y)), int(math.floor(x))
    if yl >= H - 1:
        yl = yh = H - 1
        ly = 0.0
    else:
        yh, ly = yl + 1, y - yl
    if xl >= W - 1:
        xl = xh = W - 1
        lx = 0.0
    else:
        xh, lx = xl + 1, x - xl
    hy, hx = 1 - ly, 1 - lx
    v = X[b, c].astype(np.float64)
    return hy * hx * v[yl, xl] + hy * lx * v[yl, xh] + ly * hx * v[yh, xl] + ly * lx * v[yh, xh]


def roi_align(X, boxes, boxes_num, *, pooled_height=1, pooled_width=1, spatial_scale=1.0,
              sampling_ratio=-1, aligned=1):
    t = X.dtype.type
    R, C = boxes.shape[0], X.shape[1]
    PH, PW = pooled_height, pooled_width
    out = np.zeros((R, C, PH, PW), X.dtype)
    s, off = t(np.float32(spatial_scale)), t(0.5 if aligned else 0.0)
    for r, b in enumerate(_batches(boxes_num)):
        x1, y1, x2, y2 = (v * s - off for v in boxes[r])
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, t(1)), max(rh, t(1))
        bh, bw = rh / t(PH), rw / t(PW)
        gh = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rh / t(PH)))
        gw = sampling_ratio if sampling_ratio > 0 else int(math.ceil(rw / t(PW)))
        gh, gw = max(gh, 0), max(gw, 0)
        for ph in range(PH):
            for pw in range(PW):
                for c in range(C):
                    total = 0.0
                    for iy in range(gh):
                        y = y1 + t(ph) * bh + (t(iy) + t(0.5)) * bh / t(gh)
                        for ix in range(gw):
                            x = x1 + t(pw) * bw + (t(ix) + t(0.5)) * bw / t(gw)
                            total += _bilinear(X, b, c, y, x)
                    out[r, c, ph, pw] = total / max(gh * gw, 1)
    return out


def _mmcv_sample(X, b, c, y, x):
    """mmcv's pre_calc bilinear sample, in T: w1*v1 + w2*v2 + w3*v3 + w4*v4 (0 off the map)."""
    t = X.dtype.type
    _, _, H, W = X.shape
    if y < -1 or y > H or x < -1 or x > W:
        return t(0)
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
    v = X[b, c]
    return hy * hx * v[yl, xl] + hy * lx * v[yl, xh] + ly * hx * v[yh, xl] + ly * lx * v[yh, xh]


def mmcv_roi_align(X, rois, *, output_height=1, output_width=1, spatial_scale=1.0,
                   sampling_ratio=0, mode="avg", aligned=1):
    """mmdeploy MMCVRoiAlign; "avg" is RoIAlign, "max" the largest sample (-10000 if none)."""
    R = rois.shape[0]
    counts = np.bincount(rois[:, 0].astype(int), minlength=X.shape[0])
    order = np.argsort(rois[:, 0], kind="stable")
    a = dict(pooled_height=output_height, pooled_width=output_width,
             spatial_scale=spatial_scale, sampling_ratio=sampling_ratio, aligned=aligned)
    if mode == "avg":
        out = np.empty((R, X.shape[1], output_height, output_width), X.dtype)
        out[order] = roi_align(X, rois[order, 1:], counts, **a)
        return out
    t = X.dtype.type
    PH, PW = output_height, output_width
    out = np.zeros((R, X.shape[1], PH, PW), X.dtype)
    s, off = t(np.float32(spatial_scale)), t(0.5 if aligned else 0.0)
    for r in range(R):
        b = int(rois[r, 0])
        x1, y1, x2, y2 = (v * s - off for v in rois[r, 1:])
        rw, rh = x2 - x1, y2 - y1
        if not aligned:
            rw, rh = max(rw, t(1)), max(rh, t(1))
        bh, bw = rh / t(PH), rw / t(PW)
        gh = sampling_ratio if sampling_ratio > 0 else max(int(math.ceil(rh / t(PH))), 0)
        gw = sampling_ratio if sampling_ratio > 0 else max(int(math.ceil(rw / t(PW))), 0)
        for c in range(X.shape[1]):
            for ph in range(PH):
                for pw in range(PW):
                    best = t(-10000)
                    for iy in range(gh):
                        y = y1 + t(ph) * bh + (t(iy) + t(0.5)) * bh / t(gh)
                        for ix in range(gw):
                            x = x1 + t(pw) * bw + (t(ix) + t(0.5)) * bw / t(gw)
                            best = max(best, _mmcv_sample(X, b, c, y, x))
                    out[r, c, ph, pw] = best
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
