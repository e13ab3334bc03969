"""The sparse NMS: the suppressing pairs found among the boxes that overlap along one axis (a
sort by x1 or y1, each box paired with those starting within reach of it), settled by
common.nms_from_pairs. For boxes whose overlapping pairs are few (NMS_PAIRS at most; the
choice: fixed.NMS_PAIR_COST).
"""

from __future__ import annotations

import numpy as np

from .common import nms_from_pairs, suppressing

F64 = np.float64

#: The most x-overlapping pairs the sparse NMS enumerates (else the block NMS runs)
NMS_PAIRS = 1 << 22


def nms_sparse(x1, y1, x2, y2, area, thr, norm, limit: int,
               max_pairs: int = NMS_PAIRS) -> np.ndarray | None:
    """Greedy NMS at a fixed threshold, from the suppressing pairs only: boxes sorted by x1
    (or y1, whichever pairs fewer), each pairs with the boxes starting early enough to overlap
    it by more than thr of its side (every pair that can suppress, once), their IoU as
    Paddle computes it, settled by nms_from_pairs. None when there are more than
    ``max_pairs`` pairs (the caller runs the grid search or the block NMS).

    Pinned by tests/test_proposals.py: test_nms_sparse_and_block_paths_equal_the_literal_loop
    (fixed.NMS_PAIR_COST 0: the sparse search wherever NMS_PAIRS allows; thresholds 0.05 to
    1, both pixel offsets, limits) and test_nms_of_6000_boxes_is_vectorised (Paddle's
    default 6000 candidates)."""
    m = x1.size
    best = None
    # IoU > thr needs an intersection side > thr * each box's side (inter <= side_x * h and
    # union >= w * h): box b (starting after a) can only be suppressed by a, or suppress it,
    # when it starts before x2_a + norm - thr * w_a; 1e-3 of margin covers the rounding
    t = F64(thr) * (1 - 1e-3)
    for lo, hi in ((x1, x2), (y1, y2)):  # pairs overlapping along the sparser axis
        o = np.argsort(lo, kind="stable")
        reach = hi[o] + F64(norm) - t * (hi[o].astype(F64) - lo[o] + F64(norm))
        cnt = np.maximum(np.searchsorted(lo[o], reach, side="right") - np.arange(1, m + 1), 0)
        P = int(cnt.sum())
        if best is None or P < best[0]:
            best = (P, o, cnt)
    P, o, cnt = best
    if P > max_pairs:
        return None
    starts = np.cumsum(cnt) - cnt
    a = np.repeat(np.arange(m), cnt)
    b = a + 1 + (np.arange(P) - np.repeat(starts, cnt))
    u, v = o[a], o[b]
    u, v = np.minimum(u, v), np.maximum(u, v)  # u visited first: the kept box, v the candidate
    k = suppressing(x1, y1, x2, y2, area, thr, norm, u, v)
    return nms_from_pairs(m, u[k], v[k], limit)
