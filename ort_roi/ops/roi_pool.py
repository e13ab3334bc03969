"""RoIPool: Paddle roi_pool, ROIPooling max with boxes grouped per image by counts."""

from __future__ import annotations

import numpy as np

from ..definitions.pooling import roi_pool as definition
from ..kernels import small as few
from ..kernels.checks import check_counted_boxes, check_features, check_output_size, \
    few_counted, quiet
from ..kernels.dispatch import compute, steps
from ..spec import DOMAIN, FEATURE_MAP, NodeForm, Op, OpSpec, Output, counted_boxes, pooled_attrs, \
    spatial_scale_attr

SPEC = OpSpec(
    name="RoIPool",
    source="Paddle roi_pool",
    doc="Max pooling of each box onto a pooled_height x pooled_width grid "
        "(arithmetic of ROIPooling max); boxes grouped per image by boxes_num.",
    inputs=(FEATURE_MAP, *counted_boxes()),
    attrs=(*pooled_attrs(), spatial_scale_attr()),
    outputs=(Output("Y", "[R, C, PH, PW]"),),
    pooled=("pooled_height", "pooled_width"),
)


@quiet
def roi_pool(X: np.ndarray, boxes: np.ndarray, boxes_num: np.ndarray, *,
             pooled_height: int = 1, pooled_width: int = 1,
             spatial_scale: float = 1.0) -> np.ndarray:
    """Max-pool each box of ``X`` onto a pooled grid (ROIPooling max's arithmetic).

    Args:
        X: [N, C, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        boxes: [R, 4] rows [x1, y1, x2, y2], X's dtype.
        boxes_num: [N] int32 or int64, the boxes of each image in order (sums to R).
        pooled_height: the output grid's rows (>= 1).
        pooled_width: its columns (>= 1).
        spatial_scale: multiplies box coordinates onto X (> 0).

    Returns:
        [R, C, pooled_height, pooled_width] of X's dtype. Raises RoiOpError on bad input.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                          spatial_scale=spatial_scale))
    X = check_features(op, X)
    boxes, batch = check_counted_boxes(op, ("boxes", "boxes_num"), boxes, boxes_num, X)
    check_output_size(SPEC, a, boxes.shape[0], X.shape[1])
    return compute(steps.max_pool, X, batch=batch, boxes=boxes, ph=a["pooled_height"],
                   pw=a["pooled_width"], spatial_scale=a["spatial_scale"])


def small(X, boxes, boxes_num, *, pooled_height: int, pooled_width: int,
          spatial_scale: float):
    """``roi_pool`` of a small call (resolved attributes), or None (``kernels/small.py``)."""
    got = few_counted(X, boxes, boxes_num)
    if got is None:
        return None
    return few.max_pool(X, *got, pooled_h=pooled_height,
                        pooled_w=pooled_width, spatial_scale=spatial_scale)


ENTRY = Op(
    own=True, specs=(SPEC,), kernel=roi_pool, definition=definition, steps=(steps.max_pool,),
    small=small,
    forms=(NodeForm(DOMAIN, "RoIPool", SPEC, "ort_roi graphs (ort_roi.builders)",
                    "Paddle roi_pool"),),
)
