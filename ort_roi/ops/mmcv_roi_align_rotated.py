"""MMCVRoIAlignRotated: mmcv roi_align_rotated, CPU forward (mmrotate through mmdeploy).

Per box [batch, cx, cy, w, h, theta], in T as mmcv computes it (geometry.rotated_rows): the
centre scaled and shifted by -0.5 when ``aligned``, the size scaled (at least 1 when not
aligned), theta negated when ``clockwise``. Bin (ph, pw) holds gh x gw samples laid out about
the centre, yy = -h/2 + ph*bin_h + (iy + 0.5)*bin_h/gh (xx likewise), rotated:
y = yy*cos - xx*sin + cy, x = yy*sin + xx*cos + cx. Each sample is RoIAlign's bilinear sample
(0 beyond one pixel off the map); the output is the mean over max(gh*gw, 1). The adaptive grid
is mmcv's ceilf(h / pooled_h): the quotient is rounded to float32 first, also for float64.
"""

from __future__ import annotations

import numpy as np

from ..definitions.rotated import mmcv_roi_align_rotated as definition
from ..geometry import rotated_rows
from ..kernels.checks import check_batch_rois, check_features, check_output_size, \
    check_rotated_sizes, quiet
from ..kernels.dispatch import compute, steps
from ..spec import CLOCKWISE, ROTATED_ROIS, Input, NodeForm, Op, OpSpec, Output, \
    aligned_attr, pooled_attrs, sampling_ratio_attr, spatial_scale_attr

SPEC = OpSpec(
    name="MMCVRoIAlignRotated",
    source="mmcv roi_align_rotated (mmrotate, through mmdeploy)",
    doc="RoIAlign over rotated boxes [batch_id, cx, cy, w, h, theta]: the bin grid is laid "
        "out about the centre and rotated by theta (radians; -theta when clockwise); mean "
        "of the bilinear samples.",
    inputs=(Input("input", "T", "[N, C, H, W]", "feature map"),
            ROTATED_ROIS),
    attrs=(*pooled_attrs("output_height", "output_width"), spatial_scale_attr(),
           sampling_ratio_attr(0), aligned_attr(1, "1: half-pixel offset of the centre"),
           CLOCKWISE),
    outputs=(Output("output", "[R, C, PH, PW]"),),
    pooled=("output_height", "output_width"),
    box_cols=6,
    domain="mmdeploy",
)

_TRANSCRIBED = "a literal loop of mmcv's CPU kernel (tests/literal.py)"


@quiet
def mmcv_roi_align_rotated(input: np.ndarray, rois: np.ndarray, *, output_height: int = 1,
                           output_width: int = 1, spatial_scale: float = 1.0,
                           sampling_ratio: int = 0, aligned: int = 1,
                           clockwise: int = 0) -> np.ndarray:
    """Rotated RoIAlign, as mmcv's roi_align_rotated.

    Args:
        input: [N, C, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        rois: [R, 6] rows [batch_id, cx, cy, w, h, theta] (theta in radians,
            counter-clockwise unless ``clockwise``), input's dtype.
        output_height: the output grid's rows (>= 1).
        output_width: its columns (>= 1).
        spatial_scale: multiplies box coordinates onto the input (> 0).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset of the centre.
        clockwise: 1: theta turns clockwise.

    Returns:
        [R, C, output_height, output_width] of the input's dtype.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(
        output_height=output_height, output_width=output_width, spatial_scale=spatial_scale,
        sampling_ratio=sampling_ratio, aligned=aligned, clockwise=clockwise))
    X = check_features(op, input, "input")
    rois, batch, _ = check_batch_rois(op, "rois", rois, X, 6)
    ph, pw = a["output_height"], a["output_width"]
    check_rotated_sizes(op, rois, a["spatial_scale"], bool(a["aligned"]))
    check_output_size(SPEC, a, rois.shape[0], X.shape[1])
    rows = rotated_rows(rois, batch, a["spatial_scale"], ph, pw, a["sampling_ratio"],
                        bool(a["aligned"]), bool(a["clockwise"]))
    return compute(steps.align_rotated, X, rows=rows, ph=ph, pw=pw)


ENTRY = Op(
    specs=(SPEC,), kernel=mmcv_roi_align_rotated, definition=definition,
    steps=(steps.align_rotated,),
    forms=(NodeForm("mmdeploy", "MMCVRoIAlignRotated", SPEC, "mmrotate through mmdeploy",
                    "OpenVINO (reads it from ONNX, aligned=1); " + _TRANSCRIBED),
           NodeForm("mmcv", "MMCVRoIAlignRotated", SPEC, "mmrotate / mmcv",
                    "OpenVINO (aligned=1); " + _TRANSCRIBED)),
)
