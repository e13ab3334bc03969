"""tests/work.py's ``python_lines`` itself: it fails a block over its limit, a block that ran
none of ort_roi's Python (a bound on no work holds of nothing) and one that did not enter
the function it names."""

import numpy as np
import pytest

from ort_roi import ops
from ort_roi.spec import OpSpec
from tests.work import python_lines

X = np.arange(2 * 3 * 8 * 8, dtype=np.float32).reshape(2, 3, 8, 8)
BOXES = np.array([[0, 0, 4, 4], [1, 2, 7, 6]], np.float32)
COUNTS = np.array([1, 1], np.int64)


def _roi_align():
    return ops.roi_align(X, BOXES, COUNTS, pooled_height=2, pooled_width=2)


def test_a_block_that_does_the_work_counts_it():
    with python_lines(100_000, entered=ops.roi_align) as lines:
        y = _roi_align()
    assert 0 < lines.n <= 100_000 and y.shape == (2, 3, 2, 2)
    assert ops.roi_align.__wrapped__.__code__ in lines.entered


def test_a_block_that_runs_none_of_ort_roi_fails():
    with pytest.raises(AssertionError, match="no line of ort_roi's Python ran"):
        with python_lines(100_000):
            np.sort(X.ravel())


def test_a_block_that_does_not_enter_the_named_function_fails():
    with pytest.raises(AssertionError, match="roi_align was not called"):
        with python_lines(100_000, entered=ops.roi_align):
            ops.spec("RoIAlign").resolve({})  # ort_roi's code, not the kernel


def test_a_block_over_its_limit_is_stopped_and_fails():
    done = []
    with pytest.raises(AssertionError, match="more than 5 lines"):
        with python_lines(5, entered=ops.roi_align):
            _roi_align()
            done.append(1)
    assert not done  # stopped at the sixth line


def test_entered_must_be_ort_roi_code():
    for other in (np.sort, len):  # NumPy's Python, a builtin
        with pytest.raises(ValueError, match="is not ort_roi's code"):
            with python_lines(10, entered=other):
                pass
    with python_lines(10_000, entered=OpSpec.resolve):  # a method, through the class
        ops.spec("RoIAlign").resolve({"pooled_height": 3})
