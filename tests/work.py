"""Bounds on work instead of on time: a test that a step is cheap counts what the step does,
so it passes on a machine however loaded and fails on the regression it guards.

``python_lines`` counts the lines of ort_roi's own Python that run in the calling thread (the
kernels' threads held to it): a loop per box, per block or per sample shows there, whatever
the machine's speed. It does not count NumPy's work inside one call; bound that by its memory
(tracemalloc) or by the counters the code keeps (the NMS's pairs and comparisons).
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys

import ort_roi
from ort_roi.kernels.cpu import parallel

PACKAGE = os.path.dirname(os.path.abspath(ort_roi.__file__)) + os.sep


class _Exceeded(BaseException):
    """Raised into the traced code at the first line past the limit: the work stops there
    (a BaseException: the code's ``except Exception`` handlers do not swallow it)."""


class Lines:
    """The count of a ``python_lines`` block (``n``), final once the block has exited, and
    the code objects of ort_roi's functions it entered (``entered``)."""

    def __init__(self, limit: int):
        self.limit, self.n = limit, 0
        self.entered: set = set()


def _code(fn):
    """The code object a call of ``fn`` runs (through decorators that keep ``__wrapped__``).

    Args:
        fn: a function or method of ort_roi.

    Returns:
        Its code object (the innermost wrapped function's).

    Raises:
        ValueError: ``fn`` is not ort_roi's code, which the count does not trace.
    """
    code = getattr(inspect.unwrap(getattr(fn, "__func__", fn)), "__code__", None)
    if code is None or not code.co_filename.startswith(PACKAGE):
        raise ValueError(f"python_lines(entered=...): {fn!r} is not ort_roi's code")
    return code


@contextlib.contextmanager
def python_lines(limit: int, entered=None):
    """Count the lines of ort_roi's Python that the block runs in this thread, with the
    kernels' worker threads off (parallel.set_num_threads(1): every chunk runs here). Past
    ``limit`` the work is stopped at that line and AssertionError says so; so it does when
    the block ran no line of ort_roi's Python (an upper bound on no work holds of nothing:
    the block did not call what it was to bound), or did not enter ``entered``.

    Args:
        limit: the most lines the block may run.
        entered: a function of ort_roi the block must call (the step the bound is about,
            e.g. ``ops.roi_align``), or None (any of ort_roi's lines).

    Yields:
        a Lines whose ``n`` is the count.

    Raises:
        AssertionError: more than ``limit`` lines, none, or ``entered`` not entered.
        ValueError: ``entered`` is not ort_roi's code.
    """
    want = _code(entered) if entered is not None else None
    count = Lines(limit)

    def line(frame, event, arg):
        if event == "line":
            count.n += 1
            if count.n > limit:
                raise _Exceeded
        return line

    def call(frame, event, arg):  # trace only ort_roi's own frames
        if frame.f_code.co_filename.startswith(PACKAGE):
            count.entered.add(frame.f_code)
            return line
        return None

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
    assert count.n >= 1, "no line of ort_roi's Python ran: the block did none of its work"
    assert want is None or want in count.entered, (
        f"{entered.__qualname__} was not called: the block did not do the work it bounds")
