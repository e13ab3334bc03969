"""Run a per-roi loop on every core: NumPy and BLAS release the GIL inside their calls."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

_WORKERS = max(1, min(8, os.cpu_count() or 1))
_pool: ThreadPoolExecutor | None = None
_pool_pid = -1


def _executor() -> ThreadPoolExecutor:
    global _pool, _pool_pid
    if _pool is None or _pool_pid != os.getpid():  # a forked child needs its own threads
        _pool = ThreadPoolExecutor(_WORKERS, thread_name_prefix="ort_roi")
        _pool_pid = os.getpid()
    return _pool


def for_ranges(n: int, fn: Callable[[int, int], None], min_chunk: int = 16) -> None:
    """Call fn(start, stop) over [0, n) split into one contiguous range per worker."""
    parts = min(_WORKERS, max(1, n // min_chunk))
    if parts <= 1:
        fn(0, n)
        return
    bounds = [n * i // parts for i in range(parts + 1)]
    futures = [_executor().submit(fn, a, b) for a, b in zip(bounds[:-1], bounds[1:])]
    for f in futures:
        f.result()
