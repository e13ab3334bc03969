"""PaddleDetection's FPN RoI stage as one op (DistributeRoIAlign), written as the graph
export-paddle writes it computes it: Paddle's distribute_fpn_proposals, roi_align on each
level's rois, the levels' results concatenated, then gathered by restore_index into the
rois' order (PaddleDetection's ``RoIAlign`` extractor, ppdet/modeling/heads/roi_extractor.py).
A composition of the definitions it is made of, nothing of its own."""

from __future__ import annotations

import numpy as np

from .align import roi_align
from .proposals import distribute_fpn_proposals


def distribute_roi_align(fpn_rois, rois_num, *feats, min_level, max_level, refer_level=4,
                         refer_scale=224, pixel_offset=0, pooled_height=1, pooled_width=1,
                         sampling_ratio=-1, aligned=1, spatial_scales=()):
    """DistributeRoIAlign: rois [x1, y1, x2, y2] image by image (rois_num per image) sent to
    their FPN levels by distribute_fpn_proposals; level l's rois pooled by roi_align from
    feats[l] at spatial_scales[l] with that level's per-image counts; the L results
    concatenated (level 0 first) and gathered by restore_index: [R, C, PH, PW] in the rois'
    order."""
    rois, counts, restore = distribute_fpn_proposals(
        fpn_rois, rois_num, min_level=min_level, max_level=max_level, refer_level=refer_level,
        refer_scale=refer_scale, pixel_offset=pixel_offset)
    pooled = [roi_align(feats[l], rois[l], counts[l], pooled_height=pooled_height,
                        pooled_width=pooled_width, spatial_scale=spatial_scales[l],
                        sampling_ratio=sampling_ratio, aligned=aligned)
              for l in range(len(feats))]
    concatenated = np.concatenate(pooled, axis=0)
    return concatenated[restore[:, 0]]


def distribute_roi_align_levels(fpn_rois, rois_num, *feats, **attrs):
    """``distribute_roi_align`` with the scales as attributes spatial_scale_0 .. _{L-1} (the
    nodes DistributeRoIAlign_L1..L6)."""
    scales = [attrs.pop(f"spatial_scale_{i}") for i in range(len(feats))]
    return distribute_roi_align(fpn_rois, rois_num, *feats, spatial_scales=scales, **attrs)
