"""MMCVRoiAlign: mmcv.ops.roi_align (mmdeploy's op for its onnxruntime, TensorRT and PPLNN
backends). Geometry is RoIAlign's (aligned shifts by half a pixel, adaptive grid
ceil(roi size / pooled size), samples beyond one pixel off the map are 0):
- mode "avg": the mean of the samples, exactly RoIAlign;
- mode "max": the largest sample value, each computed as mmcv does
  (w1*v1 + w2*v2 + w3*v3 + w4*v4); a bin without samples gives mmcv's initial -10000.
"""

from __future__ import annotations

import numpy as np

from ..definitions.align import mmcv_roi_align as definition
from ..geometry import MMCV_EMPTY_MAX, roi_align_geometry
from ..kernels.checks import check_batch_rois, check_features, compute_align, quiet
from ..kernels.dispatch import steps
from ..spec import BATCH_ROIS, Attr, Input, NodeForm, Op, OpSpec, Output, aligned_attr, \
    pooled_attrs, sampling_ratio_attr, spatial_scale_attr

SPEC = OpSpec(
    name="MMCVRoiAlign",
    source="mmdeploy MMCVRoiAlign (mmcv.ops.roi_align)",
    doc="RoIAlign over rows [batch_id, x1, y1, x2, y2]; mode avg: mean of the samples "
        "(= RoIAlign), max: largest sample (-10000 for a bin without samples, as mmcv).",
    inputs=(Input("input", "T", "[N, C, H, W]", "feature map"),
            BATCH_ROIS),
    attrs=(*pooled_attrs("output_height", "output_width"), spatial_scale_attr(),
           sampling_ratio_attr(0),
           Attr("mode", str, "avg", choices=("avg", "max"), doc="mean or max of the samples"),
           aligned_attr(1)),
    outputs=(Output("output", "[R, C, PH, PW]"),),
    pooled=("output_height", "output_width"),
    box_cols=5,
    domain="mmdeploy",
)

_TRANSCRIBED = "a literal loop of mmcv's CPU kernel (tests/literal.py)"


@quiet
def mmcv_roi_align(input: np.ndarray, rois: np.ndarray, *, output_height: int = 1,
                   output_width: int = 1, spatial_scale: float = 1.0,
                   sampling_ratio: int = 0, mode: str = "avg", aligned: int = 1) -> np.ndarray:
    """RoIAlign over rows [batch_id, x1, y1, x2, y2] of ``rois``, mean or max of the samples.

    Args:
        input: [N, C, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        rois: [R, 5] rows [batch_id, x1, y1, x2, y2], input's dtype.
        output_height: the output grid's rows (>= 1).
        output_width: its columns (>= 1).
        spatial_scale: multiplies box coordinates onto the input (> 0).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        mode: "avg" (mean of the samples) or "max" (the largest sample).
        aligned: 1: half-pixel offset.

    Returns:
        [R, C, output_height, output_width] of the input's dtype.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(output_height=output_height, output_width=output_width,
                          spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                          mode=mode, aligned=aligned))
    X = check_features(op, input, "input")
    _, batch, boxes = check_batch_rois(op, "rois", rois, X)
    geometry = roi_align_geometry(a["aligned"])
    if a["mode"] == "avg":
        return compute_align(steps.align, X, spec=SPEC, attrs=a, batch=batch, boxes=boxes,
                             geometry=geometry, name="rois")
    return compute_align(steps.align_max, X, spec=SPEC, attrs=a, batch=batch, boxes=boxes,
                         geometry=geometry, name="rois", empty=MMCV_EMPTY_MAX)


ENTRY = Op(
    specs=(SPEC,), kernel=mmcv_roi_align, definition=definition,
    steps=(steps.align, steps.align_max),
    forms=(NodeForm("mmdeploy", "MMCVRoiAlign", SPEC,
                    "mmdeploy (TensorRT >= 1.0, PPLNN, onnxruntime 0.1-0.3)",
                    "avg: Paddle roi_align; max: " + _TRANSCRIBED),
           NodeForm("mmcv", "MMCVRoiAlign", SPEC, "mmcv 1.x",
                    "avg: Paddle roi_align; max: " + _TRANSCRIBED)),
)
