"""Position-sensitive pooling: Paddle psroi_pool (R-FCN), one bin at a time
(docs/semantics.md)."""

from __future__ import annotations

import numpy as np

from ..geometry import psroi_bins
from .common import images_of, ps_average


def psroi_pool(X, rois, rois_num, *, output_channels, spatial_scale=1.0, pooled_height=1,
               pooled_width=1):
    """PSROIPool (Paddle psroi_pool): output (c, ph, pw) is the mean of input channel
    (c * PH + ph) * PW + pw over its bin; bins from round(x1) * s to (round(x2) + 1) * s, size
    at least 0.1; the sum row by row in T, 0 for an empty bin."""
    t = X.dtype.type
    H, W = X.shape[2:]
    PH, PW = pooled_height, pooled_width
    out = np.zeros((rois.shape[0], output_channels, PH, PW), X.dtype)
    s = t(spatial_scale)
    for r, b in enumerate(images_of(rois_num)):
        box = rois[r:r + 1]
        with np.errstate(all="ignore"):
            hlo, hhi = psroi_bins(box[:, 1], box[:, 3], s, PH, H)
            wlo, whi = psroi_bins(box[:, 0], box[:, 2], s, PW, W)
        ps_average(X[b], (hlo[0], hhi[0]), (wlo[0], whi[0]), out[r])
    return out
