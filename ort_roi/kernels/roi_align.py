"""RoIAlign (Paddle roi_align; detectron2 / torchvision semantics)."""

from __future__ import annotations

import numpy as np

from ..geometry import roi_align_geometry
from ..specs import ROI_ALIGN
from .checks import batch_from_counts, check_box_sizes, check_boxes, check_features, quiet
from .dispatch import compute


@quiet
def roi_align(X: np.ndarray, boxes: np.ndarray, boxes_num: np.ndarray, *,
              pooled_height: int = 1, pooled_width: int = 1, spatial_scale: float = 1.0,
              sampling_ratio: int = -1, aligned: int = 1) -> np.ndarray:
    """Average of bilinear samples over each bin of each box [x1, y1, x2, y2].

    Box edges are scaled by ``spatial_scale`` and shifted by -0.5 when ``aligned``; without
    ``aligned`` boxes are at least 1x1. Each bin holds ``sampling_ratio`` x
    ``sampling_ratio`` samples, or ceil(bin size) per side when ``sampling_ratio`` <= 0.
    Samples beyond one pixel outside the map contribute 0; a bin with no samples gives 0.
    Returns [R, C, pooled_height, pooled_width] of X's dtype.
    """
    op = ROI_ALIGN.name
    a = ROI_ALIGN.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                               spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                               aligned=aligned))
    X = check_features(op, X)
    boxes = check_boxes(op, "boxes", boxes, X, 4)
    batch = batch_from_counts(op, "boxes_num", boxes_num, X.shape[0], boxes.shape[0])
    check_box_sizes(op, "boxes", boxes, a["spatial_scale"])
    return compute("align", X, batch, boxes, a["pooled_height"], a["pooled_width"],
                   a["spatial_scale"], a["sampling_ratio"], roi_align_geometry(a["aligned"]))
