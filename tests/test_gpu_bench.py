"""tools/gpu_bench.py (``python -m tools.gpu_bench``) runs every workload: here on the NumPy backend (``--backend numpy
--dry-run``: one call per row), so that a GPU run (tools/gpu_check.sh on a lent machine) meets
no workload it cannot build. The rows are ``ort-roi bench``'s (``bench_workloads.plan``), the inputs
its own (``bench_cases.cases``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ort_roi.cli import bench_workloads

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOOL = [sys.executable, "-m", "tools.gpu_bench"]  # run from the repository root


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("gpu_bench") / "gpu.json"
    r = subprocess.run([*TOOL, "--backend", "numpy", "--dry-run", "--out",
                        str(out)], capture_output=True, text=True, timeout=900, cwd=ROOT)
    return r, out


def test_every_workload_runs_on_numpy(dry_run):
    r, out = dry_run
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["errors"] == []
    planned = [(name, op) for name, _, op in bench_workloads.plan()]
    assert [(x["workload"], x["op"]) for x in res["rows"]] == planned
    assert {k.split("_")[0] for k in bench_workloads.workloads()} == {
        x["workload"].split("_")[0] for x in res["rows"]}  # W1 .. W10, none left out
    for x in res["rows"]:
        assert x["session"]["numpy_s"] > 0, x
        if "kernel" in x:  # the public kernel on the bench's inputs = the session's output
            assert x["kernel"]["backend"] == "numpy" and x["kernel"]["s"] > 0, x
            assert x["kernel"]["vs_numpy_max_abs_diff"] == 0.0, x
        else:  # only the fused stages have no single kernel, and say so
            assert x["op"] == "fused multi-level stage", x
            assert any(s["workload"] == x["workload"] and s["what"] == "kernel"
                       for s in res["skipped"]), x


def test_markdown_beside_the_json(dry_run):
    r, out = dry_run
    md = out.with_suffix(".md").read_text()
    assert "| W7_fpn | ExperimentalDetectronROIFeatureExtractor |" in md
    assert "| W10_tf_crop_c4 R300 14x14 | CropAndResize |" in md
    assert "Skipped" in md and "timed through onnxruntime only" in md


def test_cupy_without_a_gpu_says_so(tmp_path):
    """Asked for the GPU where there is none: exit 2 with the reason, no traceback."""
    from ort_roi.kernels.device import gpu_available

    if gpu_available()[0]:
        pytest.skip("a GPU is here")
    r = subprocess.run([*TOOL, "W6", "--out", str(tmp_path / "x.json")],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2 and "--backend numpy" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr


def test_unknown_workload(tmp_path):
    r = subprocess.run([*TOOL, "W99", "--backend", "numpy"],
                       capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert r.returncode == 2 and "unknown workload" in r.stderr


def _load_tool():
    from tools import gpu_bench

    return gpu_bench


@pytest.fixture
def host_cupy(tmp_path_factory, monkeypatch):
    """The CUDA source built for the host as the module "cupy" (tests/fake_cupy.py), with the
    few calls the tool's timing makes (events, the device's name)."""
    import shutil
    import time
    import types

    from tests import fake_cupy
    from ort_roi.kernels.cuda import backend as _cupy

    if shutil.which("g++") is None:
        pytest.skip("g++ not found: cannot build the CUDA source for the host")
    fake = fake_cupy.module(fake_cupy.build(str(tmp_path_factory.mktemp("gpu_bench_host"))))

    class Event:
        def record(self):
            self.t = time.perf_counter()

        def synchronize(self):
            pass

    fake.__version__ = "host build"
    fake.cuda.Event = Event
    fake.cuda.Device = lambda *a: types.SimpleNamespace(synchronize=lambda: None)
    fake.cuda.get_elapsed_time = lambda a, b: (b.t - a.t) * 1e3
    fake.cuda.runtime.getDeviceProperties = lambda i: {"name": b"host build of roi_ops.cu"}
    fake.cuda.runtime.runtimeGetVersion = lambda: 0
    _cupy._module.cache_clear()
    _cupy._function.cache_clear()
    monkeypatch.setitem(sys.modules, "cupy", fake)
    yield fake
    _cupy._module.cache_clear()
    _cupy._function.cache_clear()
    ort_roi_backend("numpy")


def ort_roi_backend(name: str) -> None:
    import ort_roi

    ort_roi.set_backend(name)


def test_the_cupy_path_on_the_host_build(host_cupy, tmp_path):
    """The tool's GPU path (device arrays, event timing, the cupy backend in onnxruntime)
    on one workload of each kind, the CUDA source running on the host: every row runs and
    agrees with NumPy; without torch on CUDA the peers are said to be skipped."""
    out = tmp_path / "gpu.json"
    rc = _load_tool().main(["W4", "W5", "W6", "W7", "W8f", "W9", "--backend", "cupy",
                            "--dry-run", "--out", str(out)])
    res = json.loads(out.read_text())
    assert rc == 0 and res["errors"] == [], res["errors"]
    assert res["backend"] == "cupy" and res["device"].startswith("host build")
    assert len(res["rows"]) == len(bench_workloads.plan(["W4", "W5", "W6", "W7", "W8f", "W9"]))
    for x in res["rows"]:
        s = x["session"]
        assert s["cupy_s"] > 0 and s["cupy_vs_numpy_max_abs_diff"] < 1e-4, x
        if "kernel" in x:
            assert x["kernel"]["backend"] == "cupy"
            assert x["kernel"]["vs_numpy_max_abs_diff"] < 1e-4, x
    assert any(s["what"] == "GPU peers" for s in res["skipped"])
