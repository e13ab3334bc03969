"""PSROIPool (Paddle psroi_pool): R-FCN position-sensitive average pooling."""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..specs import PSROI_POOL
from ._parallel import for_ranges
from ._cupy import on_gpu
from ._boxes import (quiet, batch_from_counts, check_boxes, check_features, clip_edges,
                     round_half_away)


def _bins(lo: np.ndarray, hi: np.ndarray, scale, pooled: int, size: int):
    """Bins [lo, hi) [R, pooled] along one axis, in T, as Paddle computes them."""
    t = lo.dtype.type
    start = round_half_away(lo) * scale
    end = (round_half_away(hi) + t(1)) * scale
    bin_size = np.maximum(end - start, t(0.1)) / t(pooled)
    p = np.arange(pooled, dtype=lo.dtype)
    a = np.floor(bin_size[:, None] * p + start[:, None])
    b = np.ceil(bin_size[:, None] * (p + t(1)) + start[:, None])
    return clip_edges(a, size), clip_edges(b, size)


def check_channels(op: str, C: int, oc: int, ph: int, pw: int) -> None:
    """X must carry one channel per (output channel, bin)."""
    if C != oc * ph * pw:
        raise RoiOpError(op, "input 'X'",
                         f"must have output_channels*pooled_height*pooled_width = "
                         f"{oc}*{ph}*{pw} = {oc * ph * pw} channels, got {C}")


@quiet
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
    check_channels(op, X.shape[1], oc, ph, pw)
    rois = check_boxes(op, "rois", rois, X, 4)
    batch = batch_from_counts(op, "rois_num", rois_num, X.shape[0], rois.shape[0])
    return ps_pool(X, batch, rois, oc, ph, pw, a["spatial_scale"])


@on_gpu
def ps_pool(X: np.ndarray, batch: np.ndarray, rois: np.ndarray, oc: int, ph: int, pw: int,
            spatial_scale: float) -> np.ndarray:
    """PSROIPool of checked inputs (rois [R, 4])."""
    N, C, H, W = X.shape
    R = rois.shape[0]
    if R == 0:
        return np.zeros((R, oc, ph, pw), X.dtype)
    s = X.dtype.type(spatial_scale)
    hlo, hhi = _bins(rois[:, 1], rois[:, 3], s, ph, H)
    wlo, whi = _bins(rois[:, 0], rois[:, 2], s, pw, W)
    P = ph * pw
    # X channel-last, [N, P, H, W, oc]: one pixel of one bin position holds the oc output
    # channels of that position in one run (a cache line or two, not oc of them).
    Xt = np.empty((N, P, H, W, oc), X.dtype)
    planes = X.reshape(N, oc, P, H, W)

    def to_channel_last(p0: int, p1: int) -> None:
        Xt[:, p0:p1] = planes[:, :, p0:p1].transpose(0, 2, 3, 4, 1)

    for_ranges(P, to_channel_last, min_chunk=1)
    lh = np.broadcast_to((hhi - hlo)[:, :, None], (R, ph, pw)).ravel()
    lw = np.broadcast_to((whi - wlo)[:, None, :], (R, ph, pw)).ravel()
    first = (((batch[:, None, None] * P + np.arange(P).reshape(ph, pw)) * H
              + hlo[:, :, None]) * W + wlo[:, None, :]).ravel()  # pixel of each bin's corner
    # Bins of the same size (rows x cols) are summed together, those of one position (one
    # [H, W, oc] block of Xt) side by side: one gather per element of the region, a run of
    # oc values per bin, summed in Paddle's order (row by row, left to right), in T.
    key = lh * (int(lw.max()) + 1) + lw
    group = key * P + np.arange(R * P) % P
    order = np.argsort(group.astype(np.min_scalar_type(group.max())), kind="stable")
    t = X.dtype.type
    runs = Xt.reshape(-1, oc)
    sums = np.zeros((R * P, oc), X.dtype)

    def work(lo: int, hi: int) -> None:
        seg = order[lo:hi]
        starts = np.flatnonzero(np.diff(key[seg], prepend=-1))
        for a, b in zip(starts, np.append(starts[1:], seg.size)):
            sel = seg[a:b]
            h_, w_ = int(lh[sel[0]]), int(lw[sel[0]])
            if h_ <= 0 or w_ <= 0:
                continue  # empty bins stay 0
            idx = first[sel]
            total = runs.take(idx, axis=0)
            tmp = np.empty_like(total)
            for dy in range(h_):
                for dx in range(w_):
                    if dy or dx:
                        total += runs[dy * W + dx:].take(idx, axis=0, out=tmp, mode="clip")
            total /= t(h_ * w_)
            sums[sel] = total

    for_ranges(order.size, work, min_chunk=256)
    return np.ascontiguousarray(sums.reshape(R, ph, pw, oc).transpose(0, 3, 1, 2))
