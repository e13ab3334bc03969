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


# --- mmdeploy's MMCVMultiLevelRotatedRoiAlign (TensorRT plugin) --------------------------------
# csrc/mmdeploy/backend_ops/tensorrt/multi_level_rotated_roi_align/
# trt_multi_level_rotated_roi_align_kernel.cu (rotated_roi_extractor_kernel, roi_align_single)
# and tensorrt/common/common_cuda_helper.hpp (bilinear_interpolate), mmdeploy v1.3.1.

def _cuda_int(v) -> int:
    """CUDA's float-to-int conversion (cvt.rzi.s32): truncation, saturating, NaN to 0."""
    v = float(v)
    if math.isnan(v):
        return 0
    return int(max(-2.0 ** 31, min(2.0 ** 31 - 1, math.trunc(v) if math.isfinite(v) else v)))


def _fmaxf(a, b):
    """CUDA's max of floats (fmaxf): a NaN operand gives the other."""
    return b if np.isnan(a) else a if np.isnan(b) else max(a, b)


def _fminf(a, b):
    return b if np.isnan(a) else a if np.isnan(b) else min(a, b)


def _fma(t, a, b, c):
    """fma in T: one rounding for float32 (the product exact in float64)."""
    return t(np.float64(a) * np.float64(b) + np.float64(c))


def _trt_bilinear(X, b, c, y, x):
    """bilinear_interpolate of common_cuda_helper.hpp, in T."""
    t = X.dtype.type
    _, _, H, W = X.shape
    if y < -1.0 or y > H or x < -1.0 or x > W:
        return t(0)
    y = _fminf(t(H - 1), _fmaxf(t(0), y))
    x = _fminf(t(W - 1), _fmaxf(t(0), x))
    yl, xl = _cuda_int(math.floor(y)), _cuda_int(math.floor(x))
    yh, xh = _cuda_int(math.ceil(y)), _cuda_int(math.ceil(x))
    v1, v2 = X[b, c, yl, xl], X[b, c, yl, xh]
    v3, v4 = X[b, c, yh, xl], X[b, c, yh, xh]
    ly, lx = y - t(yl), x - t(xl)
    v_low = _fma(t, v2 - v1, lx, v1)
    v_high = _fma(t, v4 - v3, lx, v3)
    return _fma(t, v_high - v_low, ly, v_low)


def mmdeploy_multi_level_rotated_roi_align(rois, *feats, output_height=7, output_width=7,
                                           clockwise=0, sampling_ratio=2, roi_scale_factor=-1.0,
                                           finest_scale=56,
                                           featmap_strides=(4.0, 8.0, 16.0, 32.0), aligned=0):
    """rotated_roi_extractor_kernel, loop for loop, in T (its fma's one rounding, its
    sqrtf / log2f in float32, CUDA's fmaxf and float-to-int conversions; cos / sin the C
    library's, CUDA's are within 2 ulp). Rows [batch, cx, cy, w, h, theta]."""
    t = feats[0].dtype.type
    f32 = np.float32
    L = len(feats)
    PH, PW = output_height, output_width
    # multi_level_rotated_roi_align: spatial_scale[i] = 1. / float(strides[i])
    spatial = [f32(1.0 / np.float64(f32(s))) for s in featmap_strides[:L]]
    out = np.zeros((rois.shape[0], feats[0].shape[1], PH, PW), feats[0].dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        for n in range(rois.shape[0]):
            x0, y0, w, h, theta = (t(v) for v in rois[n, 1:])
            scale = np.sqrt(f32(f32(w) * f32(h)))  # sqrtf(w * h)
            q = f32(np.float64(scale / f32(finest_scale)) + 1e-6)  # the double literal
            lg = math.log2(q) if q > 0 else (-math.inf if q == 0 else math.nan)
            lvl = min(L - 1, max(0, _cuda_int(np.floor(f32(lg)))))
            if roi_scale_factor > 0.0:
                w, h = w * t(f32(roi_scale_factor)), h * t(f32(roi_scale_factor))
            s = t(spatial[lvl])
            X = feats[lvl]
            H, W = X.shape[2:]
            b = _cuda_int(rois[n, 0])
            off = t(-0.5) if aligned else t(0.0)
            cw, ch = _fma(t, x0, s, off), _fma(t, y0, s, off)
            rw, rh = w * s, h * s
            theta = -theta if clockwise > 0 else theta
            # roi_align_single: malformed rois forced to 1x1 (aligned or not)
            rw, rh = _fmaxf(rw, t(1)), _fmaxf(rh, t(1))
            bh, bw = rh / t(PH), rw / t(PW)
            gh = sampling_ratio if sampling_ratio > 0 else _cuda_int(np.ceil(rh / t(PH)))
            gw = sampling_ratio if sampling_ratio > 0 else _cuda_int(np.ceil(rw / t(PW)))
            sh, sw = -rh / t(2.0), -rw / t(2.0)
            cos_t, sin_t = t(math.cos(theta)), t(math.sin(theta))
            count = t(max(gh * gw, 1))
            for c in range(X.shape[1]):
                for ph in range(PH):
                    for pw in range(PW):
                        val = t(0)
                        for iy in range(gh):
                            yy = sh + t(ph) * bh + t(iy + 0.5) * bh / t(gh)
                            for ix in range(gw):
                                xx = sw + t(pw) * bw + t(ix + 0.5) * bw / t(gw)
                                y = yy * cos_t - xx * sin_t + ch
                                x = yy * sin_t + xx * cos_t + cw
                                val += _trt_bilinear(X, b, c, y, x)
                        out[n, c, ph, pw] = val / count
    return out


# --- mmdeploy::NMSRotated (MMDeploy v1.3.1, csrc/mmdeploy/backend_ops/onnxruntime/nms_rotated/
# nms_rotated.cpp): the C++ line by line, float in np.float32, double in Python floats /
# np.float64; std::sort is libstdc++'s (ort_roi.definitions.cxx, itself a transcription of
# bits/stl_algo.h pinned by tests/test_proposals.py).

def _nmsr_cos_sin(a: float):
    # double theta = box.a; (float)cos(theta) -- the C library's cos (NaN for inf)
    return (math.cos(a), math.sin(a)) if math.isfinite(a) else (math.nan, math.nan)


def _nmsr_vertices(box):
    f = np.float32
    x_ctr, y_ctr, w, h, a = box
    c, s = _nmsr_cos_sin(float(a))
    cosTheta2 = f(c) * f(0.5)
    sinTheta2 = f(s) * f(0.5)
    pts = [[f(0), f(0)] for _ in range(4)]
    pts[0][0] = x_ctr - sinTheta2 * h - cosTheta2 * w
    pts[0][1] = y_ctr + cosTheta2 * h - sinTheta2 * w
    pts[1][0] = x_ctr + sinTheta2 * h - cosTheta2 * w
    pts[1][1] = y_ctr - cosTheta2 * h - sinTheta2 * w
    pts[2][0] = f(2) * x_ctr - pts[0][0]
    pts[2][1] = f(2) * y_ctr - pts[0][1]
    pts[3][0] = f(2) * x_ctr - pts[1][0]
    pts[3][1] = f(2) * y_ctr - pts[1][1]
    return pts


def _nmsr_cross(A, B):
    return A[0] * B[1] - B[0] * A[1]


def _nmsr_dot(A, B):
    return A[0] * B[0] + A[1] * B[1]


def _nmsr_minus(A, B):
    return [A[0] - B[0], A[1] - B[1]]


def _nmsr_intersection_points(pts1, pts2, intersections):
    vec1 = [_nmsr_minus(pts1[(i + 1) % 4], pts1[i]) for i in range(4)]
    vec2 = [_nmsr_minus(pts2[(i + 1) % 4], pts2[i]) for i in range(4)]
    num = 0
    for i in range(4):
        for j in range(4):
            det = _nmsr_cross(vec2[j], vec1[i])
            if math.fabs(det) <= 1e-14:
                continue
            vec12 = _nmsr_minus(pts2[j], pts1[i])
            t1 = _nmsr_cross(vec2[j], vec12) / det
            t2 = _nmsr_cross(vec1[i], vec12) / det
            if t1 >= 0.0 and t1 <= 1.0 and t2 >= 0.0 and t2 <= 1.0:
                intersections[num] = [pts1[i][0] + vec1[i][0] * t1,
                                      pts1[i][1] + vec1[i][1] * t1]
                num += 1
    for P, Q, vec in ((pts1, pts2, vec2), (pts2, pts1, vec1)):
        AB, DA = vec[0], vec[3]
        ABdotAB, ADdotAD = _nmsr_dot(AB, AB), _nmsr_dot(DA, DA)
        for i in range(4):
            AP = _nmsr_minus(P[i], Q[0])
            APdotAB = _nmsr_dot(AP, AB)
            APdotAD = -_nmsr_dot(AP, DA)
            if APdotAB >= 0 and APdotAD >= 0 and APdotAB <= ABdotAB and APdotAD <= ADdotAD:
                intersections[num] = list(P[i])
                num += 1
    return num


def _nmsr_hull_less(A, B):
    temp = _nmsr_cross(A, B)
    if math.fabs(temp) < 1e-6:
        return bool(_nmsr_dot(A, A) < _nmsr_dot(B, B))
    return bool(temp > 0)


def _nmsr_convex_hull_graham(p, num_in, q):
    from ort_roi.definitions.cxx import std_sort

    t = 0
    for i in range(1, num_in):
        if p[i][1] < p[t][1] or (p[i][1] == p[t][1] and p[i][0] < p[t][0]):
            t = i
    start = p[t]
    for i in range(num_in):
        q[i] = _nmsr_minus(p[i], start)
    q[0], q[t] = q[t], q[0]
    part = q[1:num_in]
    std_sort(part, _nmsr_hull_less)
    q[1:num_in] = part
    dist = [_nmsr_dot(q[i], q[i]) for i in range(num_in)]
    k = 1
    while k < num_in:
        if dist[k] > 1e-8:
            break
        k += 1
    if k == num_in:
        q[0] = p[t]
        return 1
    q[1] = q[k]
    m = 2
    for i in range(k + 1, num_in):
        while m > 1 and _nmsr_cross(_nmsr_minus(q[i], q[m - 2]),
                                    _nmsr_minus(q[m - 1], q[m - 2])) >= 0:
            m -= 1
        q[m] = q[i]
        m += 1
    return m  # shift_to_zero = true


def _nmsr_polygon_area(q, m):
    if m <= 2:
        return np.float32(0)
    area = np.float32(0)
    for i in range(1, m - 1):
        # float area += fabs(float): fabs promotes to double, the sum rounds back to float
        area = np.float32(float(area) + math.fabs(_nmsr_cross(_nmsr_minus(q[i], q[0]),
                                                              _nmsr_minus(q[i + 1], q[0]))))
    return np.float32(float(area) / 2.0)


def _nmsr_rotated_boxes_intersection(box1, box2):
    intersectPts = [[np.float32(0)] * 2 for _ in range(24)]
    orderedPts = [[np.float32(0)] * 2 for _ in range(24)]
    num = _nmsr_intersection_points(_nmsr_vertices(box1), _nmsr_vertices(box2), intersectPts)
    if num <= 2:
        return np.float32(0.0)
    num_convex = _nmsr_convex_hull_graham(intersectPts, num, orderedPts)
    return _nmsr_polygon_area(orderedPts, num_convex)


def mmdeploy_nms_rotated_ovr(b_i, b_j):
    """The ovr NMSRotatedKernel::Compute compares for boxes i (the higher-scored) and j, each
    5 float32 values [cx, cy, w, h, theta]."""
    f = np.float32
    # (float + float) / 2.0: a double
    center_shift_x = float(b_i[0] + b_j[0]) / 2.0
    center_shift_y = float(b_i[1] + b_j[1]) / 2.0
    box1 = [f(float(b_i[0]) - center_shift_x), f(float(b_i[1]) - center_shift_y),
            b_i[2], b_i[3], b_i[4]]
    box2 = [f(float(b_j[0]) - center_shift_x), f(float(b_j[1]) - center_shift_y),
            b_j[2], b_j[3], b_j[4]]
    area1 = box1[2] * box1[3]
    area2 = box2[2] * box2[3]
    intersection = _nmsr_rotated_boxes_intersection(box1, box2)
    baseS = area1 + area2 - intersection
    return intersection / baseS


def mmdeploy_nms_rotated(boxes, scores, *, iou_threshold, score_threshold):
    """NMSRotatedKernel::Compute: boxes [N, B, 5], scores [N, C, B] float32 -> [S, 3] int64."""
    from ort_roi.definitions.cxx import std_sort

    f = np.float32
    iou_threshold, score_threshold = f(iou_threshold), f(score_threshold)
    nbatch, nboxes = boxes.shape[0], boxes.shape[1]
    nclass = scores.shape[1]
    tmp_boxes = [f(v) for v in boxes.ravel()]
    sc = [f(v) for v in scores.ravel()]
    res_order = []
    with np.errstate(all="ignore"):
        for k in range(nbatch):
            for g in range(nclass):
                select = [True] * nboxes
                tmp_sc = [sc[k * nboxes * nclass + g * nboxes + i] for i in range(nboxes)]
                order = list(range(nboxes))
                std_sort(order, lambda id1, id2: bool(tmp_sc[id1] > tmp_sc[id2]))
                for _i in range(nboxes):
                    if not select[_i]:
                        continue
                    i = order[_i]
                    for _j in range(_i + 1, nboxes):
                        if not select[_j]:
                            continue
                        j = order[_j]
                        bi = k * nboxes * 5 + i * 5
                        bj = k * nboxes * 5 + j * 5
                        ovr = mmdeploy_nms_rotated_ovr(tmp_boxes[bi:bi + 5], tmp_boxes[bj:bj + 5])
                        if ovr > iou_threshold:
                            select[_j] = False
                for i in range(nboxes):
                    if select[i] and tmp_sc[order[i]] > score_threshold:
                        res_order += [k, g, order[i]]
    return np.array(res_order, np.int64).reshape(-1, 3)
