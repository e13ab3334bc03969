"""RoIAlign as detectron2's Caffe2 export writes it (``org.pytorch._caffe2::RoIAlign``):
RoIAlign (Paddle / detectron2 arithmetic, the shared kernel) over rows
[batch_id, x1, y1, x2, y2], or [x1, y1, x2, y2] when X holds one image, as Caffe2 accepts.
"""

from __future__ import annotations

import numpy as np

from ..definitions.align import caffe2_roi_align as definition
from ..errors import RoiOpError
from ..geometry import roi_align_geometry
from ..kernels.checks import batch_from_column, check_boxes, check_features, compute_align, quiet
from ..kernels.dispatch import host, steps
from ..spec import FEATURE_MAP, Attr, Input, NodeForm, Op, OpSpec, Output, aligned_attr, \
    pooled_attrs, sampling_ratio_attr, spatial_scale_attr

SPEC = OpSpec(
    name="RoIAlign",
    source="Caffe2 RoIAlign (detectron2's Caffe2 export)",
    doc="RoIAlign (detectron2 semantics) over rows [batch_id, x1, y1, x2, y2], or "
        "[x1, y1, x2, y2] when N = 1.",
    inputs=(FEATURE_MAP,
            Input("rois", "T", "[R, 5] or [R, 4]", "rows [batch_id, x1, y1, x2, y2]")),
    attrs=(Attr("order", str, "NCHW", choices=("NCHW",), doc="layout of X (NCHW only)"),
           spatial_scale_attr(), *pooled_attrs("pooled_h", "pooled_w"), sampling_ratio_attr(-1),
           aligned_attr(0)),
    outputs=(Output("Y", "[R, C, PH, PW]"),),
    pooled=("pooled_h", "pooled_w"),
    box_cols=(5, 4),
    domain="org.pytorch._caffe2",
)


@quiet
def caffe2_roi_align(X: np.ndarray, rois: np.ndarray, *, order: str = "NCHW",
                     spatial_scale: float = 1.0, pooled_h: int = 1, pooled_w: int = 1,
                     sampling_ratio: int = -1, aligned: int = 0) -> np.ndarray:
    """Caffe2 RoIAlign: the mean of bilinear samples per bin.

    Args:
        X: [N, C, H, W] float32 or float64 (NumPy; CuPy computes on the GPU).
        rois: [R, 5] rows [batch_id, x1, y1, x2, y2], or [R, 4] when N = 1.
        order: "NCHW" (the only layout).
        spatial_scale: multiplies box coordinates onto X (> 0).
        pooled_h: the output grid's rows (>= 1).
        pooled_w: its columns (>= 1).
        sampling_ratio: samples per bin side; <= 0: adaptive.
        aligned: 1: half-pixel offset.

    Returns:
        [R, C, pooled_h, pooled_w] of X's dtype.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(order=order, spatial_scale=spatial_scale, pooled_h=pooled_h,
                          pooled_w=pooled_w, sampling_ratio=sampling_ratio, aligned=aligned))
    X = check_features(op, X)
    shape = np.shape(host(rois))
    cols = 4 if len(shape) == 2 and shape[1] == 4 else 5  # else the check names the shape
    if cols == 4 and X.shape[0] != 1:
        raise RoiOpError(op, "input 'rois'", f"has 4 columns (no batch index), which needs "
                         f"N = 1, but X holds N = {X.shape[0]} images")
    rois = check_boxes(op, "rois", rois, X, 4 if cols == 4 else 5)
    if cols == 4:
        batch, boxes = np.zeros(rois.shape[0], np.intp), rois
    else:
        batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
        boxes = np.ascontiguousarray(rois[:, 1:])
    return compute_align(steps.align, X, spec=SPEC, attrs=a, batch=batch, boxes=boxes,
                         geometry=roi_align_geometry(a["aligned"]), name="rois")


ENTRY = Op(
    specs=(SPEC,), kernel=caffe2_roi_align, definition=definition, steps=(steps.align,),
    forms=(NodeForm("org.pytorch._caffe2", "RoIAlign", SPEC, "detectron2's Caffe2 export",
                    "Paddle roi_align"),),
)
