"""glibc's heap kept for reuse (``ort_roi.reuse_freed_memory``).

onnxruntime-extensions' Python-op bridge copies every input of a Python op into a new NumPy
array on every call. glibc serves a block above its mmap threshold (128 KiB at first,
raised as such blocks are freed, to 32 MiB at most) with fresh pages from the kernel and
gives them back when it is freed, so a map larger than that pays, on every call, a page
fault and the kernel's zeroing for each of its pages before the copy itself: for
MMDeploy's mask stage, about twice the copy's time (docs/benchmarks.md, "Measurements
behind design choices").

Served from glibc's heap instead and kept there once freed, the next call's arrays land on
pages already mapped. The cost is the process's: memory freed by anyone stays with the
process (up to ``TRIM_THRESHOLD`` of it at the top of the heap) instead of going back to
the system, so its resident size stays near its high-water mark. Hence a choice the user
makes, not something ``import ort_roi`` does.
"""

from __future__ import annotations

import ctypes
import sys

#: glibc's mallopt parameters (malloc.h).
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
#: Free memory at the top of the heap beyond this many bytes goes back to the system.
TRIM_THRESHOLD = 512 << 20


def reuse_freed_memory() -> bool:
    """Serve large allocations from glibc's heap and keep freed memory there for reuse.

    Process-wide (glibc's ``mallopt``: no mmap of its own for large blocks, the heap
    trimmed only past ``TRIM_THRESHOLD``): the inputs onnxruntime-extensions copies for
    every call of an ort_roi op then reuse pages already mapped instead of fresh ones the
    kernel must fault in and zero (docs/benchmarks.md: a 55.7 MB map, 17 ms fresh, 7 ms
    reused).
    The process keeps memory it frees rather than returning it to the system.

    Returns:
        True when glibc took both settings; False elsewhere (not Linux, not glibc), where
        nothing is changed.
    """
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 - glibc's alone: musl's mallopt does nothing
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(M_MMAP_MAX, 0)) & bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
