"""PyramidRoIAlign: RoIAlign of each box from the feature map its level names, the level
given (as torchvision's exported MultiScaleRoIAlign computes it in the graph): the RoI stage
of torchvision's detection models in one op (ort-roi convert, ort_roi.torch_export)."""

from __future__ import annotations

import numpy as np

from ..geometry import roi_align_geometry
from ..specs import PYRAMID_SPECS
from .checks import (batch_from_column, check_box_sizes, check_boxes, check_levels,
                     int_vector, quiet)
from .dispatch import compute
from .multi_level import level_spec, scalars


@quiet
def pyramid_roi_align(rois, levels, *feats, output_height: int = 1, output_width: int = 1,
                      sampling_ratio: int = 0, aligned: int = 0, spatial_scales=()):
    """Box r [batch_id, x1, y1, x2, y2] pooled with RoIAlign (``aligned`` 0: torchvision's
    MultiScaleRoIAlign) from ``feats[levels[r]]`` at ``spatial_scales[levels[r]]``; a level
    outside 0 .. L-1 gives 0. ``feats``: [N, C, H_l, W_l], one per level. Returns
    [R, C, output_height, output_width] in the order of the rois."""
    L = len(feats)
    spec = level_spec(PYRAMID_SPECS, L, "PyramidRoIAlign")
    scales = scalars(spec, "spatial_scales", spatial_scales, L)
    a = spec.resolve(dict(output_height=output_height, output_width=output_width,
                          sampling_ratio=sampling_ratio, aligned=aligned,
                          **{f"spatial_scale_{i}": v for i, v in enumerate(scales)}))
    op = spec.name
    X = check_levels(op, feats)
    rois = check_boxes(op, "rois", rois, X[0], 5)
    level = int_vector(op, "levels", levels, rois.shape[0], "[R] = [{}] (one level per box)")
    batch = batch_from_column(op, "rois", rois[:, 0], X[0].shape[0])
    boxes = np.ascontiguousarray(rois[:, 1:])
    scale = [a[f"spatial_scale_{i}"] for i in range(L)]
    check_box_sizes(op, "rois", boxes, max(scale))
    level = np.where((level >= 0) & (level < L), level, L).astype(np.intp)  # L: no level
    return compute("align_levels", X, batch, boxes, level, a["output_height"],
                   a["output_width"], scale, a["sampling_ratio"],
                   roi_align_geometry(a["aligned"]), 0)


def pyramid_roi_align_levels(rois, levels, *feats, **attrs):
    """``pyramid_roi_align`` with the scales as attributes spatial_scale_0 .. _{L-1} (the
    fixed-arity ops PyramidRoIAlign_L1..L6)."""
    scales = [attrs.pop(f"spatial_scale_{i}", None) for i in range(len(feats))]
    return pyramid_roi_align(rois, levels, *feats, spatial_scales=scales, **attrs)
