"""What the NMS strategies of Paddle's generate_proposals share: the IoU of a pair as Paddle
computes it (``suppressing``, in IEEE: ``IOU_IEEE``), the keeps settled from every
suppressing pair (``nms_from_pairs``: the sparse and the grid search), and the comparison
budget past which an NMS is refused (``NMS_MAX_COMPARISONS``, ``NmsTooCostly``).

A box is kept when its overlap with every kept box is <= the threshold. The keep rule (a box
is kept when no kept box visited before it suppresses it: triangular) is iterated to its
fixed point, which is exact, a few thousand boxes at a time (a long chain: one box at a
time).
"""

from __future__ import annotations

import numpy as np

#: Paddle's IoU arithmetic in IEEE, without warnings: two zero-area boxes that touch give
#: 0 / 0 = NaN, which is not <= the threshold (suppressed, as by Paddle's JaccardOverlap);
#: huge boxes' sides, areas and intersections overflow to inf (inf / inf: NaN, likewise)
IOU_IEEE = {"divide": "ignore", "invalid": "ignore", "over": "ignore"}
#: The most box comparisons the block NMS and the adaptive threshold's steps make on one
#: image (~3 ns each in the block NMS: ~7 s): past it RoiOpError (a Python op cannot be
#: interrupted)
NMS_MAX_COMPARISONS = 1 << 31
#: Boxes settled at once from their suppressing pairs (nms_from_pairs)
NMS_SETTLE_BLOCK = 4096
#: The most rounds a block of boxes iterates its keep rule from its pairs (else the block is
#: settled one box at a time)
NMS_ROUNDS = 64


class NmsTooCostly(Exception):
    """An NMS that would make more than NMS_MAX_COMPARISONS box comparisons (``boxes``, and
    why); generate_proposals reports it as a RoiOpError. Pinned by tests/test_proposals.py::
    test_nms_past_its_comparison_budget_is_a_roi_op_error (a budget of 10,000: the block
    NMS's and the adaptive steps' comparisons counted)."""

    def __init__(self, boxes: int, why: str):
        super().__init__(boxes, why)
        self.boxes, self.why = boxes, why


def suppressing(x1, y1, x2, y2, area, thr, norm, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The pairs k of boxes (p[k], q[k]) whose JaccardOverlap, as Paddle computes it (the same
    either way round), is not <= thr: the one of them visited first, kept, suppresses the
    other. For boxes with x1 <= x2, y1 <= y2 Paddle's disjointness test is a negative
    intersection side; the IoU is computed for the others only."""
    with np.errstate(**IOU_IEEE):
        dx = np.minimum(x2[q], x2[p]) - np.maximum(x1[q], x1[p])
        dy = np.minimum(y2[q], y2[p]) - np.maximum(y1[q], y1[p])
        hit = np.flatnonzero((dx >= 0) & (dy >= 0))
        inter = (dx[hit] + norm) * (dy[hit] + norm)
        iou = inter / (area[q[hit]] + area[p[hit]] - inter)
    return hit[~(iou <= thr)]


def nms_from_pairs(m: int, u: np.ndarray, v: np.ndarray, limit: int) -> np.ndarray:
    """Greedy NMS from every suppressing pair (u visited before v): positions kept, the
    first ``limit``. NMS_SETTLE_BLOCK boxes at a time: the boxes not suppressed by the kept
    boxes of earlier blocks, their keep rule within the block iterated to its fixed point
    (a long chain: one box at a time), then the block's kept boxes suppress later ones.

    Its thresholds are pinned by tests/test_proposals.py: NMS_ROUNDS by
    test_nms_grid_settles_long_chains_one_box_at_a_time (3 rounds: a 300-box chain settled
    one box at a time) and test_nms_sparse_and_block_paths_equal_the_literal_loop (1 round);
    NMS_SETTLE_BLOCK by test_nms_grid_equals_the_literal_loop (blocks of 64)."""
    e = np.argsort(u, kind="stable")
    U, V = u[e], v[e]
    ptr = np.searchsorted(U, np.arange(m + 1))
    suppressed = np.zeros(m, bool)
    kept: list[np.ndarray] = []
    total = 0
    for start in range(0, m, NMS_SETTLE_BLOCK):
        end = min(m, start + NMS_SETTLE_BLOCK)
        eu, ev = U[ptr[start]:ptr[end]] - start, V[ptr[start]:ptr[end]] - start
        free = ~suppressed[start:end]
        inside = ev < end - start
        iu, iv = eu[inside], ev[inside]
        live = free[iu] & free[iv]
        iu, iv = iu[live], iv[live]
        keep = free
        for _ in range(NMS_ROUNDS):
            hit = np.zeros(end - start, bool)
            hit[iv[keep[iu]]] = True
            new = free & ~hit
            if np.array_equal(new, keep):
                break
            keep = new
        else:
            keep = free.copy()
            first = np.searchsorted(iu, np.arange(end - start + 1))  # iu ascending (U is)
            for i in np.flatnonzero(free):
                if keep[i]:
                    keep[iv[first[i]:first[i + 1]]] = False
        k = start + np.flatnonzero(keep)
        if total + k.size >= limit:
            kept.append(k[:limit - total])
            break
        kept.append(k)
        total += k.size
        out = ~inside
        suppressed[start + ev[out][keep[eu[out]]]] = True
    return np.concatenate(kept) if kept else np.zeros(0, np.int64)
