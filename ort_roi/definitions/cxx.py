"""The C++ runtime as Paddle's CPU kernels call it: libstdc++'s std::sort and std::nth_element,
transcribed (bits/stl_algo.h, stl_heap.h); the C library's expf / log2f come from ``ort_roi.libm``.

Neither is stable: the order they leave elements that compare equal in is the algorithm's
own. Paddle's generate_proposals orders anchors by score with them (CPU kernel, built with
GCC), and that order decides which of equal-scored boxes NMS visits first. These literal
transcriptions reproduce it exactly. They sort a Python list in place with a strict
``comp(a, b)`` ("a goes before b"), as libstdc++ does with its comparator.
"""

from __future__ import annotations

from typing import Any, Callable

THRESHOLD = 16  # _S_threshold


def _lg(n: int) -> int:
    return n.bit_length() - 1


def move_median_to_first(v: list, result: int, a: int, b: int, c: int, comp) -> None:
    """std::__move_median_to_first: the median of v[a], v[b], v[c] swapped into v[result]."""
    if comp(v[a], v[b]):
        if comp(v[b], v[c]):
            v[result], v[b] = v[b], v[result]
        elif comp(v[a], v[c]):
            v[result], v[c] = v[c], v[result]
        else:
            v[result], v[a] = v[a], v[result]
    elif comp(v[a], v[c]):
        v[result], v[a] = v[a], v[result]
    elif comp(v[b], v[c]):
        v[result], v[c] = v[c], v[result]
    else:
        v[result], v[b] = v[b], v[result]


def _unguarded_partition(v: list, first: int, last: int, pivot: int, comp) -> int:
    while True:
        while comp(v[first], v[pivot]):
            first += 1
        last -= 1
        while comp(v[pivot], v[last]):
            last -= 1
        if not first < last:
            return first
        v[first], v[last] = v[last], v[first]
        first += 1


def _unguarded_partition_pivot(v: list, first: int, last: int, comp) -> int:
    mid = first + (last - first) // 2
    move_median_to_first(v, first, first + 1, mid, last - 1, comp)
    return _unguarded_partition(v, first + 1, last, first, comp)


def unguarded_linear_insert(v: list, last: int, comp) -> None:
    """std::__unguarded_linear_insert: v[last] moved down past every element it goes before."""
    val = v[last]
    nxt = last - 1
    while comp(val, v[nxt]):
        v[last] = v[nxt]
        last = nxt
        nxt -= 1
    v[last] = val


def insertion_sort(v: list, first: int, last: int, comp) -> None:
    """std::__insertion_sort of v[first:last] (stable)."""
    if first == last:
        return
    for i in range(first + 1, last):
        if comp(v[i], v[first]):
            val = v[i]
            v[first + 1:i + 1] = v[first:i]  # move_backward
            v[first] = val
        else:
            unguarded_linear_insert(v, i, comp)


def _push_heap(v: list, first: int, hole: int, top: int, value: Any, comp) -> None:
    parent = (hole - 1) // 2
    while hole > top and comp(v[first + parent], value):
        v[first + hole] = v[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    v[first + hole] = value


def _adjust_heap(v: list, first: int, hole: int, length: int, value: Any, comp) -> None:
    top = hole
    second = hole
    while second < (length - 1) // 2:
        second = 2 * (second + 1)
        if comp(v[first + second], v[first + second - 1]):
            second -= 1
        v[first + hole] = v[first + second]
        hole = second
    if (length & 1) == 0 and second == (length - 2) // 2:
        second = 2 * (second + 1)
        v[first + hole] = v[first + second - 1]
        hole = second - 1
    _push_heap(v, first, hole, top, value, comp)


def _make_heap(v: list, first: int, last: int, comp) -> None:
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(v, first, parent, length, v[first + parent], comp)
        if parent == 0:
            return
        parent -= 1


def _pop_heap(v: list, first: int, last: int, result: int, comp) -> None:
    value = v[result]
    v[result] = v[first]
    _adjust_heap(v, first, 0, last - first, value, comp)


def heap_select(v: list, first: int, middle: int, last: int, comp) -> None:
    """std::__heap_select: v[first:middle] a heap of the (middle - first) first elements."""
    _make_heap(v, first, middle, comp)
    for i in range(middle, last):
        if comp(v[i], v[first]):
            _pop_heap(v, first, middle, i, comp)


def sort_heap(v: list, first: int, last: int, comp) -> None:
    """std::__sort_heap of the heap v[first:last]."""
    while last - first > 1:
        last -= 1
        _pop_heap(v, first, last, last, comp)


def _introsort_loop(v: list, first: int, last: int, depth: int, comp) -> None:
    while last - first > THRESHOLD:
        if depth == 0:
            heap_select(v, first, last, last, comp)  # std::__partial_sort
            sort_heap(v, first, last, comp)
            return
        depth -= 1
        cut = _unguarded_partition_pivot(v, first, last, comp)
        _introsort_loop(v, cut, last, depth, comp)
        last = cut


def std_sort(v: list, comp: Callable[[Any, Any], bool]) -> None:
    """std::sort(v.begin(), v.end(), comp), in place: introsort, then insertion sort."""
    first, last = 0, len(v)
    if first == last:
        return
    _introsort_loop(v, first, last, _lg(last - first) * 2, comp)
    if last - first > THRESHOLD:  # __final_insertion_sort
        insertion_sort(v, first, first + THRESHOLD, comp)
        for i in range(first + THRESHOLD, last):  # __unguarded_insertion_sort
            unguarded_linear_insert(v, i, comp)
    else:
        insertion_sort(v, first, last, comp)


def std_nth_element(v: list, nth: int, comp: Callable[[Any, Any], bool]) -> None:
    """std::nth_element(v.begin(), v.begin() + nth, v.end(), comp), in place: introselect."""
    first, last = 0, len(v)
    if first == last or nth == last:
        return
    depth = _lg(last - first) * 2
    while last - first > 3:
        if depth == 0:
            heap_select(v, first, nth + 1, last, comp)
            v[first], v[nth] = v[nth], v[first]
            return
        depth -= 1
        cut = _unguarded_partition_pivot(v, first, last, comp)
        if cut <= nth:
            first = cut
        else:
            last = cut
    insertion_sort(v, first, last, comp)


# --- std::stable_sort (bits/stl_algo.h) --------------------------------------------------------
# Paddle's collect_fpn_proposals sorts with it, by a comparator that is not a strict weak order
# (a.score >= b.score): the order it leaves equal scores in is what the merge steps below make
# of it. With the temporary buffer libstdc++ gets (half the range, rounded up: operator new
# does not fail here), the sort is __stable_sort_adaptive; GCC 8 to 14 make the same calls.

CHUNK = 7  # _S_chunk_size


def _move_merge(src: list, first1: int, last1: int, first2: int, last2: int, dst: list,
                result: int, comp) -> int:
    """std::__move_merge: src[first1:last1] and src[first2:last2] merged into dst[result:];
    an element of the second run goes first only when comp(second, first)."""
    while first1 != last1 and first2 != last2:
        if comp(src[first2], src[first1]):
            dst[result] = src[first2]
            first2 += 1
        else:
            dst[result] = src[first1]
            first1 += 1
        result += 1
    for i in range(first1, last1):
        dst[result] = src[i]
        result += 1
    for i in range(first2, last2):
        dst[result] = src[i]
        result += 1
    return result


def _merge_sort_loop(src: list, first: int, last: int, dst: list, result: int, step: int,
                     comp) -> None:
    """std::__merge_sort_loop: runs of ``step`` merged pairwise from src into dst."""
    two = 2 * step
    while last - first >= two:
        result = _move_merge(src, first, first + step, first + step, first + two, dst, result,
                             comp)
        first += two
    step = min(last - first, step)
    _move_merge(src, first, first + step, first + step, last, dst, result, comp)


def _merge_sort_with_buffer(v: list, first: int, last: int, buf: list, comp) -> None:
    """std::__merge_sort_with_buffer: insertion-sorted chunks of 7, then merges of doubling
    runs between v and the buffer."""
    length = last - first
    f = first
    while last - f >= CHUNK:  # __chunk_insertion_sort
        insertion_sort(v, f, f + CHUNK, comp)
        f += CHUNK
    insertion_sort(v, f, last, comp)
    step = CHUNK
    while step < length:
        _merge_sort_loop(v, first, last, buf, 0, step, comp)
        step *= 2
        _merge_sort_loop(buf, 0, length, v, first, step, comp)
        step *= 2


def _merge_adaptive(v: list, first: int, middle: int, last: int, buf: list, comp) -> None:
    """std::__merge_adaptive with a buffer that holds the shorter run: forward
    (__move_merge_adaptive) when the first run is not longer, else backward
    (__move_merge_adaptive_backward)."""
    len1, len2 = middle - first, last - middle
    if len1 <= len2:
        buf[:len1] = v[first:middle]
        first1, last1, first2, result = 0, len1, middle, first
        while first1 != last1 and first2 != last:
            if comp(v[first2], buf[first1]):
                v[result] = v[first2]
                first2 += 1
            else:
                v[result] = buf[first1]
                first1 += 1
            result += 1
        v[result:result + last1 - first1] = buf[first1:last1]
        return
    buf[:len2] = v[middle:last]
    if len2 == 0:
        return
    last1, last2, result = middle - 1, len2 - 1, last  # v[first:middle], buf[:len2]
    while True:
        if comp(buf[last2], v[last1]):
            result -= 1
            v[result] = v[last1]
            if last1 == first:
                v[result - last2 - 1:result] = buf[:last2 + 1]  # move_backward
                return
            last1 -= 1
        else:
            result -= 1
            v[result] = buf[last2]
            if last2 == 0:
                return
            last2 -= 1


def std_stable_sort(v: list, comp: Callable[[Any, Any], bool]) -> None:
    """std::stable_sort(v.begin(), v.end(), comp), in place: __stable_sort_adaptive with a
    buffer of half the range (each half merge-sorted through it, then the halves merged)."""
    first, last = 0, len(v)
    if first == last:
        return
    middle = first + (last - first + 1) // 2
    buf: list = [None] * (middle - first)
    _merge_sort_with_buffer(v, first, middle, buf, comp)
    _merge_sort_with_buffer(v, middle, last, buf, comp)
    _merge_adaptive(v, first, middle, last, buf, comp)
