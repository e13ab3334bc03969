"""NumPy step of Paddle's collect_fpn_proposals, equal to its CPU kernel bit for bit
(ort_roi/definitions/collect.py is the literal transcription).

Paddle sorts the records of every level with std::stable_sort by ``a.score >= b.score``.
libstdc++'s stable sort only ever asks comp(x, y) of an x that stood after y in the input
(insertion sort: the element inserted against those before it; merges: the later run's head
against the earlier run's), where ``>=`` means "greater, or equal and later": the result is
the one order strict in (score descending, position descending) — equal scores latest
first, positions being the levels' concatenation. Here that is one stable argsort of the
reversed scores, then a stable argsort by image of the kept ones.
"""

from __future__ import annotations

import numpy as np


def collect_fpn_proposals(multi_rois: list, multi_scores: list, multi_counts: list,
                          post_nms_topN: int) -> tuple[np.ndarray, np.ndarray]:
    """The post_nms_topN best rois by score over all levels and images (equal scores: later
    first), regrouped image by image (score order kept within an image).

    Args:
        multi_rois: L arrays [R_l, 4] of one float type.
        multi_scores: L arrays [R_l, 1] of that type (no NaN).
        multi_counts: L int64 arrays [N] (>= 0, level l's summing to R_l).
        post_nms_topN: rois kept (>= 0; all when fewer).

    Returns:
        (fpn_rois [K, 4], rois_num [N] int32), K = min(post_nms_topN, sum of R_l).
    """
    rois = np.concatenate(multi_rois) if len(multi_rois) > 1 else multi_rois[0]
    scores = np.concatenate([s.reshape(-1) for s in multi_scores])
    n = multi_counts[0].shape[0]
    image = np.concatenate([np.repeat(np.arange(n, dtype=np.intp), c) for c in multi_counts])
    R = scores.shape[0]
    k = min(int(post_nms_topN), R)
    # descending by score, ties by descending position: stable on the reversed array
    order = (R - 1) - np.argsort(-scores[::-1], kind="stable")[:k]
    kept = order[np.argsort(image[order], kind="stable")]
    counts = np.bincount(image[order], minlength=n).astype(np.int32)
    return np.ascontiguousarray(rois[kept]), counts
