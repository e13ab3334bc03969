"""ROIPooling (OpenVINO ROIPooling-1; max is also MXNet ROIPooling and ONNX MaxRoiPool)."""

from __future__ import annotations

import numpy as np

from ..specs import ROI_POOLING
from ._cupy import on_gpu
from ._boxes import (quiet, batch_from_column, check_boxes, check_features, max_pool_bins,
                     round_half_away)
from . import _workspace
from ._maxpool import pool_max
from ._parallel import for_channel_blocks

#: Channels per task in bilinear pooling (small blocks make the final transposition cheap).
_CHANNEL_BLOCK = 32
#: Elements per step of bilinear pooling's working buffers.
_CHUNK = 1 << 16


@on_gpu
@quiet
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
    e = round_half_away(boxes * s)[:, ::-1]  # y2, x2, y1, x1
    lo, hi = max_pool_bins(e[:, 2:], e[:, :2], (ph, pw), X.shape[2:])
    return pool_max(X, batch, lo[:, 0, :ph], hi[:, 0, :ph], lo[:, 1, :pw], hi[:, 1, :pw])


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
    """Bilinear ROIPooling of checked inputs (normalized boxes [R, 4]).

    Per block of channels (one per task, on every core): the four neighbours of every sample
    are gathered from an NHWC copy of the block (contiguous channel runs), interpolated as
    OpenVINO does (top, bottom, then between them) and written back transposed.
    """
    N, C, H, W = X.shape
    R = boxes.shape[0]
    out = _workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    vy, y0, y1, fy = _bilinear_axis(_bilinear_coords(boxes[:, 1], boxes[:, 3], ph, H), H)
    vx, x0, x1, fx = _bilinear_axis(_bilinear_coords(boxes[:, 0], boxes[:, 2], pw, W), W)
    base = (batch * (H * W))[:, None, None]
    ry0, ry1 = base + (y0 * W)[:, :, None], base + (y1 * W)[:, :, None]
    cx0, cx1 = x0[:, None, :], x1[:, None, :]
    corners = [(ry0 + cx0).ravel(), (ry0 + cx1).ravel(), (ry1 + cx0).ravel(), (ry1 + cx1).ravel()]
    dx = np.broadcast_to(fx[:, None, :], (R, ph, pw)).reshape(-1, 1)
    dy = np.broadcast_to(fy[:, :, None], (R, ph, pw)).reshape(-1, 1)
    invalid = ~(vy[:, :, None] & vx[:, None, :]).reshape(-1)
    any_invalid = bool(invalid.any())
    block = min(C, _CHANNEL_BLOCK)
    def work(c0: int, c1: int) -> None:
        cb = c1 - c0
        flat = _workspace.scratch("bilinear:x", (N, H, W, cb), X.dtype)
        np.copyto(flat, X[:, c0:c1].transpose(0, 2, 3, 1))
        flat = flat.reshape(N * H * W, cb)
        rows = max(1, _CHUNK // (cb * ph * pw)) * ph * pw  # whole boxes per step, in cache
        a, b, c = (_workspace.scratch(f"bilinear:{k}", (rows, cb), X.dtype) for k in "abc")
        for s0 in range(0, R * ph * pw, rows):
            s1 = min(R * ph * pw, s0 + rows)
            m = s1 - s0
            A, B, Cc = a[:m], b[:m], c[:m]
            fx_, fy_ = dx[s0:s1], dy[s0:s1]
            flat.take(corners[0][s0:s1], axis=0, out=A)  # top = tl + (tr - tl) * dx
            flat.take(corners[1][s0:s1], axis=0, out=B)
            B -= A
            B *= fx_
            A += B
            flat.take(corners[2][s0:s1], axis=0, out=B)  # bottom = bl + (br - bl) * dx
            flat.take(corners[3][s0:s1], axis=0, out=Cc)
            Cc -= B
            Cc *= fx_
            B += Cc
            B -= A  # top + (bottom - top) * dy
            B *= fy_
            A += B
            if any_invalid:
                A[invalid[s0:s1]] = 0
            r0, r1 = s0 // (ph * pw), s1 // (ph * pw)
            out[r0:r1, c0:c1] = A.reshape(r1 - r0, ph, pw, cb).transpose(0, 3, 1, 2)

    for_channel_blocks(C, block, work)
    return out
