"""Reusable per-thread buffers.

Fresh large allocations are expensive (every page is faulted in again), so scratch arrays
(the NHWC copy of X) are kept per thread and reused. Outputs are reused only inside the
onnxruntime bridge, which copies the output into onnxruntime's buffer before the next call
on that thread; a kernel called directly always returns a fresh array.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

_local = threading.local()
_generation = 0


def clear() -> None:
    """Drop every thread's buffers (each thread lets go at its next request)."""
    global _generation
    _generation += 1
    _local.__dict__.pop("cache", None)


def _get(name: str, shape, dtype) -> np.ndarray:
    if getattr(_local, "generation", None) != _generation:
        _local.cache, _local.generation = {}, _generation
    cache = _local.cache
    dtype = np.dtype(dtype)
    n = int(np.prod(shape, dtype=np.int64))
    buf = cache.get((name, dtype))
    if buf is None or buf.size < n:
        buf = np.empty(max(n, 1), dtype)
        cache[(name, dtype)] = buf
    return buf[:n].reshape(shape)


def scratch(name: str, shape, dtype) -> np.ndarray:
    """A scratch array of this thread (contents undefined); valid until the next request."""
    return _get("scratch:" + name, shape, dtype)


def output(shape, dtype) -> np.ndarray:
    """An uninitialized output array: reused inside ``reuse_outputs()``, else fresh."""
    if getattr(_local, "reuse", False):
        return _get("output", shape, dtype)
    return np.empty(shape, dtype)


@contextmanager
def reuse_outputs():
    _local.reuse = True
    try:
        yield
    finally:
        _local.reuse = False
