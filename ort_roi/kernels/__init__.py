"""The kernels of ort_roi, callable without ONNX.

Each takes arrays plus the op's attributes as keyword arguments and returns an array of the
input's type; bad input raises :class:`ort_roi.RoiOpError`.
"""

from .caffe2_roi_align import caffe2_roi_align
from .mmcv_roi_align import mmcv_roi_align
from .multi_level import (multi_level_roi_align, multi_level_roi_align_levels,
                          roi_feature_extractor, roi_feature_extractor_levels)
from .onnx_roi_align import onnx_roi_align
from .psroi_pool import psroi_pool
from .roi_align import roi_align
from .roi_align_rotated import mmcv_roi_align_rotated
from .roi_pool import roi_pool
from .roi_pooling import roi_pooling

__all__ = ["roi_pooling", "roi_pool", "psroi_pool", "roi_align", "mmcv_roi_align",
           "mmcv_roi_align_rotated", "caffe2_roi_align", "onnx_roi_align",
           "roi_feature_extractor", "multi_level_roi_align",
           # the kernels of the fixed-arity multi-level ops (strides as attributes)
           "roi_feature_extractor_levels", "multi_level_roi_align_levels"]
