"""The CUDA backend (CuPy): the kernels' compute steps on NVIDIA GPUs, source roi_ops.cu."""

from .backend import (align, align_levels, align_max, align_rotated, bilinear_pool, max_pool,
                      pool_bins, ps_align)
from .crop_and_resize import crop_bilinear, crop_nearest

__all__ = ["align", "align_levels", "align_max", "align_rotated", "bilinear_pool",
           "crop_bilinear", "crop_nearest", "max_pool", "pool_bins", "ps_align"]
