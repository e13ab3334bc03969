"""RoIAlign: Paddle roi_align (detectron2 / torchvision semantics)."""

from __future__ import annotations

import numpy as np

from ..definitions.align import roi_align as definition
from ..geometry import roi_align_geometry
from ..kernels import small as few
from ..kernels.checks import check_counted_boxes, check_features, compute_align, few_counted, quiet
from ..kernels.dispatch import steps
from ..spec import DOMAIN, FEATURE_MAP, NodeForm, Op, OpSpec, Output, aligned_attr, counted_boxes, \
    pooled_attrs, sampling_ratio_attr, spatial_scale_attr

SPEC = OpSpec(
    name="RoIAlign",
    source="Paddle roi_align (detectron2 / torchvision semantics)",
    doc="Average of bilinear samples on a regular grid in each bin; aligned=1 shifts by "
        "half a pixel; sampling_ratio <= 0 picks ceil(bin size) samples per bin.",
    inputs=(FEATURE_MAP, *counted_boxes()),
    attrs=(*pooled_attrs(), spatial_scale_attr(), sampling_ratio_attr(-1),
           aligned_attr(1, "1: pixel model with half-pixel offset (detectron2 ROIAlignV2)")),
    outputs=(Output("Y", "[R, C, PH, PW]"),),
    pooled=("pooled_height", "pooled_width"),
)


@quiet
def roi_align(X: np.ndarray, boxes: np.ndarray, boxes_num: np.ndarray, *,
              pooled_height: int = 1, pooled_width: int = 1, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: int = 1) -> np.ndarray:
    """The RoIAlign kernel, which computes: the mean of bilinear samples over each bin of each box.

    Paddle's roi_align. The ONNX node is ``ort_roi.builders.roi_align``; the readable
    definition it is held to, ``ort_roi.definitions.align.roi_align``.

    Box edges are scaled by ``spatial_scale`` and shifted by -0.5 when ``aligned``; without
    ``aligned`` boxes are at least 1x1. Each bin holds ``sampling_ratio`` x
    ``sampling_ratio`` samples, or ceil(bin size) per side when ``sampling_ratio`` <= 0.
    Samples beyond one pixel outside the map contribute 0; a bin with no samples gives 0.

    Args:
        X: [N, C, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        boxes: [R, 4] rows [x1, y1, x2, y2], X's dtype.
        boxes_num: [N] int32 or int64, the boxes of each image in order (sums to R).
        pooled_height: the output grid's rows (>= 1).
        pooled_width: its columns (>= 1).
        spatial_scale: multiplies box coordinates onto X (> 0).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset (detectron2's ROIAlignV2); 0: legacy.

    Returns:
        [R, C, pooled_height, pooled_width] of X's dtype. Raises RoiOpError on bad input.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                          spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                          aligned=aligned))
    X = check_features(op, X)
    boxes, batch = check_counted_boxes(op, ("boxes", "boxes_num"), boxes, boxes_num, X)
    return compute_align(steps.align, X, spec=SPEC, attrs=a, batch=batch, boxes=boxes,
                         geometry=roi_align_geometry(a["aligned"]), name="boxes")


def small(X, boxes, boxes_num, *, pooled_height: int, pooled_width: int,
          spatial_scale: float, sampling_ratio: int, aligned: int):
    """``roi_align`` of a small call (resolved attributes), or None (``kernels/small.py``)."""
    got = few_counted(X, boxes, boxes_num)
    if got is None:
        return None
    return few.align(X, got[0], boxes, got[1], pooled_h=pooled_height, pooled_w=pooled_width,
                     spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                     geometry=roi_align_geometry(aligned))


ENTRY = Op(
    own=True, specs=(SPEC,), kernel=roi_align, definition=definition, steps=(steps.align,),
    small=small,
    forms=(NodeForm(DOMAIN, "RoIAlign", SPEC, "ort_roi graphs (ort_roi.builders)",
                    "Paddle roi_align"),),
)
