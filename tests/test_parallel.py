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


def test_the_caller_takes_chunks_too_and_chunks_are_shared(workers):
    """Which thread takes which chunk is up to the scheduler (a worker may take chunk 0 before
    the caller gets to it: this test assumed it never did and failed 2 runs in 3000). Workers
    here wait until the caller has taken a chunk: the caller then takes one, whatever the
    order, and every chunk is taken once."""
    where, lock = {}, threading.Lock()
    caller_in = threading.Event()

    def fn(a, b):
        main = threading.current_thread() is threading.main_thread()
        if main:
            caller_in.set()
        elif not caller_in.wait(60):  # not forever: a caller that never takes a chunk
            caller_in.set()  # fails the test below (the other workers do not wait again)
        with lock:
            where[a] = (b, main)

    _parallel.for_ranges(64, fn, min_chunk=8)
    if workers == 1:  # one thread: one call
        assert where == {0: (64, True)}
        return
    chunks = sorted(where)
    assert chunks == list(range(0, 64, 8))  # at least min_chunk, CHUNKS_PER_WORKER a worker
    assert all(where[a][0] == a + 8 for a in chunks)
    assert any(main for _, main in where.values())  # the calling thread took chunks too


def test_the_caller_does_what_no_worker_got_to_and_waits_for_none(workers):
    """A worker thread that cannot start (here: the pool's only thread is busy) is
    cancelled: the calling thread takes every chunk and returns without waiting (for_ranges
    returns while the pool's thread is still blocked; waiting for its chunk, it would return
    only after the block ends, here after 300 s)."""
    if workers == 1:
        pytest.skip("one thread")
    gate = threading.Event()
    pool = ThreadPoolExecutor(1)
    blocked = pool.submit(gate.wait, 300)
    where = []
    try:
        with mock.patch.object(_parallel, "_executor", lambda: pool):
            _parallel.for_ranges(64, lambda a, b: where.append(
                (a, threading.current_thread() is threading.main_thread())), min_chunk=8)
        returned_while_blocked = not blocked.done()
    finally:
        gate.set()
        pool.shutdown()
    assert sorted(a for a, _ in where) == list(range(0, 64, 8))
    assert all(main for _, main in where)
    assert returned_while_blocked  # the blocked worker was not waited for


class _WaitedFor:
    """An executor whose futures note when the caller waits for them (``result()``):
    ``waited`` is set then, before the wait."""

    def __init__(self, pool: ThreadPoolExecutor):
        self.pool, self.waited = pool, threading.Event()

    def submit(self, fn, *args):
        """Submit ``fn`` to the pool.

        Args:
            fn: the callable, as ``ThreadPoolExecutor.submit`` takes it.
            *args: its arguments.

        Returns:
            A future whose ``result()`` sets ``waited``, then waits.
        """
        future, waited = self.pool.submit(fn, *args), self.waited

        class Future:
            cancel, done = future.cancel, future.done

            @staticmethod
            def result(timeout=None):
                waited.set()
                return future.result(timeout)

        return Future()


def test_an_error_stops_the_chunks_waits_for_those_running_then_raises(workers):
    """The caller's chunk raises while a worker is inside its chunk: for_ranges waits for
    that chunk to end, takes no other, then raises. In order, without sleeps: the caller
    raises only once a worker is inside a chunk (``entered``); the worker's chunk ends only
    once the caller waits for it (``waited``: its future's result()), so a caller that raised
    without waiting leaves it unfinished (the 60 s waits are hang guards: the events are set
    by then, or the test fails anyway)."""
    if workers == 1:
        pytest.skip("one thread")
    pool = _WaitedFor(ThreadPoolExecutor(workers - 1))
    entered, done, lock = [], [], threading.Lock()
    worker_in = threading.Event()
    callers = []

    def fn(a, b):
        if threading.current_thread() is threading.main_thread():
            callers.append(a)
            assert worker_in.wait(60)  # hang guard: a worker takes a chunk while we wait
            raise ValueError("first chunk")
        with lock:
            entered.append(a)
        worker_in.set()
        pool.waited.wait(60)  # hang guard: set when the caller waits for this chunk
        with lock:
            done.append(a)

    try:
        with mock.patch.object(_parallel, "_executor", lambda: pool):
            with pytest.raises(ValueError, match="first chunk"):
                _parallel.for_ranges(64, fn, min_chunk=1)
            finished = sorted(done)
    finally:
        pool.waited.set()
        pool.pool.shutdown()
    assert callers and entered  # the caller's chunk raised while a worker's ran
    assert finished == sorted(entered)  # every chunk that ran ended before the caller raised
    assert len(callers) == 1 and len(entered) <= workers - 1  # and no other was taken

    def worker_fails(a, b):
        if a > 0:
            raise KeyError("worker")

    with pytest.raises(KeyError, match="worker"):
        _parallel.for_ranges(64, worker_fails, min_chunk=8)


def _workers_in_child(env: dict, affinity=None) -> int:
    """parallel.workers() in a fresh interpreter with ``env`` (and CPU ``affinity``)."""
    import os
    import subprocess
    import sys

    code = ("import os, sys\n"
            f"if {affinity!r} is not None: os.sched_setaffinity(0, {affinity!r})\n"
            "from ort_roi.kernels.cpu import parallel\n"
            "print(parallel.workers())")
    env = {k: v for k, v in os.environ.items() if k != _parallel.THREADS_ENV} | env
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True)
    return int(out.stdout.strip())


@pytest.mark.skipif(not hasattr(__import__("os"), "sched_getaffinity"), reason="no affinity")
def test_thread_count_follows_the_cpu_affinity_and_the_environment_variable():
    """Issue 32 (10): the worker count was min(8, os.cpu_count()), the machine's CPUs, also
    in a process pinned to fewer (taskset, a container's cpuset): more threads than cores."""
    assert _workers_in_child({}, affinity={0}) == 1
    import os
    cpus = len(os.sched_getaffinity(0))
    assert _workers_in_child({}) == min(8, cpus)
    assert _workers_in_child({"ORT_ROI_NUM_THREADS": "3"}, affinity={0}) == 3
    with pytest.warns(UserWarning, match="ORT_ROI_NUM_THREADS='many' is not a positive"):
        os.environ["ORT_ROI_NUM_THREADS"] = "many"
        try:
            assert _parallel.default_workers() == min(8, cpus)
        finally:
            del os.environ["ORT_ROI_NUM_THREADS"]


def test_set_num_threads_sets_the_threads_that_share_a_kernel():
    seen, lock = set(), threading.Lock()

    def fn(a, b):
        time.sleep(0.002)
        with lock:
            seen.add(threading.current_thread().name)

    previous = _parallel.set_num_threads(1)
    try:
        assert _parallel.workers() == 1
        _parallel.for_ranges(64, fn, min_chunk=1)
        assert seen == {threading.current_thread().name}  # the caller alone
        assert _parallel.set_num_threads(3) == 1 and _parallel.workers() == 3
        seen.clear()
        _parallel.for_ranges(300, fn, min_chunk=1)
        assert 1 <= len(seen) <= 3
        assert len(_parallel._executor()._threads) <= 2  # the caller and two workers at most
        with pytest.raises(ValueError, match="positive int or None, got 0"):
            _parallel.set_num_threads(0)
        assert _parallel.set_num_threads(None) == 3
        assert _parallel.workers() == _parallel.default_workers()
    finally:
        _parallel.set_num_threads(previous)
