"""RoIAlign as detectron2's Caffe2 export writes it (``org.pytorch._caffe2::RoIAlign``).

RoIAlign (Paddle / detectron2 arithmetic, the shared kernel) over rows
[batch_id, x1, y1, x2, y2], or [x1, y1, x2, y2] when X holds one image, as Caffe2 accepts.
"""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..geometry import roi_align_geometry
from ..specs import CAFFE2_ROI_ALIGN
from .checks import batch_from_column, check_box_sizes, check_boxes, check_features, quiet
from .dispatch import compute, host


@quiet
def caffe2_roi_align(X: np.ndarray, rois: np.ndarray, *, order: str = "NCHW",
                     spatial_scale: float = 1.0, pooled_h: int = 1, pooled_w: int = 1,
                     sampling_ratio: int = -1, aligned: int = 0) -> np.ndarray:
    """Caffe2 RoIAlign: the mean of bilinear samples per bin. Returns [R, C, pooled_h, pooled_w]."""
    op = CAFFE2_ROI_ALIGN.name
    a = CAFFE2_ROI_ALIGN.resolve(dict(order=order, spatial_scale=spatial_scale,
                                      pooled_h=pooled_h, pooled_w=pooled_w,
                                      sampling_ratio=sampling_ratio, aligned=aligned))
    X = check_features(op, X)
    shape = np.shape(host(rois))
    cols = 4 if len(shape) == 2 and shape[1] == 4 else 5  # else the check names the shape
    if cols == 4 and X.shape[0] != 1:
        raise RoiOpError(op, "input 'rois'", f"has 4 columns (no batch index), which needs "
                         f"N = 1, but X holds N = {X.shape[0]} images")
    rois = check_boxes(op, "rois", rois, X, 4 if cols == 4 else 5)
    if cols == 4:
        batch, boxes = np.zeros(rois.shape[0], np.intp), rois
    else:
        batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
        boxes = np.ascontiguousarray(rois[:, 1:])
    check_box_sizes(op, "rois", boxes, a["spatial_scale"])
    return compute("align", X, batch, boxes, a["pooled_h"], a["pooled_w"], a["spatial_scale"],
                   a["sampling_ratio"], roi_align_geometry(a["aligned"]))
