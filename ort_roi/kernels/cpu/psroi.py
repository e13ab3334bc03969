"""Position-sensitive average pooling over integer bins: Paddle's psroi_pool (PSROIPool) and
torchvision's ps_roi_pool (TorchvisionPSRoIPool) differ only in where their bins lie, which
their ops compute on the host (geometry/pooling.py, geometry/torchvision.py); one pooling
computes both from the bins."""

from __future__ import annotations

import numpy as np

from .parallel import for_ranges


def pool_bins(X: np.ndarray, batch: np.ndarray, hlo, hhi, wlo, whi, oc: int, ph: int,
              pw: int) -> np.ndarray:
    """Output (r, c, p, q): the mean of input channel (c*ph + p)*pw + q of X over rows
    [hlo[r, p], hhi[r, p]) and columns [wlo[r, q], whi[r, q]), summed row by row in T; 0 for
    an empty bin."""
    N, C, H, W = X.shape
    R = batch.shape[0]
    if R == 0:
        return np.zeros((R, oc, ph, pw), X.dtype)
    P = ph * pw
    # X channel-last, [N, P, H, W, oc]: one pixel of one bin position holds the oc output
    # channels of that position in one run (a cache line or two, not oc of them).
    Xt = np.empty((N, P, H, W, oc), X.dtype)
    planes = X.reshape(N, oc, P, H, W)

    def to_channel_last(p0: int, p1: int) -> None:
        Xt[:, p0:p1] = planes[:, :, p0:p1].transpose(0, 2, 3, 4, 1)

    for_ranges(P, to_channel_last, min_chunk=1)
    lh = np.broadcast_to(np.maximum(hhi - hlo, 0)[:, :, None], (R, ph, pw)).ravel()
    lw = np.broadcast_to(np.maximum(whi - wlo, 0)[:, None, :], (R, ph, pw)).ravel()
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


#: pool_bins_few: at most this many pixels summed (every bin's window, each output channel)
#: and outputs a call, with scalars of T.
FEW_PIXELS = 1024
FEW_OUT = 256


def pool_bins_few(X: np.ndarray, batch: list[int], hlo, hhi, wlo, whi, oc: int, ph: int,
                  pw: int) -> np.ndarray | None:
    """pool_bins for a few small bins (a W6-sized call), bit for bit: each bin's window of its
    input channel summed pixel by pixel in T, row by row (pool_bins' order), divided by its
    size in T; 0 for an empty bin; a new [R, oc, ph, pw]. None (the caller takes pool_bins)
    past FEW_PIXELS pixels or FEW_OUT outputs, or where an output is NaN: which NaN a sum of
    two NaNs gives (its sign, its payload) differs between NumPy's scalars and its arrays."""
    N, C, H, W = X.shape
    if len(batch) * oc * ph * pw > FEW_OUT:
        return None
    hl, hh, wl, wh = hlo.tolist(), hhi.tolist(), wlo.tolist(), whi.tolist()
    pixels = oc * sum(sum(max(b - a, 0) for a, b in zip(hl[r], hh[r]))
                      * sum(max(b - a, 0) for a, b in zip(wl[r], wh[r])) for r in range(len(hl)))
    if pixels > FEW_PIXELS:
        return None
    t, x = X.dtype.type, X.ravel()
    zero = t(0)
    out = []
    for r, b in enumerate(batch):
        for c in range(oc):
            for p in range(ph):
                h0, h1 = hl[r][p], hh[r][p]
                for q in range(pw):
                    w0, w1 = wl[r][q], wh[r][q]
                    if h1 <= h0 or w1 <= w0:
                        out.append(zero)
                        continue
                    plane = (b * C + (c * ph + p) * pw + q) * H * W
                    total = x[plane + h0 * W + w0]
                    for y in range(h0, h1):
                        row = plane + y * W
                        for i in range(row + w0 + (y == h0), row + w1):
                            total = total + x[i]
                    out.append(total / t((h1 - h0) * (w1 - w0)))
    y = np.array(out, X.dtype)
    return None if np.isnan(y.sum()) else y.reshape(len(batch), oc, ph, pw)  # (inf - inf too)
