"""PyramidRotatedRoIAlign_L{L}: MMCVRoIAlignRotated of each rotated box from the feature map
its level names, the level given (as the graph computes it): MMRotate's
RotatedSingleRoIExtractor as MMDeploy's onnxruntime config exports it (per level, the rows of
that level Gathered by NonZero, pooled by ``mmdeploy::MMCVRoIAlignRotated`` and scattered
into zeros by ScatterND) in one op (ort-roi convert). A row whose level is outside 0 .. L-1
is not read and gives 0, as the unfused stage leaves it."""

from __future__ import annotations

from ..definitions.rotated import pyramid_rotated_roi_align_levels as definition
from ..geometry import level_scales, rotated_rows
from ..errors import BoxError
from ..kernels.checks import check_batch_rois, check_levels, check_output_size, \
    check_rotated_sizes, int_vector, level_node, quiet, resolve_levels
from ..kernels.dispatch import compute_by_level, steps
from ..spec import CLOCKWISE, MAX_LEVELS, ROTATED_ROIS, Input, Op, OpSpec, Output, \
    aligned_attr, level_forms, level_inputs, level_scale_attrs, pooled_attrs, \
    pyramid_layout, sampling_ratio_attr
from .pyramid_roi_align import rows_no_level_unread


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"PyramidRotatedRoIAlign_L{L}",
        source="MMRotate RotatedSingleRoIExtractor through MMDeploy's onnxruntime config, one "
               "fused stage (ort-roi convert)",
        doc=f"MMCVRoIAlignRotated of each box [batch_id, cx, cy, w, h, theta] from the one of "
            f"the {L} feature maps its level names (levels[r], as the graph computes it; a "
            "level outside 0 .. L-1 gives 0, and that row is not read), at that map's "
            "spatial_scale; the output in the order of the rois.",
        inputs=(ROTATED_ROIS,
                Input("levels", "I", "[R]", "the feature map of each box"))
        + level_inputs(L),
        attrs=(*pooled_attrs("output_height", "output_width"), sampling_ratio_attr(0),
               aligned_attr(1, "1: half-pixel offset of the centre"),
               CLOCKWISE)
        + level_scale_attrs(L, "spatial_scale_{}", "multiplies box coordinates onto feat_{}"),
        outputs=(Output("output", "[R, C, PH, PW]"),),
        pooled=("output_height", "output_width"),
        box_cols=6,
        **pyramid_layout(2, L),
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


@quiet
def pyramid_rotated_roi_align(rois, levels, *feats, output_height: int = 1,
                              output_width: int = 1, sampling_ratio: int = 0, aligned: int = 1,
                              clockwise: int = 0, spatial_scales=()):
    """Each rotated box pooled with MMCVRoIAlignRotated from the feature map its level names.

    Args:
        rois: [R, 6] rows [batch_id, cx, cy, w, h, theta] (theta in radians,
            counter-clockwise unless ``clockwise``), float32 or float64.
        levels: [R] int32 or int64, the feature map of each box (outside 0 .. L-1: output 0).
        *feats: [N, C, H_l, W_l], one per level (1 to MAX_LEVELS), rois' dtype.
        output_height: the output grid's rows (>= 1).
        output_width: its columns (>= 1).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset of the centre.
        clockwise: 1: theta turns clockwise.
        spatial_scales: the scale of each level.

    Returns:
        [R, C, output_height, output_width] in the order of the rois.
    """
    L = len(feats)
    spec, a = resolve_levels(SPECS, "PyramidRotatedRoIAlign", L, "spatial_scales",
                             spatial_scales, "spatial_scale_{}",
                             dict(output_height=output_height, output_width=output_width,
                                  sampling_ratio=sampling_ratio, aligned=aligned,
                                  clockwise=clockwise))
    op = spec.name
    X = check_levels(op, feats)
    rois = rows_no_level_unread(rois, levels, L)
    rois, batch, _ = check_batch_rois(op, "rois", rois, X[0], 6)
    level = int_vector(op, "levels", levels, rois.shape[0], "[R] = [{}] (one level per box)")
    check_output_size(spec, a, rois.shape[0], X[0].shape[1])
    level = level.astype("intp")
    level[(level < 0) | (level >= L)] = L  # no level: a row of zeros
    scale = level_scales([a[f"spatial_scale_{i}"] for i in range(L)], level, rois.dtype)[:, 0]
    check_rotated_sizes(op, rois, scale, bool(a["aligned"]))
    ph, pw = a["output_height"], a["output_width"]
    rows = rotated_rows(rois, batch, scale, ph, pw, a["sampling_ratio"], bool(a["aligned"]),
                        bool(a["clockwise"]))
    try:
        return compute_by_level(steps.align_rotated, X, level=level, rows=rows, ph=ph, pw=pw)
    except BoxError as e:  # (the step names the single-level op)
        raise e.placed(op=op) from None


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=pyramid_rotated_roi_align, definition=definition,
    # the nodes PyramidRotatedRoIAlign_L1..L6 (inputs rois, levels, the maps) hold
    # spatial_scale_{l}
    node=level_node(pyramid_rotated_roi_align, "spatial_scales", "spatial_scale_{}",
                    leading=2),
    steps=(steps.align_rotated,),
    forms=level_forms(SPECS, "ort-roi convert (MMRotate's RotatedSingleRoIExtractor as "
                      "MMDeploy's onnxruntime config exports it)",
                      "MMCVRoIAlignRotated per level (OpenVINO, aligned=1; a literal loop of "
                      "mmcv's kernel)"),
)
