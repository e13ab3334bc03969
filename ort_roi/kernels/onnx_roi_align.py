"""ONNX RoiAlign computed by ort_roi (``ort_roi::RoiAlign``, what ``ort-roi convert`` writes).

Same inputs and attributes as ONNX RoiAlign. mode "avg" is RoIAlign: half_pixel is
aligned=1, output_half_pixel (opset 10's rule) aligned=0, sampling_ratio 0 adaptive. mode
"max" is the largest bilinear sample of each bin as mmcv computes it (MMCVRoiAlign max; what
exporters mean), not onnxruntime's maximum of weighted corners (onnxruntime issue 6146);
mode "onnx_max" is onnxruntime's (and onnx's conformance data's): per bin, the largest over
its samples of max(w1*v1, w2*v2, w3*v3, w4*v4).
"""

from __future__ import annotations

import numpy as np

from ..geometry import onnx_geometry
from ..specs import ONNX_ROI_ALIGN
from .checks import batch_from_indices, check_box_sizes, check_boxes, check_features, quiet
from .cpu.align import MMCV_EMPTY_MAX
from .dispatch import compute


@quiet
def onnx_roi_align(X: np.ndarray, rois: np.ndarray, batch_indices: np.ndarray, *,
                   coordinate_transformation_mode: str = "half_pixel", mode: str = "avg",
                   output_height: int = 1, output_width: int = 1, sampling_ratio: int = 0,
                   spatial_scale: float = 1.0) -> np.ndarray:
    """ONNX RoiAlign. Returns [R, C, output_height, output_width]."""
    op = ONNX_ROI_ALIGN.name
    a = ONNX_ROI_ALIGN.resolve(dict(
        coordinate_transformation_mode=coordinate_transformation_mode, mode=mode,
        output_height=output_height, output_width=output_width,
        sampling_ratio=sampling_ratio, spatial_scale=spatial_scale))
    X = check_features(op, X)
    rois = check_boxes(op, "rois", rois, X, 4)
    batch = batch_from_indices(op, "batch_indices", batch_indices, X.shape[0], rois.shape[0])
    check_box_sizes(op, "rois", rois, a["spatial_scale"])
    args = (X, batch, rois, a["output_height"], a["output_width"], a["spatial_scale"],
            a["sampling_ratio"], onnx_geometry(a["coordinate_transformation_mode"]))
    if a["mode"] == "avg":
        return compute("align", *args)
    return compute("align_max", *args, empty=None if a["mode"] == "onnx_max" else MMCV_EMPTY_MAX)
