"""The kernels' work sharing: every range once, the caller's range in the caller, errors."""

import threading
import time
from concurrent.futures import ThreadPoolExecutor
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


def test_caller_takes_the_first_chunk_and_chunks_are_shared(workers):
    where = {}

    def fn(a, b):
        where[a] = (b, threading.current_thread() is threading.main_thread())

    _parallel.for_ranges(64, fn, min_chunk=8)
    if workers == 1:  # one thread: one call
        assert where == {0: (64, True)}
        return
    chunks = sorted(where)
    assert chunks == list(range(0, 64, 8))  # at least min_chunk, CHUNKS_PER_WORKER a worker
    assert all(where[a][0] == a + 8 for a in chunks)
    assert where[0][1] is True


def test_the_caller_does_what_no_worker_got_to_and_waits_for_none(workers):
    """A worker thread that cannot start (here: the pool's only thread is busy) is
    cancelled: the calling thread takes every chunk and returns without waiting."""
    if workers == 1:
        pytest.skip("one thread")
    gate = threading.Event()
    pool = ThreadPoolExecutor(1)
    pool.submit(gate.wait)
    where = []
    try:
        with mock.patch.object(_parallel, "_executor", lambda: pool):
            t = time.perf_counter()
            _parallel.for_ranges(64, lambda a, b: where.append(
                (a, threading.current_thread() is threading.main_thread())), min_chunk=8)
            took = time.perf_counter() - t
    finally:
        gate.set()
        pool.shutdown()
    assert sorted(a for a, _ in where) == list(range(0, 64, 8))
    assert all(main for _, main in where)
    assert took < 5  # the blocked worker was not waited for (it would wait forever)


def test_an_error_stops_the_chunks_waits_for_those_running_then_raises(workers):
    if workers == 1:
        pytest.skip("one thread")
    done = []

    def fn(a, b):
        if a == 0:
            time.sleep(0.01)  # a worker has started its chunk by then
            raise ValueError("first chunk")
        time.sleep(0.05)
        done.append(a)

    with pytest.raises(ValueError, match="first chunk"):
        _parallel.for_ranges(64, fn, min_chunk=1)
    finished = len(done)
    time.sleep(0.2)
    assert len(done) == finished  # every chunk that ran was done before the caller raised
    assert finished < 63  # and the rest were not taken

    def worker_fails(a, b):
        if a > 0:
            raise KeyError("worker")

    with pytest.raises(KeyError, match="worker"):
        _parallel.for_ranges(64, worker_fails, min_chunk=8)
