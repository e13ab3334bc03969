"""No test holds the machine to a speed (issue 51, 6): a threshold on how long a step took
failed under a load of 14 on 2 cores (14.8 s against 10), as CI's machines run. A test that a
step is cheap bounds its work instead (tests/work.py: the lines of ort_roi's Python it runs;
tracemalloc's peak; the counters the code keeps, e.g. the NMS's pairs and comparisons);
speed goals stay in the benchmark tools (``ort-roi bench``, tools/).

This test reads tests/*.py: a clock is read (time.perf_counter, time.time, time.monotonic,
process and thread CPU time, their _ns forms, resource.getrusage, datetime.now) only in the
functions ``ALLOWED`` names, each saying why it is no speed threshold; a wait on a thread, a
process, an event or a queue with a literal timeout (``.wait(s)``, ``.join(s)``,
``.get(timeout=s)``) gives at least ``MIN_WAIT_S``: a guard against a wait that never ends
(a hang), not a deadline a loaded machine misses.
"""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
CLOCKS = {"time": {"perf_counter", "time", "monotonic", "process_time", "thread_time",
                   "clock_gettime"},
          "resource": {"getrusage"}, "datetime": {"now", "utcnow"}}
MIN_WAIT_S = 60

#: "file::top-level function" -> (the clock it may read, why that is no speed threshold)
ALLOWED = {
    "test_ray.py::_recovered": (
        "time.monotonic",
        "a hang guard: polls the cluster until a replacement replica runs, for at most HANG_S"),
    "test_ray.py::_load": (
        "time.monotonic",
        "a hang guard: no request starts after HANG_S (the load cannot run forever)"),
    "test_ray.py::test_slowest_ray_data_an_actor_killed_mid_dataset_is_restarted": (
        "time.monotonic",
        "a hang guard: waits at most 120 s for the first batch to start, then kills its actor"),
    "test_ray.py::test_clients_sending_slowly_do_not_block_a_valid_request": (
        "time.monotonic",
        "a lower bound: the 408 comes no sooner than read_timeout_s (load only lengthens it)"),
    "test_cupy.py::test_cuda_source_on_host_max_of_huge_boxes_is_bounded_and_exact": (
        "time.thread_time",
        "this thread's CPU time, which load does not lengthen (the host build of the CUDA "
        "source keeps no count of its samples): 2000 times what it takes"),
    "test_validate_models.py::test_validate_answers_ok_on_mask_rcnn_native_and_converted": (
        "time.process_time",
        "the process's CPU time, which load does not lengthen (validate keeps no count of "
        "its work): 14 times what it takes"),
    "test_gpu_bench.py::host_cupy": (
        "time.perf_counter",
        "a fake CUDA event's clock: the bench measures with it, the test asserts no time"),
}


def _clock_name(node: ast.Call, imported: dict[str, str]) -> str | None:
    """``module.fn`` when the call reads a clock (``time.perf_counter()``, ``perf_counter()``
    imported from time, ``time.perf_counter_ns()``, ``datetime.datetime.now()``)."""
    f = node.func
    if isinstance(f, ast.Attribute):
        base = f.value
        module = base.id if isinstance(base, ast.Name) else (
            base.attr if isinstance(base, ast.Attribute) else "")
        module, name = imported.get(module, module).split(".")[0], f.attr
    elif isinstance(f, ast.Name) and "." in imported.get(f.id, ""):
        module, name = imported[f.id].rsplit(".", 1)
    else:
        return None
    name = name.removesuffix("_ns")
    return f"{module}.{name}" if name in CLOCKS.get(module, ()) else None


def _literal_wait(node: ast.Call) -> float | None:
    """The literal timeout of ``x.wait(s)``, ``x.join(s)`` or ``x.get(timeout=s)``."""
    f = node.func
    if not isinstance(f, ast.Attribute) or f.attr not in ("wait", "join", "get"):
        return None
    args = [k.value for k in node.keywords if k.arg == "timeout"]
    if f.attr != "get":
        args += node.args[:1]
    for a in args:
        if isinstance(a, ast.Constant) and isinstance(a.value, (int, float)):
            return float(a.value)
    return None


def _scan(path: pathlib.Path) -> tuple[dict[str, list[str]], list[str]]:
    """(clock reads by "file::top-level name": ["fn at line"], short waits: ["where"])."""
    tree = ast.parse(path.read_text(), filename=str(path))
    imported = {}  # local name -> the module it stands for, or "module.name" it came from
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                imported[a.asname or a.name] = a.name
        elif isinstance(node, ast.ImportFrom) and node.module in CLOCKS:
            for a in node.names:
                imported[a.asname or a.name] = f"{node.module}.{a.name}"
    reads: dict[str, list[str]] = {}
    waits = []
    for top in tree.body:
        where = f"{path.name}::{getattr(top, 'name', '<module>')}"
        for node in ast.walk(top):
            if not isinstance(node, ast.Call):
                continue
            clock = _clock_name(node, imported)
            if clock:
                reads.setdefault(where, []).append(f"{clock}() at line {node.lineno}")
            s = _literal_wait(node)
            if s is not None and s < MIN_WAIT_S:
                waits.append(f"{where} line {node.lineno}: waits {s:g} s")
    return reads, waits


def _all():
    reads, waits = {}, []
    for path in sorted(TESTS.glob("*.py")):
        r, w = _scan(path)
        reads.update(r)
        waits += w
    return reads, waits


def test_no_test_reads_a_clock_but_the_allowed():
    reads, _ = _all()
    unexplained = {k: v for k, v in reads.items()
                   if k not in ALLOWED or any(not r.startswith(ALLOWED[k][0] + "()") for r in v)}
    assert not unexplained, (
        "a test reads a clock: bound the work instead (tests/work.py, tracemalloc, the "
        f"code's counters), or say in ALLOWED why it is no speed threshold: {unexplained}")
    stale = sorted(set(ALLOWED) - set(reads))
    assert not stale, f"ALLOWED names functions that read no clock now: {stale}"


def test_waits_with_a_timeout_are_hang_guards():
    _, waits = _all()
    assert not waits, f"a literal timeout under {MIN_WAIT_S} s fails on a loaded machine: {waits}"


def test_the_scan_finds_what_it_looks_for(tmp_path):
    """The scanner itself: each form it must see, and none of the harmless ones."""
    p = tmp_path / "test_sample.py"
    p.write_text(
        "import time\nfrom time import perf_counter as pc\nimport datetime\n"
        "def test_a():\n    t = time.perf_counter()\n    assert time.perf_counter() - t < 1\n"
        "def test_b():\n    t = pc()\n"
        "def test_c():\n    time.monotonic_ns(); time.process_time()\n"
        "def test_d():\n    datetime.datetime.now()\n"
        "def test_e(q, ev):\n    q.get(timeout=30); ev.wait(5); ev.wait(HANG_S); q.get()\n"
        "    time.sleep(0.1); ev.wait(120)\n")
    reads, waits = _scan(p)
    assert sorted(reads) == [f"test_sample.py::test_{c}" for c in "abcd"], reads
    assert reads["test_sample.py::test_a"] == ["time.perf_counter() at line 5",
                                              "time.perf_counter() at line 6"]
    assert reads["test_sample.py::test_c"] == ["time.monotonic() at line 10",
                                              "time.process_time() at line 10"]
    assert waits == ["test_sample.py::test_e line 14: waits 30 s",
                     "test_sample.py::test_e line 14: waits 5 s"], waits
