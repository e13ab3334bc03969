"""Max pooling over integer bins (ROIPooling max, RoIPool): the "small" and "table" strategies.

A 2-D table of window maxima answers every bin with a few gathers: level (i, j) holds, at
(y, x), the max of X over rows [y, y + ly[i]) and columns [x, x + lx[j]). A window of
length L along an axis is covered by ceil(L / l) blocks of the longest table length l <= L
(overlapping; max is idempotent), so a bin is the max of a handful of table entries. The
lengths along an axis are either the powers of two up to 2**K (a sparse table: few levels,
up to two blocks per window) or every length up to M (more levels, one block per window);
both, and K or M, are chosen per call (strategies.table_ladders), weighing the passes that
build the table against the gathers it saves, within a memory budget. The table is built per
block of channels in an NHWC layout (gathers copy contiguous channel runs). Channel blocks
are shared among the cores.
"""

from __future__ import annotations

import math

import numpy as np

from ...geometry import roi_pool_bins, roi_pool_bins_few
from . import strategies, workspace
from .parallel import for_channel_blocks, workers


def max_pool(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int, pw: int,
             spatial_scale: float) -> np.ndarray:
    """ROIPooling max / RoIPool of checked inputs; boxes are [R, 4] rows [x1, y1, x2, y2]."""
    R, C = boxes.shape[0], X.shape[1]
    if strategies.forced("max_pool") is None:  # (a forced strategy is tested alone)
        out = None
        if R * C * ph * pw <= FEW_MAXIMA and X.size <= FEW_MAP:
            out = pool_max_few(X, batch.tolist(), boxes.ravel().tolist(), ph, pw, spatial_scale)
        elif R * ph * pw <= FEW_BINS and R * C * ph * pw <= FEW_OUT:
            out = _pool_max_bins(X, batch, boxes, ph, pw, spatial_scale)
        if out is not None:
            return out
    (hlo, hhi), (wlo, whi) = roi_pool_bins(boxes, spatial_scale, ph, pw, *X.shape[2:])
    return pool_max(X, batch, hlo, hhi, wlo, whi)


#: pool_max_few: at most this many outputs (each a window's max in Python) and values of X
#: (all read): measured against the kernel's other paths (a call alone, 4 channels, boxes on
#: the map; us): 2 outputs 6 against 15, 32: 20 / 62, 64: 63 / 66, 128: 99 / 79.
FEW_MAXIMA = 48
FEW_MAP = 1024
#: _pool_max_bins: at most this many bins (boxes x ph x pw) a call (a box's bins cost ~6 us,
#: each bin ~4 us more: measured, CPU time, against 45-55 us for the arrays on small maps:
#: 2 bins 19 against 53 us, 4 bins 32 against 46, 8 bins 61 against 50) and outputs.
FEW_BINS = 6
FEW_OUT = 256


def _pool_max_bins(X, batch, boxes, ph: int, pw: int, spatial_scale: float):
    """max_pool for a few bins on any map, bit for bit, or None (the caller takes the
    arrays): the bins with scalars (geometry.roi_pool_bins_few), then each bin's max over
    its window of X by NumPy (every channel at once), 0 for an empty bin. A max is one of
    its values; only a max of 0 (+0 or -0, as the order of the comparisons has it) or NaN
    (whose bits) could come out otherwise than from pool_max's arrays: then None."""
    N, C, H, W = X.shape
    bins = roi_pool_bins_few(boxes.ravel().tolist(), X.dtype, spatial_scale, ph, pw, H, W)
    if bins is None:
        return None
    out = workspace.output((boxes.shape[0], C, ph, pw), X.dtype)
    computed = []  # (box, bin row, bin column) of every bin with pixels
    for r, (b, (rows, cols)) in enumerate(zip(batch.tolist(), bins)):
        for p, (h0, h1) in enumerate(rows):
            for q, (w0, w1) in enumerate(cols):
                if h1 > h0 and w1 > w0:
                    out[r, :, p, q] = X[b, :, h0:h1, w0:w1].max(axis=(1, 2))
                    computed.append((r, p, q))
                else:
                    out[r, :, p, q] = 0
    values = out.tolist()
    for r, p, q in computed:
        if any(v[p][q] == 0 or v[p][q] != v[p][q] for v in values[r]):
            return None
    return out


def pool_max_few(X: np.ndarray, batch: list[int], values: list[float], ph: int, pw: int,
                 spatial_scale: float) -> np.ndarray | None:
    """max_pool for a few bins on a small map (at most FEW_MAP values), bit for bit, in
    Python's numbers: the boxes' values [x1, y1, x2, y2] row by row, their bins with
    scalars (geometry.roi_pool_bins_few), each bin's max over its window of X (a max is one
    of its values), 0 for an empty bin; a new [R, C, ph, pw]. None (the caller takes the
    arrays) for a larger map, bins the scalars decline, or a window holding NaN (NumPy's
    max propagates it, with its bits) or whose max is 0 with zeros of both signs (NumPy's
    max may give either)."""
    N, C, H, W = X.shape
    if X.size > FEW_MAP or len(batch) * C * ph * pw > FEW_MAXIMA:
        return None
    bins = roi_pool_bins_few(values, X.dtype, spatial_scale, ph, pw, H, W)
    if bins is None:
        return None
    x = X.ravel().tolist()
    finite = math.isfinite(sum(x))  # no NaN anywhere: a window's max is known but for 0
    out = []
    for b, (rows, cols) in zip(batch, bins):
        for c in range(C):
            plane = (b * C + c) * H * W
            for h0, h1 in rows:
                r0, r1 = plane + h0 * W, plane + h1 * W
                for w0, w1 in cols:
                    if h1 <= h0 or w1 <= w0:
                        out.append(0.0)
                        continue
                    window = x[r0:r1] if w1 - w0 == W else \
                        [v for r in range(r0, r1, W) for v in x[r + w0:r + w1]]
                    m = max(window)
                    if (m == 0 or not finite) and not _max_is_known(window, m):
                        return None
                    out.append(m)
    return np.array(out, X.dtype).reshape(len(batch), C, ph, pw)


def _max_is_known(window: list[float], m: float) -> bool:
    """Whether NumPy's max of ``window`` is ``m`` bit for bit in any order of comparisons:
    no NaN in it, and not a max of 0 with zeros of both signs."""
    if any(v != v for v in window):
        return False
    return m != 0 or len({math.copysign(1.0, v) for v in window if v == 0}) == 1


def _levels(length: np.ndarray, ladder: np.ndarray) -> np.ndarray:
    """Per window the table level used: the longest of ``ladder``'s lengths <= length."""
    return np.searchsorted(ladder, length, side="right") - 1


def _block_count(length: np.ndarray, block: np.ndarray) -> np.ndarray:
    """Blocks of length ``block`` needed to cover windows of ``length``."""
    return -(-length // block)


def _choose_ladders(lh: np.ndarray, lw: np.ndarray, cells: int,
                    budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Table lengths along y and x minimizing build + query work within the budget.

    Building costs one pass over a channel's map (``cells``) per level pair; a bin costs
    ny * nx gathers, n = the most blocks any window needs along the axis. Few boxes on a
    big map thus get a shallow table, many boxes with short windows every length.
    """
    queries = lh.shape[0] * lh.shape[1] * lw.shape[1]

    def options(length):  # (ladder, the most blocks a window needs)
        length = np.unique(length)
        return [(lad, int(_block_count(length, lad[_levels(length, lad)]).max()))
                for lad in strategies.table_ladders(int(length[-1]))]

    best, choice, x_options = None, None, options(lw)
    for ly, ny in options(lh):
        for lx, nx in x_options:
            planes = ly.size * lx.size
            if planes * cells > budget and planes > 1:
                continue
            cost = planes * cells + strategies.gather_cost() * queries * ny * nx
            if best is None or cost < best:
                best, choice = cost, (ly, lx)
    return choice


def _blocks(lo: np.ndarray, hi: np.ndarray, size: int, block: np.ndarray) -> np.ndarray:
    """Start positions [n, R, P] of the blocks (lengths ``block`` [R, P]) covering each
    window [lo, hi).

    Empty windows (hi <= lo) get one in-range position; their bins are zeroed afterwards.
    """
    length = np.maximum(hi - lo, 1)
    lo = np.minimum(lo, size - 1)
    last = np.maximum(lo + length - block, lo)
    n = int(_block_count(length, block).max())
    q = np.arange(n)[:, None, None]
    return np.minimum(lo + q * block, last)


def _fill_table(T: np.ndarray, ly: np.ndarray, lx: np.ndarray) -> None:
    """Fill T[i, j] ([N, H, W, c] each: the max over ly[i] rows and lx[j] columns) from
    T[0, 0]. Each length is the previous one plus a shorter one of the same ladder."""
    H, W = T.shape[3], T.shape[4]
    for i in range(1, ly.size):
        a, b, m = i - 1, _index(ly, ly[i] - ly[i - 1]), H - ly[i] + 1
        np.maximum(T[a, 0, :, :m], T[b, 0, :, ly[a]:ly[a] + m], out=T[i, 0, :, :m])
    for i in range(ly.size):
        for j in range(1, lx.size):
            a, b, m = j - 1, _index(lx, lx[j] - lx[j - 1]), W - lx[j] + 1
            np.maximum(T[i, a, :, :, :m], T[i, b, :, :, lx[a]:lx[a] + m],
                       out=T[i, j, :, :, :m])


def _index(ladder: np.ndarray, length: int) -> int:
    return int(np.flatnonzero(ladder == length)[0])


def pool_max(X: np.ndarray, batch: np.ndarray, hlo: np.ndarray, hhi: np.ndarray,
             wlo: np.ndarray, whi: np.ndarray) -> np.ndarray:
    """out[r, c, ph, pw] = max of X[batch[r], c, hlo:hhi, wlo:whi] per bin, 0 if empty."""
    N, C, H, W = X.shape
    R, PH, PW = batch.shape[0], hlo.shape[1], wlo.shape[1]
    out = workspace.output((R, C, PH, PW), X.dtype)
    if R == 0 or C == 0:
        return out
    if strategies.max_pool_is_small(R, C, PH, PW, H, W):
        return _pool_max_small(X, batch, hlo, hhi, wlo, whi, out)
    lh, lw = np.maximum(hhi - hlo, 1), np.maximum(whi - wlo, 1)
    budget = strategies.table_budget(X.size, out.size, workers())
    ly, lx = _choose_ladders(lh, lw, N * H * W, budget)
    ky, kx = _levels(lh, ly), _levels(lw, lx)
    ys = _blocks(hlo, hhi, H, ly[ky])  # [ny, R, PH]
    xs = _blocks(wlo, whi, W, lx[kx])  # [nx, R, PW]
    # Flat table row of (level, batch, y, x) = ((ky*len(lx) + kx)*N + b)*H*W + y*W + x.
    rowy = ((ky * lx.size)[:, :, None] * N + batch[:, None, None]) * (H * W) + ys[:, :, :, None] * W
    P = PH * PW
    colx = (kx * (N * H * W))[:, None, :] + xs[:, :, None, :]
    empty = ~((hhi > hlo)[:, :, None] & (whi > wlo)[:, None, :])
    has_empty = empty.reshape(R, P).any(axis=1)
    cells = ly.size * lx.size * N * H * W
    # Channel blocks: runs of up to MAX_RUN channels per gather within the budget, and at
    # least one block per core.
    block = int(min(strategies.table_run(), -(-C // workers()), max(1, budget // cells)))
    chunk = strategies.table_chunk()

    def work(c0: int, c1: int) -> None:
        cb = c1 - c0
        T = workspace.scratch("maxpool:table", (ly.size, lx.size, N, H, W, cb), X.dtype)
        np.copyto(T[0, 0], X[:, c0:c1].transpose(0, 2, 3, 1))
        _fill_table(T, ly, lx)
        F = T.reshape(-1, cb)
        rc = max(1, chunk // (P * cb))
        res = workspace.scratch("maxpool:res", (rc * P, cb), X.dtype)
        tmp = workspace.scratch("maxpool:tmp", (rc * P, cb), X.dtype)
        for r0 in range(0, R, rc):
            r1 = min(R, r0 + rc)
            m = (r1 - r0) * P
            acc = res[:m]
            for i, (a, b) in enumerate((a, b) for a in rowy[:, r0:r1] for b in colx[:, r0:r1]):
                idx = (a + b).ravel()
                if i == 0:
                    np.take(F, idx, axis=0, out=acc, mode="clip")  # the indices are valid;
                else:  # "clip" spares the copy that mode "raise" makes with out=
                    np.maximum(acc, np.take(F, idx, axis=0, out=tmp[:m], mode="clip"), out=acc)
            acc = acc.reshape(r1 - r0, PH, PW, cb)
            if has_empty[r0:r1].any():
                acc[empty[r0:r1]] = 0
            out[r0:r1, c0:c1] = acc.transpose(0, 3, 1, 2)

    for_channel_blocks(C, block, work)
    return out


def _pool_max_small(X, batch, hlo, hhi, wlo, whi, out):
    """pool_max by masks over the whole map: [R, PH, PW, H, W] for a small problem."""
    rows, cols = np.arange(X.shape[2]), np.arange(X.shape[3])
    in_h = (rows >= hlo[:, :, None]) & (rows < hhi[:, :, None])  # [R, PH, H]
    in_w = (cols >= wlo[:, :, None]) & (cols < whi[:, :, None])  # [R, PW, W]
    mask = in_h[:, None, :, None, :, None] & in_w[:, None, None, :, None, :]
    v = np.where(mask, X[batch][:, :, None, None], -np.inf).max(axis=(-2, -1))
    filled = (hhi > hlo)[:, None, :, None] & (whi > wlo)[:, None, None, :]
    np.copyto(out, np.where(filled, v, 0))
    return out
