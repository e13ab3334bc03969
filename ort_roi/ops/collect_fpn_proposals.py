"""CollectFpnProposals_L{L}: Paddle's collect_fpn_proposals, the merge of an FPN RPN's per-level
proposals into the best post_nms_topN of the batch (Paddle's static-graph detectors and older
PaddleDetection configs, between generate_proposals and distribute_fpn_proposals), exact to
Paddle's CPU kernel (ort-roi export-paddle writes it). One op per number of levels L (1 to
MAX_LEVELS): the bridge declares no variable number of inputs."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..definitions.collect import collect_fpn_proposals_outputs as definition
from ..errors import RoiOpError
from ..kernels.checks import check_finite, float_input, image_counts, quiet
from ..kernels.dispatch import compute, host, steps
from ..spec import MAX_LEVELS, Attr, Dims, Input, Op, OpSpec, Output, level_forms


def _level_count(spec: OpSpec) -> int:
    return len(spec.inputs) // 3


def collect_shapes(spec: OpSpec, dims: Sequence[Dims], attrs: Mapping[str, Any],
                   values: Mapping[int, np.ndarray]) -> list[list]:
    """[K, 4], [N] (K = min(post_nms_topN, sum of R_l), known when every R_l is); RoiOpError
    where known shapes contradict the op."""
    L = _level_count(spec)
    rows = []
    for i in range(L):
        for k, cols in ((i, 4), (L + i, 1)):
            d = dims[k]
            if d is not None and (len(d) != 2 or (isinstance(d[1], int) and d[1] != cols)):
                raise RoiOpError(spec.name, f"input '{spec.inputs[k].name}'",
                                 f"must have shape {spec.inputs[k].shape}, got "
                                 f"{[v if v is not None else '?' for v in d]}")
        d = dims[2 * L + i]
        if d is not None and len(d) != 1:
            raise RoiOpError(spec.name, f"input '{spec.inputs[2 * L + i].name}'",
                             f"must have rank 1 [N], got rank {len(d)}")
        r = dims[i][0] if dims[i] is not None else None
        rows.append(r if isinstance(r, int) else None)
    n = next((d[0] for d in dims[2 * L:] if d is not None), None)
    k = None
    if all(r is not None for r in rows) and attrs.get("post_nms_topN") is not None:
        k = min(sum(rows), int(attrs["post_nms_topN"]))
    return [[k, 4], [n]]


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"CollectFpnProposals_L{L}",
        source="Paddle collect_fpn_proposals (fluid.layers.collect_fpn_proposals; "
               "_C_ops.collect_fpn_proposals; CPU kernel)",
        doc=f"The rois of {L} levels (each image by image, per-image counts rois_num_l) as "
            "one list, level after level; its post_nms_topN best by score over the whole "
            "batch (all when fewer), equal scores the later in that list first (Paddle's "
            "std::stable_sort by score >= score); those regrouped image by image (a stable "
            "sort by image: score order within an image); rois_num the kept rois of each "
            "image.",
        inputs=tuple(Input(f"rois_{i}", "T", f"[R_{i}, 4]",
                           f"rois [x1, y1, x2, y2] of level {i}, image by image")
                     for i in range(L))
        + tuple(Input(f"scores_{i}", "T", f"[R_{i}, 1]", f"the scores of rois_{i}")
                for i in range(L))
        + tuple(Input(f"rois_num_{i}", "I", "[N]",
                      f"rois_{i} per image, in order; sums to R_{i}")
                for i in range(L)),
        attrs=(Attr("post_nms_topN", int, None, min=0,
                    doc="rois kept over the whole batch (all when fewer)"),),
        outputs=(Output("fpn_rois", "[K, 4]", doc="the kept rois, image by image, by score "
                        "within an image"),
                 Output("rois_num", "[N]", "int32", doc="kept rois per image")),
        shapes=collect_shapes,
        features=(0,),
        boxes_input=0,
        rowwise=False,
        same_types=True,
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


@quiet
def collect_fpn_proposals(*inputs, post_nms_topN: int):
    """Paddle's collect_fpn_proposals, bit for bit (its CPU kernel): CollectFpnProposals in
    docs/semantics.md. Computed on the host (CuPy input is copied).

    Args:
        *inputs: 3L arrays (L levels, 1 to MAX_LEVELS): rois_0 .. rois_{L-1} ([R_l, 4]
            float32 or float64, rows [x1, y1, x2, y2] image by image), scores_0 ..
            scores_{L-1} ([R_l, 1], the rois' dtype, no NaN), rois_num_0 .. rois_num_{L-1}
            ([N] int32 or int64, level l's rois per image: >= 0, summing to R_l).
        post_nms_topN: rois kept over the whole batch (>= 0; all when fewer).

    Returns:
        (fpn_rois [K, 4] of the rois' dtype, rois_num [N] int32), K = min(post_nms_topN,
        sum of R_l): the best rois by score (equal scores: the later level, then the later
        row, first), image by image. Raises RoiOpError on bad input.
    """
    if len(inputs) % 3 or not 1 <= len(inputs) // 3 <= MAX_LEVELS:
        raise RoiOpError("CollectFpnProposals", "inputs",
                         f"must be rois, scores and rois_num of 1 to {MAX_LEVELS} levels (3L "
                         f"arrays), got {len(inputs)}")
    L = len(inputs) // 3
    spec = SPECS[L]
    op = spec.name
    a = spec.resolve(dict(post_nms_topN=post_nms_topN))
    rois, scores, counts = [], [], []
    T = None
    n = None
    for i in range(L):
        r = float_input(op, f"rois_{i}", inputs[i], T, "rois_0")
        T = r.dtype
        if r.ndim != 2 or r.shape[1] != 4:
            raise RoiOpError(op, f"input 'rois_{i}'",
                             f"must have shape [R_{i}, 4], got {list(r.shape)}")
        s = float_input(op, f"scores_{i}", inputs[L + i], T, "rois_0")
        if s.shape != (r.shape[0], 1):
            raise RoiOpError(op, f"input 'scores_{i}'",
                             f"must have shape [R_{i}, 1] = {[r.shape[0], 1]} (one score per "
                             f"roi of rois_{i}), got {list(s.shape)}")
        check_finite(op, f"scores_{i}", s.ravel(), nan_only=True, unit="score")
        c = np.asarray(host(inputs[2 * L + i]))
        if n is None:
            n = c.shape[0] if c.ndim == 1 else -1
        c = image_counts(op, f"rois_num_{i}", c, n, r.shape[0],
                         "[N] = [{}] (one count per image, as rois_num_0)"
                         if i else "[N] (one count per image)",
                         f"R_{i} = {{}} (the rows of rois_{i})")
        rois.append(np.ascontiguousarray(r))
        scores.append(s)
        counts.append(c.astype(np.int64))
    return compute(steps.collect_fpn_proposals, rois, multi_scores=scores, multi_counts=counts,
                   post_nms_topN=a["post_nms_topN"])


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=collect_fpn_proposals, definition=definition,
    steps=(steps.collect_fpn_proposals,),
    forms=level_forms(SPECS, "ort-roi export-paddle (Paddle collect_fpn_proposals)",
                      "Paddle collect_fpn_proposals"),
)
