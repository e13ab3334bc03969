"""What each op computes, written to be read: one box, one bin, one sample at a time, from
the geometry vocabulary (ort_roi.geometry), in T as the source framework computes it.

These are the definitions the fast kernels (ort_roi.kernels) are held to: onnx.reference runs
them (``ort-roi validate`` and the demo compare onnxruntime's run of a graph with them) and the
tests compare every fast strategy with them. They take what the kernels take, without the
checks, and are slow (Python loops over bins and samples, vectorized over channels only).
The semantics in words: docs/semantics.md.
"""

from ..specs import (CAFFE2_ROI_ALIGN, EXTRACTOR_SPECS, MMCV_ROI_ALIGN, MMCV_ROI_ALIGN_ROTATED,
                     MULTI_LEVEL_SPECS, ONNX_ROI_ALIGN, PSROI_POOL, PYRAMID_SPECS, ROI_ALIGN,
                     ROI_POOL, ROI_POOLING, TV_PS_ROI_ALIGN, TV_PS_ROI_POOL,
                     HEATMAPS_TO_KEYPOINTS, PASTE_MASKS)
from .align import caffe2_roi_align, mmcv_roi_align, onnx_roi_align, roi_align
from .multilevel import (multi_level_roi_align, multi_level_roi_align_levels,
                         roi_feature_extractor, roi_feature_extractor_levels)
from .pooling import roi_pool, roi_pooling
from .psroi import psroi_pool
from .rotated import mmcv_roi_align_rotated
from .torchvision import (heatmaps_to_keypoints, paste_masks, pyramid_roi_align,
                          pyramid_roi_align_levels, torchvision_ps_roi_align,
                          torchvision_ps_roi_pool)

#: The definition of every op (spec key: domain, name).
DEFINITIONS = {
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

__all__ = ["DEFINITIONS", "caffe2_roi_align", "heatmaps_to_keypoints", "mmcv_roi_align",
           "mmcv_roi_align_rotated", "multi_level_roi_align", "onnx_roi_align", "paste_masks",
           "psroi_pool", "pyramid_roi_align", "roi_align", "roi_feature_extractor", "roi_pool",
           "roi_pooling", "torchvision_ps_roi_align", "torchvision_ps_roi_pool"]
