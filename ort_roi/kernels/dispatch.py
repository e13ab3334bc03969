"""The backend table: each compute step of the kernels with its NumPy and its CUDA
implementation, in one place, and the one dispatch between them.

A public kernel checks its inputs on the host and calls ``compute(steps.<step>, X, **args)``:
X on the GPU (a CuPy array) runs the CUDA step (kernels/cuda), anything else the NumPy step
(kernels/cpu). A CUDA step returns its output and the boxes it left to the host (samples
beyond what one GPU thread should loop over); those are computed here by the NumPy step on a
host copy and written into the device output.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import BoxError
from . import cpu, cuda


@dataclass(frozen=True)
class Step:
    """One compute step: its name, its implementations, and which of its keyword arguments
    hold one entry per box (``per_box``: parameter names of both implementations; the CUDA
    fallback slices exactly those to the boxes it left)."""

    name: str
    numpy: Callable
    cuda: Callable | None  # None: the NumPy step on host copies, for CuPy input too
    per_box: tuple[str, ...] = ()

    def __post_init__(self):
        for f in (self.numpy, self.cuda):
            if f is None:
                continue
            params = inspect.signature(f).parameters
            missing = [n for n in self.per_box if n not in params]
            if missing:
                raise TypeError(f"step {self.name}: {f.__module__}.{f.__qualname__} has no "
                                f"parameter {missing}")


class steps:  # noqa: N801 - a namespace: ``compute(steps.align, X, ...)``
    """Every compute step of the kernels, referenced by name (a misspelt one fails at import)."""

    max_pool = Step("max_pool", cpu.max_pool, cuda.max_pool, ("batch", "boxes"))
    bilinear_pool = Step("bilinear_pool", cpu.bilinear_pool, cuda.bilinear_pool,
                         ("batch", "boxes"))
    pool_bins = Step("pool_bins", cpu.pool_bins, cuda.pool_bins,
                     ("batch", "hlo", "hhi", "wlo", "whi"))
    ps_align = Step("ps_align", cpu.ps_align, cuda.ps_align, ("batch", "boxes"))
    align = Step("align", cpu.align, cuda.align, ("batch", "start", "bin_size"))
    align_max = Step("align_max", cpu.align_max, cuda.align_max, ("batch", "start", "bin_size"))
    align_rotated = Step("align_rotated", cpu.align_rotated, cuda.align_rotated, ("rows",))
    align_levels = Step("align_levels", cpu.align_levels, cuda.align_levels,
                        ("batch", "start", "bin_size", "level"))
    crop_bilinear = Step("crop_bilinear", cpu.crop_bilinear, cuda.crop_bilinear,
                         ("batch", "y0", "y1", "fy", "x0", "x1", "fx"))
    crop_nearest = Step("crop_nearest", cpu.crop_nearest, cuda.crop_nearest,
                        ("batch", "y", "x"))
    # computed on the host for either backend (CuPy input copied): per-box work whose size
    # is the box's (upsampled roi maps, pasted images), no CUDA kernel
    keypoints = Step("keypoints", cpu.keypoints, None)
    paste_masks = Step("paste_masks", cpu.paste_masks, None)
    generate_proposals = Step("generate_proposals", cpu.generate_proposals, None)
    distribute_fpn_proposals = Step("distribute_fpn_proposals", cpu.distribute_fpn_proposals,
                                    None)
    fpn_levels = Step("fpn_levels", cpu.fpn_levels, None)
    collect_fpn_proposals = Step("collect_fpn_proposals", cpu.collect_fpn_proposals, None)
    nms_rotated = Step("nms_rotated", cpu.nms_rotated, None)


#: Every compute step of the kernels, by name.
TABLE: dict[str, Step] = {s.name: s for s in vars(steps).values() if isinstance(s, Step)}


def is_cupy(a) -> bool:
    """True for a CuPy array (checked without importing CuPy)."""
    return type(a) is not np.ndarray and type(a).__module__.split(".")[0] == "cupy"


def host(a):
    """A CuPy array copied to the host; anything else as it is (boxes and counts are small:
    their checks and geometry run on the host for both backends)."""
    if is_cupy(a):
        import cupy

        return cupy.asnumpy(a)
    return a


def compute(step: Step, X, **kwargs):
    """Run compute step ``step`` (one of ``steps``) where X is (X may be a list of feature
    maps); every other argument by keyword, so the per-box ones are sliced by name."""
    first = X[0] if isinstance(X, (list, tuple)) else X
    if not is_cupy(first):
        return step.numpy(X, **kwargs)
    if step.cuda is None:
        return step.numpy([host(x) for x in X] if isinstance(X, (list, tuple)) else host(X),
                          **{k: host(v) for k, v in kwargs.items()})
    import cupy

    out, left = step.cuda(X, **kwargs)
    if len(left):
        sub = {k: v[left] if k in step.per_box else v for k, v in kwargs.items()}
        Xh = [host(x) for x in X] if isinstance(X, (list, tuple)) else host(X)
        try:
            out[left] = cupy.asarray(step.numpy(Xh, **sub))
        except BoxError as e:  # its box is one of those left
            raise e.placed(rows=host(left)) from None
    return out


def compute_by_level(step: Step, X: list, *, level: np.ndarray, **kwargs):
    """``compute(step, X[l], ...)`` on the boxes of each level l (``level`` [R] on the host),
    each level's output written into its boxes' places as soon as it is computed (a step may
    hand out a reused buffer: ``workspace.reuse_outputs``); a box of no level (outside 0 ..
    len(X)-1) gives zeros. The step's per-box arguments (``step.per_box``) are sliced to each
    level's boxes, the others passed as they are. Returns [R, ...] where X is."""
    present = [lv for lv in range(len(X)) if (level == lv).any()]
    if len(present) == 1 and (level == present[0]).all():  # one level: its output as it is
        return compute(step, X[present[0]], **kwargs)
    levels = [(lv, np.flatnonzero(level == lv)) for lv in present]
    if not present:  # no box on any level: the output's shape from an empty call
        levels = [(0, np.flatnonzero(level == 0))]
    out = None
    for lv, idx in levels:
        try:
            y = compute(step, X[lv], **{k: v[idx] if k in step.per_box else v
                                        for k, v in kwargs.items()})
        except BoxError as e:  # its box is one of this level's
            raise e.placed(rows=idx) from None
        if out is None:
            xp = np
            if is_cupy(y):
                import cupy as xp
            out = xp.zeros((level.shape[0], *y.shape[1:]), y.dtype)
        out[idx if xp is np else xp.asarray(idx)] = y
    return out
