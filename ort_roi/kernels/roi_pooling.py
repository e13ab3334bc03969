"""ROIPooling (OpenVINO ROIPooling-1; max is also MXNet ROIPooling and ONNX MaxRoiPool)."""

from __future__ import annotations

import numpy as np

from ..specs import ROI_POOLING
from ._cupy import on_gpu
from ._boxes import (quiet, batch_from_column, check_boxes, check_features, max_pool_bins,
                     round_half_away)
from . import _workspace
from ._maxpool import pool_max
from ._parallel import for_ranges

#: Elements (channels x samples) per step of bilinear pooling's working buffers.
_CHUNK = 1 << 17


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


@on_gpu
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


@on_gpu
def bilinear_pool(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int,
                  pw: int) -> np.ndarray:
    """Bilinear ROIPooling of checked inputs (normalized boxes [R, 4]).

    Only samples on the map are computed (the rest are 0): their four neighbours are
    gathered as whole pixels (all channels at once) from an NHWC copy of X, a range of
    samples per core, interpolated as OpenVINO does (top, bottom, then between them) and
    scattered into the output.
    """
    N, C, H, W = X.shape
    R, P = boxes.shape[0], ph * pw
    out = _workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    vy, y0, y1, fy = _bilinear_axis(_bilinear_coords(boxes[:, 1], boxes[:, 3], ph, H), H)
    vx, x0, x1, fx = _bilinear_axis(_bilinear_coords(boxes[:, 0], boxes[:, 2], pw, W), W)
    on_map = np.flatnonzero((vy[:, :, None] & vx[:, None, :]).reshape(R * P))
    r, p = np.divmod(on_map, P)
    iy, ix = np.divmod(p, pw)
    top, bottom = (batch[r] * H + y0[r, iy]) * W, (batch[r] * H + y1[r, iy]) * W
    left, right = x0[r, ix], x1[r, ix]
    corners = (top + left, top + right, bottom + left, bottom + right)  # pixels
    dx, dy = fx[r, ix][:, None], fy[r, iy][:, None]
    pixels = _workspace.nhwc(X).reshape(N * H * W, C)
    o3 = out.reshape(R, C, P)
    if on_map.size < R * P:
        for_ranges(R, lambda r0, r1: o3[r0:r1].fill(0))
    step = max(1, _CHUNK // C)

    def work(s0: int, s1: int) -> None:
        a, b, c = (_workspace.scratch(f"bilinear:{n}", (step, C), X.dtype) for n in "abc")
        for first in range(s0, s1, step):
            s = slice(first, min(s1, first + step))
            A, B, Cc = a[:s.stop - first], b[:s.stop - first], c[:s.stop - first]
            pixels.take(corners[0][s], axis=0, out=A, mode="clip")  # top = tl + (tr - tl) dx
            pixels.take(corners[1][s], axis=0, out=B, mode="clip")
            B -= A
            B *= dx[s]
            A += B
            pixels.take(corners[2][s], axis=0, out=B, mode="clip")  # bottom = bl + (br - bl) dx
            pixels.take(corners[3][s], axis=0, out=Cc, mode="clip")
            Cc -= B
            Cc *= dx[s]
            B += Cc
            B -= A  # top + (bottom - top) dy
            B *= dy[s]
            A += B
            o3[r[s], :, p[s]] = A

    for_ranges(on_map.size, work, min_chunk=step)
    return out
