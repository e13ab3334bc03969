"""ROIPooling (OpenVINO ROIPooling-1; max is also MXNet ROIPooling and ONNX MaxRoiPool)."""

from __future__ import annotations

import numpy as np

from ..specs import ROI_POOLING
from ._boxes import (batch_from_column, check_boxes, check_features, max_pool_bins,
                     round_half_away)
from ._maxpool import pool_max


def roi_pooling(X: np.ndarray, rois: np.ndarray, *, pooled_h: int, pooled_w: int,
                spatial_scale: float, method: str = "max") -> np.ndarray:
    """Pool each row of ``rois`` ([batch_id, x1, y1, x2, y2]) of ``X`` [N, C, H, W].

    method="max": box edges are scaled by ``spatial_scale`` and rounded half away from
    zero; bin p covers [floor(p*bin), ceil((p+1)*bin)) from the box start, clipped to the
    map; the output is the bin's maximum, 0 for an empty bin.
    method="bilinear": coordinates are normalized to [0, 1] (``spatial_scale`` unused);
    each output is one bilinear sample, 0 outside the map.

    Returns [R, C, pooled_h, pooled_w] of X's dtype. Raises RoiOpError on bad input.
    """
    op = ROI_POOLING.name
    a = ROI_POOLING.resolve(dict(pooled_h=pooled_h, pooled_w=pooled_w,
                                 spatial_scale=spatial_scale, method=method))
    X = check_features(op, X)
    rois = check_boxes(op, "rois", rois, X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    if a["method"] == "max":
        return max_pool(X, batch, rois[:, 1:], a["pooled_h"], a["pooled_w"],
                        a["spatial_scale"])
    return bilinear_pool(X, batch, rois[:, 1:], a["pooled_h"], a["pooled_w"])


def max_pool(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int, pw: int,
             spatial_scale: float) -> np.ndarray:
    """Max pooling of checked inputs; boxes are [R, 4] rows [x1, y1, x2, y2]."""
    t = X.dtype.type
    s = t(spatial_scale)
    x1, y1, x2, y2 = (round_half_away(boxes[:, i] * s) for i in range(4))
    hlo, hhi = max_pool_bins(y1, y2, ph, X.shape[2])
    wlo, whi = max_pool_bins(x1, x2, pw, X.shape[3])
    return pool_max(X, batch, hlo, hhi, wlo, whi)


def _bilinear_coords(lo: np.ndarray, hi: np.ndarray, pooled: int, size: int):
    """Sample coordinates [R, pooled] along one axis, in T, as OpenVINO computes them."""
    t = lo.dtype.type
    extent = t(size - 1)
    if pooled == 1:
        return ((lo + hi) * t(0.5) * extent)[:, None]
    step = (hi - lo) * extent / t(pooled - 1)
    c = np.arange(pooled, dtype=lo.dtype) * step[:, None] + (lo * extent)[:, None]
    c[:, -1] = hi * extent  # the last sample sits exactly on the box edge
    return c


def _bilinear_axis(c: np.ndarray, size: int):
    """Valid mask, low and high indices and the fraction for coordinates c."""
    valid = (c >= 0) & (c <= size - 1)
    cc = np.where(valid, c, 0)
    low = np.floor(cc)
    frac = cc - low
    low = low.astype(np.intp)
    high = np.minimum(np.ceil(cc).astype(np.intp), size - 1)
    return valid, low, high, frac


def bilinear_pool(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int,
                  pw: int) -> np.ndarray:
    """Bilinear ROIPooling of checked inputs (normalized boxes [R, 4])."""
    N, C, H, W = X.shape
    R = boxes.shape[0]
    out = np.zeros((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    vy, y0, y1, fy = _bilinear_axis(_bilinear_coords(boxes[:, 1], boxes[:, 3], ph, H), H)
    vx, x0, x1, fx = _bilinear_axis(_bilinear_coords(boxes[:, 0], boxes[:, 2], pw, W), W)
    # Gather from an NHWC view flattened to [N*H*W, C]: each take copies whole channel rows.
    flat = np.ascontiguousarray(X.transpose(0, 2, 3, 1)).reshape(N * H * W, C)
    base = (batch * (H * W))[:, None, None]
    ry0, ry1 = (y0 * W)[:, :, None], (y1 * W)[:, :, None]
    cx0, cx1 = x0[:, None, :], x1[:, None, :]
    tl = flat.take((base + ry0 + cx0).ravel(), axis=0)
    tr = flat.take((base + ry0 + cx1).ravel(), axis=0)
    bl = flat.take((base + ry1 + cx0).ravel(), axis=0)
    br = flat.take((base + ry1 + cx1).ravel(), axis=0)
    dx = np.broadcast_to(fx[:, None, :], (R, ph, pw)).reshape(-1, 1)
    dy = np.broadcast_to(fy[:, :, None], (R, ph, pw)).reshape(-1, 1)
    top = tl + (tr - tl) * dx
    bottom = bl + (br - bl) * dx
    val = top + (bottom - top) * dy
    valid = (vy[:, :, None] & vx[:, None, :]).reshape(-1, 1)
    val = np.where(valid, val, 0).reshape(R, ph, pw, C)
    out[...] = val.transpose(0, 3, 1, 2)
    return out
