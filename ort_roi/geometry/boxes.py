"""Where a box lies on the map: the RoIAlign family's variants (``BoxGeometry``: ALIGNED,
LEGACY, OpenVINO's, mmdeploy's) and the attributes that pick them, the bins of boxes (start,
size and samples per bin side), each box's scale on its level, and mmdeploy's box rescale.
In T, as the reference kernels compute them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np


@dataclass(frozen=True)
class BoxGeometry:
    """How an op of the RoIAlign family places a box [x1, y1, x2, y2] on the map: corners
    scaled, then shifted by ``-offset``; the box's size (per axis) at least ``least`` (None:
    any size, even negative)."""

    name: str
    offset: float
    least: float | None


#: Paddle / torchvision / detectron2 aligned=True (ROIAlignV2); ONNX RoiAlign half_pixel.
ALIGNED = BoxGeometry("aligned", 0.5, None)
#: aligned=False (torchvision's default, Caffe2's and detectron2's legacy); ONNX RoiAlign
#: output_half_pixel (opset 10's only rule): no shift, boxes at least 1 x 1.
LEGACY = BoxGeometry("legacy", 0.0, 1.0)
#: OpenVINO's ExperimentalDetectronROIFeatureExtractor aligned=1: shifted, sizes at least 1.
OPENVINO_ALIGNED = BoxGeometry("OpenVINO aligned", 0.5, 1.0)
#: mmdeploy's MMCVMultiLevelRoiAlign plugin aligned=1: shifted, sizes at least 0.
MMDEPLOY_ALIGNED = BoxGeometry("mmdeploy aligned", 0.5, 0.0)

#: mmcv's RoIAlign max starts each bin from -10000 (a bin without samples keeps it).
MMCV_EMPTY_MAX = -10000.0
#: mmdeploy's multi-level max pooling starts from -FLT_MAX.
FLT_MAX = float(np.finfo(np.float32).max)

ONNX_HALF_PIXEL, ONNX_OUTPUT_HALF_PIXEL = ALIGNED, LEGACY


def roi_align_geometry(aligned: int | bool) -> BoxGeometry:
    """RoIAlign's ``aligned`` attribute (Paddle, torchvision, mmcv, Caffe2): 1 ALIGNED,
    0 LEGACY."""
    return ALIGNED if aligned else LEGACY


def onnx_geometry(coordinate_transformation_mode: str) -> BoxGeometry:
    """ONNX RoiAlign's coordinate_transformation_mode."""
    return ONNX_HALF_PIXEL if coordinate_transformation_mode == "half_pixel" else LEGACY


class AlignBins(NamedTuple):
    """Per box and axis (columns y, x): the first bin's start and the bin size, in T. The
    samples of each bin: ``sampling_grid(size, sampling_ratio)``."""

    start: np.ndarray  # [R, 2]
    size: np.ndarray  # [R, 2]


#: Columns [x1, y1, x2, y2] -> [y1, x1, y2, x2] (an index array made once: a list is
#: converted on every call).
_YX = np.array([1, 0, 3, 2])


def align_bins(boxes: np.ndarray, spatial_scale, geometry: BoxGeometry, pooled_h: int,
               pooled_w: int) -> AlignBins:
    """The bins of boxes [R, 4] = [x1, y1, x2, y2], in T, as the references compute them:
    start = corner * scale - offset, size = end - start (at least ``geometry.least``),
    bin = size / pooled. ``spatial_scale``: one scale, or one per box ([R, 1])."""
    t = boxes.dtype.type
    scale = np.asarray(spatial_scale, boxes.dtype)
    c = boxes[:, _YX] * scale - t(geometry.offset)  # y1 x1 y2 x2
    size = c[:, 2:] - c[:, :2]
    if geometry.least is not None:
        size = np.maximum(size, t(geometry.least))
    pooled = np.array([pooled_h, pooled_w], boxes.dtype)
    return AlignBins(c[:, :2], size / pooled)


def sampling_grid(bin_size: np.ndarray, sampling_ratio: int) -> np.ndarray:
    """RoIAlign's ``sampling_ratio`` attribute made the samples per side of each bin (the
    family's one rule, for the definitions and both backends): ``sampling_ratio`` when it is
    > 0, else ceil(bin size) (adaptive; 0 for an empty or inverted bin: no samples).

    ``bin_size``: the bins' sizes (``align_bins``), [R, 2] in T. Returns the grid, [R, 2]
    int64 (y, x)."""
    if sampling_ratio > 0:
        return np.full(bin_size.shape, sampling_ratio, np.int64)
    # ceil of a huge float is clipped before the cast; a grid <= 0 means no samples.
    return np.minimum(np.maximum(np.ceil(bin_size), 0), 2**62).astype(np.int64)


def level_scales(scales, level: np.ndarray, dtype) -> np.ndarray:
    """Each box's scale [R, 1] (for ``align_bins``) from its level's; a box on no level
    (outside 0 .. L-1: its output is 0) takes level 0's."""
    ok = (level >= 0) & (level < len(scales))
    return np.asarray(scales, dtype)[np.where(ok, level, 0)][:, None]


def box_extent(boxes: np.ndarray, spatial_scale, geometry: BoxGeometry) -> np.ndarray:
    """The boxes' sizes [R, 2] (y, x) in T, before the geometry's least size: (end * scale
    - offset) - (start * scale - offset), as the references subtract them."""
    t = boxes.dtype.type
    c = boxes[:, _YX] * np.asarray(spatial_scale, boxes.dtype) - t(geometry.offset)
    return c[:, 2:] - c[:, :2]


# --- mmdeploy's box rescale (its levels: ort_roi.levels) ---------------------------------------

def mmdeploy_rescale(boxes: np.ndarray, factor: float) -> np.ndarray:
    """mmdeploy's rescale about the centre: half size = fma(size + 1, factor / 2, -1/2)."""
    t = boxes.dtype.type
    x0, y0, x1, y1 = boxes.T
    cx, cy = (x0 + x1) * t(0.5), (y0 + y1) * t(0.5)
    half = t(factor) * t(0.5)

    def fma(a):  # one rounding, as the plugin's fma
        return (a.astype(np.float64) * np.float64(half) - 0.5).astype(boxes.dtype)
    hw, hh = fma(x1 - x0 + t(1)), fma(y1 - y0 + t(1))
    return np.stack([cx - hw, cy - hh, cx + hw, cy + hh], 1)
