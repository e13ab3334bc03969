"""Multi-level (FPN) RoIAlign: each box pooled from one of several feature maps.

Two exporters write it as one node, each with its own level rule and RoIAlign:

- OpenVINO's ``ExperimentalDetectronROIFeatureExtractor`` (CPU plugin): rois [R, 4] of image 0;
  level clamp(floor(log2(sqrt(area) / 224 + 1e-6) + 2), 0, L-1) in float32, a box of area
  <= 0 on no level (its output stays 0); RoIAlign at scale 1/scale_l whose box sizes are at
  least 1 also when aligned; second output the rois.
- mmdeploy's ``MMCVMultiLevelRoiAlign`` (TensorRT plugin): rois [R, 5] with the batch index;
  level clamp(floor(log2(sqrt(area) / finest_scale + 1e-6)), 0, L-1) from the box as given
  (in float32, as its sqrtf/log2f; NaN from an inverted box is level 0, as CUDA's float-to-int
  conversion); then, when roi_scale_factor > 0, the box rescaled about its centre with half
  sizes (size + 1) * factor / 2 - 1/2; then MMCVRoiAlign at scale 1/stride_l: pool_mode 1
  the mean, 0 the largest sample (a bin without samples -FLT_MAX, the plugin's start).

Both pool each box from its level with RoIAlign's arithmetic (the compute step
"align_levels", NumPy or CUDA by where the maps are); the output is in the order of the rois.
"""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..geometry import (LEGACY, MMDEPLOY_ALIGNED, OPENVINO_ALIGNED, mmdeploy_levels,
                        mmdeploy_rescale, openvino_levels)
from ..specs import EXTRACTOR_SPECS, MAX_LEVELS, MULTI_LEVEL_SPECS
from .checks import batch_from_column, check_box_sizes, check_boxes, check_levels, quiet
from .dispatch import compute

#: mmdeploy's max pooling starts from -FLT_MAX.
FLT_MAX = float(np.finfo(np.float32).max)


@quiet
def roi_feature_extractor(rois, *feats, output_size: int = 7, sampling_ratio: int = 2,
                          aligned: int = 0, pyramid_scales=(4, 8, 16, 32)):
    """OpenVINO's ExperimentalDetectronROIFeatureExtractor: (features [R, C, output_size,
    output_size], rois). ``feats`` are the levels [1, C, H_l, W_l], finest first;
    ``pyramid_scales`` their strides."""
    L = len(feats)
    spec = level_spec(EXTRACTOR_SPECS, L, "ExperimentalDetectronROIFeatureExtractor")
    scales = scalars(spec, "pyramid_scales", pyramid_scales, L)
    a = spec.resolve(dict(output_size=output_size, sampling_ratio=sampling_ratio,
                          aligned=aligned, **{f"scale_{i}": v for i, v in enumerate(scales)}))
    op = spec.name
    X = check_levels(op, feats, batch=1)
    boxes = check_boxes(op, "rois", rois, X[0], 4)
    level = openvino_levels(boxes, L)
    scale = [float(np.float32(1) / np.float32(a[f"scale_{i}"])) for i in range(L)]  # 1.0f / s
    check_box_sizes(op, "rois", boxes, max(scale))
    p = a["output_size"]
    out = compute("align_levels", X, np.zeros(boxes.shape[0], np.intp), boxes, level, p, p,
                  scale, a["sampling_ratio"], OPENVINO_ALIGNED if a["aligned"] else LEGACY, 0)
    return out, boxes.copy()


@quiet
def multi_level_roi_align(rois, *feats, output_height: int = 7, output_width: int = 7,
                          sampling_ratio: int = 0, pool_mode: int = 1, aligned: int = 1,
                          roi_scale_factor: float = -1.0, finest_scale: int = 56,
                          featmap_strides=(4.0, 8.0, 16.0, 32.0)):
    """mmdeploy's MMCVMultiLevelRoiAlign: [R, C, output_height, output_width]. ``feats``
    are the levels [N, C, H_l, W_l], finest first; ``featmap_strides`` their strides."""
    L = len(feats)
    spec = level_spec(MULTI_LEVEL_SPECS, L, "MMCVMultiLevelRoiAlign")
    strides = scalars(spec, "featmap_strides", featmap_strides, L)
    a = spec.resolve(dict(output_height=output_height, output_width=output_width,
                          sampling_ratio=sampling_ratio, pool_mode=pool_mode, aligned=aligned,
                          roi_scale_factor=roi_scale_factor, finest_scale=finest_scale,
                          **{f"stride_{i}": v for i, v in enumerate(strides)}))
    op = spec.name
    X = check_levels(op, feats)
    rois = check_boxes(op, "rois", rois, X[0], 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X[0].shape[0])
    boxes = np.ascontiguousarray(rois[:, 1:])
    level = mmdeploy_levels(boxes, a["finest_scale"], L)
    if a["roi_scale_factor"] > 0:
        boxes = mmdeploy_rescale(boxes, a["roi_scale_factor"])
    scale = [float(np.float32(1.0 / np.float32(a[f"stride_{i}"]))) for i in range(L)]
    check_box_sizes(op, "rois", boxes, max(scale))
    ph, pw = a["output_height"], a["output_width"]
    return compute("align_levels", X, batch, boxes, level, ph, pw, scale, a["sampling_ratio"],
                   MMDEPLOY_ALIGNED if a["aligned"] else LEGACY, 1 - a["pool_mode"], -FLT_MAX)


def level_spec(specs: dict, L: int, node: str):
    if L not in specs:
        raise RoiOpError(node, "inputs", f"takes 1 to {MAX_LEVELS} feature maps, got {L}")
    return specs[L]


def scalars(spec, name: str, values, L: int) -> list:
    values = list(np.atleast_1d(np.asarray(values)).tolist())
    if len(values) != L:
        raise RoiOpError(spec.name, f"attribute '{name}'",
                         f"must hold one value per feature map ({L}), got {values!r}")
    return values


def roi_feature_extractor_levels(rois, *feats, **attrs):
    """``roi_feature_extractor`` with the strides as attributes scale_0 .. scale_{L-1} (the
    fixed-arity ops ROIFeatureExtractor_L1..L6 that convert writes)."""
    scales = [attrs.pop(f"scale_{i}", None) for i in range(len(feats))]
    return roi_feature_extractor(rois, *feats, pyramid_scales=scales, **attrs)


def multi_level_roi_align_levels(rois, *feats, **attrs):
    """``multi_level_roi_align`` with the strides as attributes stride_0 .. stride_{L-1}."""
    strides = [attrs.pop(f"stride_{i}", None) for i in range(len(feats))]
    return multi_level_roi_align(rois, *feats, featmap_strides=strides, **attrs)
