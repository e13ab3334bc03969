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
suppresses it: triangular) is iterated to its fixed point, which is exact, a few thousand
boxes at a time (a long chain: one box at a time). Where the pairs are too many, the boxes are
visited in blocks (each block's keeps from its own overlaps, then suppressing every later box
at once); where those blocks could cost many comparisons (every anchor of an image taken:
each kept box against every box left), the pairs come from a grid search instead (size
classes, rows, an x1 window: each box meets only the boxes that can overlap it by more than
the threshold); boxes too dense for it go to the blocks, within a budget of comparisons (past
it RoiOpError). With
eta < 1 the threshold falls after each keep; then each kept box is one vectorised step until
it stops falling, and the fixed-threshold NMS takes the rest.
"""

from __future__ import annotations

import math

import numpy as np

from ... import libm
from ...errors import RoiOpError
from ...definitions.cxx import heap_select, insertion_sort, sort_heap
from ...levels import fpn_levels

F64 = np.float64
#: kBBoxClipDefault: the largest log-scale a box side is decoded with
BBOX_CLIP = math.log(1000.0 / 16.0)
#: Candidates visited per block of the NMS
NMS_BLOCK = 256
#: libstdc++'s _S_threshold (introsort leaves ranges this small to the insertion sort)
STL_THRESHOLD = 16
#: Paddle's IoU arithmetic in IEEE, without warnings: two zero-area boxes that touch give
#: 0 / 0 = NaN, which is not <= the threshold (suppressed, as by Paddle's JaccardOverlap);
#: huge boxes' sides, areas and intersections overflow to inf (inf / inf: NaN, likewise)
IOU_IEEE = {"divide": "ignore", "invalid": "ignore", "over": "ignore"}


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


class NmsTooCostly(Exception):
    """An NMS that would make more than NMS_MAX_COMPARISONS box comparisons (``boxes``, and
    why); generate_proposals reports it as a RoiOpError."""

    def __init__(self, boxes: int, why: str):
        super().__init__(boxes, why)
        self.boxes, self.why = boxes, why


def _nms_blocks(x1, y1, x2, y2, area, thr, norm, limit: int) -> np.ndarray:
    """Greedy NMS at a fixed threshold over boxes in visiting order; positions kept. Each
    block's kept boxes are compared with every box left after it: NmsTooCostly past
    NMS_MAX_COMPARISONS of those comparisons."""
    m = x1.size

    def over(r: np.ndarray, c: np.ndarray) -> np.ndarray:
        """[len(r), len(c)]: kept box r suppresses candidate c (JaccardOverlap(c, r) > thr).
        For boxes with x1 <= x2, y1 <= y2 (as the filter leaves them) Paddle's disjointness
        test is a negative intersection side; the IoU is computed for the others only."""
        with np.errstate(**IOU_IEEE):
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
    total = work = 0
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
            work += new_kept.size * rest.size
            if work > NMS_MAX_COMPARISONS:
                raise NmsTooCostly(m, "its boxes overlap too densely for its sparse search")
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
#: The most rounds a block of boxes iterates its keep rule from its pairs (else the block is
#: settled one box at a time)
NMS_ROUNDS = 64


def _nms_sparse(x1, y1, x2, y2, area, thr, norm, limit: int,
                max_pairs: int = NMS_PAIRS) -> np.ndarray | None:
    """Greedy NMS at a fixed threshold, from the suppressing pairs only: boxes sorted by x1
    (or y1, whichever pairs fewer), each pairs with the boxes starting early enough to overlap
    it by more than thr of its side (every pair that can suppress, once), their IoU as
    Paddle computes it, settled by _nms_from_pairs. None when there are more than
    ``max_pairs`` pairs (the caller runs the grid search or the block NMS)."""
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
    k = _suppressing(x1, y1, x2, y2, area, thr, norm, u, v)
    return _nms_from_pairs(m, u[k], v[k], limit)


def _suppressing(x1, y1, x2, y2, area, thr, norm, p: np.ndarray, q: np.ndarray) -> np.ndarray:
    """The pairs k of boxes (p[k], q[k]) whose JaccardOverlap, as Paddle computes it (the same
    either way round), is not <= thr: the one of them visited first, kept, suppresses the
    other. For boxes with x1 <= x2, y1 <= y2 Paddle's disjointness test is a negative
    intersection side; the IoU is computed for the others only."""
    with np.errstate(**IOU_IEEE):
        dx = np.minimum(x2[q], x2[p]) - np.maximum(x1[q], x1[p])
        dy = np.minimum(y2[q], y2[p]) - np.maximum(y1[q], y1[p])
        hit = np.flatnonzero((dx >= 0) & (dy >= 0))
        inter = (dx[hit] + norm) * (dy[hit] + norm)
        iou = inter / (area[q[hit]] + area[p[hit]] - inter)
    return hit[~(iou <= thr)]


#: A fixed-threshold NMS whose block NMS could compare more than this many boxes (n x
#: min(limit, n), n boxes visited) and whose pairs are too many for the sparse search finds
#: its pairs with the grid search (_nms_grid) first: about 0.2 s of block NMS
NMS_GRID_FROM = 1 << 26
#: The most candidate pairs the grid search examines (~50 ns each: ~7 s); past it the boxes
#: are too dense for it and the block NMS runs
NMS_GRID_PAIRS = 1 << 27
#: The most size classes the grid search makes (sides from the smallest to the largest box,
#: each class 1/t times wider: thr 1 and sides 1 to 1e28)
NMS_GRID_CLASSES = 1 << 16
#: Candidate pairs the grid search examines at once (its scratch: ~50 bytes each, ~13 MB)
NMS_GRID_CHUNK = 1 << 18
#: Boxes settled at once from their suppressing pairs (_nms_from_pairs)
NMS_SETTLE_BLOCK = 4096
#: The most box comparisons the block NMS and the adaptive threshold's steps make on one
#: image (~3 ns each in the block NMS: ~7 s): past it RoiOpError (a Python op cannot be
#: interrupted)
NMS_MAX_COMPARISONS = 1 << 31
#: What a comparison of the adaptive threshold's steps (one vectorised pass per keep) costs
#: in block NMS comparisons
NMS_ADAPTIVE_COST = 4
#: Size classes searched from each box (width class, height class); the others' pairs are
#: found from their other box
_GRID_OFFSETS = ((0, 0), (0, 1), (1, -1), (1, 0), (1, 1))


def _grid_ranges(x1, y1, x2, y2, thr, norm):
    """The grid search's candidates: (o, a, lo, cnt), boxes sorted (``o``) by size class,
    row and x1, and for query a (a sorted position) the sorted positions [lo, lo + cnt) that
    may overlap it by more than ``thr``, each unordered pair once; None where the boxes do
    not fit the grid (a side <= 0, a non-finite size or area, coordinates too far apart,
    size classes past float64's range) or ``thr`` is <= 0 (eta 0 or below makes the adaptive
    threshold 0 or negative: every overlap suppresses, and no size class bounds a pair).

    IoU > t needs (sides w = x2 - x1 + norm, h likewise; inter <= the smaller box, union >=
    the larger): w_b / w_a in (t, 1/t), h likewise, and x1_b - x1_a in (-(1-t) w_b,
    (1-t) w_a), y1 likewise (an intersection side > t times each box's side). Boxes fall
    into width and height classes each 1/t times wider than the one before (a pair's classes
    differ by at most one in each) and, per class, into rows of y1 of height (1-t) x the
    class's largest height;
    each box queries the rows of the classes next to it that reach its y1 window, and in
    each row (sorted by x1) its x1 window. t is thr less 1e-3 of it, and the windows are
    widened by a relative 1e-9: rounding (of T's IoU, here in float64) only adds candidates."""
    if not thr > 0:
        return None
    m = x1.size
    X1, Y1 = x1.astype(F64), y1.astype(F64)
    W = (x2.astype(F64) - X1) + F64(norm)
    H = (y2.astype(F64) - Y1) + F64(norm)
    t = F64(thr) * (1 - 1e-3)
    c = 1.0 - t
    with np.errstate(all="ignore"):
        if not (np.all(W > 0) and np.all(H > 0) and np.isfinite(W).all()
                and np.isfinite(H).all()):
            return None
        smallest = float(min(W.min(), H.min()))
        spread = float(max(W.max(), H.max())) / smallest
    q = (1.0 / float(t)) * (1 + 1e-9)
    if not math.isfinite(spread) or math.log(spread) / math.log(q) > NMS_GRID_CLASSES:
        return None
    # class k: sides in [bound[k], bound[k + 1]); each bound over 1/t times the one before
    # (Python's pow, the C library's: no NumPy transcendental decides a class)
    try:
        bound = np.array([smallest * q ** k
                          for k in range(int(math.log(spread) / math.log(q)) + 4)])
    except OverflowError:  # a tiny thr (eta ~1e-45) and sides far apart: q ** k past 1e308
        return None
    if not np.isfinite(bound).all():
        return None
    cw = np.searchsorted(bound, W, "right") - 1
    ch = np.searchsorted(bound, H, "right") - 1
    with np.errstate(all="ignore"):
        row = np.floor(Y1 / (c * bound[ch + 1]))
    if not (np.isfinite(row).all() and np.abs(row).max() < F64(1 << 40)):
        return None
    row = row.astype(np.int64)
    cw0, ch0 = -1, -1
    nch = int(ch.max()) - ch0 + 2
    code = (cw - cw0) * nch + (ch - ch0)
    o = np.lexsort((X1, row, code))
    code, row, X1, Y1, W, H, cw, ch = (v[o] for v in (code, row, X1, Y1, W, H, cw, ch))
    # classes (runs of code), their rows; groups (runs of (code, row)) keyed in that order
    cstart = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    ccount = np.diff(np.r_[cstart, m])
    ucode = code[cstart]
    rmin, rmax = row[cstart], row[cstart + ccount - 1]
    span = rmax - rmin + 1
    if span.sum(dtype=F64) > 2.0 ** 62:
        return None
    base = np.cumsum(span) - span
    cls = np.repeat(np.arange(ucode.size), ccount)
    gkey = base[cls] + (row - rmin[cls])
    gstart = np.flatnonzero(np.r_[True, gkey[1:] != gkey[:-1]])
    ugkey = gkey[gstart]
    G = ugkey.size
    gid = np.repeat(np.arange(G), np.diff(np.r_[gstart, m]))
    # one sorted key: group + x1 scaled into [0, 0.5]; eps covers its rounding
    xmin = X1.min()
    xs = max(float(X1.max() - xmin), 1.0) * 2.0
    comp = gid + (X1 - xmin) / xs
    eps = 8 * np.finfo(F64).eps * (G + 1)
    rel = 1e-9
    found = []
    for dw, dh in _GRID_OFFSETS:
        tcode = code + (dw * nch + dh)
        ct = np.minimum(np.searchsorted(ucode, tcode), ucode.size - 1)
        a = np.flatnonzero(ucode[ct] == tcode)
        if a.size == 0:
            continue
        ct = ct[a]
        hmax = bound[ch[a] + (dh + 1)]  # the target class's largest height, width
        wmax = bound[cw[a] + (dw + 1)]
        gy = c * hmax  # its rows' height (as the boxes' rows were computed)
        ya, xa = Y1[a], X1[a]
        rlo = np.floor((ya - c * hmax * (1 + rel) - rel * np.abs(ya)) / gy).astype(np.int64)
        rhi = np.floor((ya + c * H[a] * (1 + rel) + rel * np.abs(ya)) / gy).astype(np.int64)
        rlo = np.maximum(rlo, rmin[ct])
        if dw == 0 and dh == 0:
            rlo = np.maximum(rlo, row[a])  # rows above: found from the other box
        rhi = np.minimum(rhi, rmax[ct])
        xlo = np.clip((xa - c * wmax * (1 + rel) - rel * np.abs(xa) - xmin) / xs - eps,
                      -0.25, 0.75)
        xhi = np.clip((xa + c * W[a] * (1 + rel) + rel * np.abs(xa) - xmin) / xs + eps,
                      -0.25, 0.75)
        r = rlo
        while True:
            live = r <= rhi
            if not live.all():
                a, ct, r, rhi, xlo, xhi = (v[live] for v in (a, ct, r, rhi, xlo, xhi))
            if a.size == 0:
                break
            gk = base[ct] + (r - rmin[ct])
            g = np.minimum(np.searchsorted(ugkey, gk), G - 1)
            lo = np.searchsorted(comp, g + xlo, "left")
            hi = np.searchsorted(comp, g + xhi, "right")
            if dw == 0 and dh == 0:  # the box's own row: the boxes after it
                lo = np.where(r == row[a], np.maximum(lo, a + 1), lo)
            n = np.where(ugkey[g] == gk, hi - lo, 0)
            k = np.flatnonzero(n > 0)
            if k.size:  # (int32: a few per box and row searched)
                found.append((a[k].astype(np.int32), lo[k].astype(np.int32),
                              n[k].astype(np.int32)))
            r = r + 1
    if not found:
        z = np.zeros(0, np.int64)
        return o, z, z, z
    a, lo, cnt = (np.concatenate(v) for v in zip(*found))
    return o, a, lo, cnt


def _grid_pairs(x1, y1, x2, y2, area, thr, norm, ranges) -> tuple[np.ndarray, np.ndarray]:
    """The suppressing pairs (u, v) among the grid's candidates: visiting positions u < v
    (_suppressing). Examined NMS_GRID_CHUNK candidates at a time, in the sorted order
    (neighbours in memory)."""
    o, A, LO, CNT = ranges
    sx1, sy1, sx2, sy2, sarea = (v[o] for v in (x1, y1, x2, y2, area))
    us, vs = [], []
    ends = np.cumsum(CNT, dtype=np.int64)
    i, Q = 0, A.size
    while i < Q:
        done = int(ends[i - 1]) if i else 0
        j = max(i + 1, int(np.searchsorted(ends, done + NMS_GRID_CHUNK, "right")))
        a, lo, cnt = A[i:j], LO[i:j], CNT[i:j]
        P = int(ends[j - 1]) - done
        p = np.repeat(a, cnt)
        q = np.repeat(lo - (np.cumsum(cnt, dtype=np.int64) - cnt), cnt) + np.arange(P)
        k = _suppressing(sx1, sy1, sx2, sy2, sarea, thr, norm, p, q)
        u, v = o[p[k]], o[q[k]]
        us.append(np.minimum(u, v))
        vs.append(np.maximum(u, v))
        i = j
    if not us:
        z = np.zeros(0, np.int64)
        return z, z
    return np.concatenate(us), np.concatenate(vs)


def _nms_from_pairs(m: int, u: np.ndarray, v: np.ndarray, limit: int) -> np.ndarray:
    """Greedy NMS from every suppressing pair (u visited before v): positions kept, the
    first ``limit``. NMS_SETTLE_BLOCK boxes at a time: the boxes not suppressed by the kept
    boxes of earlier blocks, their keep rule within the block iterated to its fixed point
    (a long chain: one box at a time), then the block's kept boxes suppress later ones."""
    e = np.argsort(u, kind="stable")
    U, V = u[e], v[e]
    ptr = np.searchsorted(U, np.arange(m + 1))
    suppressed = np.zeros(m, bool)
    kept: list[np.ndarray] = []
    total = 0
    for start in range(0, m, NMS_SETTLE_BLOCK):
        end = min(m, start + NMS_SETTLE_BLOCK)
        eu, ev = U[ptr[start]:ptr[end]] - start, V[ptr[start]:ptr[end]] - start
        free = ~suppressed[start:end]
        inside = ev < end - start
        iu, iv = eu[inside], ev[inside]
        live = free[iu] & free[iv]
        iu, iv = iu[live], iv[live]
        keep = free
        for _ in range(NMS_ROUNDS):
            hit = np.zeros(end - start, bool)
            hit[iv[keep[iu]]] = True
            new = free & ~hit
            if np.array_equal(new, keep):
                break
            keep = new
        else:
            keep = free.copy()
            first = np.searchsorted(iu, np.arange(end - start + 1))  # iu ascending (U is)
            for i in np.flatnonzero(free):
                if keep[i]:
                    keep[iv[first[i]:first[i + 1]]] = False
        k = start + np.flatnonzero(keep)
        if total + k.size >= limit:
            kept.append(k[:limit - total])
            break
        kept.append(k)
        total += k.size
        out = ~inside
        suppressed[start + ev[out][keep[eu[out]]]] = True
    return np.concatenate(kept) if kept else np.zeros(0, np.int64)


def _nms_grid(x1, y1, x2, y2, area, thr, norm, limit: int,
              max_pairs: int | None = None) -> np.ndarray | None:
    """Greedy NMS at a fixed threshold from the pairs the grid search finds (_grid_ranges:
    about a box's own size class, rows and x1 window, so the work follows the pairs that can
    overlap, not the square of the boxes): positions kept, the first ``limit``. None where
    the boxes do not fit the grid or give more than ``max_pairs`` candidates (too dense: the
    caller runs the block NMS)."""
    if thr >= 1:  # an IoU of boxes with positive finite areas is <= 1 in T too
        ok = (area > 0) & np.isfinite(area)
        return np.arange(min(limit, x1.size)) if ok.all() else None
    ranges = _grid_ranges(x1, y1, x2, y2, thr, norm)
    if ranges is None or not (np.all(area > 0) and np.isfinite(area).all()):
        return None
    if int(ranges[3].sum(dtype=np.int64)) > (NMS_GRID_PAIRS if max_pairs is None else max_pairs):
        return None
    u, v = _grid_pairs(x1, y1, x2, y2, area, thr, norm, ranges)
    return _nms_from_pairs(x1.size, u, v, limit)


def _nms_adaptive(x1, y1, x2, y2, area, thr, eta, norm, limit: int) -> np.ndarray:
    """Greedy NMS whose threshold is multiplied by eta (< 1) after each keep while it is > 0.5:
    a box is kept when its largest overlap with the kept boxes is <= the threshold then. One
    vectorised step per keep while the threshold falls; once it is <= 0.5 it stays, and the
    boxes left that the kept ones do not suppress go to the fixed-threshold NMS."""
    T = x1.dtype.type
    m = x1.size
    worst = np.full(m, -np.inf, x1.dtype)
    kept = []
    j = 0
    work = 0
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
        with np.errstate(**IOU_IEEE):
            inter = ((np.minimum(x2[c], x2[j]) - np.maximum(x1[c], x1[j]) + norm)
                     * (np.minimum(y2[c], y2[j]) - np.maximum(y1[c], y1[j]) + norm))
            iou = np.where(disjoint, T(0), inter / (area[c] + area[j] - inter))
        worst[c] = np.maximum(worst[c], iou)
        j += 1
        work += NMS_ADAPTIVE_COST * (m - j)
        if not thr > 0.5:  # fixed from here on
            rest = j + np.flatnonzero(worst[j:] <= thr)
            more = _nms_fixed(*(v[rest] for v in (x1, y1, x2, y2, area)), thr, norm,
                              limit - len(kept))
            return np.concatenate([np.array(kept, np.int64), rest[more]])
        if work > NMS_MAX_COMPARISONS:
            raise NmsTooCostly(m, "the threshold falls by eta after each of its first keeps")
    return np.array(kept, np.int64)


def _nms_fixed(x1, y1, x2, y2, area, thr, norm, limit: int) -> np.ndarray:
    """Greedy NMS at a fixed threshold over boxes in visiting order: positions kept, the
    first ``limit``. Whether a box is kept depends only on the boxes visited before it: a
    prefix of the visiting order holding ``limit`` keeps is enough. The sparse pair search
    where its pairs are few, else the grid search where the block NMS could cost more than
    NMS_GRID_FROM comparisons, else (or where the boxes are too dense for it) the block
    NMS."""
    m = x1.size
    if limit <= 0 or m == 0:
        return np.zeros(0, np.int64)
    n = min(m, max(2 * limit, 1024))
    while True:
        part = [a[:n] for a in (x1, y1, x2, y2, area)]
        cost = n * min(limit, n)
        pairs = cost // NMS_PAIR_COST if NMS_PAIR_COST else NMS_PAIRS
        kept = _nms_sparse(*part, thr, norm, limit, min(NMS_PAIRS, pairs))
        if kept is None and cost > NMS_GRID_FROM:
            kept = _nms_grid(*part, thr, norm, limit, NMS_GRID_PAIRS)
        if kept is None:
            kept = _nms_blocks(*part, thr, norm, limit)
        if len(kept) >= limit or n == m:
            return kept
        n = min(m, 4 * n)


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
        kept = _nms_adaptive(x1, y1, x2, y2, area, thr, np.float32(eta), norm, limit)
    else:
        kept = _nms_fixed(x1, y1, x2, y2, area, thr, norm, limit)
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
                f"than {NMS_MAX_COMPARISONS} box comparisons ({e.why}); give pre_nms_top_n "
                f"and post_nms_top_n > 0 (PaddleDetection's RPN tests with 1000 / 1000 a level)"
            ) from None
        rois.append(r)
        probs.append(p)
    counts = np.array([len(r) for r in rois], np.int32)
    if not rois:
        return np.zeros((0, 4), T), np.zeros((0, 1), T), counts
    return np.concatenate(rois), np.concatenate(probs), counts


# --- distribute_fpn_proposals -------------------------------------------------------------------

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
