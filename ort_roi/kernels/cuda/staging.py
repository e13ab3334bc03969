"""Copies between onnxruntime's host arrays and the GPU through pinned, reused buffers.

A registered op on the "cupy" backend gets its inputs from onnxruntime on the host and must
hand its outputs back there. A copy from pageable memory is staged by the driver and blocks;
from page-locked (pinned) memory it runs at the bus's full speed and asynchronously. So within
one call (``call_scope``) each host -> device copy goes through a pinned buffer of this
thread's pool (the copy queued on the current stream), the kernels follow on the same stream,
and each output comes back into a pinned buffer with one synchronisation at the end: the
buffers are reused by the next call on the thread, which onnxruntime's bridge allows (it
copies an output before the next call on that thread).

Outside a call scope (a kernel called directly with CuPy arrays) ``to_device`` is a plain
``cupy.asarray``. Where CuPy offers no pinned memory (a stand-in), or an array is larger than
``PINNED_MAX``, both fall back to plain copies. ``release()`` (``ort_roi.release_memory()``)
lets go of every thread's buffers.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import numpy as np

from ... import forksafe

#: Buffers start this far past a page boundary (see kernels/cpu/workspace.py: glibc's memcpy
#: of a large buffer is slow when source and destination share their offset in the page).
_OFFSET = 2048
_PAGE = 4096

#: An array larger than this is copied without a pinned buffer (page-locked host memory is
#: taken from the whole machine: a thread keeps at most its largest arrays' worth).
PINNED_MAX = 512 << 20

_local = threading.local()
_lock = forksafe.Lock()
_pools: list = []  # every thread's pool, for release()


@forksafe.in_child
def _after_fork_in_child() -> None:
    """CUDA does not survive a fork: a child starts afresh."""
    global _local
    _local = threading.local()
    _pools.clear()


class _Pool:
    """One thread's pinned buffers: ``slots[i]`` is (memory, capacity in bytes)."""

    def __init__(self) -> None:
        self.slots: list = []
        self.next = 0
        self.depth = 0

    def buffer(self, nbytes: int, dtype, shape) -> np.ndarray:
        import cupy

        i, self.next = self.next, self.next + 1
        while len(self.slots) <= i:  # (release() may have emptied the list meanwhile)
            self.slots.append((None, 0))
        mem, cap = self.slots[i]
        if cap < nbytes + _OFFSET:
            cap = max(nbytes + _OFFSET, 2 * cap)
            cap = -(-cap // _PAGE) * _PAGE
            mem = cupy.cuda.alloc_pinned_memory(cap)
            self.slots[i] = (mem, cap)
        count = int(np.prod(shape, dtype=np.int64))
        return np.frombuffer(mem, dtype, count, _OFFSET).reshape(shape)


def _pool() -> _Pool:
    p = getattr(_local, "pool", None)
    if p is None:
        p = _local.pool = _Pool()
        with _lock:
            _pools.append(p)
    return p


def _pinned_available() -> bool:
    import cupy

    return hasattr(getattr(cupy, "cuda", None), "alloc_pinned_memory")


@contextmanager
def call_scope():
    """One registered op's call on this thread: pinned buffers are handed out from the start
    of the pool, and the stream is synchronised on the way out (also after an error, so that
    no queued copy still reads a buffer the next call writes)."""
    p = _pool()
    if p.depth:  # nested: the outer scope owns the buffers
        yield
        return
    p.depth, p.next = 1, 0
    try:
        yield
    finally:
        p.depth = 0
        if _pinned_available():
            import cupy

            cupy.cuda.get_current_stream().synchronize()


def to_device(a: np.ndarray):
    """``a`` on the GPU: within a call scope through a pinned buffer, queued on the current
    stream (no synchronisation); elsewhere a plain copy.

    Args:
        a: a host array.
    Returns:
        A C-contiguous CuPy array of a's dtype and shape.
    """
    import cupy

    a = np.asarray(a)
    p = _pool()
    if not p.depth or a.nbytes > PINNED_MAX or not _pinned_available():
        return cupy.ascontiguousarray(cupy.asarray(a))
    staged = p.buffer(a.nbytes, a.dtype, a.shape)
    np.copyto(staged, a)
    d = cupy.empty(a.shape, a.dtype)
    d.set(staged, stream=cupy.cuda.get_current_stream())
    return d


def to_host(y) -> np.ndarray:
    """A CuPy array on the host: within a call scope in a pinned buffer of the pool (reused by
    the next call on this thread), after the stream's work; elsewhere a fresh array.

    Args:
        y: a CuPy array, or a NumPy one (an output a kernel computed on the host, such as
            ROIFeatureExtractor's rois_out: handed back as it is).
    Returns:
        A C-contiguous NumPy array of y's dtype and shape.
    """
    import cupy

    if isinstance(y, np.ndarray) and type(y).__module__ != "cupy":  # already on the host
        return np.ascontiguousarray(y)
    p = _pool()
    if not p.depth or y.nbytes > PINNED_MAX or not _pinned_available():
        return np.ascontiguousarray(cupy.asnumpy(y))
    out = p.buffer(y.nbytes, y.dtype, y.shape)
    cupy.ascontiguousarray(y).get(stream=cupy.cuda.get_current_stream(), out=out)
    return out


def release() -> int:
    """Let go of every thread's pinned buffers (one in use lives on until its array goes).

    Returns:
        The bytes let go.
    """
    with _lock:
        n = sum(cap for p in _pools for _, cap in p.slots)
        for p in _pools:
            p.slots = []
    return n
