"""Reusable per-thread buffers, within a process-wide budget.

Fresh large allocations are expensive (every page is faulted in again), so scratch arrays
(the NHWC copy of X) are kept per thread and reused. Outputs are reused only inside the
onnxruntime bridge, which copies the output into onnxruntime's buffer before the next call
on that thread; a kernel called directly always returns a fresh array.

What stays cached is bounded for the whole process: at most ``ORT_ROI_CACHE_MB`` MiB (256 by
default; read at import, or set with ``set_limit``) over every thread; past it the least
recently used buffers (of any thread) are let go, and a buffer larger than the budget is not
kept at all. ``release()`` (``ort_roi.release_memory()``) lets go of everything now. A buffer
let go while a kernel still uses it lives on until that kernel drops it.

The bridge's copy is one ``memcpy``. onnxruntime's output buffer starts on a page boundary,
and so does a large NumPy array give or take 16 bytes; glibc copies a buffer above ~200 MB
with a loop that is slower when source and destination sit at nearly the same offset in
their pages (docs/benchmarks.md, "Measurements behind design choices"). Reused outputs therefore
start half a page off a page boundary.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from contextlib import contextmanager

import numpy as np

from ... import forksafe
from .parallel import for_ranges

_local = threading.local()
_lock = forksafe.Lock()
#: (thread cache id, name, dtype) -> (that thread's cache dict, bytes), least recent first
_lru: "OrderedDict[tuple, tuple[dict, int]]" = OrderedDict()
_cached = 0  # bytes held by every thread's cache


@forksafe.in_child
def _after_fork_in_child() -> None:
    """A forked child starts with one thread: the other threads' buffers are unreachable
    there. Start afresh."""
    global _local, _cached
    _local, _cached = threading.local(), 0
    _lru.clear()


def _env_limit() -> int:
    try:
        return max(0, int(float(os.environ.get("ORT_ROI_CACHE_MB", "256")) * (1 << 20)))
    except ValueError:
        return 256 << 20


_limit = _env_limit()


def set_limit(nbytes: int) -> int:
    """Set the budget of cached buffers (bytes, every thread together); returns the old one.
    Buffers past the new budget are let go at once."""
    global _limit
    with _lock:
        old, _limit = _limit, max(0, int(nbytes))
        _evict(0)
    return old


def cached_bytes() -> int:
    """Bytes of reusable buffers kept now, every thread together."""
    return _cached


def release() -> int:
    """Let go of every thread's cached buffers; returns the bytes released."""
    global _cached
    with _lock:
        freed = _cached
        for cache, _ in _lru.values():
            cache.clear()
        _lru.clear()
        _cached = 0
    return freed


def clear() -> None:
    """Drop every thread's buffers (``release``)."""
    release()


def _evict(incoming: int) -> None:
    """Let go of least recently used buffers until ``incoming`` more bytes fit (lock held)."""
    global _cached
    while _lru and _cached + incoming > _limit:
        (_, name, dtype), (cache, nbytes) = _lru.popitem(last=False)
        cache.pop((name, dtype), None)
        _cached -= nbytes


#: Byte offset within a page at which reused outputs start (see the module's doc).
OUTPUT_PAGE_OFFSET = 2048
_PAGE = 4096


def _offset_empty(n: int, dtype: np.dtype, offset: int) -> np.ndarray:
    """np.empty(n, dtype) whose data starts ``offset`` bytes past a page boundary."""
    raw = np.empty(n * dtype.itemsize + 2 * _PAGE, np.uint8)
    skip = (offset - raw.ctypes.data) % _PAGE
    return raw[skip: skip + n * dtype.itemsize].view(dtype)


def _new(n: int, dtype: np.dtype, page_offset: int | None) -> np.ndarray:
    return np.empty(n, dtype) if page_offset is None else _offset_empty(n, dtype, page_offset)


def _get(name: str, shape, dtype, page_offset: int | None = None) -> np.ndarray:
    global _cached
    cache = getattr(_local, "cache", None)
    if cache is None:
        cache = _local.cache = {}
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    key = (id(cache), name, dtype)
    with _lock:
        buf = cache.get((name, dtype))
        if buf is not None and buf.size >= n:
            _lru.move_to_end(key)
            return buf[:n].reshape(shape)
        if buf is not None:  # too small: let it go
            cache.pop((name, dtype))
            _cached -= _lru.pop(key)[1]
    buf = _new(max(n, 1), dtype, page_offset)
    if buf.nbytes <= _limit:
        with _lock:
            _evict(buf.nbytes)
            cache[(name, dtype)] = buf
            _lru[key] = (cache, buf.nbytes)
            _cached += buf.nbytes
    return buf[:n].reshape(shape)


def scratch(name: str, shape, dtype) -> np.ndarray:
    """A scratch array of this thread (contents undefined); valid until the next request."""
    return _get("scratch:" + name, shape, dtype)


#: Outputs of at most this many bytes are always fresh: malloc hands them out from memory
#: it holds (no page is faulted in), for less than the cache's lookup costs (a W6 call).
FRESH_MAX = 4096


def output(shape, dtype) -> np.ndarray:
    """An uninitialized output array: reused inside ``reuse_outputs()`` (above FRESH_MAX
    bytes), else fresh."""
    if getattr(_local, "reuse", False) and math.prod(shape) * np.dtype(dtype).itemsize > FRESH_MAX:
        return _get("output", shape, dtype, OUTPUT_PAGE_OFFSET)
    return np.empty(shape, dtype)


@contextmanager
def reuse_outputs():
    """Within it, ``output`` hands this thread's kept buffers out again (the bridge's calls)."""
    _local.reuse = True
    try:
        yield
    finally:
        _local.reuse = False


def set_reuse(on: bool) -> None:
    """``reuse_outputs`` without a context manager, for the bridge's every call (a
    ``with`` costs a microsecond on a W6 call): set, then reset in a ``finally``."""
    _local.reuse = on


#: Elements of X below which its NHWC copy is made by the calling thread alone (handing half
#: of a small copy to another thread costs more than it saves: a 20 x 20 x 256 map, 65 us
#: shared, 41 us alone).
NHWC_ALONE = 1 << 20


def nhwc(X: np.ndarray) -> np.ndarray:
    """X [N, C, H, W] copied to this thread's NHWC scratch array, a large copy split over
    the cores (valid until the thread's next request for it)."""
    N, C, H, W = X.shape
    Xn = scratch("nhwc", (N, H, W, C), X.dtype)
    if X.size < NHWC_ALONE:
        np.copyto(Xn, X.transpose(0, 2, 3, 1))
        return Xn
    for_ranges(H, lambda h0, h1: np.copyto(Xn[:, h0:h1], X[:, :, h0:h1].transpose(0, 2, 3, 1)),
               min_chunk=1)
    return Xn
