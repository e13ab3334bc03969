"""PSROIPool: Paddle psroi_pool, R-FCN's position-sensitive average pooling."""

from __future__ import annotations

import numpy as np

from ..definitions.psroi import psroi_pool as definition
from ..geometry import psroi_box_bins
from ..kernels import small as few
from ..kernels.checks import check_counted_boxes, check_features, few_counted, quiet
from ..kernels.dispatch import compute, steps
from ..spec import DOMAIN, Attr, Input, NodeForm, Op, OpSpec, Output, check_channels, \
    counted_boxes, pooled_attrs, spatial_scale_attr

SPEC = OpSpec(
    name="PSROIPool",
    source="Paddle psroi_pool (R-FCN)",
    doc="Position-sensitive average pooling: output bin (c, ph, pw) averages input channel "
        "(c*pooled_height + ph)*pooled_width + pw over its region.",
    inputs=(Input("X", "T", "[N, output_channels*PH*PW, H, W]", "position-sensitive score maps"),
            *counted_boxes("rois", "rois_num")),
    attrs=(Attr("output_channels", int, None, min=1, doc="channels of the output"),
           spatial_scale_attr(), *pooled_attrs()),
    outputs=(Output("Y", "[R, output_channels, PH, PW]"),),
    pooled=("pooled_height", "pooled_width"),
    channels_attr="output_channels",
)


@quiet
def psroi_pool(X: np.ndarray, rois: np.ndarray, rois_num: np.ndarray, *,
               output_channels: int, spatial_scale: float = 1.0,
               pooled_height: int = 1, pooled_width: int = 1) -> np.ndarray:
    """Position-sensitive RoI pooling (R-FCN), as Paddle's psroi_pool.

    Output bin (c, ph, pw) is the mean of input channel (c*pooled_height + ph)*pooled_width
    + pw over the bin's region (0 for an empty region). Box corners are rounded before
    scaling and the end edge is exclusive (+1).

    Args:
        X: [N, output_channels*pooled_height*pooled_width, H, W] float32 or float64.
        rois: [R, 4] rows [x1, y1, x2, y2], X's dtype.
        rois_num: [N] int32 or int64, the boxes of each image in order (sums to R).
        output_channels: channels of the output (>= 1).
        spatial_scale: multiplies box coordinates onto X (> 0).
        pooled_height: the output grid's rows (>= 1).
        pooled_width: its columns (>= 1).

    Returns:
        [R, output_channels, pooled_height, pooled_width] of X's dtype.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(output_channels=output_channels, spatial_scale=spatial_scale,
                          pooled_height=pooled_height, pooled_width=pooled_width))
    oc, ph, pw = a["output_channels"], a["pooled_height"], a["pooled_width"]
    X = check_features(op, X)
    check_channels(op, X.shape[1], oc, ph, pw)
    rois, batch = check_counted_boxes(op, ("rois", "rois_num"), rois, rois_num, X)
    (hlo, hhi), (wlo, whi) = psroi_box_bins(rois, a["spatial_scale"], ph, pw, *X.shape[2:])
    return compute(steps.pool_bins, X, batch=batch, hlo=hlo, hhi=hhi, wlo=wlo, whi=whi, oc=oc,
                   ph=ph, pw=pw)


def small(X, rois, rois_num, *, output_channels: int, spatial_scale: float,
          pooled_height: int, pooled_width: int):
    """``psroi_pool`` of a small call (resolved attributes), or None (``kernels/small.py``)."""
    got = few_counted(X, rois, rois_num)
    if got is None or X.shape[1] != output_channels * pooled_height * pooled_width:
        return None
    return few.psroi_pool(X, got[0], rois, output_channels=output_channels,
                          spatial_scale=spatial_scale, pooled_height=pooled_height,
                          pooled_width=pooled_width)


ENTRY = Op(
    own=True, specs=(SPEC,), kernel=psroi_pool, definition=definition, steps=(steps.pool_bins,),
    small=small,
    forms=(NodeForm(DOMAIN, "PSROIPool", SPEC, "ort_roi graphs (ort_roi.builders)",
                    "Paddle psroi_pool"),),
)
