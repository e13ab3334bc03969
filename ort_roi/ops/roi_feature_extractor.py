"""ROIFeatureExtractor_L{L}: OpenVINO's ExperimentalDetectronROIFeatureExtractor (CPU plugin),
FPN RoIAlign over L levels: rois [R, 4] of image 0; level clamp(floor(log2(sqrt(area) / 224
+ 1e-6) + 2), 0, L-1) in float32, a box of area <= 0 on no level (its output stays 0);
RoIAlign at scale 1/scale_l whose box sizes are at least 1 also when aligned; second output
the rois. The exported node (a variable number of inputs, a list attribute) is rewritten into
the fixed-arity op of its number of levels by convert and the front door."""

from __future__ import annotations

import numpy as np

from ..definitions.multilevel import roi_feature_extractor_levels as definition
from ..geometry import LEGACY, OPENVINO_ALIGNED, align_bins, level_scales
from ..levels import openvino_levels
from ..kernels.checks import check_box_sizes, check_boxes, check_levels, check_output_size, \
    level_node, quiet, resolve_levels
from ..kernels.dispatch import compute, steps
from ..spec import MAX_LEVELS, MAX_SAMPLING_RATIO, Attr, Input, NodeForm, Op, OpSpec, Output, \
    aligned_attr, level_forms, level_inputs, pooled_attr, pyramid_layout


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"ROIFeatureExtractor_L{L}",
        source="OpenVINO ExperimentalDetectronROIFeatureExtractor-6 (CPU plugin)",
        doc=f"FPN RoIAlign over {L} level(s): each box [x1, y1, x2, y2] of image 0 to the level "
            "clamp(floor(log2(sqrt(area) / 224 + 1e-6) + 2), 0, L-1) (area <= 0: none, "
            "output 0), pooled from it with RoIAlign at scale 1/scale_l (sizes at least 1); "
            "second output: the rois.",
        inputs=(Input("rois", "T", "[R, 4]", "rows [x1, y1, x2, y2] (image 0)"),)
        + level_inputs(L),
        attrs=(pooled_attr("output_size", 7, "output height and width"),
               Attr("sampling_ratio", int, 2, max=MAX_SAMPLING_RATIO,
                    doc="samples per bin side; <= 0: adaptive"),
               aligned_attr(0))
        + tuple(Attr(f"scale_{i}", int, None, min=1, doc=f"stride of level {i} (pyramid_scales)")
                for i in range(L)),
        outputs=(Output("output", "[R, C, output_size, output_size]"),
                 Output("rois_out", "[R, 4]")),
        pooled=("output_size", "output_size"),
        **pyramid_layout(1, L),
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


@quiet
def roi_feature_extractor(rois, *feats, output_size: int = 7, sampling_ratio: int = 2,
                          aligned: int = 0, pyramid_scales=(4, 8, 16, 32)):
    """OpenVINO's ExperimentalDetectronROIFeatureExtractor.

    Args:
        rois: [R, 4] rows [x1, y1, x2, y2] of image 0, float32 or float64.
        *feats: the levels [1, C, H_l, W_l], finest first (1 to MAX_LEVELS), rois' dtype.
        output_size: the output grid (>= 1).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset.
        pyramid_scales: the stride of each level.

    Returns:
        (features [R, C, output_size, output_size], rois [R, 4]).
    """
    L = len(feats)
    spec, a = resolve_levels(SPECS, "ExperimentalDetectronROIFeatureExtractor", L,
                             "pyramid_scales", pyramid_scales, "scale_{}",
                             dict(output_size=output_size, sampling_ratio=sampling_ratio,
                                  aligned=aligned))
    op = spec.name
    X = check_levels(op, feats, batch=1)
    boxes = check_boxes(op, "rois", rois, X[0], 4)
    check_output_size(spec, a, boxes.shape[0], X[0].shape[1])
    level = openvino_levels(boxes, L)
    scale = [float(np.float32(1) / np.float32(a[f"scale_{i}"])) for i in range(L)]  # 1.0f / s
    check_box_sizes(op, "rois", boxes, max(scale))
    p = a["output_size"]
    bins = align_bins(boxes, level_scales(scale, level, boxes.dtype),
                      OPENVINO_ALIGNED if a["aligned"] else LEGACY, p, p)
    out = compute(steps.align_levels, X, batch=np.zeros(boxes.shape[0], np.intp),
                  start=bins.start, bin_size=bins.size, level=level, ph=p, pw=p,
                  sampling_ratio=a["sampling_ratio"], mode=0)
    return out, boxes.copy()


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=roi_feature_extractor, definition=definition,
    # the nodes ROIFeatureExtractor_L1..L6 (convert writes them) hold the strides as scale_{l}
    node=level_node(roi_feature_extractor, "pyramid_scales", "scale_{}"),
    steps=(steps.align_levels,),
    forms=level_forms(SPECS, "ort-roi convert (from OpenVINO's ROI feature extractor)",
                      "OpenVINO")
    + (NodeForm("org.openvinotoolkit", "ExperimentalDetectronROIFeatureExtractor", SPECS[4],
                "mmdeploy's OpenVINO backend, OpenVINO Training Extensions",
                "OpenVINO (reads it from ONNX)", registered=False, levels=SPECS,
                split={"pyramid_scales": "scale_{}"}, guard_levels=4,
                drop=("image_id", "distribute_rois_between_levels", "preserve_rois_order")),),
)
