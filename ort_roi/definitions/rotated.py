"""Rotated RoIAlign (mmcv roi_align_rotated; mmdeploy's multi-level plugin), one bin at a time
(docs/semantics.md)."""

from __future__ import annotations

import numpy as np

from ..geometry import mmdeploy_rotated_rows, rotated_rows, sample_positions
from ..levels import mmdeploy_rotated_levels
from .common import bilinear


def mmcv_roi_align_rotated(input, rois, *, output_height=1, output_width=1, spatial_scale=1.0,
                           sampling_ratio=0, aligned=1, clockwise=0):
    """MMCVRoIAlignRotated over rows [batch, cx, cy, w, h, theta]: RoIAlign's samples laid
    out about the box's centre from (-h/2, -w/2) (geometry.rotated_rows), rotated by theta
    (-theta when clockwise): y = yy*cos - xx*sin + cy, x = yy*sin + xx*cos + cx; the mean of
    the bilinear samples over max(gh*gw, 1)."""
    X = input
    PH, PW = output_height, output_width
    out = np.zeros((rois.shape[0], X.shape[1], PH, PW), X.dtype)
    for r in range(rois.shape[0]):
        row = rotated_rows(rois[r:r + 1], rois[r:r + 1, 0], spatial_scale, PH, PW,
                           sampling_ratio, bool(aligned), bool(clockwise))
        out[r] = _pooled_row(X, row[0], PH, PW, bilinear)
    return out


def _pooled_row(X, row, PH: int, PW: int, sample):
    """One box's bins from its ROTATED_ROW ``row``: bin (p, q) the sum of ``sample`` (the
    bilinear rule) over its gh x gw samples about the centre, rotated (y = yy*cos - xx*sin +
    cy, x = yy*sin + xx*cos + cx), divided by max(gh*gw, 1), in T. [C, PH, PW]."""
    t = X.dtype.type
    b, cy, cx, sh, sw, bh, bw, cos, sin, gh, gw = row
    gh, gw = int(gh), int(gw)
    yys = sample_positions(sh, bh, gh, PH, gh)  # [PH, gh]
    xxs = sample_positions(sw, bw, gw, PW, gw)  # [PW, gw]
    out = np.zeros((X.shape[1], PH, PW), X.dtype)
    for p in range(PH):
        for q in range(PW):
            yy, xx = yys[p][:, None], xxs[q][None, :]  # the bin's samples, about the centre
            y, x = yy * cos - xx * sin + cy, yy * sin + xx * cos + cx  # rotated
            total = sample(X[int(b)], y, x).reshape(X.shape[1], -1).sum(axis=1, dtype=X.dtype)
            out[:, p, q] = total / t(max(gh * gw, 1))
    return out


def mmdeploy_multi_level_rotated_roi_align(rois, *feats, output_height=7, output_width=7,
                                           sampling_ratio=2, aligned=0, clockwise=0,
                                           roi_scale_factor=-1.0, finest_scale=56,
                                           featmap_strides=(4.0, 8.0, 16.0, 32.0)):
    """mmdeploy's MMCVMultiLevelRotatedRoiAlign plugin over rows [batch, cx, cy, w, h,
    theta] (trt_multi_level_rotated_roi_align_kernel.cu): the level clamp(floor(log2(sqrt(w *
    h) / finest_scale + 1e-6)), 0, L-1) of the box as given (levels.mmdeploy_rotated_levels);
    w, h times roi_scale_factor when it is > 0; the box at scale 1/stride of its level as the
    plugin lays it out (geometry.mmdeploy_rotated_rows: centre fma(c, scale, -0.5 when
    aligned), size at least 1 also when aligned, -theta when clockwise); each sample the
    plugin's bilinear_interpolate (``plugin_bilinear``); the mean over max(gh*gw, 1)."""
    t = feats[0].dtype.type
    PH, PW = output_height, output_width
    level = mmdeploy_rotated_levels(rois, finest_scale, len(feats))
    boxes = rois.copy()
    if roi_scale_factor > 0:  # a float attribute: float32
        boxes[:, 3:5] *= t(np.float32(roi_scale_factor))
    out = np.zeros((rois.shape[0], feats[0].shape[1], PH, PW), feats[0].dtype)
    for r in range(rois.shape[0]):
        X = feats[level[r]]
        scale = np.float32(1.0 / np.float64(np.float32(featmap_strides[level[r]])))
        row = mmdeploy_rotated_rows(boxes[r:r + 1], boxes[r:r + 1, 0], [scale], PH, PW,
                                    sampling_ratio, bool(aligned), bool(clockwise))
        out[r] = _pooled_row(X, row[0], PH, PW, plugin_bilinear)
    return out


def plugin_bilinear(X: np.ndarray, y, x) -> np.ndarray:
    """mmdeploy's TensorRT bilinear_interpolate (common_cuda_helper.hpp) of every channel of
    X [C, H, W] at (y, x): 0 beyond one pixel off the map; else y, x clamped to [0, H-1] x
    [0, W-1] (CUDA's fmax / fmin: NaN to 0), the neighbours floor and ceil, and the lerps
    fma(v2 - v1, lx, v1), fma(v4 - v3, lx, v3), fma(v_high - v_low, ly, v_low) (each one
    rounding in float32)."""
    C, H, W = X.shape
    t = X.dtype.type
    y, x = np.broadcast_arrays(np.asarray(y, X.dtype), np.asarray(x, X.dtype))
    off = (y < -1.0) | (y > H) | (x < -1.0) | (x > W)
    y = np.fmin(t(H - 1), np.fmax(t(0), y))
    x = np.fmin(t(W - 1), np.fmax(t(0), x))
    yl, xl = np.floor(y).astype(np.intp), np.floor(x).astype(np.intp)
    yh, xh = np.ceil(y).astype(np.intp), np.ceil(x).astype(np.intp)
    ly, lx = y - yl.astype(X.dtype), x - xl.astype(X.dtype)

    def fma(a, b, c):  # one rounding for float32 (exact product in float64)
        return (a.astype(np.float64) * b + c).astype(X.dtype)
    v_low = fma(X[:, yl, xh] - X[:, yl, xl], lx, X[:, yl, xl])
    v_high = fma(X[:, yh, xh] - X[:, yh, xl], lx, X[:, yh, xl])
    return np.where(off, t(0), fma(v_high - v_low, ly, v_low))


def mmdeploy_multi_level_rotated_roi_align_levels(rois, *feats, **attrs):
    """``mmdeploy_multi_level_rotated_roi_align`` with the strides as attributes stride_0 ..
    stride_{L-1}."""
    strides = [attrs.pop(f"stride_{i}") for i in range(len(feats))]
    return mmdeploy_multi_level_rotated_roi_align(rois, *feats, featmap_strides=strides,
                                                  **attrs)


def pyramid_rotated_roi_align(rois, levels, *feats, output_height=1, output_width=1,
                              sampling_ratio=0, aligned=1, clockwise=0, spatial_scales=()):
    """PyramidRotatedRoIAlign: row r pooled by ``mmcv_roi_align_rotated`` from the map its
    level names (feats[levels[r]], at spatial_scales[levels[r]]); a row of no level (outside
    0 .. L-1) is 0 and is not read."""
    X0 = feats[0]
    out = np.zeros((rois.shape[0], X0.shape[1], output_height, output_width), X0.dtype)
    for r in range(rois.shape[0]):
        lv = int(levels[r])
        if 0 <= lv < len(feats):
            out[r] = mmcv_roi_align_rotated(
                feats[lv], rois[r:r + 1], output_height=output_height,
                output_width=output_width, spatial_scale=spatial_scales[lv],
                sampling_ratio=sampling_ratio, aligned=aligned, clockwise=clockwise)[0]
    return out


def pyramid_rotated_roi_align_levels(rois, levels, *feats, **attrs):
    """``pyramid_rotated_roi_align`` with the scales as attributes spatial_scale_0 ..
    spatial_scale_{L-1}."""
    scales = [attrs.pop(f"spatial_scale_{i}") for i in range(len(feats))]
    return pyramid_rotated_roi_align(rois, levels, *feats, spatial_scales=scales, **attrs)
