"""PSROIPool (Paddle psroi_pool): R-FCN position-sensitive average pooling."""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..specs import PSROI_POOL
from ._boxes import batch_from_counts, check_boxes, check_features, round_half_away


def _bins(lo: np.ndarray, hi: np.ndarray, scale, pooled: int, size: int):
    """Bins [lo, hi) [R, pooled] along one axis, in T, as Paddle computes them."""
    t = lo.dtype.type
    start = round_half_away(lo) * scale
    end = (round_half_away(hi) + t(1)) * scale
    bin_size = np.maximum(end - start, t(0.1)) / t(pooled)
    p = np.arange(pooled, dtype=lo.dtype)
    a = np.floor(bin_size[:, None] * p + start[:, None])
    b = np.ceil(bin_size[:, None] * (p + t(1)) + start[:, None])
    return np.clip(a, 0, size).astype(np.intp), np.clip(b, 0, size).astype(np.intp)


def psroi_pool(X: np.ndarray, rois: np.ndarray, rois_num: np.ndarray, *,
               output_channels: int, spatial_scale: float = 1.0,
               pooled_height: int = 1, pooled_width: int = 1) -> np.ndarray:
    """Position-sensitive RoI pooling (R-FCN).

    X has output_channels*pooled_height*pooled_width channels; output bin (c, ph, pw) is
    the mean of input channel (c*pooled_height + ph)*pooled_width + pw over the bin's
    region (0 for an empty region). Box corners are rounded before scaling and the end
    edge is exclusive (+1). Returns [R, output_channels, pooled_height, pooled_width].
    """
    op = PSROI_POOL.name
    a = PSROI_POOL.resolve(dict(output_channels=output_channels, spatial_scale=spatial_scale,
                                pooled_height=pooled_height, pooled_width=pooled_width))
    oc, ph, pw = a["output_channels"], a["pooled_height"], a["pooled_width"]
    X = check_features(op, X)
    N, C, H, W = X.shape
    if C != oc * ph * pw:
        raise RoiOpError(op, "input 'X'",
                         f"must have output_channels*pooled_height*pooled_width = "
                         f"{oc}*{ph}*{pw} = {oc * ph * pw} channels, got {C}")
    rois = check_boxes(op, "rois", rois, X, 4)
    R = rois.shape[0]
    batch = batch_from_counts(op, "rois_num", rois_num, N, R)
    out = np.zeros((R, oc, ph, pw), X.dtype)
    if R == 0:
        return out
    s = X.dtype.type(a["spatial_scale"])
    hlo, hhi = _bins(rois[:, 1], rois[:, 3], s, ph, H)
    wlo, whi = _bins(rois[:, 0], rois[:, 2], s, pw, W)
    # Region sums from a float64 integral image: 4 lookups per output element.
    used = np.unique(batch)
    integral = np.zeros((used.size, C, H + 1, W + 1), np.float64)
    np.cumsum(X[used], axis=2, dtype=np.float64, out=integral[:, :, 1:, 1:])
    np.cumsum(integral[:, :, 1:, 1:], axis=3, out=integral[:, :, 1:, 1:])
    img = np.searchsorted(used, batch)[:, None, None, None]
    ch = ((np.arange(oc)[:, None, None] * ph + np.arange(ph)[:, None]) * pw
          + np.arange(pw))[None]
    h0, h1 = hlo[:, None, :, None], hhi[:, None, :, None]
    w0, w1 = wlo[:, None, None, :], whi[:, None, None, :]
    total = (integral[img, ch, h1, w1] - integral[img, ch, h0, w1]
             - integral[img, ch, h1, w0] + integral[img, ch, h0, w0])
    area = (h1 - h0) * (w1 - w0)
    np.divide(total, area, out=total, where=area > 0)
    out[...] = np.where(area > 0, total, 0)
    return out
