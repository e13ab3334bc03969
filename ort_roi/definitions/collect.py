"""Paddle's collect_fpn_proposals, transcribed literally from its CPU kernel
(paddle/phi/kernels/impl/collect_fpn_proposals_kernel_impl.h), one roi at a time.

The kernel puts every roi of every level in one list of (score, image, index, level) records,
level after level, sorts it with ``std::stable_sort`` by ``CompareByScore`` (``a.score >=
b.score``: not a strict order, so equal scores do not keep their order; libstdc++'s merge
steps, transcribed in ``cxx.std_stable_sort``, leave them latest first), keeps the first
post_nms_topN (all when there are fewer), sorts those again with ``std::stable_sort`` by image
(``a.batch_id < b.batch_id``: score order kept within an image) and copies their boxes out.
rois_num counts the kept rois of each image (int32).

Two places where Paddle's kernel is not well defined, and what this definition does instead
(docs/semantics.md, "Deliberate divergences"): Paddle finds a roi's image by stepping at most
one image per roi (an image with no rois in a level, followed by one with rois, hands the next
roi to the empty image); here each roi belongs to the image its level's counts put it in. Paddle
counts rois per image by the changes of image along the kept list (an image with none kept, past
the first, shifts the counts, and it reads past its count vector for the images at the end);
here each image's count is the number of its rois kept, 0 if none.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .cxx import std_stable_sort


class ScoreWithID(NamedTuple):
    """Paddle's ScoreWithID: a roi's score, its image, its row in its level, its level."""

    score: np.floating
    batch_id: int
    index: int
    level: int


def collect_fpn_proposals(multi_rois: list, multi_scores: list, multi_rois_num: list,
                          post_nms_topN: int) -> tuple[np.ndarray, np.ndarray]:
    """Paddle collect_fpn_proposals: the post_nms_topN best rois by score over every level and
    image (equal scores: the later level, then the later row, first), regrouped image by image
    in score order. Returns (fpn_rois [K, 4] of the rois' type, rois_num [N] int32)."""
    T = multi_rois[0].dtype
    L = len(multi_rois)
    integral = [0]
    for i in range(L):
        integral.append(integral[-1] + sum(int(n) for n in multi_rois_num[i]))
    batch_size = len(multi_rois_num[0])
    records = []
    for i in range(L):
        counts = [int(n) for n in multi_rois_num[i]]
        image, end = 0, counts[0] if counts else 0
        for j in range(integral[i + 1] - integral[i]):
            while j >= end:  # the image roi j of this level belongs to
                image += 1
                end += counts[image]
            records.append(ScoreWithID(multi_scores[i][j, 0], image, j, i))
    topn = min(post_nms_topN, integral[L])
    std_stable_sort(records, lambda a, b: a.score >= b.score)  # CompareByScore
    records = records[:topn]
    std_stable_sort(records, lambda a, b: a.batch_id < b.batch_id)  # CompareByBatchid
    fpn_rois = np.zeros((topn, 4), T)
    rois_num = [0] * batch_size
    for k, r in enumerate(records):
        fpn_rois[k] = multi_rois[r.level][r.index]
        rois_num[r.batch_id] += 1
    return fpn_rois, np.array(rois_num, np.int32)


def collect_fpn_proposals_outputs(*inputs, post_nms_topN: int) -> tuple:
    """``collect_fpn_proposals`` as its nodes (CollectFpnProposals_L{L}) take it: inputs
    rois_0 .. rois_{L-1}, scores_0 .., rois_num_0 ..; outputs (fpn_rois, rois_num)."""
    L = len(inputs) // 3
    return collect_fpn_proposals(list(inputs[:L]), list(inputs[L:2 * L]),
                                 list(inputs[2 * L:]), int(post_nms_topN))
