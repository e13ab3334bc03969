"""MMCVRoIAlignRotated (mmcv roi_align_rotated, CPU forward; mmrotate through mmdeploy).

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

from ..geometry import rotated_rows
from ..specs import MMCV_ROI_ALIGN_ROTATED
from .checks import (batch_from_column, check_boxes, check_features, check_rotated_sizes,
                     quiet)
from .dispatch import compute


@quiet
def mmcv_roi_align_rotated(input: np.ndarray, rois: np.ndarray, *, output_height: int = 1,
                           output_width: int = 1, spatial_scale: float = 1.0,
                           sampling_ratio: int = 0, aligned: int = 1,
                           clockwise: int = 0) -> np.ndarray:
    """Rotated RoIAlign over rows [batch_id, cx, cy, w, h, theta] (theta in radians,
    counter-clockwise unless ``clockwise``). Returns [R, C, output_height, output_width]."""
    op = MMCV_ROI_ALIGN_ROTATED.name
    a = MMCV_ROI_ALIGN_ROTATED.resolve(dict(
        output_height=output_height, output_width=output_width, spatial_scale=spatial_scale,
        sampling_ratio=sampling_ratio, aligned=aligned, clockwise=clockwise))
    X = check_features(op, input, "input")
    rois = check_boxes(op, "rois", rois, X, 6)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    ph, pw = a["output_height"], a["output_width"]
    check_rotated_sizes(op, rois, a["spatial_scale"], bool(a["aligned"]))
    rows = rotated_rows(rois, batch, a["spatial_scale"], ph, pw, a["sampling_ratio"],
                        bool(a["aligned"]), bool(a["clockwise"]))
    return compute("align_rotated", X, rows, ph, pw)
