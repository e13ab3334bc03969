"""ROIPooling: OpenVINO ROIPooling-1 (max is also MXNet ROIPooling and ONNX MaxRoiPool)."""

from __future__ import annotations

import numpy as np

from ..definitions.pooling import roi_pooling as definition
from ..kernels import small as few
from ..kernels.checks import batch_from_column, check_boxes, check_features, check_output_size, \
    few_batch_rois, quiet
from ..kernels.dispatch import compute, steps
from ..spec import BATCH_ROIS, DOMAIN, FEATURE_MAP, SCALE_DOC, Attr, NodeForm, Op, OpSpec, Output, \
    pooled_attrs, spatial_scale_attr

SPEC = OpSpec(
    name="ROIPooling",
    source="OpenVINO ROIPooling-1 (max also MXNet ROIPooling, ONNX MaxRoiPool)",
    doc="Max or bilinear pooling of each box onto a pooled_h x pooled_w grid; "
        "rows of rois carry their batch index.",
    inputs=(FEATURE_MAP, BATCH_ROIS),
    attrs=(*pooled_attrs("pooled_h", "pooled_w", None),
           spatial_scale_attr(None, SCALE_DOC + " (method=max; ignored by bilinear)"),
           Attr("method", str, "max", choices=("max", "bilinear"),
                doc="max: max over integer bins; bilinear: one bilinear sample per bin, "
                    "boxes normalized to [0, 1]")),
    outputs=(Output("Y", "[R, C, PH, PW]"),),
    pooled=("pooled_h", "pooled_w"),
    box_cols=5,
)


@quiet
def roi_pooling(X: np.ndarray, rois: np.ndarray, *, pooled_h: int, pooled_w: int,
                spatial_scale: float, method: str = "max") -> np.ndarray:
    """Pool each row of ``rois`` of ``X`` onto a pooled_h x pooled_w grid.

    method="max": box edges are scaled by ``spatial_scale`` and rounded half away from
    zero; bin p covers [floor(p*bin), ceil((p+1)*bin)) from the box start, clipped to the
    map; the output is the bin's maximum, 0 for an empty bin.
    method="bilinear": coordinates are normalized to [0, 1] (``spatial_scale`` unused);
    each output is one bilinear sample, 0 outside the map.

    Args:
        X: [N, C, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        rois: [R, 5] rows [batch_id, x1, y1, x2, y2], X's dtype.
        pooled_h: the output grid's rows (>= 1).
        pooled_w: its columns (>= 1).
        spatial_scale: multiplies box coordinates onto X (> 0).
        method: "max" or "bilinear".

    Returns:
        [R, C, pooled_h, pooled_w] of X's dtype. Raises RoiOpError on bad input.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(pooled_h=pooled_h, pooled_w=pooled_w, spatial_scale=spatial_scale,
                          method=method))
    X = check_features(op, X)
    rois = check_boxes(op, "rois", rois, X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    check_output_size(SPEC, a, rois.shape[0], X.shape[1])
    if a["method"] == "max":
        return compute(steps.max_pool, X, batch=batch, boxes=rois[:, 1:], ph=a["pooled_h"],
                       pw=a["pooled_w"], spatial_scale=a["spatial_scale"])
    return compute(steps.bilinear_pool, X, batch=batch, boxes=rois[:, 1:], ph=a["pooled_h"],
                   pw=a["pooled_w"])


def small(X, rois, *, pooled_h: int, pooled_w: int, spatial_scale: float, method: str):
    """``roi_pooling`` of a small call (resolved attributes), or None (``kernels/small.py``)."""
    got = few_batch_rois(X, rois)
    if got is None:
        return None
    if method == "max":
        return few.max_pool(X, *got, pooled_h=pooled_h, pooled_w=pooled_w,
                            spatial_scale=spatial_scale)
    return few.bilinear_pool(X, got[0], rois[:, 1:], pooled_h=pooled_h, pooled_w=pooled_w)


ENTRY = Op(
    own=True, specs=(SPEC,), kernel=roi_pooling, definition=definition,
    steps=(steps.max_pool, steps.bilinear_pool), small=small,
    forms=(NodeForm(DOMAIN, "ROIPooling", SPEC, "ort_roi graphs (ort_roi.builders)",
                    "MXNet ROIPooling (max), OpenVINO ROIPooling-1 (bilinear)"),
           NodeForm("", "MaxRoiPool", SPEC, "ONNX graphs (MaxRoiPool-1)",
                    "onnxruntime's MaxRoiPool, MXNet ROIPooling", registered=False,
                    defaults={"spatial_scale": 1.0},
                    split={"pooled_shape": ("pooled_h", "pooled_w")}, fixed={"method": "max"})),
)
