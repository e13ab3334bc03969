"""GenerateProposals: Paddle's generate_proposals (v2), the RPN stage of PaddleDetection's
two-stage detectors, exact to Paddle's CPU kernel (ort-roi export-paddle writes it)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..definitions.proposals import generate_proposals as definition
from ..errors import RoiOpError
from ..kernels.checks import check_finite, float_input, quiet
from ..kernels.dispatch import compute, steps
from ..spec import DOMAIN, Attr, Dims, Input, NodeForm, Op, OpSpec, Output


def proposal_shapes(spec: OpSpec, dims: Sequence[Dims], attrs: Mapping[str, Any],
                    values: Mapping[int, np.ndarray]) -> list[list]:
    """[R, 4], [R, 1], [N] (R is known only once the op has run); RoiOpError where known
    ranks contradict the op."""
    for i, rank in ((0, 4), (1, 4), (2, 2)):
        d = dims[i]
        if d is not None and len(d) != rank:
            raise RoiOpError(spec.name, f"input '{spec.inputs[i].name}'",
                             f"must have rank {rank} {spec.inputs[i].shape}, got rank {len(d)}")
    n = dims[0][0] if dims[0] is not None else (dims[2][0] if dims[2] is not None else None)
    return [[None, 4], [None, 1], [n]]


SPEC = OpSpec(
    name="GenerateProposals",
    source="Paddle generate_proposals (v2; paddle.vision.ops.generate_proposals, CPU kernel)",
    doc="Per image: the pre_nms_top_n best anchors by score (all when <= 0; among equal scores "
        "the order of libstdc++'s std::nth_element / std::sort, as Paddle's kernel takes them), "
        "decoded by their deltas times variances (sides exp-clipped at log(1000/16); +1 pixel "
        "with pixel_offset), clipped to [0, w - offset] x [0, h - offset] of im_shape (h, w), "
        "boxes with a side < max(min_size, 1) dropped (with pixel_offset also a centre past the "
        "image), then NMS (IoU > nms_thresh suppresses; with eta < 1 the threshold is multiplied "
        "by eta after each keep while > 0.5; none when nms_thresh <= 0) and the first "
        "post_nms_top_n kept (all when <= 0). An image left without boxes gives one zero box of "
        "score 0. In the float type of the scores, with Paddle's order of operations, expf and "
        "log2f as the C library rounds them.",
    inputs=(Input("scores", "T", "[N, A, H, W]", "objectness of each anchor"),
            Input("bbox_deltas", "T", "[N, 4A, H, W]", "(dx, dy, dw, dh) of each anchor"),
            Input("im_shape", "T", "[N, 2]", "(height, width) of each image"),
            Input("anchors", "T", "[H, W, A, 4]", "anchors [x1, y1, x2, y2] ([H*W*A, 4] too)"),
            Input("variances", "T", "[H, W, A, 4]", "scales of the deltas, anchors' shape")),
    attrs=(Attr("pre_nms_top_n", int, 6000, doc="anchors taken per image before NMS "
                "(<= 0: all)"),
           Attr("post_nms_top_n", int, 1000, doc="boxes kept per image after NMS (<= 0: all)"),
           Attr("nms_thresh", float, 0.5, doc="IoU above which NMS suppresses (<= 0: no NMS)"),
           Attr("min_size", float, 0.1, doc="smallest side kept (at least 1)"),
           Attr("eta", float, 1.0, doc="adaptive NMS: < 1 multiplies the threshold after each "
                "keep while it is > 0.5"),
           Attr("pixel_offset", int, 1, choices=(0, 1),
                doc="1: sides and areas count +1 pixel (PaddleDetection passes 0)")),
    outputs=(Output("rpn_rois", "[R, 4]", doc="proposals [x1, y1, x2, y2], image by image"),
             Output("rpn_roi_probs", "[R, 1]", doc="their scores"),
             Output("rpn_rois_num", "[N]", "int32", doc="proposals per image")),
    shapes=proposal_shapes,
    same_types=True,
    boxes_input=3,
    rowwise=False,
)


@quiet
def generate_proposals(scores: np.ndarray, bbox_deltas: np.ndarray, im_shape: np.ndarray,
                       anchors: np.ndarray, variances: np.ndarray, *,
                       pre_nms_top_n: int = 6000, post_nms_top_n: int = 1000,
                       nms_thresh: float = 0.5, min_size: float = 0.1, eta: float = 1.0,
                       pixel_offset: int = 1):
    """Paddle's generate_proposals (v2), bit for bit (its CPU kernel): GenerateProposals in
    docs/semantics.md. Computed on the host (CuPy input is copied).

    Args:
        scores: [N, A, H, W] float32 or float64, objectness of each anchor (no NaN).
        bbox_deltas: [N, 4A, H, W], scores' dtype: (dx, dy, dw, dh) of anchor a in channels
            4a .. 4a+3 (no NaN).
        im_shape: [N, 2], scores' dtype: (height, width) of each image (finite, >= 0).
        anchors: [H, W, A, 4] (or [H*W*A, 4]), scores' dtype, rows [x1, y1, x2, y2] (finite).
        variances: anchors' shape and dtype (finite).
        pre_nms_top_n: anchors taken per image before NMS (<= 0: all).
        post_nms_top_n: proposals kept per image after NMS (<= 0: all).
        nms_thresh: IoU above which a box is suppressed (<= 0: no NMS, no post_nms_top_n).
        min_size: smallest side kept (taken as at least 1).
        eta: adaptive NMS factor (< 1: the threshold falls after each keep while > 0.5).
        pixel_offset: 1: sides and areas count +1 pixel (Paddle's op default; PaddleDetection
            passes 0).

    Returns:
        (rpn_rois [R, 4], rpn_roi_probs [R, 1] of scores' dtype, rpn_rois_num [N] int32).
        Raises RoiOpError on bad input.
    """
    op = SPEC.name
    a = SPEC.resolve(dict(pre_nms_top_n=pre_nms_top_n, post_nms_top_n=post_nms_top_n,
                          nms_thresh=nms_thresh, min_size=min_size, eta=eta,
                          pixel_offset=pixel_offset))
    scores = float_input(op, "scores", scores)
    T = scores.dtype
    if scores.ndim != 4:
        raise RoiOpError(op, "input 'scores'",
                         f"must have rank 4 [N, A, H, W], got shape {list(scores.shape)}")
    N, A, H, W = scores.shape
    deltas = float_input(op, "bbox_deltas", bbox_deltas, T)
    if deltas.shape != (N, 4 * A, H, W):
        raise RoiOpError(op, "input 'bbox_deltas'",
                         f"must have shape [N, 4A, H, W] = {[N, 4 * A, H, W]} (scores are "
                         f"{list(scores.shape)}), got {list(deltas.shape)}")
    im = float_input(op, "im_shape", im_shape, T)
    if im.shape != (N, 2):
        raise RoiOpError(op, "input 'im_shape'",
                         f"must have shape [N, 2] = {[N, 2]} (height, width per image), got "
                         f"{list(im.shape)}")
    M = H * W * A
    an = float_input(op, "anchors", anchors, T)
    if an.ndim not in (2, 4) or an.shape[-1] != 4 or an.size != 4 * M:
        raise RoiOpError(op, "input 'anchors'",
                         f"must have shape [H, W, A, 4] = {[H, W, A, 4]} (or [H*W*A, 4]) for "
                         f"scores {list(scores.shape)}, got {list(an.shape)}")
    va = float_input(op, "variances", variances, T)
    if va.size != an.size or va.shape[-1:] != (4,):
        raise RoiOpError(op, "input 'variances'",
                         f"must have the anchors' shape {list(an.shape)}, got {list(va.shape)}")
    check_finite(op, "scores", scores, nan_only=True)
    check_finite(op, "bbox_deltas", deltas, nan_only=True)
    check_finite(op, "im_shape", im)
    check_finite(op, "anchors", an)
    check_finite(op, "variances", va)
    if (im < 0).any():
        i = tuple(int(k) for k in np.argwhere(im < 0)[0])
        raise RoiOpError(op, "input 'im_shape'",
                         f"image {i[0]} has a negative size {im[i[0]].tolist()}")
    return compute(steps.generate_proposals, scores, bbox_deltas=deltas, im_shape=im,
                   anchors=np.ascontiguousarray(an.reshape(-1, 4)),
                   variances=np.ascontiguousarray(va.reshape(-1, 4)),
                   pre_nms_top_n=a["pre_nms_top_n"], post_nms_top_n=a["post_nms_top_n"],
                   nms_thresh=a["nms_thresh"], min_size=a["min_size"], eta=a["eta"],
                   pixel_offset=bool(a["pixel_offset"]))


ENTRY = Op(
    specs=(SPEC,), kernel=generate_proposals, definition=definition,
    steps=(steps.generate_proposals,),
    forms=(NodeForm(DOMAIN, "GenerateProposals", SPEC,
                    "ort-roi export-paddle (Paddle generate_proposals)",
                    "Paddle generate_proposals"),),
)
