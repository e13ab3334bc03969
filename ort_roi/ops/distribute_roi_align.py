"""DistributeRoIAlign_L{L}: PaddleDetection's FPN RoI stage in one op: Paddle's
distribute_fpn_proposals, roi_align per level, the levels concatenated and gathered back into
the rois' order (ppdet's RoIAlign extractor), each roi pooled once from its level and written
straight to its row. ort-roi convert (and export-paddle) fuse the stage export-paddle writes
(graph/paddle.py). One op per number of levels L = max_level - min_level + 1, as
DistributeFpnProposals_L{L}."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..definitions.paddle_stage import distribute_roi_align_levels as definition
from ..errors import RoiOpError
from ..geometry import align_bins, level_scales, roi_align_geometry
from ..kernels.checks import check_box_sizes, check_counted_boxes, check_level_count, \
    check_levels, check_output_size, level_node, quiet, resolve_levels
from ..kernels.dispatch import compute, steps
from ..spec import COUNTS_DOC, MAX_LEVELS, Attr, Dims, Input, Op, OpSpec, Output, aligned_attr, \
    level_forms, level_inputs, level_scale_attrs, pooled_attrs, pooled_shapes, pyramid_layout, \
    sampling_ratio_attr


def stage_shapes(spec: OpSpec, dims: Sequence[Dims], attrs: Mapping[str, Any],
                 values: Mapping[int, np.ndarray]) -> list[list]:
    """[R, C, PH, PW] (R of fpn_rois, C of feat_0); RoiOpError where the levels or known shapes
    contradict the op."""
    if attrs.get("min_level") is not None and attrs.get("max_level") is not None:
        check_level_count(spec.name, attrs["min_level"], attrs["max_level"], len(spec.features),
                          "the op's feature maps")
    if dims[1] is not None and len(dims[1]) != 1:
        raise RoiOpError(spec.name, "input 'rois_num'",
                         f"must have rank 1 [N], got rank {len(dims[1])}")
    return pooled_shapes(spec, dims, attrs, values)


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"DistributeRoIAlign_L{L}",
        source="PaddleDetection's FPN RoI stage (distribute_fpn_proposals, roi_align per "
               "level, concat, gather by restore_index) fused (ort-roi convert, export-paddle)",
        doc=f"Each roi [x1, y1, x2, y2] sent to its level as Paddle's distribute_fpn_proposals "
            f"does ({L} levels: floor(log2(sqrt(area) / refer_scale + 1e-6) + refer_level) "
            "clamped to [min_level, max_level]) and pooled there by Paddle's roi_align "
            "(RoIAlign) from feat_l at spatial_scale_l, its image from rois_num; the output in "
            "the rois' order: what the levels' RoIAlign results concatenated and gathered by "
            "restore_index are.",
        inputs=(Input("fpn_rois", "T", "[R, 4]", "rois [x1, y1, x2, y2], image by image"),
                Input("rois_num", "I", "[N]", COUNTS_DOC)) + level_inputs(L),
        attrs=(Attr("min_level", int, None, doc="the level of feat_0"),
               Attr("max_level", int, None, doc=f"the level of feat_{L - 1}: min_level + "
                                                f"{L - 1}"),
               Attr("refer_level", int, 4, doc="the level of a roi of side refer_scale"),
               Attr("refer_scale", int, 224, min=1, doc="the side of a roi of refer_level"),
               Attr("pixel_offset", int, 0, choices=(0, 1),
                    doc="1: areas count +1 pixel per side (the level rule only)"),
               *pooled_attrs(), sampling_ratio_attr(-1),
               aligned_attr(1, "1: pixel model with half-pixel offset (detectron2 ROIAlignV2)"))
        + level_scale_attrs(L, "spatial_scale_{}", "multiplies roi coordinates onto feat_{}"),
        outputs=(Output("Y", "[R, C, PH, PW]", doc="each roi pooled at its level, in the rois' "
                                                   "order"),),
        shapes=stage_shapes,
        pooled=("pooled_height", "pooled_width"),
        **pyramid_layout(2, L),
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


@quiet
def distribute_roi_align(fpn_rois: np.ndarray, rois_num: np.ndarray, *feats: np.ndarray,
                         min_level: int, max_level: int, refer_level: int = 4,
                         refer_scale: int = 224, pixel_offset: int = 0,
                         pooled_height: int = 1, pooled_width: int = 1,
                         sampling_ratio: int = -1, aligned: int = 1,
                         spatial_scales: Sequence[float] = ()) -> np.ndarray:
    """PaddleDetection's FPN RoI stage in one pass, bit for bit what DistributeFpnProposals,
    a RoIAlign per level, Concat and Gather(restore_index) compute: each roi's level by
    DistributeFpnProposals' rule (the same host step), then RoIAlign's arithmetic (the same
    bins and align step) from that level's map, written to the roi's row.

    Args:
        fpn_rois: [R, 4] float32 or float64 rows [x1, y1, x2, y2], image by image (finite).
        rois_num: [N] int32 or int64, the rois of each image (>= 0, sums to R; N of the maps).
        *feats: L maps [N, C, H_l, W_l] of fpn_rois' dtype, level min_level first (L = 1 ..
            MAX_LEVELS = max_level - min_level + 1).
        min_level: the level of feats[0].
        max_level: the level of feats[-1].
        refer_level: the level a roi of side refer_scale goes to.
        refer_scale: that side (>= 1).
        pixel_offset: 1: areas count +1 pixel per side (the level rule; PaddleDetection 0).
        pooled_height: the output grid's rows (>= 1).
        pooled_width: its columns (>= 1).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset (Paddle's default); 0: legacy.
        spatial_scales: the scale of each level (> 0), e.g. 1/4 .. 1/32.

    Returns:
        [R, C, pooled_height, pooled_width] of the maps' dtype, in the rois' order. Raises
        RoiOpError on bad input.
    """
    L = len(feats)
    spec, a = resolve_levels(SPECS, "DistributeRoIAlign", L, "spatial_scales", spatial_scales,
                             "spatial_scale_{}",
                             dict(min_level=min_level, max_level=max_level,
                                  refer_level=refer_level, refer_scale=refer_scale,
                                  pixel_offset=pixel_offset, pooled_height=pooled_height,
                                  pooled_width=pooled_width, sampling_ratio=sampling_ratio,
                                  aligned=aligned))
    op = spec.name
    check_level_count(op, a["min_level"], a["max_level"], L, "the op's feature maps")
    X = check_levels(op, feats)
    rois, batch = check_counted_boxes(op, ("fpn_rois", "rois_num"), fpn_rois, rois_num, X[0])
    rois = np.ascontiguousarray(rois)
    check_output_size(spec, a, rois.shape[0], X[0].shape[1])
    level = compute(steps.fpn_levels, rois, min_level=a["min_level"], max_level=a["max_level"],
                    refer_level=a["refer_level"], refer_scale=a["refer_scale"],
                    pixel_offset=bool(a["pixel_offset"])) - a["min_level"]
    scale = level_scales([a[f"spatial_scale_{i}"] for i in range(L)], level, rois.dtype)
    check_box_sizes(op, "fpn_rois", rois, scale, level, a["min_level"])  # at each level
    ph, pw = a["pooled_height"], a["pooled_width"]
    bins = align_bins(rois, scale, roi_align_geometry(a["aligned"]), ph, pw)
    return compute(steps.align_levels, X, batch=batch, start=bins.start, bin_size=bins.size,
                   level=level.astype(np.intp), ph=ph, pw=pw,
                   sampling_ratio=a["sampling_ratio"], mode=0)


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=distribute_roi_align, definition=definition,
    # the nodes DistributeRoIAlign_L1..L6 (inputs fpn_rois, rois_num, the maps) hold
    # spatial_scale_{l}
    node=level_node(distribute_roi_align, "spatial_scales", "spatial_scale_{}", leading=2),
    steps=(steps.fpn_levels, steps.align_levels),
    forms=level_forms(SPECS, "ort-roi convert / export-paddle (PaddleDetection's FPN RoI "
                      "stage as export-paddle writes it, fused)",
                      "Paddle distribute_fpn_proposals + roi_align + concat + gather"),
)
