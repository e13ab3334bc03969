"""ROIPooling (OpenVINO ROIPooling-1; max is also MXNet ROIPooling and ONNX MaxRoiPool)."""

from __future__ import annotations

import numpy as np

from ..specs import ROI_POOLING
from .checks import batch_from_column, check_boxes, check_features, quiet
from .dispatch import compute


@quiet
def roi_pooling(X: np.ndarray, rois: np.ndarray, *, pooled_h: int, pooled_w: int,
                spatial_scale: float, method: str = "max") -> np.ndarray:
    """Pool each row of ``rois`` ([batch_id, x1, y1, x2, y2]) of ``X`` [N, C, H, W].

    method="max": box edges are scaled by ``spatial_scale`` and rounded half away from
    zero; bin p covers [floor(p*bin), ceil((p+1)*bin)) from the box start, clipped to the
    map; the output is the bin's maximum, 0 for an empty bin.
    method="bilinear": coordinates are normalized to [0, 1] (``spatial_scale`` unused);
    each output is one bilinear sample, 0 outside the map.

    Returns [R, C, pooled_h, pooled_w] of X's dtype. Raises RoiOpError on bad input.
    """
    op = ROI_POOLING.name
    a = ROI_POOLING.resolve(dict(pooled_h=pooled_h, pooled_w=pooled_w,
                                 spatial_scale=spatial_scale, method=method))
    X = check_features(op, X)
    rois = check_boxes(op, "rois", rois, X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    if a["method"] == "max":
        return compute("max_pool", X, batch, rois[:, 1:], a["pooled_h"], a["pooled_w"],
                       a["spatial_scale"])
    return compute("bilinear_pool", X, batch, rois[:, 1:], a["pooled_h"], a["pooled_w"])
