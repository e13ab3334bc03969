"""PSROIPool (Paddle psroi_pool): R-FCN position-sensitive average pooling."""

from __future__ import annotations

import numpy as np

from ..specs import PSROI_POOL
from .checks import batch_from_counts, check_boxes, check_channels, check_features, quiet
from .dispatch import compute


@quiet
def psroi_pool(X: np.ndarray, rois: np.ndarray, rois_num: np.ndarray, *,
               output_channels: int, spatial_scale: float = 1.0,
               pooled_height: int = 1, pooled_width: int = 1) -> np.ndarray:
    """Position-sensitive RoI pooling (R-FCN).

    X has output_channels*pooled_height*pooled_width channels; output bin (c, ph, pw) is
    the mean of input channel (c*pooled_height + ph)*pooled_width + pw over the bin's
    region (0 for an empty region). Box corners are rounded before scaling and the end
    edge is exclusive (+1). Returns [R, output_channels, pooled_height, pooled_width].
    """
    op = PSROI_POOL.name
    a = PSROI_POOL.resolve(dict(output_channels=output_channels, spatial_scale=spatial_scale,
                                pooled_height=pooled_height, pooled_width=pooled_width))
    oc, ph, pw = a["output_channels"], a["pooled_height"], a["pooled_width"]
    X = check_features(op, X)
    check_channels(op, X.shape[1], oc, ph, pw)
    rois = check_boxes(op, "rois", rois, X, 4)
    batch = batch_from_counts(op, "rois_num", rois_num, X.shape[0], rois.shape[0])
    return compute("ps_pool", X, batch, rois, oc, ph, pw, a["spatial_scale"])
