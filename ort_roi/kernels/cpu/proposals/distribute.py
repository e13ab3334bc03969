"""Paddle's distribute_fpn_proposals, its compute step: each roi's FPN level (levels.fpn_levels,
Paddle's rule) and the rois regrouped level by level, equal to Paddle's CPU kernel.
"""

from __future__ import annotations

import numpy as np

from ....levels import fpn_levels

def distribute_fpn_proposals(fpn_rois: np.ndarray, rois_num: np.ndarray, min_level: int,
                             max_level: int, refer_level: int, refer_scale: int,
                             pixel_offset: bool):
    """The compute step of DistributeFpnProposals (checked inputs).

    Args:
        fpn_rois: [R, 4] T; rois_num: [N] int64, sums to R.
    Returns:
        (rois of each level [R_l, 4] T, counts of each level [N] int32, restore_index [R, 1]
        int32).
    """
    L = max_level - min_level + 1
    N = rois_num.size
    k = fpn_levels(fpn_rois, min_level, max_level, refer_level, refer_scale,
                   pixel_offset) - min_level
    order = np.argsort(k, kind="stable")
    per = np.bincount(k, minlength=L)
    bounds = np.concatenate([[0], np.cumsum(per)])
    ordered = fpn_rois[order]
    rois = [ordered[bounds[i]:bounds[i + 1]] for i in range(L)]
    image = np.repeat(np.arange(N), rois_num)
    counts = np.bincount(k * N + image, minlength=L * N).reshape(L, N).astype(np.int32)
    restore = np.empty((fpn_rois.shape[0], 1), np.int32)
    restore[order, 0] = np.arange(fpn_rois.shape[0], dtype=np.int32)
    return rois, list(counts), restore
