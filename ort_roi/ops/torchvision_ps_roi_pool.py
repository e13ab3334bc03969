"""TorchvisionPSRoIPool: torchvision's ps_roi_pool (R-FCN), exact to its CPU kernel
(torchvision/csrc/ops/cpu/ps_roi_pool_kernel.cpp; docs/semantics.md)."""

from __future__ import annotations

import numpy as np

from ..definitions.torchvision import torchvision_ps_roi_pool as definition
from ..geometry import torchvision_psroi_bins
from ..kernels.checks import check_position_sensitive, quiet
from ..kernels.dispatch import compute, steps
from ..spec import BATCH_ROIS, DOMAIN, Input, NodeForm, Op, OpSpec, Output, \
    pooled_attrs, spatial_scale_attr

SPEC = OpSpec(
    name="TorchvisionPSRoIPool",
    source="torchvision ps_roi_pool (R-FCN)",
    doc="Position-sensitive average pooling over integer bins: corners round(x * scale), the "
        "box at least 1 x 1, bin p over [floor(p*bin), ceil((p+1)*bin)) from the start, "
        "clipped to [0, H-1] / [0, W-1] as torchvision's kernel does; output bin (c, ph, pw) "
        "the mean of input channel (c*PH + ph)*PW + pw over it, 0 if empty. (Paddle's "
        "psroi_pool, PSROIPool, places its bins otherwise.)",
    inputs=(Input("X", "T", "[N, C_out*PH*PW, H, W]", "position-sensitive score maps"),
            BATCH_ROIS),
    attrs=(*pooled_attrs(), spatial_scale_attr()),
    outputs=(Output("Y", "[R, C/(PH*PW), PH, PW]"),),
    pooled=("pooled_height", "pooled_width"),
    channels_per_bin=True,
    box_cols=5,
)


@quiet
def torchvision_ps_roi_pool(X: np.ndarray, rois: np.ndarray, *, pooled_height: int = 1,
                            pooled_width: int = 1, spatial_scale: float = 1.0) -> np.ndarray:
    """torchvision.ops.ps_roi_pool: output bin (c, ph, pw) is the mean of input channel
    (c*PH + ph)*PW + pw over its integer bin: corners round(x * scale), the box at least
    1 x 1, bins clipped to [0, H - 1] x [0, W - 1] as torchvision's kernel does; 0 for an
    empty bin.

    Args:
        X: [N, C_out*PH*PW, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        rois: [R, 5] rows [batch_id, x1, y1, x2, y2], X's dtype.
        pooled_height: the output grid's rows PH (>= 1).
        pooled_width: its columns PW (>= 1).
        spatial_scale: multiplies box coordinates onto X (> 0).

    Returns:
        [R, C / (PH * PW), PH, PW] of X's dtype.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                          spatial_scale=spatial_scale))
    ph, pw = a["pooled_height"], a["pooled_width"]
    X, batch, boxes = check_position_sensitive(op, X, rois, ph, pw)
    N, C, H, W = X.shape
    rows, cols = torchvision_psroi_bins(boxes, a["spatial_scale"], ph, pw, H, W)
    (hlo, hhi), (wlo, whi) = rows, cols
    return compute(steps.pool_bins, X, batch=batch, hlo=hlo, hhi=hhi, wlo=wlo, whi=whi,
                   oc=C // (ph * pw), ph=ph, pw=pw)


ENTRY = Op(
    specs=(SPEC,), kernel=torchvision_ps_roi_pool, definition=definition, steps=(steps.pool_bins,),
    forms=(NodeForm(DOMAIN, SPEC.name, SPEC, "ort_roi.torch_export (torchvision.ops.ps_roi_pool)",
                    "torchvision ps_roi_pool"),),
)
