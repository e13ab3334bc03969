"""The backend table: each compute step of the kernels with its NumPy and its CUDA
implementation, in one place, and the one dispatch between them.

A public kernel checks its inputs on the host and calls ``compute(step, X, ...)``: X on the
GPU (a CuPy array) runs the CUDA step (kernels/cuda), anything else the NumPy step
(kernels/cpu). A CUDA step returns its output and the boxes it left to the host (samples
beyond what one GPU thread should loop over); those are computed here by the NumPy step on a
host copy and written into the device output.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


from . import cpu, cuda


@dataclass(frozen=True)
class Step:
    """One compute step: its implementations and which of its arguments (by position,
    after X) hold one entry per box."""

    numpy: Callable
    cuda: Callable | None  # None: the NumPy step on host copies, for CuPy input too
    per_box: tuple[int, ...]


#: Every compute step of the kernels.
TABLE: dict[str, Step] = {
    "max_pool": Step(cpu.max_pool, cuda.max_pool, (0, 1)),
    "bilinear_pool": Step(cpu.bilinear_pool, cuda.bilinear_pool, (0, 1)),
    "pool_bins": Step(cpu.pool_bins, cuda.pool_bins, (0, 1, 2, 3, 4)),
    "ps_align": Step(cpu.ps_align, cuda.ps_align, (0, 1)),
    "align": Step(cpu.align, cuda.align, (0, 1, 2, 3)),
    "align_max": Step(cpu.align_max, cuda.align_max, (0, 1, 2, 3)),
    "align_rotated": Step(cpu.align_rotated, cuda.align_rotated, (0,)),
    "align_levels": Step(cpu.align_levels, cuda.align_levels, (0, 1, 2, 3, 4)),
    "crop_bilinear": Step(cpu.crop_bilinear, cuda.crop_bilinear, (0, 1, 2, 3, 4, 5, 6)),
    "crop_nearest": Step(cpu.crop_nearest, cuda.crop_nearest, (0, 1, 2)),
    # computed on the host for either backend (CuPy input copied): per-box work whose size
    # is the box's (upsampled roi maps, pasted images), no CUDA kernel
    "keypoints": Step(cpu.keypoints, None, ()),
    "paste_masks": Step(cpu.paste_masks, None, ()),
    "generate_proposals": Step(cpu.generate_proposals, None, ()),
    "distribute_fpn_proposals": Step(cpu.distribute_fpn_proposals, None, ()),
    "fpn_levels": Step(cpu.fpn_levels, None, ()),
    "collect_fpn_proposals": Step(cpu.collect_fpn_proposals, None, ()),
}


def is_cupy(a) -> bool:
    """True for a CuPy array (checked without importing CuPy)."""
    return type(a).__module__.split(".")[0] == "cupy"


def host(a):
    """A CuPy array copied to the host; anything else as it is (boxes and counts are small:
    their checks and geometry run on the host for both backends)."""
    if is_cupy(a):
        import cupy

        return cupy.asnumpy(a)
    return a


def compute(step: str, X, *args, **kwargs):
    """Run compute step ``step`` where X is (X may be a list of feature maps)."""
    s = TABLE[step]
    first = X[0] if isinstance(X, (list, tuple)) else X
    if not is_cupy(first):
        return s.numpy(X, *args, **kwargs)
    if s.cuda is None:
        return s.numpy([host(x) for x in X] if isinstance(X, (list, tuple)) else host(X),
                       *(host(a) for a in args), **kwargs)
    import cupy

    out, left = s.cuda(X, *args, **kwargs)
    if len(left):
        sub = [a[left] if i in s.per_box else a for i, a in enumerate(args)]
        Xh = [host(x) for x in X] if isinstance(X, (list, tuple)) else host(X)
        out[left] = cupy.asarray(s.numpy(Xh, *sub, **kwargs))
    return out
