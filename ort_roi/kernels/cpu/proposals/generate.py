"""Paddle's generate_proposals (v2), its compute step: per image the candidates in
libstdc++'s order (order.py), decoded (BoxCoder), clipped, small boxes dropped, and NMS
(``nms``: the adaptive steps where eta < 1 and the threshold is > 0.5, else the
fixed-threshold NMS, which picks its strategy), equal to Paddle's CPU kernel bit for bit
(definitions/proposals.py is the literal transcription).
"""

from __future__ import annotations

import math

import numpy as np

from .... import libm
from ....errors import RoiOpError
from . import common
from .adaptive import nms_adaptive
from .common import IOU_IEEE, NmsTooCostly
from .fixed import nms_fixed
from .order import candidates

F64 = np.float64

#: kBBoxClipDefault: the largest log-scale a box side is decoded with
BBOX_CLIP = math.log(1000.0 / 16.0)


def _min(a, b):
    return np.where(b < a, b, a)  # std::min, signed zeros and NaN included


def _max(a, b):
    return np.where(a < b, b, a)  # std::max


def decode(anchors: np.ndarray, deltas: np.ndarray, variances: np.ndarray,
           offset) -> np.ndarray:
    """BoxCoder: [K, 4] anchors decoded by deltas scaled by variances, in T (centres through
    double, as Paddle's 0.5 constant makes them)."""
    T = anchors.dtype.type
    aw = anchors[:, 2] - anchors[:, 0] + offset
    ah = anchors[:, 3] - anchors[:, 1] + offset
    acx = (anchors[:, 0].astype(F64) + 0.5 * aw.astype(F64)).astype(T)
    acy = (anchors[:, 1].astype(F64) + 0.5 * ah.astype(F64)).astype(T)
    clip = T(BBOX_CLIP)
    cx = variances[:, 0] * deltas[:, 0] * aw + acx
    cy = variances[:, 1] * deltas[:, 1] * ah + acy
    w = libm.exp(_min(variances[:, 2] * deltas[:, 2], clip)) * aw
    h = libm.exp(_min(variances[:, 3] * deltas[:, 3], clip)) * ah
    half_w, half_h = w / T(2), h / T(2)
    return np.stack([cx - half_w, cy - half_h, cx + half_w - offset, cy + half_h - offset], 1)


def nms(boxes: np.ndarray, scores: np.ndarray, nms_thresh: float, eta: float,
        pixel_offset: bool, limit: int) -> np.ndarray:
    """funcs::NMS of Paddle, the first ``limit`` kept.

    Args:
        boxes: [K, 4] T boxes [x1, y1, x2, y2], finite, x1 <= x2 and y1 <= y2 (as Paddle's
            size filter leaves them).
        scores: [K] T; visited by score, equal scores latest first.
        nms_thresh: > 0, the overlap threshold (taken in T).
        eta: the adaptive factor (< 1: the threshold falls after each keep while > 0.5).
        pixel_offset: sides and areas count +1 pixel.
        limit: the most boxes to keep.
    Returns:
        [k] int64 indices into boxes, in the order NMS keeps them.
    """
    T = boxes.dtype.type
    order = np.argsort(scores, kind="stable")[::-1]
    b = boxes[order]
    x1, y1, x2, y2 = (np.ascontiguousarray(b[:, i]) for i in range(4))
    norm = T(0) if not pixel_offset else T(1)
    with np.errstate(**IOU_IEEE):
        w, h = x2 - x1, y2 - y1
        area = np.where((x2 < x1) | (y2 < y1), T(0), (w + norm) * (h + norm))
    thr = T(nms_thresh)
    if eta < 1 and thr > 0.5:
        kept = nms_adaptive(x1, y1, x2, y2, area, thr, np.float32(eta), norm, limit)
    else:
        kept = nms_fixed(x1, y1, x2, y2, area, thr, norm, limit)
    return order[kept]


def proposals_one_image(scores, bbox_deltas, im_shape, anchors, variances, pre_nms_top_n: int,
                        post_nms_top_n: int, nms_thresh: float, min_size: float, eta: float,
                        pixel_offset: bool):
    """ProposalForOneImage: (rois [R, 4], probs [R, 1]) of one image.

    Args:
        scores: [A, H, W] T; bbox_deltas: [4A, H, W] T; im_shape: [2] T (h, w);
        anchors, variances: [H*W*A, 4] T, in (H, W, A) order.
    """
    T = scores.dtype.type
    A, H, W = scores.shape
    s = scores.transpose(1, 2, 0).ravel()
    idx = candidates(s, pre_nms_top_n, nms_thresh <= 0)
    hh, rem = np.divmod(idx, W * A)
    ww, aa = np.divmod(rem, A)
    d = bbox_deltas[4 * aa[:, None] + np.arange(4), hh[:, None], ww[:, None]]
    offset = T(1) if pixel_offset else T(0)
    p = decode(anchors[idx], d, variances[idx], offset)
    im_h, im_w = im_shape[0], im_shape[1]
    zero = T(0)
    for c, bound in ((0, im_w - offset), (1, im_h - offset), (2, im_w - offset),
                     (3, im_h - offset)):
        p[:, c] = _max(_min(p[:, c], bound), zero)
    ws = p[:, 2] - p[:, 0] + offset
    hs = p[:, 3] - p[:, 1] + offset
    ms = max(np.float32(min_size), np.float32(1.0))
    keep = (ws >= ms) & (hs >= ms)
    if pixel_offset:
        keep &= (p[:, 0] + ws / T(2) <= im_w) & (p[:, 1] + hs / T(2) <= im_h)
    keep = np.flatnonzero(keep)
    if keep.size == 0:
        return np.zeros((1, 4), T), np.zeros((1, 1), T)
    boxes, sc = p[keep], s[idx[keep]]
    if nms_thresh <= 0:
        return boxes, sc[:, None]
    limit = post_nms_top_n if post_nms_top_n > 0 else boxes.shape[0]
    sel = nms(boxes, sc, nms_thresh, eta, pixel_offset, limit)
    return boxes[sel], sc[sel, None]


def generate_proposals(scores: np.ndarray, bbox_deltas: np.ndarray, im_shape: np.ndarray,
                       anchors: np.ndarray, variances: np.ndarray, pre_nms_top_n: int,
                       post_nms_top_n: int, nms_thresh: float, min_size: float, eta: float,
                       pixel_offset: bool):
    """The compute step of GenerateProposals (checked inputs): every image's proposals.

    Args:
        scores: [N, A, H, W] T; bbox_deltas: [N, 4A, H, W] T; im_shape: [N, 2] T;
        anchors, variances: [H*W*A, 4] T.
    Returns:
        (rpn_rois [R, 4] T, rpn_roi_probs [R, 1] T, rpn_rois_num [N] int32).
    """
    T = scores.dtype.type
    rois, probs = [], []
    for n in range(scores.shape[0]):
        try:
            r, p = proposals_one_image(scores[n], bbox_deltas[n], im_shape[n], anchors,
                                       variances, pre_nms_top_n, post_nms_top_n, nms_thresh,
                                       min_size, eta, pixel_offset)
        except NmsTooCostly as e:
            A, H, W = scores.shape[1:]
            raise RoiOpError(
                "GenerateProposals", "input 'scores'",
                f"image {n}: NMS over {e.boxes} boxes (of {A * H * W} anchors [A, H, W] = "
                f"[{A}, {H}, {W}], pre_nms_top_n {pre_nms_top_n}, post_nms_top_n "
                f"{post_nms_top_n}, nms_thresh {nms_thresh:g}, eta {eta:g}) would make more "
                f"than {common.NMS_MAX_COMPARISONS} box comparisons ({e.why}); give pre_nms_top_n "
                f"and post_nms_top_n > 0 (PaddleDetection's RPN tests with 1000 / 1000 a level)"
            ) from None
        rois.append(r)
        probs.append(p)
    counts = np.array([len(r) for r in rois], np.int32)
    if not rois:
        return np.zeros((0, 4), T), np.zeros((0, 1), T), counts
    return np.concatenate(rois), np.concatenate(probs), counts
