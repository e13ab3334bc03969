"""Paddle's generate_proposals (v2) and distribute_fpn_proposals, transcribed literally from
their CPU kernels (paddle/phi/kernels/cpu/generate_proposals_kernel.cc,
distribute_fpn_proposals_kernel.cc, funcs/detection/nms_util.h), one box at a time, in the
float type T of the scores with Paddle's own mixing of double constants (docs/semantics.md).

Scalar arithmetic runs on NumPy scalars of T; expf / log2f are the C library's (the functions
Paddle's kernels call; glibc's are not always correctly rounded), through ctypes.
"""

from __future__ import annotations

import math

import numpy as np

from ..libm import c_expf, c_log2f
from .cxx import std_nth_element, std_sort

#: kBBoxClipDefault: the largest log-scale a box side is decoded with
BBOX_CLIP = math.log(1000.0 / 16.0)


def _exp(x):
    """std::exp in T: the C library's expf for float32, exp for float64."""
    return c_expf(x) if isinstance(x, np.float32) else np.float64(math.exp(float(x)))


def _log2(x):
    """std::log2 in T: log2f for float32, log2 for float64."""
    return c_log2f(x) if isinstance(x, np.float32) else np.float64(math.log2(float(x)))


def _min(a, b):
    return b if b < a else a  # std::min


def _max(a, b):
    return b if a < b else a  # std::max


def _box_coder(T, anchor, delta, var, offset):
    """BoxCoder for one row: the anchor decoded by its deltas (scaled by variances)."""
    aw = anchor[2] - anchor[0] + offset
    ah = anchor[3] - anchor[1] + offset
    half = np.float64(0.5)  # a double constant: the sum is double, then T
    acx = T(anchor[0] + half * aw)
    acy = T(anchor[1] + half * ah)
    clip = T(BBOX_CLIP)  # std::min<T>
    cx = var[0] * delta[0] * aw + acx
    cy = var[1] * delta[1] * ah + acy
    w = _exp(_min(var[2] * delta[2], clip)) * aw
    h = _exp(_min(var[3] * delta[3], clip)) * ah
    return [cx - w / 2, cy - h / 2, cx + w / 2 - offset, cy + h / 2 - offset]


def _area(T, box, normalized):
    """BBoxArea: 0 for an inverted box; (w + 1) * (h + 1), or w * h when normalized."""
    if box[2] < box[0] or box[3] < box[1]:
        return T(0)
    w = box[2] - box[0]
    h = box[3] - box[1]
    return w * h if normalized else (w + 1) * (h + 1)


def jaccard_overlap(T, box1, box2, normalized: bool):
    """JaccardOverlap of nms_util.h: IoU with +1 pixel sides unless ``normalized``."""
    if box2[0] > box1[2] or box2[2] < box1[0] or box2[1] > box1[3] or box2[3] < box1[1]:
        return T(0)
    ixmin = _max(box1[0], box2[0])
    iymin = _max(box1[1], box2[1])
    ixmax = _min(box1[2], box2[2])
    iymax = _min(box1[3], box2[3])
    norm = T(0) if normalized else T(1)
    inter = (ixmax - ixmin + norm) * (iymax - iymin + norm)
    return inter / (_area(T, box1, normalized) + _area(T, box2, normalized) - inter)


def nms(T, boxes: list, scores: list, nms_threshold, eta: float, pixel_offset: bool) -> list:
    """funcs::NMS: visit boxes by score (a stable ascending sort, taken from its back: equal
    scores latest first), keep one whose overlap with every kept box is <= the adaptive
    threshold, which is multiplied by eta after each keep while it is > 0.5."""
    order = sorted(range(len(scores)), key=lambda j: scores[j])  # std::stable_sort, "<"
    selected = []
    threshold = T(nms_threshold)
    normalized = not pixel_offset
    # IEEE, as in Paddle, without warnings: two zero-area boxes that touch give 0 / 0 = NaN
    # (not <= any threshold: suppressed); huge boxes overflow to inf
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        while order:
            idx = order[-1]
            flag = True
            for kept in selected:
                if not flag:
                    break
                flag = jaccard_overlap(T, boxes[idx], boxes[kept], normalized) <= threshold
            if flag:
                selected.append(idx)
            order.pop()
            if flag and eta < 1 and threshold > 0.5:
                threshold = threshold * T(np.float32(eta))
    return selected


def proposals_for_one_image(im_shape, anchors, variances, deltas, scores, pre_nms_top_n: int,
                            post_nms_top_n: int, nms_thresh: float, min_size: float,
                            eta: float, pixel_offset: bool):
    """ProposalForOneImage: (rois [R, 4], probs [R, 1]) of one image, from its anchors' scores
    [M] and deltas [M, 4] (in N, H, W, A order)."""
    T = scores.dtype.type
    s = [float(v) for v in scores]
    index = list(range(len(s)))
    comp = lambda i, j: s[i] > s[j]  # noqa: E731
    if pre_nms_top_n <= 0 or pre_nms_top_n >= len(s):
        std_sort(index, comp)
    else:
        std_nth_element(index, pre_nms_top_n, comp)
        index = index[:pre_nms_top_n]
    offset = T(1) if pixel_offset else T(0)
    proposals = [_box_coder(T, anchors[i], deltas[i], variances[i], offset) for i in index]
    sel_scores = [scores[i] for i in index]
    im_h, im_w = im_shape[0], im_shape[1]
    for p in proposals:  # ClipTiledBoxes, is_scale false
        for c in range(4):
            bound = (im_w if c % 2 == 0 else im_h) - offset
            p[c] = _max(_min(p[c], bound), T(0))
    keep = []  # FilterBoxes, is_scale false
    min_size = max(np.float32(min_size), np.float32(1.0))
    for i, p in enumerate(proposals):
        ws = p[2] - p[0] + offset
        hs = p[3] - p[1] + offset
        if pixel_offset:
            x_ctr = p[0] + ws / 2
            y_ctr = p[1] + hs / 2
            if ws >= min_size and hs >= min_size and x_ctr <= im_w and y_ctr <= im_h:
                keep.append(i)
        elif ws >= min_size and hs >= min_size:
            keep.append(i)
    if not keep:  # Paddle's stand-in: one zero box with score 0
        return np.zeros((1, 4), T), np.zeros((1, 1), T)
    boxes = [proposals[i] for i in keep]
    kept_scores = [sel_scores[i] for i in keep]
    if nms_thresh <= 0:
        return np.array(boxes, T).reshape(-1, 4), np.array(kept_scores, T).reshape(-1, 1)
    sel = nms(T, boxes, kept_scores, nms_thresh, eta, pixel_offset)
    if 0 < post_nms_top_n < len(sel):
        sel = sel[:post_nms_top_n]
    return (np.array([boxes[i] for i in sel], T).reshape(-1, 4),
            np.array([kept_scores[i] for i in sel], T).reshape(-1, 1))


def generate_proposals(scores, bbox_deltas, im_shape, anchors, variances, *,
                       pre_nms_top_n=6000, post_nms_top_n=1000, nms_thresh=0.5, min_size=0.1,
                       eta=1.0, pixel_offset=1):
    """Paddle generate_proposals (v2), per image: the pre_nms_top_n best anchors (std::sort /
    std::nth_element order), decoded, clipped to im_shape (h, w), small boxes dropped, NMS,
    the first post_nms_top_n kept. Returns (rpn_rois [R, 4], rpn_roi_probs [R, 1] of T,
    rpn_rois_num [N] int32)."""
    T = scores.dtype.type
    N, A, H, W = scores.shape
    sc = np.ascontiguousarray(scores.transpose(0, 2, 3, 1)).reshape(N, H * W * A)
    dl = np.ascontiguousarray(bbox_deltas.transpose(0, 2, 3, 1)).reshape(N, H * W * A, 4)
    an = np.asarray(anchors).reshape(-1, 4)
    va = np.asarray(variances).reshape(-1, 4)
    rois, probs, nums = [], [], []
    for i in range(N):
        r, p = proposals_for_one_image(im_shape[i], an, va, dl[i], sc[i], int(pre_nms_top_n),
                                       int(post_nms_top_n), float(nms_thresh),
                                       float(min_size), float(eta), bool(pixel_offset))
        rois.append(r)
        probs.append(p)
        nums.append(len(r))
    return (np.concatenate(rois).astype(T, copy=False) if rois else np.zeros((0, 4), T),
            np.concatenate(probs).astype(T, copy=False) if probs else np.zeros((0, 1), T),
            np.array(nums, np.int32))


def target_level(box, min_level: int, max_level: int, refer_level: int, refer_scale: int,
                 pixel_offset: bool) -> int:
    """The FPN level of one roi: floor(log2(sqrt(area) / refer_scale + 1e-6) + refer_level),
    clamped to [min_level, max_level], in T (sqrtf, log2f for float32); an infinite area
    gives INT_MIN, so min_level."""
    T = type(box[0])
    with np.errstate(over="ignore"):  # a huge box's area is inf, as in Paddle
        roi_scale = T(np.sqrt(_area(T, box, not pixel_offset)))
    v = np.floor(_log2(roi_scale / T(refer_scale) + T(1e-6)) + T(refer_level))
    # the float -> int conversion of x86 (cvttss2si): a value no int holds is INT_MIN
    lvl = int(v) if abs(v) < 2.0 ** 31 else -(1 << 31)
    return min(max_level, max(lvl, min_level))


def distribute_fpn_proposals(fpn_rois, rois_num, *, min_level, max_level, refer_level,
                             refer_scale, pixel_offset=0):
    """Paddle distribute_fpn_proposals: each roi to its level; per level the rois (image by
    image, in order) and their per-image counts; restore_index [R, 1] int32 gives each input
    roi's row in the levels' concatenation. Returns (rois per level, counts per level,
    restore_index)."""
    T = fpn_rois.dtype.type
    L = max_level - min_level + 1
    lod = [0]
    for n in rois_num:
        lod.append(lod[-1] + int(n))
    R = lod[-1]
    levels = [target_level(fpn_rois[r], min_level, max_level, refer_level, refer_scale,
                           bool(pixel_offset)) for r in range(R)]
    per_level = [[] for _ in range(L)]
    counts = [[0] * (len(lod) - 1) for _ in range(L)]
    members = [[] for _ in range(L)]
    for i in range(len(lod) - 1):
        for r in range(lod[i], lod[i + 1]):
            k = levels[r] - min_level
            per_level[k].append(fpn_rois[r])
            members[k].append(r)
            counts[k][i] += 1
    restore = np.zeros((R, 1), np.int32)
    pos = 0
    for k in range(L):
        for r in members[k]:
            restore[r, 0] = pos
            pos += 1
    rois = [np.array(p, T).reshape(-1, 4) for p in per_level]
    return rois, [np.array(c, np.int32) for c in counts], restore


def distribute_fpn_proposals_outputs(fpn_rois, rois_num, **attrs) -> tuple:
    """``distribute_fpn_proposals`` with the outputs of its nodes (DistributeFpnProposals_L{L}):
    rois_0 .. rois_{L-1}, rois_num_0 .. rois_num_{L-1}, restore_index."""
    rois, counts, restore = distribute_fpn_proposals(fpn_rois, rois_num, **attrs)
    return tuple(rois) + tuple(counts) + (restore,)
