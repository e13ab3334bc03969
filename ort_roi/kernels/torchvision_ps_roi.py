"""torchvision's position-sensitive ops (R-FCN): ps_roi_align and ps_roi_pool, exact to
torchvision's CPU kernels (torchvision/csrc/ops/cpu/ps_roi_*_kernel.cpp; docs/semantics.md).
Both take rows [batch_id, x1, y1, x2, y2] and X with C_out * PH * PW channels; output bin
(c, ph, pw) reads input channel (c*PH + ph)*PW + pw."""

from __future__ import annotations

import numpy as np

from ..specs import TV_PS_ROI_ALIGN, TV_PS_ROI_POOL
from .checks import (batch_from_column, check_box_sizes, check_boxes, check_channels_per_bin,
                     check_features, quiet)
from .dispatch import compute


def _inputs(spec, X, rois, ph: int, pw: int):
    op = spec.name
    X = check_features(op, X)
    check_channels_per_bin(op, X.shape[1], ph, pw)
    rois = check_boxes(op, "rois", rois, X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    return X, batch, np.ascontiguousarray(rois[:, 1:])


@quiet
def torchvision_ps_roi_align(X: np.ndarray, rois: np.ndarray, *, pooled_height: int = 1,
                             pooled_width: int = 1, spatial_scale: float = 1.0,
                             sampling_ratio: int = -1) -> np.ndarray:
    """torchvision.ops.ps_roi_align: output bin (c, ph, pw) is the mean of the bilinear samples
    of input channel (c*PH + ph)*PW + pw over the bin. The box's corners are scaled and
    shifted by -0.5 (no least size); the grid is ``sampling_ratio`` per side, or
    ceil(bin size) when <= 0; torchvision divides by the grid's count, so a bin of a
    zero-size box with an adaptive grid is NaN. Returns [R, C / (PH * PW), PH, PW]."""
    a = TV_PS_ROI_ALIGN.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                                     spatial_scale=spatial_scale, sampling_ratio=sampling_ratio))
    ph, pw = a["pooled_height"], a["pooled_width"]
    X, batch, boxes = _inputs(TV_PS_ROI_ALIGN, X, rois, ph, pw)
    check_box_sizes(TV_PS_ROI_ALIGN.name, "rois", boxes, a["spatial_scale"])
    return compute("ps_align", X, batch, boxes, ph, pw, a["spatial_scale"], a["sampling_ratio"])


@quiet
def torchvision_ps_roi_pool(X: np.ndarray, rois: np.ndarray, *, pooled_height: int = 1,
                            pooled_width: int = 1, spatial_scale: float = 1.0) -> np.ndarray:
    """torchvision.ops.ps_roi_pool: output bin (c, ph, pw) is the mean of input channel
    (c*PH + ph)*PW + pw over its integer bin: corners round(x * scale), the box at least
    1 x 1, bins clipped to [0, H - 1] x [0, W - 1] as torchvision's kernel does; 0 for an
    empty bin. Returns [R, C / (PH * PW), PH, PW]."""
    a = TV_PS_ROI_POOL.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                                    spatial_scale=spatial_scale))
    ph, pw = a["pooled_height"], a["pooled_width"]
    X, batch, boxes = _inputs(TV_PS_ROI_POOL, X, rois, ph, pw)
    return compute("tv_ps_pool", X, batch, boxes, ph, pw, a["spatial_scale"])
