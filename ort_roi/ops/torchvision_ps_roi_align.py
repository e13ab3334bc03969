"""TorchvisionPSRoIAlign: torchvision's ps_roi_align (R-FCN), exact to its CPU kernel
(torchvision/csrc/ops/cpu/ps_roi_align_kernel.cpp; docs/semantics.md)."""

from __future__ import annotations

import numpy as np

from ..definitions.torchvision import torchvision_ps_roi_align as definition
from ..kernels.checks import check_box_sizes, check_position_sensitive, quiet
from ..kernels.dispatch import compute, steps
from ..spec import BATCH_ROIS, DOMAIN, Input, NodeForm, Op, OpSpec, Output, \
    pooled_attrs, sampling_ratio_attr, spatial_scale_attr

SPEC = OpSpec(
    name="TorchvisionPSRoIAlign",
    source="torchvision ps_roi_align (R-FCN)",
    doc="Position-sensitive RoIAlign: output bin (c, ph, pw) is the mean of the bilinear "
        "samples of input channel (c*PH + ph)*PW + pw over the bin; the box's corners scaled "
        "and shifted by -0.5, any size; sampling_ratio <= 0: ceil(bin size) samples per side; "
        "a bin whose sample count is 0 gives NaN (0/0), as torchvision's kernel.",
    inputs=(Input("X", "T", "[N, C_out*PH*PW, H, W]", "position-sensitive score maps"),
            BATCH_ROIS),
    attrs=(*pooled_attrs(), spatial_scale_attr(), sampling_ratio_attr(-1)),
    outputs=(Output("Y", "[R, C/(PH*PW), PH, PW]"),),
    pooled=("pooled_height", "pooled_width"),
    channels_per_bin=True,
    box_cols=5,
)


@quiet
def torchvision_ps_roi_align(X: np.ndarray, rois: np.ndarray, *, pooled_height: int = 1,
                             pooled_width: int = 1, spatial_scale: float = 1.0,
                             sampling_ratio: int = -1) -> np.ndarray:
    """torchvision.ops.ps_roi_align: output bin (c, ph, pw) is the mean of the bilinear
    samples of input channel (c*PH + ph)*PW + pw over the bin. The box's corners are scaled
    and shifted by -0.5 (no least size); the grid is ``sampling_ratio`` per side, or
    ceil(bin size) when <= 0; torchvision divides by the grid's count, so a bin of a
    zero-size box with an adaptive grid is NaN.

    Args:
        X: [N, C_out*PH*PW, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        rois: [R, 5] rows [batch_id, x1, y1, x2, y2], X's dtype.
        pooled_height: the output grid's rows PH (>= 1).
        pooled_width: its columns PW (>= 1).
        spatial_scale: multiplies box coordinates onto X (> 0).
        sampling_ratio: samples per bin side; <= 0: adaptive.

    Returns:
        [R, C / (PH * PW), PH, PW] of X's dtype.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                          spatial_scale=spatial_scale, sampling_ratio=sampling_ratio))
    ph, pw = a["pooled_height"], a["pooled_width"]
    X, batch, boxes = check_position_sensitive(op, X, rois, ph, pw)
    check_box_sizes(op, "rois", boxes, a["spatial_scale"])
    return compute(steps.ps_align, X, batch=batch, boxes=boxes, ph=ph, pw=pw,
                   spatial_scale=a["spatial_scale"], sampling_ratio=a["sampling_ratio"])


ENTRY = Op(
    specs=(SPEC,), kernel=torchvision_ps_roi_align, definition=definition, steps=(steps.ps_align,),
    forms=(NodeForm(DOMAIN, SPEC.name, SPEC,
                    "ort_roi.torch_export (torchvision.ops.ps_roi_align)",
                    "torchvision ps_roi_align"),),
)
