"""Reusable per-thread buffers.

Fresh large allocations are expensive (every page is faulted in again), so scratch arrays
(the NHWC copy of X) are kept per thread and reused. Outputs are reused only inside the
onnxruntime bridge, which copies the output into onnxruntime's buffer before the next call
on that thread; a kernel called directly always returns a fresh array.

The bridge's copy is one ``memcpy``. onnxruntime's output buffer starts on a page boundary,
and so does a large NumPy array give or take 16 bytes; glibc copies a buffer above ~200 MB
with a loop that is 4x slower when source and destination sit at nearly the same offset in
their pages (W1's 229 MB output: 60 ms against 16 ms, measured). Reused outputs therefore
start half a page off a page boundary.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager

import numpy as np

from ._parallel import for_ranges

_local = threading.local()
_generation = 0


def clear() -> None:
    """Drop every thread's buffers (each thread lets go at its next request)."""
    global _generation
    _generation += 1
    _local.__dict__.pop("cache", None)


#: Byte offset within a page at which reused outputs start (see the module's doc).
OUTPUT_PAGE_OFFSET = 2048
_PAGE = 4096


def _offset_empty(n: int, dtype: np.dtype, offset: int) -> np.ndarray:
    """np.empty(n, dtype) whose data starts ``offset`` bytes past a page boundary."""
    raw = np.empty(n * dtype.itemsize + 2 * _PAGE, np.uint8)
    skip = (offset - raw.ctypes.data) % _PAGE
    return raw[skip: skip + n * dtype.itemsize].view(dtype)


def _get(name: str, shape, dtype, page_offset: int | None = None) -> np.ndarray:
    if getattr(_local, "generation", None) != _generation:
        _local.cache, _local.generation = {}, _generation
    cache = _local.cache
    dtype = np.dtype(dtype)
    n = math.prod(shape)
    buf = cache.get((name, dtype))
    if buf is None or buf.size < n:
        if page_offset is None:
            buf = np.empty(max(n, 1), dtype)
        else:
            buf = _offset_empty(max(n, 1), dtype, page_offset)
        cache[(name, dtype)] = buf
    return buf[:n].reshape(shape)


def scratch(name: str, shape, dtype) -> np.ndarray:
    """A scratch array of this thread (contents undefined); valid until the next request."""
    return _get("scratch:" + name, shape, dtype)


def output(shape, dtype) -> np.ndarray:
    """An uninitialized output array: reused inside ``reuse_outputs()``, else fresh."""
    if getattr(_local, "reuse", False):
        return _get("output", shape, dtype, OUTPUT_PAGE_OFFSET)
    return np.empty(shape, dtype)


@contextmanager
def reuse_outputs():
    _local.reuse = True
    try:
        yield
    finally:
        _local.reuse = False


def nhwc(X: np.ndarray) -> np.ndarray:
    """X [N, C, H, W] copied to this thread's NHWC scratch array, the copy split over the
    cores (valid until the thread's next request for it)."""
    N, C, H, W = X.shape
    Xn = scratch("nhwc", (N, H, W, C), X.dtype)
    for_ranges(H, lambda h0, h1: np.copyto(Xn[:, h0:h1], X[:, :, h0:h1].transpose(0, 2, 3, 1)),
               min_chunk=1)
    return Xn
