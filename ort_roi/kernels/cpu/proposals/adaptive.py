"""The adaptive NMS (eta < 1): the threshold multiplied by eta after each keep while it is
> 0.5; each kept box one vectorised step until it stops falling, then the fixed-threshold NMS
(fixed.nms_fixed) takes the rest.
"""

from __future__ import annotations

import numpy as np

from . import common
from .common import IOU_IEEE, NmsTooCostly
from .fixed import nms_fixed

#: What a comparison of the adaptive threshold's steps (one vectorised pass per keep) costs
#: in block NMS comparisons
NMS_ADAPTIVE_COST = 4


def nms_adaptive(x1, y1, x2, y2, area, thr, eta, norm, limit: int) -> np.ndarray:
    """Greedy NMS whose threshold is multiplied by eta (< 1) after each keep while it is > 0.5:
    a box is kept when its largest overlap with the kept boxes is <= the threshold then. One
    vectorised step per keep while the threshold falls; once it is <= 0.5 it stays, and the
    boxes left that the kept ones do not suppress go to the fixed-threshold NMS.

    Pinned by tests/test_proposals.py: test_step_equals_definition_random (eta 0.9, 0.5),
    test_nms_grid_equals_the_literal_loop (eta 0.9, then the grid),
    test_eta_at_or_near_zero_keeps_what_paddle_keeps (eta 0, below 0, 1e-45: a threshold of
    0 or below after the first keep),
    test_nms_past_its_comparison_budget_is_a_roi_op_error (eta 0.99999: NMS_ADAPTIVE_COST
    counted against the budget)."""
    T = x1.dtype.type
    m = x1.size
    worst = np.full(m, -np.inf, x1.dtype)
    kept = []
    j = 0
    work = 0
    while j < m and len(kept) < limit:
        ok = worst[j:] <= thr
        p = int(np.argmax(ok))
        if not ok[p]:
            break
        j += p
        kept.append(j)
        if eta < 1 and thr > 0.5:
            thr = thr * T(eta)
        c = slice(j + 1, m)
        disjoint = (x1[j] > x2[c]) | (x2[j] < x1[c]) | (y1[j] > y2[c]) | (y2[j] < y1[c])
        with np.errstate(**IOU_IEEE):
            inter = ((np.minimum(x2[c], x2[j]) - np.maximum(x1[c], x1[j]) + norm)
                     * (np.minimum(y2[c], y2[j]) - np.maximum(y1[c], y1[j]) + norm))
            iou = np.where(disjoint, T(0), inter / (area[c] + area[j] - inter))
        worst[c] = np.maximum(worst[c], iou)
        j += 1
        work += NMS_ADAPTIVE_COST * (m - j)
        if not thr > 0.5:  # fixed from here on
            rest = j + np.flatnonzero(worst[j:] <= thr)
            more = nms_fixed(*(v[rest] for v in (x1, y1, x2, y2, area)), thr, norm,
                              limit - len(kept))
            return np.concatenate([np.array(kept, np.int64), rest[more]])
        if work > common.NMS_MAX_COMPARISONS:
            raise NmsTooCostly(m, "the threshold falls by eta after each of its first keeps")
    return np.array(kept, np.int64)
