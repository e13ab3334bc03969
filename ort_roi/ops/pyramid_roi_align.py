"""PyramidRoIAlign_L{L}: RoIAlign of each box from the feature map its level names, the level
given (as torchvision's exported MultiScaleRoIAlign computes it in the graph): the RoI stage
of torchvision's detection models in one op (ort-roi convert, ort_roi.torch_export)."""

from __future__ import annotations

import numpy as np

from ..definitions.torchvision import pyramid_roi_align_levels as definition
from ..geometry import align_bins, level_scales, roi_align_geometry
from ..kernels.checks import check_batch_rois, check_box_sizes, check_levels, check_output_size, \
    int_vector, level_node, quiet, resolve_levels
from ..kernels.dispatch import compute, host, steps
from ..spec import BATCH_ROIS, MAX_LEVELS, Input, Op, OpSpec, Output, aligned_attr, level_forms, \
    level_inputs, level_scale_attrs, pooled_attrs, pyramid_layout, sampling_ratio_attr


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"PyramidRoIAlign_L{L}",
        source="torchvision MultiScaleRoIAlign, one fused stage (ort-roi convert, "
               "ort_roi.torch_export)",
        doc=f"RoIAlign of each box [batch_id, x1, y1, x2, y2] from the one of the {L} feature "
            "maps its level names (levels[r], as the graph computes it; a level outside 0 .. "
            "L-1 gives 0, and that row is not read: NaN there is no error), at that map's "
            "spatial_scale; the output in the order of the rois. "
            "aligned 0 is torchvision's MultiScaleRoIAlign.",
        inputs=(BATCH_ROIS, Input("levels", "I", "[R]", "the feature map of each box"))
        + level_inputs(L),
        attrs=(*pooled_attrs("output_height", "output_width"), sampling_ratio_attr(0),
               aligned_attr(0))
        + level_scale_attrs(L, "spatial_scale_{}", "multiplies box coordinates onto feat_{}"),
        outputs=(Output("output", "[R, C, PH, PW]"),),
        pooled=("output_height", "output_width"),
        box_cols=5,
        **pyramid_layout(2, L),
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


def rows_no_level_unread(rois, levels, L: int):
    """The rois with each row that no level selects (levels[r] outside 0 .. L-1) replaced by
    zeros but for the first selected row's batch index (batch 0 when none is): such a row is
    never pooled (its output is 0, as the native multi-level stages leave it), so what it
    holds (NaN, inf, any batch index or size) is not checked either, at no level's scale.
    The rois as given when every row has a level, or when their shapes are wrong (the checks
    after this say so)."""
    rois, levels = host(rois), host(levels)
    if not (isinstance(rois, np.ndarray) and isinstance(levels, np.ndarray)
            and rois.ndim == 2 and levels.shape == rois.shape[:1]
            and levels.dtype.kind in "iu"):
        return rois
    none = (levels < 0) | (levels >= L)
    if not none.any():
        return rois
    rois = rois.copy()
    some = np.flatnonzero(~none)
    rois[none] = 0
    if some.size:
        rois[none, 0] = rois[some[0], 0]
    return rois


@quiet
def pyramid_roi_align(rois, levels, *feats, output_height: int = 1, output_width: int = 1,
                      sampling_ratio: int = 0, aligned: int = 0, spatial_scales=()):
    """Each box pooled with RoIAlign from the feature map its level names.

    Args:
        rois: [R, 5] rows [batch_id, x1, y1, x2, y2], float32 or float64.
        levels: [R] int32 or int64, the feature map of each box (outside 0 .. L-1: output 0).
        *feats: [N, C, H_l, W_l], one per level (1 to MAX_LEVELS), rois' dtype.
        output_height: the output grid's rows (>= 1).
        output_width: its columns (>= 1).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset; 0: torchvision's MultiScaleRoIAlign.
        spatial_scales: the scale of each level.

    Returns:
        [R, C, output_height, output_width] in the order of the rois.
    """
    L = len(feats)
    spec, a = resolve_levels(SPECS, "PyramidRoIAlign", L, "spatial_scales", spatial_scales,
                             "spatial_scale_{}",
                             dict(output_height=output_height, output_width=output_width,
                                  sampling_ratio=sampling_ratio, aligned=aligned))
    op = spec.name
    X = check_levels(op, feats)
    rois = rows_no_level_unread(rois, levels, L)
    rois, batch, boxes = check_batch_rois(op, "rois", rois, X[0])
    level = int_vector(op, "levels", levels, rois.shape[0], "[R] = [{}] (one level per box)")
    scale = [a[f"spatial_scale_{i}"] for i in range(L)]
    check_box_sizes(op, "rois", boxes, max(scale))
    check_output_size(spec, a, boxes.shape[0], X[0].shape[1])
    level = np.where((level >= 0) & (level < L), level, L).astype(np.intp)  # L: no level
    ph, pw = a["output_height"], a["output_width"]
    bins = align_bins(boxes, level_scales(scale, level, boxes.dtype),
                      roi_align_geometry(a["aligned"]), ph, pw)
    return compute(steps.align_levels, X, batch=batch, start=bins.start, bin_size=bins.size,
                   level=level, ph=ph, pw=pw, sampling_ratio=a["sampling_ratio"], mode=0)


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=pyramid_roi_align, definition=definition,
    # the nodes PyramidRoIAlign_L1..L6 (inputs rois, levels, the maps) hold spatial_scale_{l}
    node=level_node(pyramid_roi_align, "spatial_scales", "spatial_scale_{}", leading=2),
    steps=(steps.align_levels,),
    forms=level_forms(SPECS, "ort-roi convert (torchvision's exported MultiScaleRoIAlign "
                      "stage), ort_roi.torch_export", "torchvision MultiScaleRoIAlign"),
)
