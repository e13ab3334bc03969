"""NumPy steps of Paddle's generate_proposals (v2) and distribute_fpn_proposals, equal to their
CPU kernels bit for bit (ort_roi/definitions/proposals.py is the literal transcription).

Ordering: Paddle picks the pre_nms_top_n best anchors with libstdc++'s std::nth_element (or
sorts them all with std::sort); neither is stable, so where scores tie, their order (and at the
cut, which of them are taken) is the algorithm's. Without ties in the taken scores (the common
case) any descending order is exact; with ties the steps here replay libstdc++'s introselect /
introsort with a vectorised partition (``order_nth_element``, ``order_sort``).

NMS: a box is kept when its overlap with every kept box is <= the threshold. The suppressing
pairs are found among the boxes that overlap in x (a sort by x1, each box paired with those
starting within it), and the keep rule (a box is kept when no kept box visited before it
suppresses it: triangular) is iterated to its fixed point, which is exact. Where the pairs
are too many or the chains too long, the boxes are visited in blocks (each block's keeps from
its own overlaps, then suppressing every later box at once). With eta < 1 the threshold falls
after each keep; then each kept box is one vectorised step.
"""

from __future__ import annotations

import math

import numpy as np

from ... import libm
from ...definitions.cxx import heap_select, insertion_sort, sort_heap

F64 = np.float64
#: kBBoxClipDefault: the largest log-scale a box side is decoded with
BBOX_CLIP = math.log(1000.0 / 16.0)
#: Candidates visited per block of the NMS
NMS_BLOCK = 256
#: libstdc++'s _S_threshold (introsort leaves ranges this small to the insertion sort)
STL_THRESHOLD = 16
INT_MIN = -(1 << 31)


# --- libstdc++'s orders, vectorised ------------------------------------------------------------

def _partition(v: np.ndarray, sv: np.ndarray, first: int, last: int) -> int:
    """std::__unguarded_partition_pivot on v[first:last] (indices; sv = their scores, kept
    alongside; comp: a goes before b when its score is greater), in place; returns the cut.
    The scans' stops are found at once: the left scan stops at elements not before the
    pivot, the right one at elements the pivot is not before; the i-th stops swap while they
    have not crossed."""
    mid = first + (last - first) // 2
    a, b, c = first + 1, mid, last - 1
    sa, sb, sc = sv[a], sv[b], sv[c]
    if sa > sb:
        m = b if sb > sc else (c if sa > sc else a)
    elif sa > sc:
        m = a
    elif sb > sc:
        m = c
    else:
        m = b
    v[first], v[m] = v[m], v[first]
    sv[first], sv[m] = sv[m], sv[first]
    pivot = sv[first]
    seg = sv[first + 1:last]
    ls = np.flatnonzero(seg <= pivot) + (first + 1)  # not (x > pivot): no NaN here
    rs = np.append(np.flatnonzero(seg >= pivot)[::-1] + (first + 1), first)
    n = min(len(ls), len(rs))
    crossed = ls[:n] >= rs[:n]
    k = int(np.argmax(crossed)) if crossed.any() else n
    if k:
        left, right = ls[:k], rs[:k]
        v[left], v[right] = v[right], v[left].copy()
        sv[left], sv[right] = sv[right], sv[left].copy()
        return int(min(ls[k], rs[k - 1])) if k < len(ls) else int(rs[k - 1])
    return int(ls[0])


def _literal(v: np.ndarray, sv: np.ndarray, first: int, last: int, fn) -> None:
    """Run a literal libstdc++ helper ``fn(list, comp)`` on v[first:last] (sv alongside)."""
    sub = v[first:last].tolist()
    vals = dict(zip(sub, sv[first:last].tolist()))
    fn(sub, lambda i, j: vals[i] > vals[j])
    v[first:last] = sub
    sv[first:last] = [vals[i] for i in sub]


def order_nth_element(s: np.ndarray, nth: int) -> np.ndarray:
    """The indices of ``s`` as std::nth_element(begin, begin + nth, end, s[i] > s[j]) leaves
    them (libstdc++'s introselect).

    Args:
        s: [M] scores (float, no NaN).
        nth: 0 <= nth <= M.
    Returns:
        [M] int64 indices; the first ``nth`` are the nth best, in libstdc++'s order.
    """
    M = s.size
    v = np.arange(M)
    if M == 0 or nth == M:
        return v
    sv = s.copy()
    first, last = 0, M
    depth = 2 * (M.bit_length() - 1)
    while last - first > 3:
        if depth == 0:
            def select(sub, comp, k=nth - first):
                heap_select(sub, 0, k + 1, len(sub), comp)
                sub[0], sub[k] = sub[k], sub[0]
            _literal(v, sv, first, last, select)
            return v
        depth -= 1
        cut = _partition(v, sv, first, last)
        if cut <= nth:
            first = cut
        else:
            last = cut
    _literal(v, sv, first, last, lambda sub, comp: insertion_sort(sub, 0, len(sub), comp))
    return v


def order_sort(s: np.ndarray) -> np.ndarray:
    """The indices of ``s`` as std::sort(begin, end, s[i] > s[j]) leaves them (libstdc++'s
    introsort; its final insertion sort is a stable sort of the state the loop leaves).

    Args:
        s: [M] scores (float, no NaN).
    Returns:
        [M] int64 indices, scores descending, ties in libstdc++'s order.
    """
    M = s.size
    v = np.arange(M)
    if M == 0:
        return v
    sv = s.copy()
    stack = [(0, M, 2 * (M.bit_length() - 1))]
    while stack:
        first, last, depth = stack.pop()
        while last - first > STL_THRESHOLD:
            if depth == 0:
                def heapsort(sub, comp):
                    heap_select(sub, 0, len(sub), len(sub), comp)
                    sort_heap(sub, 0, len(sub), comp)
                _literal(v, sv, first, last, heapsort)
                break
            depth -= 1
            cut = _partition(v, sv, first, last)
            stack.append((cut, last, depth))
            last = cut
    return v[np.argsort(-sv, kind="stable")]


def candidates(s: np.ndarray, pre_nms_top_n: int, exact_order: bool) -> np.ndarray:
    """The anchors Paddle takes before NMS, in the order its sort leaves them.

    Args:
        s: [M] scores of one image (H, W, A order).
        pre_nms_top_n: how many (<= 0 or >= M: all, std::sort; else std::nth_element).
        exact_order: the order itself is wanted (nms_thresh <= 0 returns the boxes in it);
            else only the order of equal scores matters (NMS visits boxes by score).
    Returns:
        [K] int64 indices into s.
    """
    M = s.size
    if pre_nms_top_n <= 0 or pre_nms_top_n >= M:
        o = np.argsort(-s, kind="stable")
        vals = s[o]
        if not (vals[1:] == vals[:-1]).any():
            return o
        return order_sort(s)
    k = pre_nms_top_n
    if not exact_order:
        part = np.argpartition(-s, k)
        top = part[:k]
        o = top[np.argsort(-s[top], kind="stable")]
        vals = s[o]
        if not ((vals[1:] == vals[:-1]).any() or vals[-1] == s[part[k]]):
            return o
    return order_nth_element(s, k)[:k]


# --- generate_proposals --------------------------------------------------------------------------

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


def _nms_blocks(x1, y1, x2, y2, area, thr, norm, limit: int) -> np.ndarray:
    """Greedy NMS at a fixed threshold over boxes in visiting order; positions kept."""
    m = x1.size

    def over(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        """[len(r), len(c)]: kept box r suppresses candidate c (JaccardOverlap(c, r) > thr).
        For boxes with x1 <= x2, y1 <= y2 (as the filter leaves them) Paddle's disjointness
        test is a negative intersection side; the IoU is computed for the others only."""
        dx = np.minimum(x2[c], x2[r, None]) - np.maximum(x1[c], x1[r, None])
        dy = np.minimum(y2[c], y2[r, None]) - np.maximum(y1[c], y1[r, None])
        hit = (dx >= 0) & (dy >= 0)
        i, j = np.nonzero(hit)
        if i.size:
            inter = (dx[i, j] + norm) * (dy[i, j] + norm)
            iou = inter / (area[c[j]] + area[r[i]] - inter)
            hit[i, j] = ~(iou <= thr)
        return hit

    suppressed = np.zeros(m, bool)
    kept: list[np.ndarray] = []
    total = 0
    for start in range(0, m, NMS_BLOCK):
        end = min(start + NMS_BLOCK, m)
        cand = start + np.flatnonzero(~suppressed[start:end])
        if cand.size == 0:
            continue
        o = np.triu(over(cand, cand), 1)
        keep = np.ones(cand.size, bool)
        while True:  # keep[j] = no kept i < j suppresses j: a triangular rule, its fixed point
            new = ~(o & keep[:, None]).any(0)
            if np.array_equal(new, keep):
                break
            keep = new
        new_kept = cand[keep]
        if total + new_kept.size >= limit:
            kept.append(new_kept[:limit - total])
            break
        kept.append(new_kept)
        total += new_kept.size
        if end < m and new_kept.size:
            rest = np.arange(end, m)
            rest = rest[~suppressed[end:]]
            if rest.size:
                suppressed[rest] = over(new_kept, rest).any(0)
    return np.concatenate(kept) if kept else np.zeros(0, np.int64)


#: The most x-overlapping pairs the sparse NMS enumerates (else the block NMS runs)
NMS_PAIRS = 1 << 22
#: A pair costs the sparse NMS about as much as this many box pairs cost the block NMS, which
#: compares its n boxes with the min(limit, n) it keeps: the sparse NMS runs while its pairs
#: are fewer than n * min(limit, n) / NMS_PAIR_COST (0: up to NMS_PAIRS). Measured (float32,
#: 2 cores): 4800 anchors clipped to a 256 x 320 image, 2.8 M pairs in the first 4096, limit
#: 300: sparse 355 ms, block 39 ms; 6000 P2 boxes of an 800 x 1216 image, 0.3 M pairs: sparse
#: 13 ms, block 16 (limit 300) and 45 ms (limit 1000).
NMS_PAIR_COST = 3
#: The most rounds the sparse NMS iterates its keep rule (else the block NMS runs)
NMS_ROUNDS = 64


def _nms_sparse(x1, y1, x2, y2, area, thr, norm, limit: int,
                max_pairs: int = NMS_PAIRS) -> np.ndarray | None:
    """Greedy NMS at a fixed threshold, from the suppressing pairs only: boxes sorted by x1
    (or y1, whichever pairs fewer), each pairs with the boxes starting early enough to overlap
    it by more than thr of its side (every pair that can suppress, once), their IoU as
    Paddle computes it; keep[j] = no kept box visited before j suppresses it, iterated to its
    fixed point (exact: the rule is triangular). None when there are more than ``max_pairs``
    pairs or the chain of suppressions is too long (the caller runs the block NMS)."""
    m = x1.size
    best = None
    # IoU > thr needs an intersection side > thr * each box's side (inter <= side_x * h and
    # union >= w * h): box b (starting after a) can only be suppressed by a, or suppress it,
    # when it starts before x2_a + norm - thr * w_a; 1e-3 of margin covers the rounding
    t = F64(thr) * (1 - 1e-3)
    for lo, hi in ((x1, x2), (y1, y2)):  # pairs overlapping along the sparser axis
        o = np.argsort(lo, kind="stable")
        reach = hi[o] + F64(norm) - t * (hi[o].astype(F64) - lo[o] + F64(norm))
        cnt = np.maximum(np.searchsorted(lo[o], reach, side="right") - np.arange(1, m + 1), 0)
        P = int(cnt.sum())
        if best is None or P < best[0]:
            best = (P, o, cnt)
    P, o, cnt = best
    if P > max_pairs:
        return None
    starts = np.cumsum(cnt) - cnt
    a = np.repeat(np.arange(m), cnt)
    b = a + 1 + (np.arange(P) - np.repeat(starts, cnt))
    u, v = o[a], o[b]
    u, v = np.minimum(u, v), np.maximum(u, v)  # u visited first: the kept box, v the candidate
    dx = np.minimum(x2[v], x2[u]) - np.maximum(x1[v], x1[u])
    dy = np.minimum(y2[v], y2[u]) - np.maximum(y1[v], y1[u])
    hit = (dx >= 0) & (dy >= 0)
    u, v, dx, dy = u[hit], v[hit], dx[hit], dy[hit]
    inter = (dx + norm) * (dy + norm)
    iou = inter / (area[v] + area[u] - inter)
    sup = ~(iou <= thr)
    u, v = u[sup], v[sup]
    keep = np.ones(m, bool)
    for _ in range(NMS_ROUNDS):
        suppressed = np.zeros(m, bool)
        suppressed[v[keep[u]]] = True
        if np.array_equal(~suppressed, keep):
            return np.flatnonzero(keep)[:limit]
        keep = ~suppressed
    return None


def _nms_adaptive(x1, y1, x2, y2, area, thr, eta, norm, limit: int) -> np.ndarray:
    """Greedy NMS whose threshold is multiplied by eta after each keep while it is > 0.5: a
    box is kept when its largest overlap with the kept boxes is <= the threshold then."""
    T = x1.dtype.type
    m = x1.size
    worst = np.full(m, -np.inf, x1.dtype)
    kept = []
    j = 0
    while j < m and len(kept) < limit:
        ok = worst[j:] <= thr
        p = int(np.argmax(ok))
        if not ok[p]:
            break
        j += p
        kept.append(j)
        if eta < 1 and thr > 0.5:
            thr = thr * T(eta)
        c = slice(j + 1, m)
        disjoint = (x1[j] > x2[c]) | (x2[j] < x1[c]) | (y1[j] > y2[c]) | (y2[j] < y1[c])
        inter = ((np.minimum(x2[c], x2[j]) - np.maximum(x1[c], x1[j]) + norm)
                 * (np.minimum(y2[c], y2[j]) - np.maximum(y1[c], y1[j]) + norm))
        iou = np.where(disjoint, T(0), inter / (area[c] + area[j] - inter))
        worst[c] = np.maximum(worst[c], iou)
        j += 1
    return np.array(kept, np.int64)


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
    w, h = x2 - x1, y2 - y1
    area = np.where((x2 < x1) | (y2 < y1), T(0), (w + norm) * (h + norm))
    thr = T(nms_thresh)
    if eta < 1 and thr > 0.5:
        kept = _nms_adaptive(x1, y1, x2, y2, area, thr, np.float32(eta), norm, limit)
    else:
        # whether a box is kept depends only on the boxes visited before it: a prefix of the
        # visiting order holding ``limit`` keeps is enough
        m = x1.size
        n = min(m, max(2 * limit, 1024))
        while True:
            part = [a[:n] for a in (x1, y1, x2, y2, area)]
            pairs = n * min(limit, n) // NMS_PAIR_COST if NMS_PAIR_COST else NMS_PAIRS
            kept = _nms_sparse(*part, thr, norm, limit, min(NMS_PAIRS, pairs))
            if kept is None:
                kept = _nms_blocks(*part, thr, norm, limit)
            if len(kept) >= limit or n == m:
                break
            n = min(m, 4 * n)
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
        r, p = proposals_one_image(scores[n], bbox_deltas[n], im_shape[n], anchors, variances,
                                   pre_nms_top_n, post_nms_top_n, nms_thresh, min_size, eta,
                                   pixel_offset)
        rois.append(r)
        probs.append(p)
    counts = np.array([len(r) for r in rois], np.int32)
    if not rois:
        return np.zeros((0, 4), T), np.zeros((0, 1), T), counts
    return np.concatenate(rois), np.concatenate(probs), counts


# --- distribute_fpn_proposals -------------------------------------------------------------------

def fpn_levels(rois: np.ndarray, min_level: int, max_level: int, refer_level: int,
               refer_scale: int, pixel_offset: bool) -> np.ndarray:
    """The level of each roi: floor(log2(sqrt(area) / refer_scale + 1e-6) + refer_level) in T
    (the C library's log2f / log2: ``libm.floor_log2``), clamped to [min_level, max_level];
    a value no int holds converts to INT_MIN (x86), so clamps to min_level.

    Args:
        rois: [R, 4] T.
    Returns:
        [R] int64 levels.
    """
    T = rois.dtype.type
    x1, y1, x2, y2 = rois.T
    w, h = x2 - x1, y2 - y1
    with np.errstate(over="ignore"):  # a huge roi's area is inf, as in Paddle
        area = w * h if not pixel_offset else (w + T(1)) * (h + T(1))
    area = np.where((x2 < x1) | (y2 < y1), T(0), area)
    q = np.sqrt(area) / T(refer_scale) + T(1e-6)
    v = libm.floor_log2(q, refer_level)
    fits = np.abs(v) < 2.0 ** 31
    lvl = np.where(fits, np.where(fits, v, 0).astype(np.int64), INT_MIN)
    return np.clip(lvl, min_level, max_level)


def distribute_fpn_proposals(fpn_rois: np.ndarray, rois_num: np.ndarray, min_level: int,
                             max_level: int, refer_level: int, refer_scale: int,
                             pixel_offset: bool):
    """The compute step of DistributeFpnProposals (checked inputs).

    Args:
        fpn_rois: [R, 4] T; rois_num: [N] int64, sums to R.
    Returns:
        (rois of each level [R_l, 4] T, counts of each level [N] int32, restore_index [R, 1]
        int32).
    """
    L = max_level - min_level + 1
    N = rois_num.size
    k = fpn_levels(fpn_rois, min_level, max_level, refer_level, refer_scale,
                   pixel_offset) - min_level
    order = np.argsort(k, kind="stable")
    per = np.bincount(k, minlength=L)
    bounds = np.concatenate([[0], np.cumsum(per)])
    ordered = fpn_rois[order]
    rois = [ordered[bounds[i]:bounds[i + 1]] for i in range(L)]
    image = np.repeat(np.arange(N), rois_num)
    counts = np.bincount(k * N + image, minlength=L * N).reshape(L, N).astype(np.int32)
    restore = np.empty((fpn_rois.shape[0], 1), np.int32)
    restore[order, 0] = np.arange(fpn_rois.shape[0], dtype=np.int32)
    return rois, list(counts), restore
