"""ONNX RoiAlign computed by ort_roi (``ort_roi::RoiAlign``, what ``ort-roi convert`` writes
for the standard node).

Same inputs and attributes as ONNX RoiAlign. mode "avg" is RoIAlign: half_pixel is
aligned=1, output_half_pixel (opset 10's rule) aligned=0, sampling_ratio 0 adaptive. mode
"max" is the largest bilinear sample of each bin as mmcv computes it (MMCVRoiAlign max; what
exporters mean), not onnxruntime's maximum of weighted corners (onnxruntime issue 6146);
mode "onnx_max" is onnxruntime's (and onnx's conformance data's): per bin, the largest over
its samples of max(w1*v1, w2*v2, w3*v3, w4*v4).
"""

from __future__ import annotations

import numpy as np

from ..definitions.align import onnx_roi_align as definition
from ..geometry import MMCV_EMPTY_MAX, onnx_geometry
from ..kernels import small as few
from ..kernels.checks import batch_from_indices, check_boxes, check_features, compute_align, \
    few_indexed, quiet
from ..kernels.dispatch import steps
from ..spec import DOMAIN, FEATURE_MAP, Attr, Input, NodeForm, Op, OpSpec, Output, pooled_attrs, \
    sampling_ratio_attr, spatial_scale_attr

SPEC = OpSpec(
    name="RoiAlign",
    source="ONNX RoiAlign (opsets 10, 16, 22: torchvision, mmdeploy, paddle2onnx)",
    doc="ONNX RoiAlign with its inputs and attributes: avg is RoIAlign (half_pixel = "
        "aligned, output_half_pixel = not aligned, sampling_ratio 0 adaptive); max is the "
        "largest bilinear sample of each bin (mmcv, OpenVINO), onnx_max onnxruntime's max "
        "of weighted corners (convert --roialign-max onnx).",
    inputs=(FEATURE_MAP,
            Input("rois", "T", "[R, 4]", "rows [x1, y1, x2, y2]"),
            Input("batch_indices", "I", "[R]", "image of each box")),
    attrs=(Attr("coordinate_transformation_mode", str, "half_pixel",
                choices=("half_pixel", "output_half_pixel"),
                doc="half_pixel: shift by -0.5 (aligned); output_half_pixel: opset 10's rule"),
           Attr("mode", str, "avg", choices=("avg", "max", "onnx_max"),
                doc="avg: mean of the samples; max: the largest sample; onnx_max: the "
                    "largest weighted corner of any sample (onnxruntime's RoiAlign max)"),
           *pooled_attrs("output_height", "output_width"),
           sampling_ratio_attr(0, least=0),
           spatial_scale_attr()),
    outputs=(Output("Y", "[R, C, PH, PW]"),),
    pooled=("output_height", "output_width"),
)

_ORACLE = ("avg: onnxruntime's RoiAlign; max: a literal loop of mmcv's CPU kernel "
           "(tests/literal.py)")


@quiet
def onnx_roi_align(X: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, *,
                   coordinate_transformation_mode: str = "half_pixel", mode: str = "avg",
                   output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
                   spatial_scale: float = 1.0) -> np.ndarray:
    """ONNX RoiAlign, with mode "max" read as mmcv's (see the module).

    Args:
        X: [N, C, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        rois: [R, 4] rows [x1, y1, x2, y2], X's dtype.
        batch_indices: [R] int32 or int64, the image of each box.
        coordinate_transformation_mode: "half_pixel" (aligned) or "output_half_pixel".
        mode: "avg", "max" (mmcv's) or "onnx_max" (onnxruntime's).
        output_height: the output grid's rows (>= 1).
        output_width: its columns (>= 1).
        sampling_ratio: samples per bin side; 0: adaptive.
        spatial_scale: multiplies box coordinates onto X (> 0).

    Returns:
        [R, C, output_height, output_width] of X's dtype.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(
        coordinate_transformation_mode=coordinate_transformation_mode, mode=mode,
        output_height=output_height, output_width=output_width,
        sampling_ratio=sampling_ratio, spatial_scale=spatial_scale))
    X = check_features(op, X)
    rois = check_boxes(op, "rois", rois, X, 4)
    batch = batch_from_indices(op, "batch_indices", batch_indices, X.shape[0], rois.shape[0])
    geometry = onnx_geometry(a["coordinate_transformation_mode"])
    if a["mode"] == "avg":
        return compute_align(steps.align, X, spec=SPEC, attrs=a, batch=batch, boxes=rois,
                             geometry=geometry, name="rois")
    return compute_align(steps.align_max, X, spec=SPEC, attrs=a, batch=batch, boxes=rois,
                         geometry=geometry, name="rois",
                         empty=None if a["mode"] == "onnx_max" else MMCV_EMPTY_MAX)


def small(X, rois, batch_indices, *, coordinate_transformation_mode: str, mode: str,
          output_height: int, output_width: int, sampling_ratio: int, spatial_scale: float):
    """``onnx_roi_align`` of a small call (resolved attributes; mode avg), or None
    (``kernels/small.py``)."""
    got = None if mode != "avg" else few_indexed(X, rois, batch_indices)
    if got is None:
        return None
    return few.align(X, got[0], rois, got[1], pooled_h=output_height, pooled_w=output_width,
                     spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                     geometry=onnx_geometry(coordinate_transformation_mode))


ENTRY = Op(
    specs=(SPEC,), kernel=onnx_roi_align, definition=definition,
    steps=(steps.align, steps.align_max), small=small,
    forms=(NodeForm(DOMAIN, "RoiAlign", SPEC, "ort-roi convert (from ONNX RoiAlign)", _ORACLE),
           NodeForm("", "RoiAlign", SPEC, "torchvision, mmdeploy (onnxruntime >= 0.4), "
                    "paddle2onnx", _ORACLE, registered=False, two_maxes=True,
                    before_opset=(16, {"coordinate_transformation_mode": "output_half_pixel"}))),
)
