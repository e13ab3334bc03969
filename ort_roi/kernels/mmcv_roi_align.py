"""MMCVRoiAlign (mmcv.ops.roi_align; mmdeploy's op for its onnxruntime, TensorRT and PPLNN
backends). Geometry is RoIAlign's (aligned shifts by half a pixel, adaptive grid
ceil(roi size / pooled size), samples beyond one pixel off the map are 0):
- mode "avg": the mean of the samples, exactly RoIAlign;
- mode "max": the largest sample value, each computed as mmcv does
  (w1*v1 + w2*v2 + w3*v3 + w4*v4); a bin without samples gives mmcv's initial -10000.
"""

from __future__ import annotations

import numpy as np

from ..geometry import roi_align_geometry
from ..specs import MMCV_ROI_ALIGN
from .checks import batch_from_column, check_box_sizes, check_boxes, check_features, quiet
from .cpu.align import MMCV_EMPTY_MAX
from .dispatch import compute


@quiet
def mmcv_roi_align(input: np.ndarray, rois: np.ndarray, *, output_height: int = 1,
                   output_width: int = 1, spatial_scale: float = 1.0,
                   sampling_ratio: int = 0, mode: str = "avg", aligned: int = 1) -> np.ndarray:
    """RoIAlign over rows [batch_id, x1, y1, x2, y2] of ``rois``, mean or max of the samples.

    Returns [R, C, output_height, output_width] of the input's dtype.
    """
    op = MMCV_ROI_ALIGN.name
    a = MMCV_ROI_ALIGN.resolve(dict(output_height=output_height, output_width=output_width,
                                    spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                                    mode=mode, aligned=aligned))
    X = check_features(op, input, "input")
    rois = check_boxes(op, "rois", rois, X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    boxes = np.ascontiguousarray(rois[:, 1:])
    check_box_sizes(op, "rois", boxes, a["spatial_scale"])
    args = (X, batch, boxes, a["output_height"], a["output_width"], a["spatial_scale"],
            a["sampling_ratio"], roi_align_geometry(a["aligned"]))
    if a["mode"] == "avg":
        return compute("align", *args)
    return compute("align_max", *args, empty=MMCV_EMPTY_MAX)
