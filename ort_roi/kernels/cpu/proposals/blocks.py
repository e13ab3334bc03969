"""The block NMS: the boxes visited in blocks of NMS_BLOCK, each block's keeps from its own
overlaps (the keep rule to its fixed point), then its kept boxes suppressing every later box
at once. Exact on any boxes (zero-size ones too); its cost grows with the boxes times the
keeps, within the comparison budget (common.NMS_MAX_COMPARISONS).
"""

from __future__ import annotations

import numpy as np

from . import common
from .common import IOU_IEEE, NmsTooCostly

#: Candidates visited per block of the NMS
NMS_BLOCK = 256


def nms_blocks(x1, y1, x2, y2, area, thr, norm, limit: int) -> np.ndarray:
    """Greedy NMS at a fixed threshold over boxes in visiting order; positions kept. Each
    block's kept boxes are compared with every box left after it: NmsTooCostly past
    common.NMS_MAX_COMPARISONS of those comparisons.

    Pinned by tests/test_proposals.py: test_nms_sparse_and_block_paths_equal_the_literal_loop
    (sparse.NMS_PAIRS 0: the blocks throughout, dense and sparse sets, ties, duplicates),
    test_nms_grid_equals_block_nms_on_rpn_boxes (12,000 RPN boxes, against the grid) and
    test_nms_past_its_comparison_budget_is_a_roi_op_error (its budget)."""
    m = x1.size

    def over(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        """[len(r), len(c)]: kept box r suppresses candidate c (JaccardOverlap(c, r) > thr).
        For boxes with x1 <= x2, y1 <= y2 (as the filter leaves them) Paddle's disjointness
        test is a negative intersection side; the IoU is computed for the others only."""
        with np.errstate(**IOU_IEEE):
            dx = np.minimum(x2[c], x2[r, None]) - np.maximum(x1[c], x1[r, None])
            dy = np.minimum(y2[c], y2[r, None]) - np.maximum(y1[c], y1[r, None])
            hit = (dx >= 0) & (dy >= 0)
            i, j = np.nonzero(hit)
            if i.size:
                inter = (dx[i, j] + norm) * (dy[i, j] + norm)
                iou = inter / (area[c[j]] + area[r[i]] - inter)
                hit[i, j] = ~(iou <= thr)
        return hit

    suppressed = np.zeros(m, bool)
    kept: list[np.ndarray] = []
    total = work = 0
    for start in range(0, m, NMS_BLOCK):
        end = min(start + NMS_BLOCK, m)
        cand = start + np.flatnonzero(~suppressed[start:end])
        if cand.size == 0:
            continue
        o = np.triu(over(cand, cand), 1)
        keep = np.ones(cand.size, bool)
        while True:  # keep[j] = no kept i < j suppresses j: a triangular rule, its fixed point
            new = ~(o & keep[:, None]).any(0)
            if np.array_equal(new, keep):
                break
            keep = new
        new_kept = cand[keep]
        if total + new_kept.size >= limit:
            kept.append(new_kept[:limit - total])
            break
        kept.append(new_kept)
        total += new_kept.size
        if end < m and new_kept.size:
            rest = np.arange(end, m)
            rest = rest[~suppressed[end:]]
            work += new_kept.size * rest.size
            if work > common.NMS_MAX_COMPARISONS:
                raise NmsTooCostly(m, "its boxes overlap too densely for its sparse search")
            if rest.size:
                suppressed[rest] = over(new_kept, rest).any(0)
    return np.concatenate(kept) if kept else np.zeros(0, np.int64)
