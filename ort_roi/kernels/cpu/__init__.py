"""The NumPy implementations of the kernels' compute steps (checked inputs in, arrays out),
over every core: the strategies each step may take are named in strategies.py."""

from .align import align, align_levels, align_max
from .bilinear import bilinear_pool
from .max_pool import max_pool
from .ps_align import ps_align
from .psroi import ps_pool, tv_ps_pool
from .rotated import align_rotated

__all__ = ["align", "align_levels", "align_max", "bilinear_pool", "max_pool", "ps_align",
           "ps_pool", "tv_ps_pool", "align_rotated"]
