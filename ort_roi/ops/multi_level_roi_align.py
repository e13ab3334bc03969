"""MultiLevelRoiAlign_L{L}: mmdeploy's MMCVMultiLevelRoiAlign (TensorRT plugin), FPN RoIAlign
over L levels: rois [R, 5] with the batch index; level clamp(floor(log2(sqrt(area) /
finest_scale + 1e-6)), 0, L-1) from the box as given (in float32, as its sqrtf/log2f; NaN
from an inverted box is level 0, as CUDA's float-to-int conversion); then, when
roi_scale_factor > 0, the box rescaled about its centre with half sizes (size + 1) * factor /
2 - 1/2; then MMCVRoiAlign at scale 1/stride_l: pool_mode 1 the mean, 0 the largest sample (a
bin without samples -FLT_MAX, the plugin's start). The exported node is rewritten into the
fixed-arity op of its number of levels by convert and the front door."""

from __future__ import annotations

import numpy as np

from ..definitions.multilevel import multi_level_roi_align_levels as definition
from ..geometry import FLT_MAX, LEGACY, MMDEPLOY_ALIGNED, align_bins, level_scales, \
    mmdeploy_rescale
from ..kernels.checks import check_batch_rois, check_box_sizes, check_levels, check_output_size, \
    level_node, quiet, resolve_levels
from ..kernels.dispatch import compute, steps
from ..levels import mmdeploy_levels
from ..spec import BATCH_ROIS, MAX_LEVELS, Attr, NodeForm, Op, OpSpec, Output, aligned_attr, \
    level_forms, level_inputs, level_scale_attrs, pooled_attrs, pyramid_layout, \
    sampling_ratio_attr


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"MultiLevelRoiAlign_L{L}",
        source="mmdeploy MMCVMultiLevelRoiAlign (TensorRT plugin)",
        doc=f"FPN RoIAlign over {L} level(s): each box [batch_id, x1, y1, x2, y2] to the level "
            "clamp(floor(log2(sqrt(area) / finest_scale + 1e-6)), 0, L-1), rescaled about "
            "its centre when roi_scale_factor > 0, pooled from it with MMCVRoiAlign at scale "
            "1/stride_l (pool_mode 0 max, 1 avg).",
        inputs=(BATCH_ROIS,) + level_inputs(L),
        attrs=(*pooled_attrs("output_height", "output_width", 7),
               sampling_ratio_attr(0),
               Attr("pool_mode", int, 1, choices=(0, 1), doc="0: max, 1: avg"),
               aligned_attr(1),
               Attr("roi_scale_factor", float, -1.0,
                    doc="> 0: boxes rescaled about their centre first"),
               Attr("finest_scale", int, 56, min=1, doc="box size of level 0"))
        + level_scale_attrs(L, "stride_{}", "stride of level {} (featmap_strides)"),
        outputs=(Output("output", "[R, C, PH, PW]"),),
        pooled=("output_height", "output_width"),
        box_cols=5,
        **pyramid_layout(1, L),
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


@quiet
def multi_level_roi_align(rois, *feats, output_height: int = 7, output_width: int = 7,
                          sampling_ratio: int = 0, pool_mode: int = 1, aligned: int = 1,
                          roi_scale_factor: float = -1.0, finest_scale: int = 56,
                          featmap_strides=(4.0, 8.0, 16.0, 32.0)):
    """mmdeploy's MMCVMultiLevelRoiAlign.

    Args:
        rois: [R, 5] rows [batch_id, x1, y1, x2, y2], float32 or float64.
        *feats: the levels [N, C, H_l, W_l], finest first (1 to MAX_LEVELS), rois' dtype.
        output_height: the output grid's rows (>= 1).
        output_width: its columns (>= 1).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        pool_mode: 1: the mean of the samples; 0: the largest.
        aligned: 1: half-pixel offset.
        roi_scale_factor: > 0: boxes rescaled about their centre first.
        finest_scale: box size of level 0.
        featmap_strides: the stride of each level.

    Returns:
        [R, C, output_height, output_width] of the rois' dtype.
    """
    L = len(feats)
    spec, a = resolve_levels(SPECS, "MMCVMultiLevelRoiAlign", L, "featmap_strides",
                             featmap_strides, "stride_{}",
                             dict(output_height=output_height, output_width=output_width,
                                  sampling_ratio=sampling_ratio, pool_mode=pool_mode,
                                  aligned=aligned, roi_scale_factor=roi_scale_factor,
                                  finest_scale=finest_scale))
    op = spec.name
    X = check_levels(op, feats)
    _, batch, boxes = check_batch_rois(op, "rois", rois, X[0])
    check_output_size(spec, a, boxes.shape[0], X[0].shape[1])
    level = mmdeploy_levels(boxes, a["finest_scale"], L)
    if a["roi_scale_factor"] > 0:
        boxes = mmdeploy_rescale(boxes, a["roi_scale_factor"])
    scale = [float(np.float32(1.0 / np.float32(a[f"stride_{i}"]))) for i in range(L)]
    check_box_sizes(op, "rois", boxes, max(scale))
    ph, pw = a["output_height"], a["output_width"]
    bins = align_bins(boxes, level_scales(scale, level, boxes.dtype),
                      MMDEPLOY_ALIGNED if a["aligned"] else LEGACY, ph, pw)
    return compute(steps.align_levels, X, batch=batch, start=bins.start, bin_size=bins.size,
                   level=level, ph=ph, pw=pw, sampling_ratio=a["sampling_ratio"],
                   mode=1 - a["pool_mode"], empty=-FLT_MAX)


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=multi_level_roi_align, definition=definition,
    # the nodes MultiLevelRoiAlign_L1..L6 (convert writes them) hold the strides as stride_{l}
    node=level_node(multi_level_roi_align, "featmap_strides", "stride_{}"),
    steps=(steps.align_levels,),
    forms=level_forms(SPECS, "ort-roi convert (from mmdeploy::MMCVMultiLevelRoiAlign)",
                      "level rule + MMCVRoiAlign per level")
    + (NodeForm("mmdeploy", "MMCVMultiLevelRoiAlign", SPECS[4], "mmdeploy's TensorRT backend",
                "its level rule composed with MMCVRoiAlign per level (Paddle roi_align), and a "
                "literal loop", registered=False, levels=SPECS,
                split={"featmap_strides": "stride_{}"}, guard_levels=4),),
)
