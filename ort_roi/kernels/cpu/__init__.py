"""The NumPy implementations of the kernels' compute steps (checked inputs in, arrays out),
over every core: the strategies each step may take are named in strategies.py."""

from .align import align, align_levels, align_max
from .bilinear import bilinear_pool
from .collect import collect_fpn_proposals
from .crop_and_resize import crop_bilinear, crop_nearest
from .max_pool import max_pool
from .ps_align import ps_align
from .keypoints import keypoints
from .masks import paste_masks
from .nms_rotated import nms_rotated
from .proposals import distribute_fpn_proposals, fpn_levels, generate_proposals
from .psroi import pool_bins
from .rotated import align_rotated

__all__ = ["align", "align_levels", "align_max", "bilinear_pool", "crop_bilinear",
           "crop_nearest", "max_pool", "ps_align", "pool_bins", "distribute_fpn_proposals",
           "fpn_levels", "generate_proposals", "align_rotated", "keypoints", "paste_masks",
           "collect_fpn_proposals", "nms_rotated"]
