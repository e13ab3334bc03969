"""The kernels' work sharing: every range once, the caller's range in the caller, errors."""

import threading
import time
from unittest import mock

import pytest

from ort_roi.kernels.cpu import parallel as _parallel


@pytest.fixture(params=[1, 2, 3])
def workers(request):
    with mock.patch.object(_parallel, "_WORKERS", request.param):
        yield request.param


@pytest.mark.parametrize("n", [0, 1, 15, 16, 17, 100, 1001])
def test_ranges_cover_every_index_once(workers, n):
    seen, lock = [], threading.Lock()

    def fn(a, b):
        with lock:
            seen.extend(range(a, b))

    _parallel.for_ranges(n, fn, min_chunk=8)
    assert sorted(seen) == list(range(n))


def test_caller_takes_the_first_range(workers):
    where = {}

    def fn(a, b):
        where[a] = threading.current_thread() is threading.main_thread()

    _parallel.for_ranges(64, fn, min_chunk=8)
    assert len(where) == workers
    assert where.pop(0) is True
    assert not any(where.values())


def test_an_error_waits_for_the_other_ranges_then_raises(workers):
    if workers == 1:
        pytest.skip("one range")
    done = []

    def fn(a, b):
        if a == 0:
            raise ValueError("first range")
        time.sleep(0.05)
        done.append(a)

    with pytest.raises(ValueError, match="first range"):
        _parallel.for_ranges(64, fn, min_chunk=8)
    assert len(done) == workers - 1  # the workers finished before the caller raised

    def worker_fails(a, b):
        if a > 0:
            raise KeyError("worker")

    with pytest.raises(KeyError, match="worker"):
        _parallel.for_ranges(64, worker_fails, min_chunk=8)
