"""The level rules of the multi-level RoI ops, one place: which feature map each box is
pooled from, as each exporter computes it (OpenVINO's ExperimentalDetectronROIFeatureExtractor,
mmdeploy's MMCVMultiLevelRoiAlign and MMCVMultiLevelRotatedRoiAlign, Paddle's
distribute_fpn_proposals: ``fpn_levels``, also the compute step of that name). log2 is the C library's (``ort_roi.libm``), as theirs."""

from __future__ import annotations

import numpy as np

from . import libm
from .geometry.torchvision import c_int
from .libm import floor_log2

#: The rules' IEEE arithmetic, as the references compute it (no warnings): infinite
#: coordinates give inf - inf and inf * 0 (NaN), a huge box's area overflows to inf, and
#: mmdeploy's sqrtf of an inverted box's negative area is NaN; each rule maps those values
#: as its reference does (OpenVINO: area <= 0 or NaN is level L; mmdeploy: NaN is 0; Paddle:
#: inf and NaN convert to INT_MIN, min_level)
_IEEE = {"invalid": "ignore", "over": "ignore"}


def openvino_levels(boxes: np.ndarray, L: int) -> np.ndarray:
    """OpenVINO's redistribute_rois, in float32 (log2f, the C library's): the level of each
    box, L for area <= 0."""
    b = boxes.astype(np.float32)
    f = np.float32
    with np.errstate(**_IEEE):
        area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
        level = np.clip(floor_log2(np.sqrt(np.maximum(area, f(0))) / f(224) + f(1e-6), 2), 0,
                        L - 1)
    return np.where(area > 0, level, L).astype(np.intp)


def mmdeploy_levels(boxes: np.ndarray, finest_scale: int, L: int) -> np.ndarray:
    """mmdeploy's rule on the boxes as given: sqrtf, then log2f of (scale / finest_scale +
    1e-6) (the 1e-6 added in double, as the plugin's literal), floor, clamp; NaN is 0."""
    b = boxes.astype(np.float32)
    with np.errstate(**_IEEE):
        return _mmdeploy_rule((b[:, 3] - b[:, 1]) * (b[:, 2] - b[:, 0]), finest_scale, L)


def mmdeploy_rotated_levels(rois: np.ndarray, finest_scale: int, L: int) -> np.ndarray:
    """mmdeploy's rule for rotated rows [batch, cx, cy, w, h, theta] (its
    MMCVMultiLevelRotatedRoiAlign plugin, as RotatedSingleRoIExtractor.map_roi_levels):
    sqrtf(w * h), then as ``mmdeploy_levels``; a negative size's NaN is level 0, an area
    overflowing float32 level L-1 (CUDA's float-to-int conversion saturates)."""
    b = rois.astype(np.float32)
    with np.errstate(**_IEEE):
        return _mmdeploy_rule(b[:, 3] * b[:, 4], finest_scale, L)


def _mmdeploy_rule(area: np.ndarray, finest_scale: int, L: int) -> np.ndarray:
    """floor(log2f(sqrtf(area) / finest_scale + 1e-6)) in float32, clamped to [0, L-1]."""
    with np.errstate(**_IEEE):
        scale = np.sqrt(area)
        q = (scale / np.float32(finest_scale)).astype(np.float64) + 1e-6
        v = floor_log2(q.astype(np.float32), 0)
    v = np.where(np.isnan(v), 0, v)
    return np.clip(v, 0, L - 1).astype(np.intp)


def fpn_levels(rois: np.ndarray, min_level: int, max_level: int, refer_level: int,
               refer_scale: int, pixel_offset: bool) -> np.ndarray:
    """The level of each roi: floor(log2(sqrt(area) / refer_scale + 1e-6) + refer_level) in T
    (the C library's log2f / log2: ``libm.floor_log2``), clamped to [min_level, max_level];
    a value no int holds converts to INT_MIN (x86), so clamps to min_level.

    Args:
        rois: [R, 4] T.
    Returns:
        [R] int64 levels.
    """
    T = rois.dtype.type
    x1, y1, x2, y2 = rois.T
    with np.errstate(**_IEEE):
        w, h = x2 - x1, y2 - y1
        area = w * h if not pixel_offset else (w + T(1)) * (h + T(1))
        area = np.where((x2 < x1) | (y2 < y1), T(0), area)
        q = np.sqrt(area) / T(refer_scale) + T(1e-6)
    return np.clip(c_int(libm.floor_log2(q, refer_level)), min_level, max_level)
