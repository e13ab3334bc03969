"""Max over integer bins, the shared core of ROIPooling(max) and RoIPool.

A 2-D sparse table answers every bin with a few gathers: level (i, j) of the table holds,
at (y, x), the max of X over rows [y, y + 2**i) and columns [x, x + 2**j). A window of
length L along an axis is covered by ceil(L / 2**k) blocks of length 2**k (k = floor(log2 L)
gives at most two, overlapping, blocks; max is idempotent), so a bin is the max of a handful
of table entries. The table is built per block of channels in an NHWC layout (gathers copy
contiguous channel runs); its depth is chosen per call, weighing the passes that build it
against the gathers it saves, within a memory budget. Channel blocks are shared among the
cores.
"""

from __future__ import annotations

import numpy as np

from . import _workspace
from ._parallel import for_channel_blocks, workers

#: Elements of sparse table over all threads: at least TABLE_MIN, up to the size of X plus
#: the output where those are larger (the memory bound allows that much), at most
#: TABLE_MAX per thread. The channel block shrinks to fit (at least one channel).
TABLE_MIN = 1 << 23
TABLE_MAX = 1 << 24
#: Channels per table row at most: longer gathered runs gained nothing (W1, W3) and a
#: smaller table stays in cache.
MAX_RUN = 64
#: Elements of gathered rows per step (keeps the working set in cache).
CHUNK = 1 << 18
#: Cost of one gathered element relative to one element of a table-building pass (measured).
_GATHER_COST = 3
#: Problems whose every (box, channel, bin, pixel) fits in this many elements are pooled
#: directly, in a handful of NumPy calls (the table's fixed cost dominates tiny calls).
SMALL = 1 << 14


def _levels(length: np.ndarray, cap: int) -> np.ndarray:
    """Per window the table level used: floor(log2(length)), at most ``cap`` (length >= 1)."""
    return np.minimum(np.floor(np.log2(length)).astype(np.intp), cap)


def _block_count(length: np.ndarray, level: np.ndarray) -> np.ndarray:
    """Blocks of length 2**level needed to cover windows of ``length``: ceil(length / 2**level)."""
    return (length + (1 << level) - 1) >> level


def _table_budget(x_size: int, out_size: int) -> int:
    """Elements of sparse table per thread."""
    total = max(TABLE_MIN, x_size + out_size)
    return min(total // workers(), TABLE_MAX)


def _choose_levels(lh: np.ndarray, lw: np.ndarray, cells: int,
                   budget: int) -> tuple[int, int]:
    """Top table levels (Ky, Kx) minimizing build + query work within the budget.

    Building costs one pass over a channel's map (``cells``) per level pair; a bin costs
    ny * nx gathers, n = blocks of the chosen level covering its longest window. Few boxes on
    a big map thus get a shallow table, many boxes a deep one.
    """
    queries = lh.shape[0] * lh.shape[1] * lw.shape[1]
    best, choice = None, (0, 0)
    for ky in range(int(np.log2(lh.max())) + 1):
        ny = int(_block_count(lh, _levels(lh, ky)).max())
        for kx in range(int(np.log2(lw.max())) + 1):
            if (ky + 1) * (kx + 1) * cells > budget and (ky, kx) != (0, 0):
                continue
            nx = int(_block_count(lw, _levels(lw, kx)).max())
            cost = (ky + 1) * (kx + 1) * cells + _GATHER_COST * queries * ny * nx
            if best is None or cost < best:
                best, choice = cost, (ky, kx)
    return choice


def _blocks(lo: np.ndarray, hi: np.ndarray, size: int, level: np.ndarray) -> np.ndarray:
    """Start positions [n, R, P] of the 2**level blocks covering each window [lo, hi).

    Empty windows (hi <= lo) get one in-range position; their bins are zeroed afterwards.
    """
    length = np.maximum(hi - lo, 1)
    lo = np.minimum(lo, size - 1)
    last = np.maximum(lo + length - (1 << level), lo)
    n = int(_block_count(length, level).max())
    q = np.arange(n)[:, None, None]
    return np.minimum(lo + (q << level), last)


def _sparse_table(T: np.ndarray, Ky: int, Kx: int) -> None:
    """Fill T[i, j] ([N, H, W, c] each) from T[0, 0]."""
    H, W = T.shape[3], T.shape[4]
    for i in range(Ky):
        s, m = 1 << i, H - (2 << i) + 1
        np.maximum(T[i, 0, :, :m], T[i, 0, :, s:s + m], out=T[i + 1, 0, :, :m])
    for i in range(Ky + 1):
        for j in range(Kx):
            s, m = 1 << j, W - (2 << j) + 1
            np.maximum(T[i, j, :, :, :m], T[i, j, :, :, s:s + m], out=T[i, j + 1, :, :, :m])


def pool_max(X: np.ndarray, batch: np.ndarray, hlo: np.ndarray, hhi: np.ndarray,
             wlo: np.ndarray, whi: np.ndarray) -> np.ndarray:
    """out[r, c, ph, pw] = max of X[batch[r], c, hlo:hhi, wlo:whi] per bin, 0 if empty."""
    N, C, H, W = X.shape
    R, PH, PW = batch.shape[0], hlo.shape[1], wlo.shape[1]
    out = _workspace.output((R, C, PH, PW), X.dtype)
    if R == 0 or C == 0:
        return out
    if R * C * PH * PW * H * W <= SMALL:
        return _pool_max_small(X, batch, hlo, hhi, wlo, whi, out)
    lh, lw = np.maximum(hhi - hlo, 1), np.maximum(whi - wlo, 1)
    budget = _table_budget(X.size, out.size)
    Ky, Kx = _choose_levels(lh, lw, N * H * W, budget)
    ky, kx = _levels(lh, Ky), _levels(lw, Kx)
    ys, xs = _blocks(hlo, hhi, H, ky), _blocks(wlo, whi, W, kx)  # [ny, R, PH], [nx, R, PW]
    # Flat table row of (level, batch, y, x) = ((ky*(Kx+1) + kx)*N + b)*H*W + y*W + x.
    rowy = ((ky * (Kx + 1))[:, :, None] * N + batch[:, None, None]) * (H * W) + ys[:, :, :, None] * W
    P = PH * PW
    colx = (kx * (N * H * W))[:, None, :] + xs[:, :, None, :]
    empty = ~((hhi > hlo)[:, :, None] & (whi > wlo)[:, None, :])
    has_empty = empty.reshape(R, P).any(axis=1)
    cells = (Ky + 1) * (Kx + 1) * N * H * W
    # Channel blocks: runs of up to MAX_RUN channels per gather within the budget, and at
    # least one block per core.
    block = int(min(MAX_RUN, -(-C // workers()), max(1, budget // cells)))
    def work(c0: int, c1: int) -> None:
        cb = c1 - c0
        T = _workspace.scratch("maxpool:table", (Ky + 1, Kx + 1, N, H, W, cb), X.dtype)
        np.copyto(T[0, 0], X[:, c0:c1].transpose(0, 2, 3, 1))
        _sparse_table(T, Ky, Kx)
        F = T.reshape(-1, cb)
        rc = max(1, CHUNK // (P * cb))
        res = _workspace.scratch("maxpool:res", (rc * P, cb), X.dtype)
        tmp = _workspace.scratch("maxpool:tmp", (rc * P, cb), X.dtype)
        for r0 in range(0, R, rc):
            r1 = min(R, r0 + rc)
            m = (r1 - r0) * P
            acc = res[:m]
            for i, (a, b) in enumerate((a, b) for a in rowy[:, r0:r1] for b in colx[:, r0:r1]):
                idx = (a + b).ravel()
                if i == 0:
                    np.take(F, idx, axis=0, out=acc)
                else:
                    np.maximum(acc, np.take(F, idx, axis=0, out=tmp[:m]), out=acc)
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
