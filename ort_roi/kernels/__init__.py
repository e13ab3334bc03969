"""The kernels of ort_roi, callable without ONNX.

Each takes arrays plus the op's attributes as keyword arguments and returns an array of the
input's array library (NumPy in, NumPy out; X as a CuPy array computes on the GPU and gives a
CuPy array); bad input raises :class:`ort_roi.RoiOpError`. Every kernel is a thin wrapper:
resolve the attributes (the spec table), check the inputs (checks.py), then one compute step
of the backend table (dispatch.py: kernels/cpu or kernels/cuda).
"""

from ..specs import (CAFFE2_ROI_ALIGN, EXTRACTOR_SPECS, MMCV_ROI_ALIGN, MMCV_ROI_ALIGN_ROTATED,
                     MULTI_LEVEL_SPECS, ONNX_ROI_ALIGN, PSROI_POOL, PYRAMID_SPECS, ROI_ALIGN,
                     ROI_POOL, ROI_POOLING, TV_PS_ROI_ALIGN, TV_PS_ROI_POOL,
                     HEATMAPS_TO_KEYPOINTS, PASTE_MASKS)
from .caffe2_roi_align import caffe2_roi_align
from .keypoints import heatmaps_to_keypoints
from .masks import paste_masks
from .mmcv_roi_align import mmcv_roi_align
from .multi_level import (multi_level_roi_align, multi_level_roi_align_levels,
                          roi_feature_extractor, roi_feature_extractor_levels)
from .onnx_roi_align import onnx_roi_align
from .psroi_pool import psroi_pool
from .pyramid_roi_align import pyramid_roi_align, pyramid_roi_align_levels
from .roi_align import roi_align
from .roi_align_rotated import mmcv_roi_align_rotated
from .roi_pool import roi_pool
from .roi_pooling import roi_pooling
from .torchvision_ps_roi import torchvision_ps_roi_align, torchvision_ps_roi_pool

#: The kernel of every op (spec key: domain, name), for the bridge and the tests.
KERNELS = {
    ROI_POOLING.key: roi_pooling, ROI_POOL.key: roi_pool, PSROI_POOL.key: psroi_pool,
    ROI_ALIGN.key: roi_align, MMCV_ROI_ALIGN.key: mmcv_roi_align,
    MMCV_ROI_ALIGN_ROTATED.key: mmcv_roi_align_rotated, CAFFE2_ROI_ALIGN.key: caffe2_roi_align,
    ONNX_ROI_ALIGN.key: onnx_roi_align, TV_PS_ROI_ALIGN.key: torchvision_ps_roi_align,
    TV_PS_ROI_POOL.key: torchvision_ps_roi_pool,
    **{s.key: roi_feature_extractor_levels for s in EXTRACTOR_SPECS.values()},
    **{s.key: multi_level_roi_align_levels for s in MULTI_LEVEL_SPECS.values()},
    **{s.key: pyramid_roi_align_levels for s in PYRAMID_SPECS.values()},
    HEATMAPS_TO_KEYPOINTS.key: heatmaps_to_keypoints, PASTE_MASKS.key: paste_masks,
}

__all__ = ["roi_pooling", "roi_pool", "psroi_pool", "roi_align", "mmcv_roi_align",
           "mmcv_roi_align_rotated", "caffe2_roi_align", "onnx_roi_align",
           "roi_feature_extractor", "multi_level_roi_align", "pyramid_roi_align",
           "torchvision_ps_roi_align", "torchvision_ps_roi_pool", "heatmaps_to_keypoints",
           "paste_masks",
           # the kernels of the fixed-arity multi-level ops (strides as attributes)
           "roi_feature_extractor_levels", "multi_level_roi_align_levels",
           "pyramid_roi_align_levels", "KERNELS"]
