"""The fixed-threshold NMS: which strategy runs (sparse, grid, blocks) and on how long a prefix
of the visiting order. The choice's thresholds are here (NMS_PAIR_COST, NMS_GRID_FROM); each
strategy's own beside it (sparse.NMS_PAIRS, grid.NMS_GRID_PAIRS, blocks.NMS_BLOCK), read at
call time (the tests set them).
"""

from __future__ import annotations

import numpy as np

from . import grid, sparse
from .blocks import nms_blocks

#: A pair costs the sparse NMS about as much as this many box pairs cost the block NMS, which
#: compares its n boxes with the min(limit, n) it keeps: the sparse NMS runs while its pairs
#: are fewer than n * min(limit, n) / NMS_PAIR_COST (0: up to sparse.NMS_PAIRS). Measured (float32,
#: 2 cores): 4800 anchors clipped to a 256 x 320 image, 2.8 M pairs in the first 4096, limit
#: 300: sparse 355 ms, block 39 ms; 6000 P2 boxes of an 800 x 1216 image, 0.3 M pairs: sparse
#: 13 ms, block 16 (limit 300) and 45 ms (limit 1000).
NMS_PAIR_COST = 3
#: A fixed-threshold NMS whose block NMS could compare more than this many boxes (n x
#: min(limit, n), n boxes visited) and whose pairs are too many for the sparse search finds
#: its pairs with the grid search (nms_grid) first: about 0.2 s of block NMS
NMS_GRID_FROM = 1 << 26


def nms_fixed(x1, y1, x2, y2, area, thr, norm, limit: int) -> np.ndarray:
    """Greedy NMS at a fixed threshold over boxes in visiting order: positions kept, the
    first ``limit``. Whether a box is kept depends only on the boxes visited before it: a
    prefix of the visiting order holding ``limit`` keeps is enough. The sparse pair search
    where its pairs are few, else the grid search where the block NMS could cost more than
    NMS_GRID_FROM comparisons, else (or where the boxes are too dense for it) the block
    NMS.

    Pinned by tests/test_proposals.py: test_nms_sparse_and_block_paths_equal_the_literal_loop
    (NMS_PAIR_COST 0 and 3, limits 7 and all), test_all_anchors_nms_is_not_quadratic
    (NMS_GRID_FROM: 100,000 anchors taken go to the grid) and the grid tests (NMS_GRID_FROM
    0: the grid wherever it can)."""
    m = x1.size
    if limit <= 0 or m == 0:
        return np.zeros(0, np.int64)
    n = min(m, max(2 * limit, 1024))
    while True:
        part = [a[:n] for a in (x1, y1, x2, y2, area)]
        cost = n * min(limit, n)
        pairs = cost // NMS_PAIR_COST if NMS_PAIR_COST else sparse.NMS_PAIRS
        kept = sparse.nms_sparse(*part, thr, norm, limit, min(sparse.NMS_PAIRS, pairs))
        if kept is None and cost > NMS_GRID_FROM:
            kept = grid.nms_grid(*part, thr, norm, limit, grid.NMS_GRID_PAIRS)
        if kept is None:
            kept = nms_blocks(*part, thr, norm, limit)
        if len(kept) >= limit or n == m:
            return kept
        n = min(m, 4 * n)
