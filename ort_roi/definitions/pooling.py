"""Max pooling over integer bins (ROIPooling max, RoIPool) and bilinear ROIPooling, one bin at
a time (docs/semantics.md)."""

from __future__ import annotations

import numpy as np

from ..geometry import bilinear_pool_neighbours, bilinear_pool_positions, roi_pool_bins
from .common import images_of


def _max_bin(X: np.ndarray, h0: int, h1: int, w0: int, w1: int) -> np.ndarray:
    """The max of every channel over rows [h0, h1) and columns [w0, w1); 0 when empty."""
    if h1 <= h0 or w1 <= w0:
        return np.zeros(X.shape[0], X.dtype)
    return X[:, h0:h1, w0:w1].max(axis=(1, 2))


def _max_pool_box(X: np.ndarray, box: np.ndarray, ph: int, pw: int, scale: float) -> np.ndarray:
    """One box [x1, y1, x2, y2] of X [C, H, W]: edges round(x * scale), bin p of an axis
    [floor(p * bin) + start, ceil((p + 1) * bin) + start) clipped to the map, bin = max(end -
    start + 1, 1) / pooled; the max over each bin."""
    C, H, W = X.shape
    with np.errstate(all="ignore"):  # a huge box overflows T, as in the references
        (hlo, hhi), (wlo, whi) = roi_pool_bins(box[None], scale, ph, pw, H, W)
    out = np.zeros((C, ph, pw), X.dtype)
    for p in range(ph):
        for q in range(pw):
            out[:, p, q] = _max_bin(X, hlo[0, p], hhi[0, p], wlo[0, q], whi[0, q])
    return out


def roi_pool(X, boxes, boxes_num, *, pooled_height=1, pooled_width=1, spatial_scale=1.0):
    """RoIPool (Paddle roi_pool): max pooling of each box over integer bins."""
    out = np.zeros((boxes.shape[0], X.shape[1], pooled_height, pooled_width), X.dtype)
    for r, b in enumerate(images_of(boxes_num)):
        out[r] = _max_pool_box(X[b], boxes[r], pooled_height, pooled_width, spatial_scale)
    return out


def roi_pooling(X, rois, *, pooled_h, pooled_w, spatial_scale, method="max"):
    """ROIPooling (OpenVINO ROIPooling-1; max = MXNet ROIPooling = ONNX MaxRoiPool) over rows
    [batch, x1, y1, x2, y2]. bilinear: boxes normalized to [0, 1]; one sample per bin at
    y = ph * (y2 - y1) * (H - 1) / (pooled_h - 1) + y1 * (H - 1) (the last exactly
    y2 * (H - 1), the centre when pooled_h = 1), 0 off the map, else the interpolation
    between its floor and ceil neighbours (top, bottom, then between them)."""
    R, (_, C, H, W) = rois.shape[0], X.shape
    out = np.zeros((R, C, pooled_h, pooled_w), X.dtype)
    for r in range(R):
        b, box = int(rois[r, 0]), rois[r, 1:]
        if method == "max":
            out[r] = _max_pool_box(X[b], box, pooled_h, pooled_w, spatial_scale)
            continue
        ys = bilinear_pool_positions(box[1:2], box[3:4], pooled_h, H)
        xs = bilinear_pool_positions(box[0:1], box[2:3], pooled_w, W)
        vy, y0, y1, fy = bilinear_pool_neighbours(ys, H)
        vx, x0, x1, fx = bilinear_pool_neighbours(xs, W)
        for p in range(pooled_h):
            for q in range(pooled_w):
                if not (vy[0, p] and vx[0, q]):
                    continue  # off the map: 0
                tl, tr = X[b, :, y0[0, p], x0[0, q]], X[b, :, y0[0, p], x1[0, q]]
                bl, br = X[b, :, y1[0, p], x0[0, q]], X[b, :, y1[0, p], x1[0, q]]
                top = tl + (tr - tl) * fx[0, q]
                bottom = bl + (br - bl) * fx[0, q]
                out[r, :, p, q] = top + (bottom - top) * fy[0, p]
    return out
