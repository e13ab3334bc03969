"""The CuPy backend.

- On a GPU (``gpu`` marker; skipped without CuPy and a device): each kernel on CuPy arrays
  against the NumPy kernels, and the ops in onnxruntime with the backend switched to cupy.
- Everywhere with g++: the CUDA source built for the host (tests/cuda_host.cpp) under the
  backend's own Python code (tests/fake_cupy.py), against the NumPy kernels.
- Everywhere with nvcc: the CUDA source compiles for sm_80/sm_90 without register spills.
- The backend switch: names, the environment variable, the fallback with one warning.
Max pooling must be bit-identical to the NumPy kernels; averages within 1e-5 relative.
"""

import os
import shutil
import subprocess
import sys
import time
import warnings
from unittest import mock

import numpy as np
import onnxruntime as ort
import pytest

from tests import cases as C
from tests import fake_cupy
from tests.conftest import load_golden, ordered, tolerance
import ort_roi
from ort_roi import builders, ops
from ort_roi.kernels import device as backend
from ort_roi.kernels.cuda import backend as _cupy

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # a child's PYTHONPATH
SUITES = {"max": C.max_pool_cases("ROIPooling", 11) + C.max_pool_cases("RoIPool", 12),
          "bilinear": C.bilinear_cases(13), "psroi": C.psroi_cases(14),
          "align": C.roi_align_cases(15) + C.mmcv_cases(17, "max")[::3]
          + C.onnx_roi_align_cases(18, "max")[::5] + C.onnx_roi_align_cases(20, "onnx_max")[::4]
          + C.caffe2_cases(19)[::5]
          + C.rotated_cases(16),
          "psroi_tv": C.torchvision_ps_cases("TorchvisionPSRoIPool", 21)[::2],
          "align_tv": C.torchvision_ps_cases("TorchvisionPSRoIAlign", 22)[::3]}
ALL = [(k, c) for k, cs in SUITES.items() for c in cs]
IDS = [f"{k}-{c['name']}" for k, c in ALL]


def _check(kind, got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    if kind == "max":
        np.testing.assert_array_equal(got, want)
    else:  # (NaN where torchvision's ps_roi_align divides 0 by 0: NaN in both)
        scale = float(np.nanmax(np.abs(want))) if want.size and not np.isnan(want).all() else 1.0
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * max(1.0, scale))


def _kernel(case):
    from ort_roi.ops import spec

    if case["op"] == "RoIAlign" and "order" in case["attrs"]:  # detectron2's Caffe2 node
        return ops.caffe2_roi_align
    return ops.kernel(spec(case["op"], "mmdeploy" if case["op"].startswith("MMCV")
                           else "ort_roi"))


# -- the CUDA source on the host ------------------------------------------------------------

@pytest.fixture(scope="module")
def host_lib(tmp_path_factory):
    if shutil.which("g++") is None:
        pytest.skip("g++ not found: cannot build the CUDA source for the host")
    return fake_cupy.build(str(tmp_path_factory.mktemp("cuda_host")))


@pytest.fixture
def host_cupy(host_lib, monkeypatch):
    """The host build as the module "cupy". Only that entry of sys.modules is replaced and
    restored: mock.patch.dict(sys.modules) restored the whole dict, dropping every module
    first imported during the test (onnxruntime-extensions, torch, ...), and the next
    import of torch, a second one in the process, crashed it."""
    fake = fake_cupy.module(host_lib)
    _cupy._module.cache_clear()
    _cupy._function.cache_clear()  # the compiled functions too: a GPU test after it got these
    monkeypatch.setitem(sys.modules, "cupy", fake)
    yield fake
    _cupy._module.cache_clear()
    _cupy._function.cache_clear()


@pytest.mark.parametrize("kind,case", ALL, ids=IDS)
def test_cuda_source_on_host_matches_numpy(host_cupy, kind, case):
    """The public kernel given X on the "device" runs the CUDA source, returns a device array."""
    fn = _kernel(case)
    X, *rest = case["inputs"].values()
    got = fn(host_cupy.asarray(X), *rest, **case["attrs"])
    assert isinstance(got, host_cupy.ndarray)
    _check(kind, got, fn(X, *rest, **case["attrs"]))


@pytest.mark.parametrize("cb", _cupy.BLOCKS)
def test_cuda_source_on_host_every_channel_block(host_cupy, cb):
    """Each channel block the loader may pick (C = 3 leaves a partial block)."""
    with mock.patch.object(_cupy, "channel_block", lambda *a: cb):
        for kind, case in ALL[::9]:
            fn = _kernel(case)
            X, *rest = case["inputs"].values()
            _check(kind, fn(host_cupy.asarray(X), *rest, **case["attrs"]),
                   fn(X, *rest, **case["attrs"]))


def test_channel_block_choice():
    assert _cupy.channel_block(300, 1024, 14, 14) == 8  # W1
    assert _cupy.channel_block(1000, 256, 7, 7) == 4  # W2
    assert _cupy.channel_block(300, 21, 7, 7) == 2  # W4
    assert _cupy.channel_block(0, 256, 7, 7) == 2


def test_cuda_source_on_host_huge_grid_and_mmcv(host_cupy):
    """Huge adaptive grids take the closed-form GEMM path; MMCVRoiAlign avg the same kernel."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((2, 3, 16, 12)).astype(np.float32)
    boxes = np.array([[-3e3, -2e3, 4e3, 5e3], [1, 2, 9, 14], [0, 0, 2e3, 3]], np.float32)
    counts = np.array([2, 1])
    a = dict(pooled_height=3, pooled_width=2, sampling_ratio=-1)
    Xd = host_cupy.asarray(X)
    _check("align", ops.roi_align(Xd, boxes, counts, **a),
           ops.roi_align(X, boxes, counts, **a))
    rois = np.concatenate([[[0], [0], [1]], boxes], 1).astype(np.float32)
    m = dict(output_height=3, output_width=2, sampling_ratio=0, spatial_scale=0.5)
    for mode in ("avg", "max"):
        got = ops.mmcv_roi_align(Xd, rois, mode=mode, **m)
        assert isinstance(got, host_cupy.ndarray)
        _check("align", got, ops.mmcv_roi_align(X, rois, mode=mode, **m))


def test_cuda_path_never_returns_unwritten_memory(host_cupy):
    """A box whose grid the float64 bound called small while in T it exceeds the kernel's
    limit: the kernel skipped it and nobody computed it, so the output kept what the device
    allocation held. The grid is now computed once, on the host, for both sides."""
    X = np.arange(2 * 3 * 4, dtype=np.float32).reshape(1, 2, 3, 4)
    boxes = np.array([[4.3423657e9, 0, 4.342366e9, 1]], np.float32)
    a = dict(pooled_height=3, pooled_width=3, spatial_scale=float(np.float32(1 / 3)),
             sampling_ratio=-1)
    def prefilled(shape, dtype=np.float32):  # what a device allocation may hold
        return host_cupy.asarray(np.full(shape, 123.0, dtype))

    with mock.patch.object(host_cupy, "empty", prefilled):
        got = np.asarray(ops.roi_align(host_cupy.asarray(X), boxes, np.array([1]), **a))
    want = ops.roi_align(X, boxes, np.array([1]), **a)
    assert not (got == 123.0).any()
    _check("align", got, want)
    rows = np.concatenate([np.zeros((1, 1), np.float32), boxes], 1)
    m = dict(output_height=3, output_width=3, spatial_scale=a["spatial_scale"],
             sampling_ratio=0, aligned=1)
    for mode in ("avg", "max"):
        with mock.patch.object(host_cupy, "empty", prefilled):
            got = np.asarray(ops.mmcv_roi_align(host_cupy.asarray(X), rows, mode=mode, **m))
        assert not (got == 123.0).any(), mode
        _check("align", got, ops.mmcv_roi_align(X, rows, mode=mode, **m))


def test_cuda_source_on_host_rotated_huge_grids_go_to_the_host(host_cupy):
    """A rotated box with a huge adaptive grid is not looped over in the kernel (one thread
    per bin would visit ~1e12 samples): the NumPy kernel's clipped sampling computes it."""
    rng = np.random.default_rng(6)
    X = rng.standard_normal((1, 3, 9, 11))
    rois = np.array([[0, 5, 4, 3e6, 2e6, 0.3], [0, 5, 4, 300, 220, -0.7],
                     [0, 4, 3, 6, 5, 0.2]], np.float64)
    a = dict(output_height=2, output_width=3, sampling_ratio=0)
    launched = []
    launch = _cupy.launch
    with mock.patch.object(_cupy, "launch",
                           lambda k, out, X, rows, *r: launched.append(rows.copy())
                           or launch(k, out, X, rows, *r)):
        got = ops.mmcv_roi_align_rotated(host_cupy.asarray(X), rois, **a)
    assert launched[0][:2, 9:].tolist() == [[-1, -1], [-1, -1]]  # both huge: on the host
    assert launched[0][2, 9:].tolist() == [3, 2]
    _check("align", np.asarray(got), ops.mmcv_roi_align_rotated(X, rois, **a))
    assert _cupy.SAMPLES_PER_BOX < 2 * 3 * 110 * 100  # the second box: 110 x 100 per bin


def test_cuda_path_reports_bad_input_like_numpy(host_cupy):
    X = np.zeros((1, 2, 4, 4), np.float32)
    with pytest.raises(ort_roi.RoiOpError, match="RoIPool.*'boxes_num'"):
        ops.roi_pool(host_cupy.asarray(X), np.zeros((2, 4), np.float32), np.array([3]))
    with pytest.raises(ort_roi.RoiOpError, match="RoIAlign.*'boxes'.*shape"):
        ops.roi_align(host_cupy.asarray(X), host_cupy.asarray(np.zeros((2, 5), np.float32)),
                          np.array([2]))


# -- nvcc -------------------------------------------------------------------------------------

@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_cuda_source_compiles_with_nvcc(tmp_path, arch):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found")
    src = tmp_path / "inst.cu"
    lines = [f'#include "{os.path.join(os.path.dirname(os.path.abspath(_cupy.__file__)), "roi_ops.cu")}"']
    for t in ("float", "double"):
        lines += [
            f"template __global__ void max_pool<{t}, 8>(const {t}*, const {t}*, {t}*, "
            f"long long, int, int, int, int, int, {t});",
            f"template __global__ void bilinear_pool<{t}, 8>(const {t}*, const {t}*, {t}*, "
            f"long long, int, int, int, int, int);",
            f"template __global__ void psroi_pool<{t}, 8>(const {t}*, const {t}*, {t}*, "
            f"long long, int, int, int, int, int, int);",
            f"template __global__ void roi_align<{t}, 8>(const {t}*, const {t}*, {t}*, "
            f"long long, int, int, int, int, int, int, {t}, int);",
            f"template __global__ void roi_align_levels<{t}, 8>(" + f"const {t}*, " * 7
            + f"{t}*, long long, int, int, int, int, {t});",
            f"template __global__ void roi_align_rotated<{t}, 8>(const {t}*, const {t}*, {t}*, "
            f"long long, int, int, int, int, int);"]
    src.write_text("\n".join(lines) + "\n")
    r = subprocess.run(["nvcc", "-cubin", f"-arch={arch}", "-fmad=false", "--resource-usage",
                        "-o", str(tmp_path / "k.cubin"), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("Compiling entry function") == 12
    assert "bytes spill" in r.stderr and " 0 bytes spill stores" in r.stderr
    assert all(" 0 bytes spill stores" in ln for ln in r.stderr.splitlines() if "spill stores" in ln)


# -- the switch -------------------------------------------------------------------------------

def test_backend_names_and_default():
    assert backend.CHOICES == ("numpy", "cupy", "auto")
    with pytest.raises(ValueError, match="backend must be one of"):
        ort_roi.set_backend("tpu")
    assert ort_roi.set_backend("numpy") == "numpy" == ort_roi.get_backend()


def test_cupy_requested_without_gpu_falls_back_with_one_warning():
    with mock.patch.object(backend, "gpu_available", return_value=(False, "no CUDA device")):
        with pytest.warns(RuntimeWarning, match="cupy.*unavailable.*no CUDA device.*NumPy"):
            assert ort_roi.set_backend("cupy") == "numpy"
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # no second warning
            assert ort_roi.get_backend() == "numpy"
            sess = ort.InferenceSession(
                builders.single_op_model("RoIPool").SerializeToString(),
                ort_roi.session_options(), providers=["CPUExecutionProvider"])
            X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4) + 1
            y = sess.run(None, {"X": X, "boxes": np.array([[1, 1, 2, 2]], np.float32),
                                "boxes_num": np.array([1], np.int32)})[0]
        assert y.ravel().tolist() == [11.0]
        # auto without a GPU: NumPy, silently
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert ort_roi.set_backend("auto") == "numpy"
    ort_roi.set_backend("numpy")


def test_environment_variable_selects_the_backend():
    code = ("import ort_roi; from ort_roi.kernels import device as backend; "
            "print(backend._choice, ort_roi.get_backend())")
    env = {**os.environ, "ORT_ROI_BACKEND": "auto"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    expected = "auto" if backend.gpu_available()[0] else "numpy"
    assert out.stdout.split() == ["auto", expected]
    env["ORT_ROI_BACKEND"] = "bogus"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.split() == ["numpy", "numpy"] and "ORT_ROI_BACKEND" in out.stderr


# -- on a GPU ---------------------------------------------------------------------------------

def _gpu():
    cupy = pytest.importorskip("cupy",
                               reason="needs CuPy and an NVIDIA GPU: pip install '.[cupy]'")
    if not backend.gpu_available()[0]:
        pytest.skip("no CUDA device (the GPU tests need one and pip install '.[cupy]')")
    return cupy


@pytest.mark.gpu
@pytest.mark.parametrize("kind,case", ALL, ids=IDS)
def test_gpu_kernels_match_numpy(kind, case):
    cupy = _gpu()
    fn = _kernel(case)
    args = list(case["inputs"].values())
    got = fn(*(cupy.asarray(a) for a in args), **case["attrs"])
    assert isinstance(got, cupy.ndarray)
    _check(kind, cupy.asnumpy(got), fn(*args, **case["attrs"]))


def _roi_align_session():
    """(a plain onnxruntime session of one RoIAlign node, its feed, the NumPy kernel's
    output)."""
    case = C.roi_align_cases(16)[0]
    args = list(case["inputs"].values())
    m = builders.single_op_model("RoIAlign", args[0].dtype, args[2].dtype, **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    feed = dict(zip([i.name for i in sess.get_inputs()], args))
    return sess, feed, ops.roi_align(*args, **case["attrs"])


def _roi_align_in_session_on_cupy_backend():
    """(output of a plain onnxruntime session run with the cupy backend, NumPy kernel's)."""
    sess, feed, want = _roi_align_session()
    try:
        assert ort_roi.set_backend("cupy") == "cupy"
        got = sess.run(None, feed)[0]
    finally:
        ort_roi.set_backend("numpy")
    return got, want


@pytest.mark.gpu
def test_gpu_backend_in_onnxruntime():
    _gpu()
    _check("align", *_roi_align_in_session_on_cupy_backend())


def test_cuda_source_on_host_in_onnxruntime(host_cupy):
    """The cupy backend through a plain onnxruntime session: X goes to the "device", the
    CUDA source computes, the output comes back."""
    calls = []
    launch = _cupy.launch
    with mock.patch.object(_cupy, "launch", lambda *a: calls.append(a[0]) or launch(*a)):
        got, want = _roi_align_in_session_on_cupy_backend()
    assert calls == ["roi_align"]
    _check("align", got, want)


def test_cupy_backend_copies_through_reused_pinned_buffers(host_cupy):
    """With the cupy backend a registered op's copies go through this thread's pinned
    buffers: the first call allocates them, the next calls reuse them (no allocation), each
    call ends with one synchronisation of the stream, and the results equal NumPy's."""
    from ort_roi.kernels.cuda import staging

    ort_roi.release_memory()
    fake_cupy.PINNED.clear()
    got, want = _roi_align_in_session_on_cupy_backend()
    _check("align", got, want)
    first = list(fake_cupy.PINNED)
    assert len(first) >= 3  # X, the boxes' rows, the output
    syncs = fake_cupy.Stream.synchronized
    for _ in range(3):
        got, want = _roi_align_in_session_on_cupy_backend()
        _check("align", got, want)
    assert fake_cupy.PINNED == first  # reused
    assert fake_cupy.Stream.synchronized - syncs == 3
    assert ort_roi.release_memory() >= sum(first)
    assert staging._pool().depth == 0


def test_cupy_backend_error_leaves_no_call_open(host_cupy):
    """A kernel that raises inside the GPU call scope leaves the scope closed (the stream
    synchronised), and the next call runs."""
    from ort_roi.kernels import device
    from ort_roi.kernels.cuda import staging

    def bad(X):
        raise ValueError("bad input")

    ort_roi.set_backend("cupy")
    try:
        with pytest.raises(ValueError, match="bad input"):
            device.call(bad, [np.zeros((1, 1, 2, 2), np.float32)], [0])
        assert staging._pool().depth == 0
    finally:
        ort_roi.set_backend("numpy")
    got, want = _roi_align_in_session_on_cupy_backend()
    _check("align", got, want)


def test_auto_backend_measures_each_call_shape():
    """"auto": NumPy and the GPU alternately, twice each (a first call warms up: not
    counted), then the faster; the slower again every REPROBE calls, so a backend that got
    slower loses the choice."""
    from ort_roi.kernels.device import REPROBE, _Timings

    t = _Timings()
    seconds = {"numpy": 1.0, "cupy": 0.25}
    seq = []
    for _ in range(4 + 2 * REPROBE):
        b = t.pick()
        seq.append(b)
        t.record(b, 9.0 if t.tries[b] == 0 else seconds[b])  # a first call: slow, not counted
    assert seq[:4] == ["numpy", "cupy", "numpy", "cupy"]
    assert [i for i, b in enumerate(seq[4:], 1) if b == "numpy"] == [REPROBE, 2 * REPROBE]
    seconds["cupy"] = 4.0  # the GPU got slower
    for _ in range(REPROBE):
        b = t.pick()
        t.record(b, seconds[b])
    assert t.pick() == "numpy"


def test_auto_backend_in_onnxruntime_equals_numpy(host_cupy):
    """"auto" through a plain session: every call equals the NumPy kernel's, whichever
    backend the measurement picked, and both were tried."""
    from ort_roi.kernels import device

    device._timings.clear()
    sess, feed, want = _roi_align_session()
    try:
        assert ort_roi.set_backend("auto") == "auto"
        for _ in range(6):
            _check("align", sess.run(None, feed)[0], want)
    finally:
        ort_roi.set_backend("numpy")
    (t,) = device._timings.values()
    assert t.tries["numpy"] >= 2 and t.tries["cupy"] >= 2


def test_auto_backend_keys_its_timings_on_the_attributes(host_cupy):
    """"auto" keys its measurements on the node's attributes too: a 14x14 mask head and a
    7x7 box head over the same maps and boxes (the same shapes in, a different cost) get a
    record each, both measured (they shared one, so one's timings chose for the other),
    and every call equals the NumPy kernel's. Two 7x7 heads share theirs."""
    from ort_roi.kernels import device

    device._timings.clear()
    case = C.roi_align_cases(16)[0]
    args = list(case["inputs"].values())
    runs = []
    for size in (7, 14, 7):
        attrs = dict(case["attrs"], pooled_height=size, pooled_width=size)
        m = builders.single_op_model("RoIAlign", args[0].dtype, args[2].dtype, **attrs)
        sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                    providers=["CPUExecutionProvider"])
        runs.append((sess, dict(zip([i.name for i in sess.get_inputs()], args)),
                     ops.roi_align(*args, **attrs)))
    try:
        assert ort_roi.set_backend("auto") == "auto"
        for _ in range(4):
            for sess, feed, want in runs:
                _check("align", sess.run(None, feed)[0], want)
    finally:
        ort_roi.set_backend("numpy")
    assert len(device._timings) == 2
    for t in device._timings.values():
        assert t.tries["numpy"] >= 2 and t.tries["cupy"] >= 2
    (seven,) = [t for key, t in device._timings.items() if ("pooled_height", 7) in key[-1]]
    assert seven.tries["numpy"] + seven.tries["cupy"] == 8  # both 7x7 heads' calls


_AFTER_HOST_CUPY = r'''
import sys
import numpy as np, onnxruntime as ort
from tests import cases as C
import ort_roi
from ort_roi import builders, ops
from tests import test_cupy
from tests.test_cupy import host_lib, host_cupy  # noqa: F401 - the fixtures


def test_1_session_on_host_cupy(host_cupy):
    test_cupy.test_cuda_source_on_host_in_onnxruntime(host_cupy)
    import host_cupy_probe  # noqa: F401 - first imported while "cupy" is the host build


def test_2_after():
    case = C.roi_align_cases(16)[0]
    args = list(case["inputs"].values())
    m = builders.single_op_model("RoIAlign", args[0].dtype, args[2].dtype, **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], args)))[0]
    np.testing.assert_array_equal(got, ops.roi_align(*args, **case["attrs"]))
    assert "host_cupy_probe" in sys.modules  # the fixture restored "cupy" only
    assert "cupy" not in sys.modules
'''


def test_host_cupy_fixture_keeps_modules_imported_meanwhile(tmp_path):
    """The host_cupy fixture restores sys.modules["cupy"] only. It used to restore the whole
    dict (mock.patch.dict), dropping the modules the session test imported first
    (onnxruntime-extensions, torch, ...): the next session imported torch a second time and
    the process died ("bad call flags", then a segfault in the garbage collector). Run in a
    fresh process, where those modules are first imported under the fixture."""
    if shutil.which("g++") is None:
        pytest.skip("g++ not found: cannot build the CUDA source for the host")
    (tmp_path / "test_after_host_cupy.py").write_text(_AFTER_HOST_CUPY)
    (tmp_path / "host_cupy_probe.py").write_text("")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "--rootdir", str(tmp_path), str(tmp_path / "test_after_host_cupy.py")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "2 passed" in r.stdout, r.stdout[-3000:]


GOLDEN_SUITES = ["roi_pooling_max", "roi_pooling_bilinear", "roi_pool", "psroi_pool", "roi_align"]
GOLDEN = [(s, c) for s in GOLDEN_SUITES for c in load_golden(s)]


@pytest.mark.gpu
@pytest.mark.parametrize("suite,case", GOLDEN, ids=[f"{s}-{c['name']}" for s, c in GOLDEN])
def test_gpu_kernels_match_framework_goldens(suite, case):
    """The parity suite with X on the GPU: the frameworks' committed outputs."""
    cupy = _gpu()
    inputs = ordered(case)
    X, *rest = inputs.values()
    got = cupy.asnumpy(_kernel(case)(cupy.asarray(X), *rest, **case["attrs"]))
    expected = case["expected"]
    if case["nan_to_zero"]:
        expected = np.nan_to_num(expected, nan=0.0)
    tol = tolerance(case["op"], case["attrs"], got.dtype)
    if suite == "roi_pooling_bilinear" and got.dtype == np.float64:
        tol = dict(rtol=1e-5, atol=1e-5)  # OpenVINO computed float64 in float32
    assert got.dtype == X.dtype
    np.testing.assert_allclose(got, expected, **tol)


_EVERY_OP_IN_SESSION = r'''
import sys, warnings
import numpy as np, onnxruntime as ort
from tests import cases as C  # the repository root is on PYTHONPATH
import ort_roi
from ort_roi import builders, ops
from ort_roi.ops import spec
warnings.simplefilter("default")
print("backend", ort_roi.get_backend())
for domain, case in C.form_cases():
    s = spec(case["op"], domain)
    args = list(case["inputs"].values())
    counts = next((a.dtype for a in args if a.dtype.kind == "i"), np.int32)
    floats = next(a.dtype for a in args if a.dtype.kind == "f")
    m = builders.single_op_model(case["op"], floats, counts, domain=domain,
                                 **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], args)))[0]
    want = ops.kernel(s.key)(*args, **case["attrs"])  # NumPy in: the NumPy kernel
    want = want[0] if isinstance(want, tuple) else want  # the extractor's second output: rois
    exact = case["op"] == "RoIPool" or case["attrs"].get("method") == "max"
    # NaN where the op's framework gives it (torchvision's 0 / 0) must be NaN in both
    same_nan = np.array_equal(np.isnan(got), np.isnan(want))
    diff = float(np.nanmax(np.abs(got - want))) if got.size and not np.isnan(got).all() else 0.0
    print(domain or "-", case["op"], args[0].dtype, "exact" if exact else "avg",
          diff if same_nan else float("inf"),
          float(np.nanmax(np.abs(want))) if want.size and not np.isnan(want).all() else 0.0)
'''


def _run_every_op(env_backend: str, hide_cupy: bool = False):
    code = _EVERY_OP_IN_SESSION
    if hide_cupy:
        code = "import sys; sys.modules['cupy'] = None\n" + code
    env = {**os.environ, "ORT_ROI_BACKEND": env_backend,
           "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", code], env=env,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    rows = [ln.split() for ln in lines[1:]]
    from ort_roi.ops import FORMS
    assert {(r[0], r[1]) for r in rows} == {(f.domain or "-", f.op_type) for f in FORMS
                                           if f.registered}
    for domain, name, dtype, kind, diff, scale in rows:
        if kind == "exact":
            assert float(diff) == 0, (domain, name, dtype)
        else:
            assert float(diff) <= 1e-5 * max(1.0, float(scale)), (domain, name, dtype, diff)
    return lines[0], r.stderr


@pytest.mark.gpu
def test_gpu_every_op_in_onnxruntime_with_env_backend():
    """ORT_ROI_BACKEND=cupy: every op through a plain session computes on the GPU and agrees
    with the NumPy kernels (max bit for bit, averages 1e-5)."""
    _gpu()
    head, _ = _run_every_op("cupy")
    assert head == "backend cupy"


def test_every_op_falls_back_to_numpy_without_cupy():
    """ORT_ROI_BACKEND=cupy where CuPy cannot be imported: one warning, NumPy results."""
    head, err = _run_every_op("cupy", hide_cupy=True)
    assert head == "backend numpy"
    assert err.count("RuntimeWarning: ort_roi: backend 'cupy' requested but unavailable") == 1, err


MULTI = C.extractor_cases(41) + C.multilevel_cases(42) + C.pyramid_cases(43)


def _multi_level(case, to_device):
    """The op with its feature maps (not its rois, nor its levels) on the device."""
    from ort_roi.ops import spec

    s = spec(case["op"])
    args = [to_device(a) if i in s.features else a
            for i, a in enumerate(case["inputs"].values())]
    y = ops.kernel(s.key)(*args, **case["attrs"])
    return y[0] if isinstance(y, tuple) else y


@pytest.mark.parametrize("case", MULTI, ids=[c["name"] + c["op"][:4] for c in MULTI])
def test_cuda_source_on_host_multi_level(host_cupy, case):
    """The multi-level kernels with their maps on the "device": each level's boxes through
    the CUDA RoIAlign (geometry variants 2 and 3, mmdeploy's -FLT_MAX max)."""
    got = _multi_level(case, host_cupy.asarray)
    assert isinstance(got, host_cupy.ndarray)
    _check("align", np.asarray(got), _multi_level(case, lambda a: a))


@pytest.mark.gpu
@pytest.mark.parametrize("case", MULTI, ids=[c["name"] + c["op"][:4] for c in MULTI])
def test_gpu_multi_level(case):
    cupy = _gpu()
    got = _multi_level(case, cupy.asarray)
    assert isinstance(got, cupy.ndarray)
    _check("align", cupy.asnumpy(got), _multi_level(case, lambda a: a))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_source_on_host_max_of_huge_boxes_is_bounded_and_exact(host_cupy, dtype):
    """Issue 32 (3): a thread visited every sample of its bin (a box of side 1e5 on an 8 x 8
    map: 14286^2 samples a bin, in the kernel up to MAX_MODE_SAMPLES a side). It reads those
    within a pixel of the map and one neighbour each side now: the NumPy kernel's values
    (one sample per distinct taps) bit for bit. The host build keeps no count of the samples
    it reads: this thread's CPU time is bounded instead (about 0.001 s a call here; every
    sample, ~1e10 of them, takes 10 s at least), which the machine's load does not lengthen."""
    rng = np.random.default_rng(32)
    X = (rng.standard_normal((2, 3, 8, 8)) + 1).astype(dtype)
    side = 1e5
    boxes = np.array([[3.5 - side / 2, -side / 3, side / 2, 2 * side / 3],
                      [1, 2, 6, side], [side, 1, -side, 6], [1.5, 0.5, 5.25, 7],
                      [-3, -2, 12, 11]], dtype)
    rois = np.concatenate([np.array([[0], [1], [0], [1], [0]], dtype), boxes], 1)
    assert _cupy.MAX_MODE_SAMPLES > side / 7  # the huge box is the kernel's
    Xd = host_cupy.asarray(X)
    runs = [(ops.mmcv_roi_align, (rois,), dict(mode="max", sampling_ratio=0)),
            (ops.mmcv_roi_align, (rois,), dict(mode="max", sampling_ratio=5, aligned=0)),
            (ops.onnx_roi_align, (boxes, rois[:, 0].astype(np.int64)),
             dict(mode="onnx_max")),
            (ops.onnx_roi_align, (boxes, rois[:, 0].astype(np.int64)),
             dict(mode="onnx_max", sampling_ratio=3,
                  coordinate_transformation_mode="output_half_pixel"))]
    for fn, rest, a in runs:
        t = time.thread_time()  # the host build runs in this thread
        got = fn(Xd, *rest, output_height=7, output_width=7, **a)
        took = time.thread_time() - t
        np.testing.assert_array_equal(np.asarray(got), fn(X, *rest, output_height=7,
                                                          output_width=7, **a))
        assert took < 2, f"{fn.__name__} {a}: {took:.2f} s of this thread's CPU"
    levels = dict(output_height=7, output_width=7, pool_mode=0, featmap_strides=(1.0, 2.0),
                  finest_scale=4)
    X2 = X[:, :, ::2, ::2].copy()
    got = ops.multi_level_roi_align(rois, Xd, host_cupy.asarray(X2), **levels)
    np.testing.assert_array_equal(np.asarray(got),
                                  ops.multi_level_roi_align(rois, X, X2, **levels))
