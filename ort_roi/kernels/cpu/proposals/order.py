"""libstdc++'s orders, vectorised: the anchors Paddle's generate_proposals takes before NMS, in
the order its std::nth_element (pre_nms_top_n) or std::sort (all of them) leaves them.

Neither is stable, so where scores tie, their order (and at the cut, which of them are
taken) is the algorithm's. Without ties in the taken scores (the common case) any descending
order is exact; with ties ``order_nth_element`` / ``order_sort`` replay libstdc++'s
introselect / introsort with a vectorised partition. Pinned by tests/test_proposals.py:
test_libstdcxx_orders_equal_the_literal_transcription and
test_libstdcxx_all_equal_and_sorted_inputs (against definitions/cxx.py, STL_THRESHOLD
included), and by the goldens with ties (generate_no_nms_ties: Paddle's own order).
"""

from __future__ import annotations

import numpy as np

from ....definitions.cxx import heap_select, insertion_sort, sort_heap

#: libstdc++'s _S_threshold (introsort leaves ranges this small to the insertion sort)
STL_THRESHOLD = 16


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
