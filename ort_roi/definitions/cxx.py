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
