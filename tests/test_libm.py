"""The transcendental functions of ort_roi's exact steps equal the C library's, on any CPU.

NumPy's np.exp / np.log2 dispatch to SIMD routines by the CPU (on AVX-512, float64 np.exp is
1 ULP off glibc's exp on ~5 % of arguments); the frameworks call the C library. These tests
hold ``ort_roi.libm`` to the C library itself (loaded here through ctypes, independently of
ort_roi), and scan the package so that no exact step calls a NumPy transcendental directly: a
step that did would fail here even on a CPU whose NumPy happens to agree with the C library.
"""

from __future__ import annotations

import ast
import ctypes
import ctypes.util
import pathlib
import warnings

import numpy as np
import pytest

from ort_roi import libm
from ort_roi.levels import mmdeploy_levels, openvino_levels
from ort_roi.kernels.cpu import proposals as K

try:
    C = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    for _n, _t in (("exp", ctypes.c_double), ("expf", ctypes.c_float),
                   ("log2", ctypes.c_double), ("log2f", ctypes.c_float)):
        getattr(C, _n).restype = _t
        getattr(C, _n).argtypes = [_t]
except OSError:  # pragma: no cover - every CI platform has a C library
    C = None

needs_libm = pytest.mark.skipif(C is None, reason="no loadable C library")
PKG = pathlib.Path(__file__).resolve().parents[1] / "ort_roi"


def c_apply(name: str, x: np.ndarray) -> np.ndarray:
    f = getattr(C, name)
    t = np.float32 if name.endswith("f") else np.float64
    return np.array([f(float(v)) for v in np.asarray(x).ravel().tolist()], t).reshape(x.shape)


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit (NaN payloads aside: any NaN equals any NaN)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    nan = np.isnan(a) & np.isnan(b)
    u = np.uint32 if a.dtype == np.float32 else np.uint64
    return bool(np.all(nan | (a.view(u) == b.view(u))))


def exp_arguments(t) -> np.ndarray:
    rng = np.random.default_rng(7)
    lo, hi = (-103.0, 88.8) if t is np.float32 else (-745.2, 709.8)
    edges = [0.0, -0.0, 1e-300, -1e-300, 5e-324, 1.0, -1.0, np.log(2.0), 4.135166556742356,
             np.inf, -np.inf, np.nan, hi, lo, hi + 0.5, lo - 0.5, 88.72283, 709.782712893384,
             709.7827128933841, -745.1332191019411]
    x = np.concatenate([rng.uniform(-5, 5, 60000), rng.uniform(lo, hi, 20000),
                        rng.normal(0, 1e-3, 5000), np.array(edges)])
    return x.astype(t)


@needs_libm
@pytest.mark.parametrize("t", [np.float32, np.float64], ids=["float32", "float64"])
def test_exp_is_the_c_librarys(t):
    x = exp_arguments(t)
    want = c_apply("expf" if t is np.float32 else "exp", x)
    assert same_bits(libm.exp(x), want)
    assert same_bits(libm.exp(x.reshape(-1, 5)), want.reshape(-1, 5))  # any shape


@needs_libm
def test_expf_near_rounding_midpoints():
    """The float32 arguments whose glibc expf differs from the double exp rounded."""
    from tests.proposal_cases import hard_exp_arguments

    x = hard_exp_arguments(200)
    assert same_bits(libm.exp(x), c_apply("expf", x))


def log2_arguments(t) -> np.ndarray:
    rng = np.random.default_rng(11)
    p = (2.0 ** np.arange(-30, 40)).astype(t)
    near = np.concatenate([p, np.nextafter(p, t(0)), np.nextafter(p, t(np.inf)),
                           np.nextafter(np.nextafter(p, t(0)), t(0))])
    x = np.concatenate([rng.uniform(1e-6, 40, 30000), np.exp(rng.uniform(-20, 20, 20000)),
                        near.astype(np.float64),
                        [0.0, -0.0, -1.0, np.inf, -np.inf, np.nan, 5e-324, 1e-6]])
    return x.astype(t)


@needs_libm
@pytest.mark.parametrize("t", [np.float32, np.float64], ids=["float32", "float64"])
@pytest.mark.parametrize("add", [0, 2, 4, -3])
def test_floor_log2_is_the_c_librarys(t, add):
    q = log2_arguments(t)
    with np.errstate(divide="ignore", invalid="ignore"):
        want = np.floor(c_apply("log2f" if t is np.float32 else "log2", q) + t(add))
    assert same_bits(libm.floor_log2(q, add), want)


@needs_libm
@pytest.mark.parametrize("t", [np.float32, np.float64], ids=["float32", "float64"])
def test_box_decoding_uses_the_c_librarys_exp(t):
    """GenerateProposals' BoxCoder: widths and heights through exp / expf of the C library."""
    rng = np.random.default_rng(5)
    n = 20000
    anchors = np.sort(rng.uniform(0, 600, (n, 2, 2)), axis=1).reshape(n, 4)[:, [0, 2, 1, 3]]
    anchors = anchors.astype(t)
    deltas = rng.normal(0, 1.5, (n, 4)).astype(t)
    var = np.ones((n, 4), t)
    got = K.decode(anchors, deltas, var, t(1))
    clip = t(K.BBOX_CLIP)
    aw = anchors[:, 2] - anchors[:, 0] + t(1)
    ah = anchors[:, 3] - anchors[:, 1] + t(1)
    e = "expf" if t is np.float32 else "exp"
    w = c_apply(e, np.minimum(deltas[:, 2], clip)) * aw
    h = c_apply(e, np.minimum(deltas[:, 3], clip)) * ah
    cx = var[:, 0] * deltas[:, 0] * aw + (anchors[:, 0].astype(np.float64)
                                          + 0.5 * aw.astype(np.float64)).astype(t)
    assert same_bits(got[:, 0], cx - w / t(2))
    assert same_bits(got[:, 2], cx + w / t(2) - t(1))
    cy = var[:, 1] * deltas[:, 1] * ah + (anchors[:, 1].astype(np.float64)
                                          + 0.5 * ah.astype(np.float64)).astype(t)
    assert same_bits(got[:, 1], cy - h / t(2))
    assert same_bits(got[:, 3], cy + h / t(2) - t(1))


@needs_libm
@pytest.mark.parametrize("t", [np.float32, np.float64], ids=["float32", "float64"])
def test_fpn_levels_use_the_c_librarys_log2(t):
    """Paddle's level rule on boxes whose sqrt(area)/224 + 1e-6 straddles powers of two."""
    rng = np.random.default_rng(9)
    side = np.concatenate([rng.uniform(1, 2000, 20000),
                           224.0 * 2.0 ** np.arange(-4, 5), 224.0 * 2.0 ** np.arange(-4, 5) - 1e-4])
    x1 = rng.uniform(0, 100, side.size)
    rois = np.stack([x1, x1, x1 + side, x1 + side], 1).astype(t)
    got = K.fpn_levels(rois, 2, 5, 4, 224, False)
    w, h = rois[:, 2] - rois[:, 0], rois[:, 3] - rois[:, 1]
    q = np.sqrt(w * h) / t(224) + t(1e-6)
    v = np.floor(c_apply("log2f" if t is np.float32 else "log2", q) + t(4))
    assert np.array_equal(got, np.clip(v.astype(np.int64), 2, 5))


@needs_libm
def test_openvino_and_mmdeploy_levels_use_log2f():
    rng = np.random.default_rng(3)
    side = np.concatenate([rng.uniform(1, 2000, 20000), 224.0 * 2.0 ** np.arange(-3, 4),
                           56.0 * 2.0 ** np.arange(-3, 4)]).astype(np.float32)
    boxes = np.stack([np.zeros_like(side), np.zeros_like(side), side, side], 1)
    f = np.float32
    area = side * side
    want = np.clip(np.floor(c_apply("log2f", np.sqrt(area) / f(224) + f(1e-6)) + f(2)), 0, 3)
    assert np.array_equal(openvino_levels(boxes, 4), want.astype(np.intp))
    q = ((np.sqrt(area) / f(56)).astype(np.float64) + 1e-6).astype(f)
    want = np.clip(np.floor(c_apply("log2f", q)), 0, 3)
    assert np.array_equal(mmdeploy_levels(boxes, 56, 4), want.astype(np.intp))


#: Boxes whose level arithmetic meets IEEE's special values: inverted (x, then y), an
#: infinite side, inf - inf, -inf .. inf times a zero side, NaN, zero-size, a float32-huge
#: area, and two plain ones
SPECIAL_BOXES = [[10, 10, 5, 50], [0, 50, 10, 10], [0, 0, np.inf, 5], [np.inf, 0, np.inf, 5],
                 [-np.inf, 0, np.inf, 0], [0, 0, np.nan, 4], [3, 3, 3, 3], [0, 0, 3e38, 3e38],
                 [0, 0, 100, 100], [0, 0, 1000, 900]]


@pytest.mark.parametrize("t", [np.float32, np.float64], ids=["float32", "float64"])
def test_level_rules_on_special_boxes_give_their_levels_without_warnings(t):
    """The level rules as their references map an inverted box (mmdeploy's sqrtf of a
    negative area: NaN, level 0; OpenVINO: level L), infinities, NaN and an overflowing area
    (Paddle: INT_MIN, min_level), with no RuntimeWarning (levels.py warned "invalid value
    encountered in sqrt" 61 times in the suite, and in subtract / multiply / overflow)."""
    boxes = np.array(SPECIAL_BOXES, t)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = [openvino_levels(boxes, 4), K.fpn_levels(boxes, 2, 5, 4, 224, False),
               K.fpn_levels(boxes, 2, 5, 4, 224, True), mmdeploy_levels(boxes, 56, 4)]
    huge = 2 if t is np.float32 else 5  # 3e38 squared: inf in float32 (INT_MIN), not float64
    assert [g.tolist() for g in got] == [[4, 4, 3, 4, 4, 4, 4, 3, 0, 3],
                                         [2, 2, 2, 2, 2, 2, 2, huge, 2, 5],
                                         [2, 2, 2, 2, 2, 2, 2, huge, 2, 5],
                                         [0, 0, 3, 0, 0, 0, 0, 3, 0, 3]]


#: NumPy routines whose results the CPU's SIMD level can change (correctly rounded ones --
#: sqrt, floor, ceil, +, *, / -- cannot). No module of the package calls them, except:
TRANSCENDENTAL = {"exp", "exp2", "expm1", "log", "log2", "log10", "log1p", "power",
                  "float_power", "sin", "cos", "tan", "arcsin", "arccos", "arctan", "arctan2",
                  "sinh", "cosh", "tanh", "hypot", "cbrt"}
ALLOWED = {
    "libm.py": "the one place: NumPy's value checked against the C library's",
    "geometry/rotated.py": "rotated boxes' cos / sin: RoIAlignRotated is held to a tolerance (bilinear "
                   "averages), not bit for bit",
    "cli/bench_workloads.py": "generates the benchmark's random boxes",
    "graph/pyramid.py": "draws validate's random box sizes; each box's level is then the "
                        "graph's own rule's, run on the boxes drawn",
}


def test_no_exact_step_calls_a_numpy_transcendental():
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG).as_posix()
        if rel in ALLOWED or rel.startswith("kernels/cuda/"):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Attribute) and node.attr in TRANSCENDENTAL
                    and isinstance(node.value, ast.Name) and node.value.id in ("np", "numpy")):
                found.append(f"{rel}:{node.lineno} np.{node.attr}")
    assert not found, found
