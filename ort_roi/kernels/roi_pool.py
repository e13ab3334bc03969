"""RoIPool (Paddle roi_pool): ROIPooling max with boxes grouped per image by counts."""

from __future__ import annotations

import numpy as np

from ..specs import ROI_POOL
from .checks import batch_from_counts, check_boxes, check_features, quiet
from .dispatch import compute


@quiet
def roi_pool(X: np.ndarray, boxes: np.ndarray, boxes_num: np.ndarray, *,
             pooled_height: int = 1, pooled_width: int = 1,
             spatial_scale: float = 1.0) -> np.ndarray:
    """Max-pool each box [x1, y1, x2, y2] of ``X`` [N, C, H, W] onto a pooled grid.

    ``boxes_num`` [N] (int32/int64) gives the boxes of each image, in order. The arithmetic
    is ROIPooling(method="max")'s. Returns [R, C, pooled_height, pooled_width].
    """
    op = ROI_POOL.name
    a = ROI_POOL.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                              spatial_scale=spatial_scale))
    X = check_features(op, X)
    boxes = check_boxes(op, "boxes", boxes, X, 4)
    batch = batch_from_counts(op, "boxes_num", boxes_num, X.shape[0], boxes.shape[0])
    return compute("max_pool", X, batch, boxes, a["pooled_height"], a["pooled_width"],
                   a["spatial_scale"])
