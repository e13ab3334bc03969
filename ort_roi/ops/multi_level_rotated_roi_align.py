"""MultiLevelRotatedRoiAlign_L{L}: mmdeploy's MMCVMultiLevelRotatedRoiAlign (TensorRT plugin;
MMRotate's RotatedSingleRoIExtractor as mmdeploy's TensorRT config writes it), rotated RoIAlign
over L levels: rois [R, 6] rows [batch, cx, cy, w, h, theta]; level clamp(floor(log2(sqrt(w *
h) / finest_scale + 1e-6)), 0, L-1) from the box as given (ort_roi.levels.
mmdeploy_rotated_levels); then, when roi_scale_factor > 0, w and h multiplied by it (the
centre and angle kept); then the box pooled from its level at scale 1/stride_l as the plugin
computes it (geometry.mmdeploy_rotated_rows): mmcv's roi_align_rotated except that the centre
is fma(c, scale, -0.5 when aligned), one rounding, and the size is at least 1 also when
aligned (mmcv keeps an aligned size, and refuses a negative one). The samples are
MMCVRoIAlignRotated's compute step (mmcv's bilinear w1*v1 + ... + w4*v4; the plugin
interpolates with fma lerps, v1 + (v2 - v1)*lx: the same value up to rounding, and its CUDA
cosf / sinf are within 2 ulp of the C library's: held to 1e-4, as MMCVRoIAlignRotated). The
exported node is rewritten into the fixed-arity op of its number of levels by convert and the
front door."""

from __future__ import annotations

import numpy as np

from ..definitions.rotated import mmdeploy_multi_level_rotated_roi_align_levels as definition
from ..geometry import level_scales, mmdeploy_rotated_rows
from ..errors import BoxError
from ..kernels.checks import check_batch_rois, check_levels, check_output_size, \
    check_rotated_sizes, level_node, quiet, resolve_levels
from ..kernels.dispatch import compute_by_level, steps
from ..levels import mmdeploy_rotated_levels
from ..spec import CLOCKWISE, MAX_LEVELS, ROTATED_ROIS, Attr, NodeForm, Op, OpSpec, \
    Output, aligned_attr, level_forms, level_inputs, level_scale_attrs, pooled_attrs, \
    pyramid_layout, sampling_ratio_attr

NODE = "MMCVMultiLevelRotatedRoiAlign"


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"MultiLevelRotatedRoiAlign_L{L}",
        source="mmdeploy MMCVMultiLevelRotatedRoiAlign (TensorRT plugin)",
        doc=f"Rotated FPN RoIAlign over {L} level(s): each box [batch_id, cx, cy, w, h, theta] "
            "to the level clamp(floor(log2(sqrt(w*h) / finest_scale + 1e-6)), 0, L-1), w and "
            "h times roi_scale_factor when > 0, pooled from it with the plugin's rotated "
            "RoIAlign at scale 1/stride_l (mmcv's roi_align_rotated, its centre one fma, its "
            "size at least 1 also when aligned).",
        inputs=(ROTATED_ROIS,)
        + level_inputs(L),
        attrs=(*pooled_attrs("output_height", "output_width", 7),
               sampling_ratio_attr(2),
               aligned_attr(0, "1: half-pixel offset of the centre"),
               CLOCKWISE,
               Attr("roi_scale_factor", float, -1.0,
                    doc="> 0: w and h multiplied by it (after the level is chosen)"),
               Attr("finest_scale", int, 56, min=1, doc="box size of level 0"))
        + level_scale_attrs(L, "stride_{}", "stride of level {} (featmap_strides)"),
        outputs=(Output("output", "[R, C, PH, PW]"),),
        pooled=("output_height", "output_width"),
        box_cols=6,
        **pyramid_layout(1, L),
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


@quiet
def multi_level_rotated_roi_align(rois, *feats, output_height: int = 7, output_width: int = 7,
                                  sampling_ratio: int = 2, aligned: int = 0, clockwise: int = 0,
                                  roi_scale_factor: float = -1.0, finest_scale: int = 56,
                                  featmap_strides=(4.0, 8.0, 16.0, 32.0)):
    """mmdeploy's MMCVMultiLevelRotatedRoiAlign.

    Args:
        rois: [R, 6] rows [batch_id, cx, cy, w, h, theta] (theta in radians,
            counter-clockwise unless ``clockwise``), float32 or float64.
        *feats: the levels [N, C, H_l, W_l], finest first (1 to MAX_LEVELS), rois' dtype.
        output_height: the output grid's rows (>= 1).
        output_width: its columns (>= 1).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset of the centre.
        clockwise: 1: theta turns clockwise.
        roi_scale_factor: > 0: w and h multiplied by it, after the level is chosen.
        finest_scale: box size of level 0.
        featmap_strides: the stride of each level.

    Returns:
        [R, C, output_height, output_width] of the rois' dtype.
    """
    L = len(feats)
    spec, a = resolve_levels(SPECS, NODE, L, "featmap_strides", featmap_strides, "stride_{}",
                             dict(output_height=output_height, output_width=output_width,
                                  sampling_ratio=sampling_ratio, aligned=aligned,
                                  clockwise=clockwise, roi_scale_factor=roi_scale_factor,
                                  finest_scale=finest_scale))
    op = spec.name
    X = check_levels(op, feats)
    rois, batch, _ = check_batch_rois(op, "rois", rois, X[0], 6)
    check_output_size(spec, a, rois.shape[0], X[0].shape[1])
    level = mmdeploy_rotated_levels(rois, a["finest_scale"], L)
    if a["roi_scale_factor"] > 0:  # a float attribute: float32, as the plugin multiplies
        rois = rois.copy()
        rois[:, 3:5] *= rois.dtype.type(np.float32(a["roi_scale_factor"]))
    # the plugin's 1. / float(stride), a double quotient stored as float
    scale = level_scales([np.float32(1.0 / np.float64(np.float32(a[f"stride_{i}"])))
                          for i in range(L)], level, rois.dtype)[:, 0]
    check_rotated_sizes(op, rois, scale, False)
    ph, pw = a["output_height"], a["output_width"]
    rows = mmdeploy_rotated_rows(rois, batch, scale, ph, pw, a["sampling_ratio"],
                                 bool(a["aligned"]), bool(a["clockwise"]))
    try:
        return compute_by_level(steps.align_rotated, X, level=level, rows=rows, ph=ph, pw=pw)
    except BoxError as e:  # (the step names the single-level op)
        raise e.placed(op=op) from None


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=multi_level_rotated_roi_align, definition=definition,
    # the nodes MultiLevelRotatedRoiAlign_L1..L6 (convert writes them) hold the strides as
    # stride_{l}
    node=level_node(multi_level_rotated_roi_align, "featmap_strides", "stride_{}"),
    steps=(steps.align_rotated,),
    forms=level_forms(SPECS, f"ort-roi convert (from mmdeploy::{NODE})",
                      "level rule + the plugin's rotated RoIAlign per level")
    + (NodeForm("mmdeploy", NODE, SPECS[4],
                "mmdeploy's TensorRT backend (MMRotate's RotatedSingleRoIExtractor)",
                "a literal loop of the plugin's CUDA kernel (tests/literal.py); for aligned=1, "
                "MMCVRoIAlignRotated per level (OpenVINO reads it from ONNX)",
                registered=False, levels=SPECS, split={"featmap_strides": "stride_{}"},
                guard_levels=4),),
)
