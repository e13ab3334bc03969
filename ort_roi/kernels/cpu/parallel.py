"""Run a per-roi loop on every core: NumPy and BLAS release the GIL inside their calls.

While our workers run, the OpenBLAS that NumPy ships is held to one thread per call: the
workers already use every core, and OpenBLAS's own threads on top of them cost time
(docs/benchmarks.md, "Measurements behind design choices"). The previous setting is restored when
the last running kernel finishes.
"""

from __future__ import annotations

import ctypes
import os
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Callable
from ... import forksafe

#: The environment variable that sets the kernels' thread count (a positive integer).
THREADS_ENV = "ORT_ROI_NUM_THREADS"
#: Without it, the kernels use the CPUs this process may run on, at most this many.
MAX_DEFAULT_WORKERS = 8


def default_workers() -> int:
    """The kernels' thread count unless set_num_threads() says otherwise.

    Returns:
        ORT_ROI_NUM_THREADS when it is a positive integer, else the CPUs this process may
        run on (its CPU affinity, as taskset, cgroups' cpusets and container runtimes set
        it; not os.cpu_count(), the machine's), at most MAX_DEFAULT_WORKERS.
    """
    value = os.environ.get(THREADS_ENV, "").strip()
    if value:
        if value.isdigit() and int(value) >= 1:
            return int(value)
        warnings.warn(f"ort_roi: {THREADS_ENV}={value!r} is not a positive integer: ignored",
                      stacklevel=2)
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity on this platform (macOS, Windows)
        cpus = os.cpu_count() or 1
    return max(1, min(MAX_DEFAULT_WORKERS, cpus))


_WORKERS = default_workers()
_pool: ThreadPoolExecutor | None = None  # started on first need (again in a forked child)


def set_num_threads(n: int | None) -> int:
    """Set how many threads (the calling one included) share a kernel's work.

    Args:
        n: a positive thread count, or None for the default (default_workers():
            ORT_ROI_NUM_THREADS, else the process's CPU affinity, at most 8). 1 runs every
            kernel in the calling thread alone, e.g. when onnxruntime's own threads or several
            sessions already use the cores.

    Returns:
        The previous thread count.
    """
    global _WORKERS, _pool
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
        raise ValueError(f"set_num_threads: n must be a positive int or None, got {n!r}")
    previous = _WORKERS
    _WORKERS = default_workers() if n is None else n
    _pool = None  # the next kernel starts a pool of the new size (idle old threads exit)
    return previous


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(max(1, _WORKERS - 1), thread_name_prefix="ort_roi")
    return _pool


def _find_openblas():
    """(get, set) thread-count functions of the OpenBLAS loaded by NumPy, or None."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f if "openblas" in line.lower()}
    except OSError:
        return None
    for path in sorted(paths):
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for suffix in ("64_", ""):
            for prefix in ("scipy_openblas", "openblas"):
                get = getattr(lib, f"{prefix}_get_num_threads{suffix}", None)
                put = getattr(lib, f"{prefix}_set_num_threads{suffix}", None)
                if get is not None and put is not None:
                    get.restype, put.argtypes = ctypes.c_int, [ctypes.c_int]
                    return get, put
    return None


_blas = None
_blas_lock = forksafe.Lock()
_blas_users = 0
_blas_saved = 1


@forksafe.in_child
def _after_fork_in_child() -> None:
    """A forked child has only the thread that forked: no kernel of another thread is
    running there, so OpenBLAS gets its saved setting back (the lock is fresh there)."""
    global _blas_users, _pool
    _pool = None
    if _blas and _blas_users:
        _blas[1](_blas_saved)
    _blas_users = 0


class _SingleThreadBlas:
    """Context: OpenBLAS at one thread while at least one kernel is inside."""

    def __enter__(self):
        global _blas, _blas_users, _blas_saved
        with _blas_lock:
            if _blas is None:
                _blas = _find_openblas() or False
            if _blas and _blas_users == 0:
                _blas_saved = _blas[0]()
                _blas[1](1)
            _blas_users += 1

    def __exit__(self, *exc):
        global _blas_users
        with _blas_lock:
            _blas_users -= 1
            if _blas and _blas_users == 0:
                _blas[1](_blas_saved)


def blas_threads() -> int | None:
    """OpenBLAS's thread count now (1 while a kernel runs), or None without OpenBLAS."""
    global _blas
    with _blas_lock:
        if _blas is None:
            _blas = _find_openblas() or False
        return _blas[0]() if _blas else None


def workers() -> int:
    """Threads that share a kernel's work (set_num_threads, default_workers)."""
    return _WORKERS


#: Chunks per worker that for_ranges cuts its range into (the threads take them in turn).
CHUNKS_PER_WORKER = 4


def for_ranges(n: int, fn: Callable[[int, int], None], min_chunk: int = 16) -> None:
    """Call fn(start, stop) over contiguous chunks covering [0, n) once each, shared by the
    workers: each thread takes the next chunk until none is left, the calling thread too,
    with OpenBLAS at one thread meanwhile.

    Taken, not dealt: on this 2-vCPU VM another thread often holds the second core
    (onnxruntime's intra-op workers spin after each of their parallel ops), and a kernel
    that had dealt half of its boxes to a worker waited for that worker to be scheduled, up
    to a 4 ms scheduler tick (W8f's 6-box P4 row: calls of 1 ms or 5 ms, 5 ms in the median
    next to onnxruntime's RoiAlign). Taken in chunks, the calling thread does the work that
    no other thread got to, and a worker that has not started by then is cancelled, not
    waited for. OpenBLAS's own threads would be waited for the same way: it runs one thread
    per call inside (the calls here are small), our threads share the boxes."""
    parts = min(_WORKERS, max(1, n // min_chunk))
    if parts <= 1:
        with _SingleThreadBlas():
            fn(0, n)
        return
    size = max(min_chunk, -(-n // (parts * CHUNKS_PER_WORKER)))
    starts = iter(range(0, n, size))  # next() of a range iterator is atomic under the GIL
    failed = []

    def take() -> None:
        for a in starts:
            if failed:
                return
            try:
                fn(a, min(n, a + size))
            except BaseException as e:  # noqa: BLE001 - raised by the calling thread
                failed.append(e)
                return

    with _SingleThreadBlas():
        futures = [_executor().submit(take) for _ in range(parts - 1)]
        take()  # the calling thread takes chunks too
        for f in futures:
            if not f.cancel():  # one that has started finishes its chunk
                f.result()
    if failed:
        raise failed[0]


def for_channel_blocks(C: int, block: int, fn: Callable[[int, int], None]) -> None:
    """Call fn(c0, c1) for the channel blocks [c0, c1) of size ``block``, shared by the cores."""
    blocks = [(c0, min(C, c0 + block)) for c0 in range(0, C, block)]

    def work(first: int, last: int) -> None:
        for c0, c1 in blocks[first:last]:
            fn(c0, c1)

    for_ranges(len(blocks), work, min_chunk=1)
