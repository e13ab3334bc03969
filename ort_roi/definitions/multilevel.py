"""Feature-pyramid RoIAlign: each box pooled from one level (docs/semantics.md): OpenVINO's
ExperimentalDetectronROIFeatureExtractor and mmdeploy's MMCVMultiLevelRoiAlign."""

from __future__ import annotations

import numpy as np

from ..geometry import FLT_MAX, LEGACY, MMDEPLOY_ALIGNED, OPENVINO_ALIGNED, mmdeploy_rescale
from ..levels import mmdeploy_levels, openvino_levels
from .align import align_box



def roi_feature_extractor(rois, *feats, output_size=7, sampling_ratio=2, aligned=0,
                          pyramid_scales=(4, 8, 16, 32)):
    """OpenVINO's extractor: boxes of image 0, level clamp(floor(log2(sqrt(area) / 224 +
    1e-6) + 2), 0, L-1) in float32 (area <= 0: no level, output 0), pooled with RoIAlign at
    scale 1.0f / stride with sizes at least 1 also when aligned; second output the rois."""
    L, p = len(feats), output_size
    level = openvino_levels(rois, L)
    geometry = OPENVINO_ALIGNED if aligned else LEGACY
    out = np.zeros((rois.shape[0], feats[0].shape[1], p, p), feats[0].dtype)
    for r in range(rois.shape[0]):
        if level[r] < L:
            scale = float(np.float32(1) / np.float32(pyramid_scales[level[r]]))
            out[r] = align_box(feats[level[r]][0], rois[r], geometry, scale, p, p,
                               sampling_ratio)
    return out, rois.copy()


def multi_level_roi_align(rois, *feats, output_height=7, output_width=7, sampling_ratio=0,
                          pool_mode=1, aligned=1, roi_scale_factor=-1.0, finest_scale=56,
                          featmap_strides=(4.0, 8.0, 16.0, 32.0)):
    """mmdeploy's plugin over rows [batch, x1, y1, x2, y2]: level clamp(floor(log2(sqrt(area)
    / finest_scale + 1e-6)), 0, L-1) from the box as given, then the box rescaled about its
    centre when roi_scale_factor > 0, then MMCVRoiAlign at scale 1/stride (sizes at least 0
    when aligned), pool_mode 1 the mean, 0 the max from -FLT_MAX."""
    L = len(feats)
    boxes = np.ascontiguousarray(rois[:, 1:])
    level = mmdeploy_levels(boxes, finest_scale, L)
    if roi_scale_factor > 0:  # a float attribute: float32
        boxes = mmdeploy_rescale(boxes, float(np.float32(roi_scale_factor)))
    geometry = MMDEPLOY_ALIGNED if aligned else LEGACY
    out = np.zeros((rois.shape[0], feats[0].shape[1], output_height, output_width),
                   feats[0].dtype)
    for r in range(rois.shape[0]):
        scale = float(np.float32(1.0 / np.float32(featmap_strides[level[r]])))
        out[r] = align_box(feats[level[r]][int(rois[r, 0])], boxes[r], geometry, scale,
                           output_height, output_width, sampling_ratio,
                           "mean" if pool_mode == 1 else "max", -FLT_MAX)
    return out


def roi_feature_extractor_levels(rois, *feats, **attrs):
    """``roi_feature_extractor`` with the strides as attributes scale_0 .. scale_{L-1}."""
    scales = [attrs.pop(f"scale_{i}") for i in range(len(feats))]
    return roi_feature_extractor(rois, *feats, pyramid_scales=scales, **attrs)


def multi_level_roi_align_levels(rois, *feats, **attrs):
    """``multi_level_roi_align`` with the strides as attributes stride_0 .. stride_{L-1}."""
    strides = [attrs.pop(f"stride_{i}") for i in range(len(feats))]
    return multi_level_roi_align(rois, *feats, featmap_strides=strides, **attrs)
