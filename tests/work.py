"""Bounds on work instead of on time: a test that a step is cheap counts what the step does,
so it passes on a machine however loaded and fails on the regression it guards.

``python_lines`` counts the lines of ort_roi's own Python that run in the calling thread (the
kernels' threads held to it): a loop per box, per block or per sample shows there, whatever
the machine's speed. It does not count NumPy's work inside one call; bound that by its memory
(tracemalloc) or by the counters the code keeps (the NMS's pairs and comparisons).
"""

from __future__ import annotations

import contextlib
import os
import sys

import ort_roi
from ort_roi.kernels.cpu import parallel

PACKAGE = os.path.dirname(os.path.abspath(ort_roi.__file__)) + os.sep


class _Exceeded(BaseException):
    """Raised into the traced code at the first line past the limit: the work stops there
    (a BaseException: the code's ``except Exception`` handlers do not swallow it)."""


class Lines:
    """The count of a ``python_lines`` block (``n``), final once the block has exited."""

    def __init__(self, limit: int):
        self.limit, self.n = limit, 0


@contextlib.contextmanager
def python_lines(limit: int):
    """Count the lines of ort_roi's Python that the block runs in this thread, with the
    kernels' worker threads off (parallel.set_num_threads(1): every chunk runs here). Past
    ``limit`` the work is stopped at that line and AssertionError says so.

    Yields:
        a Lines whose ``n`` is the count.
    """
    count = Lines(limit)

    def line(frame, event, arg):
        if event == "line":
            count.n += 1
            if count.n > limit:
                raise _Exceeded
        return line

    def call(frame, event, arg):  # trace only ort_roi's own frames
        return line if frame.f_code.co_filename.startswith(PACKAGE) else None

    threads = parallel.set_num_threads(1)
    before = sys.gettrace()
    sys.settrace(call)
    try:
        yield count
    except _Exceeded:
        pass
    finally:
        sys.settrace(before)
        parallel.set_num_threads(threads)
    assert count.n <= limit, f"more than {limit} lines of ort_roi's Python ran"
