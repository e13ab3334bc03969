"""Small calls (issue 63): the scalar paths a W6-sized call takes give the bits of the array
paths they stand in for, on a few hundred random small calls each, with the inputs that
break such code (degenerate, reversed and off-map boxes, .5 ties, tiny fractions, huge
values, zeros of both signs and NaN in the map, float32 and float64); the fast accepts of
the checks leave every error as it was."""

import importlib

import numpy as np
import pytest

import ort_roi
from ort_roi import ops
from ort_roi.geometry import ALIGNED, LEGACY, MMDEPLOY_ALIGNED, OPENVINO_ALIGNED, align_bins, \
    roi_pool_bins, sampling_grid
from ort_roi.kernels import checks

align_kernel = importlib.import_module("ort_roi.kernels.cpu.align")
max_pool_kernel = importlib.import_module("ort_roi.kernels.cpu.max_pool")

CALLS = 400


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _boxes(rng, R: int, dtype) -> np.ndarray:
    """Boxes of one kind: on and off a map of a few pixels, integer corners with .5 ties and
    tiny offsets, magnitudes from 1e-30 to 1e38 (reversed as often as not)."""
    kind = rng.integers(0, 4)
    if kind == 0:
        b = rng.uniform(-3, 9, (R, 4))
    elif kind == 1:
        b = rng.integers(-2, 8, (R, 4)) + rng.choice([0, 0.5, -0.5, 0.25, 1e-7, -1e-7], (R, 4))
    elif kind == 2:
        b = rng.uniform(-1, 1, (R, 4)) * 10.0 ** rng.integers(-30, 39, (R, 4))
    else:
        b = rng.uniform(-20, 20, (R, 4))
    with np.errstate(all="ignore"):
        b = b.astype(dtype)
    b[~np.isfinite(b)] = 0
    return b


def test_roi_align_few_samples_give_the_array_weights_bits(monkeypatch):
    """_small_weights_few (scalars) against _small_weights (arrays): the same weights, bit for
    bit, wherever it answers (here on problems of any size: its exactness does not depend on
    the limits that pick it for speed)."""
    monkeypatch.setattr(align_kernel, "FEW_SAMPLES", 10**6)
    monkeypatch.setattr(align_kernel, "FEW_WEIGHTS", 10**6)
    rng = np.random.default_rng(63)
    answered = 0
    for _ in range(CALLS):
        R, H, W = (int(v) for v in rng.integers(1, [5, 7, 7]))
        ph, pw = (int(v) for v in rng.integers(1, 4, 2))
        boxes = _boxes(rng, R, np.float32)
        geometry = [ALIGNED, LEGACY, OPENVINO_ALIGNED, MMDEPLOY_ALIGNED][rng.integers(4)]
        scale = float(rng.choice([1.0, 0.5, 0.25, 1 / 3, 2.0]))
        sr = int(rng.choice([-1, 0, 1, 2, 3, 5]))
        with np.errstate(all="ignore"):
            bins = align_bins(boxes, scale, geometry, ph, pw)
            grid = sampling_grid(bins.size, sr)
            if grid.max() > 64:  # (align() takes the small path for small grids only)
                continue
            args = (bins.start, bins.size, grid, max(ph, pw), (H, W), np.float32)
            few = align_kernel._small_weights_few(*args)
            many = align_kernel._small_weights(*args)
        if few is None:
            continue
        answered += 1
        assert few.shape == many.shape and few.dtype == many.dtype
        assert np.array_equal(_bits(few), _bits(many)), (boxes, scale, geometry, sr, ph, pw)
    assert answered > CALLS // 2


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_roi_align_small_calls_are_the_same_with_and_without_scalars(dtype, monkeypatch):
    rng = np.random.default_rng(630)
    calls = []
    for _ in range(CALLS // 4):
        N, C, H, W, R = (int(v) for v in rng.integers(1, [3, 4, 7, 7, 5]))
        X = rng.standard_normal((N, C, H, W)).astype(dtype)
        if rng.integers(4) == 0:
            X.flat[rng.integers(X.size)] = np.nan
        boxes = _boxes(rng, R, dtype)
        counts = np.bincount(rng.integers(0, N, R), minlength=N)
        a = dict(pooled_height=int(rng.integers(1, 4)), pooled_width=int(rng.integers(1, 4)),
                 spatial_scale=float(rng.choice([1.0, 0.5, 2.0])),
                 sampling_ratio=int(rng.choice([-1, 0, 1, 2, 3])),
                 aligned=int(rng.integers(2)))
        calls.append((X, boxes, counts, a))

    def run_all():
        out = []
        for X, boxes, counts, a in calls:
            try:
                out.append(ops.roi_align(X, boxes, counts, **a))
            except ort_roi.RoiOpError as e:  # a box whose scaled size overflows
                out.append(str(e))
        return out

    fast = run_all()
    monkeypatch.setattr(align_kernel, "FEW_SAMPLES", 0)
    slow = run_all()
    for f, s in zip(fast, slow):
        if isinstance(f, str):
            assert f == s
        else:
            assert f.dtype == s.dtype and np.array_equal(_bits(f), _bits(s))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_few_bins_give_pool_max_bits(dtype):
    """_pool_max_few (scalar bins, a max per bin) against roi_pool_bins and pool_max (arrays),
    on maps with zeros of both signs and NaN: the same output, bit for bit, wherever it
    answers (a max of 0 or NaN goes to the arrays)."""
    rng = np.random.default_rng(64)  # (problems of up to 36 bins: beyond FEW_BINS, called)
    answered = 0
    for _ in range(CALLS):
        N, C, H, W, R = (int(v) for v in rng.integers(1, [3, 4, 7, 7, 5]))
        ph, pw = (int(v) for v in rng.integers(1, 4, 2))
        boxes = _boxes(rng, R, dtype)
        X = rng.standard_normal((N, C, H, W)).astype(dtype)
        if rng.integers(3) == 0:
            X[X < 0.3] = rng.choice([0.0, -0.0])
        if rng.integers(6) == 0:
            X.flat[rng.integers(X.size)] = np.nan
        batch = rng.integers(0, N, R).astype(np.intp)
        scale = float(rng.choice([1.0, 0.5, 0.25, 1 / 3, 2.0, 1e30]))
        with np.errstate(all="ignore"):
            few = max_pool_kernel._pool_max_few(X, batch, boxes, ph, pw, scale)
            (hlo, hhi), (wlo, whi) = roi_pool_bins(boxes, scale, ph, pw, H, W)
            many = max_pool_kernel.pool_max(X, batch, hlo, hhi, wlo, whi)
        if few is None:
            continue
        answered += 1
        assert np.array_equal(_bits(few), _bits(many)), (boxes, scale, ph, pw)
    assert answered > CALLS // 2


def test_a_few_boxes_fail_as_many_do():
    """The checks' fast accepts (a few values: Python's sum, |corner * scale| bounded, batch
    indices in range) let nothing through that the array checks refuse: the same errors,
    word for word."""
    X = np.zeros((1, 1, 4, 4), np.float32)
    many = 40  # boxes: over checks.FEW_VALUES values, the array checks
    for bad, match in [(np.nan, "non-finite coordinate nan"), (np.inf, "non-finite"),
                       (3e38, "overflows float32")]:
        for R in (1, many):
            boxes = np.tile(np.array([[0, 0, 2, 2]], np.float32), (R, 1))
            boxes[R - 1, 2] = bad
            if bad == 3e38:
                boxes[R - 1, 0] = -3e38
            with pytest.raises(ort_roi.RoiOpError, match=match) as e:
                ops.roi_align(X, boxes, np.array([R]), spatial_scale=1.0)
            assert f"row {R - 1}" in str(e.value)
    for bad, why in [(0.5, "is not an integer"), (-1.0, r"is out of range \[0, 1\)"),
                     (1.0, r"is out of range \[0, 1\)"), (3e9, "is out of range")]:
        for R in (1, many):
            rois = np.tile(np.array([[0, 0, 0, 2, 2]], np.float32), (R, 1))
            rois[R - 1, 0] = bad
            with pytest.raises(ort_roi.RoiOpError, match=f"row {R - 1} has batch index .*{why}"):
                ops.roi_pooling(X, rois, pooled_h=1, pooled_w=1, spatial_scale=1.0)
    # a scale that overflows T, boxes at 0 (0 * inf): refused as before (the ops' attribute
    # check refuses it first; the multi-level ops pass their own scales)
    with pytest.raises(ort_roi.RoiOpError, match="row 0: the scaled box size overflows"), \
            np.errstate(all="ignore"):
        checks.check_box_sizes("RoIAlign", "boxes", np.zeros((1, 4), np.float32), 1e39)


def test_bench_small_rows_time_native_bridge_and_ours_and_share_our_time():
    """``ort-roi bench --small``'s rows: every op family's few-box call runs, agrees with
    onnxruntime's native op where one exists, and its time is shared among the parts."""
    from ort_roi.cli import bench_small

    rows = bench_small.run(repeat=1, log=lambda *a: None, calls=20)
    assert [r["case"] for r in rows][:2] == ["W6 RoIAlign", "W6 ROIPooling.max"]
    for r in rows:
        assert r["ort_roi_s"] > 0 and r["bridge_floor_s"] > 0
        assert set(r["shares"]) == set(bench_small.PARTS)
        assert abs(sum(r["shares"].values()) - 1) < 1e-9
        if r["native_max_abs_diff"] is not None and "CropAndResize" not in r["case"]:
            assert r["native_max_abs_diff"] < 1e-6, r
    assert "| W6 RoIAlign |" in bench_small.markdown(rows)


def test_bench_small_charges_time_by_module():
    from ort_roi.cli import bench_small

    assert bench_small.category("/x/ort_roi/kernels/checks.py") == "checks"
    assert bench_small.category("/x/ort_roi/ops/roi_align.py") == "checks"
    assert bench_small.category("/x/ort_roi/geometry/boxes.py") == "geometry"
    assert bench_small.category("/x/ort_roi/kernels/cpu/align.py") == "kernel"
    assert bench_small.category("/x/ort_roi/runtime/bridge.py") == "bridge"
    assert bench_small.category("/x/numpy/_core/fromnumeric.py") is None
    X = np.ones((1, 1, 4, 4), np.float32)
    share = bench_small.breakdown(lambda: ops.roi_align(X, np.zeros((1, 4), np.float32),
                                                        np.array([1])), calls=50)
    assert share["checks"] > 0 and share["kernel"] > 0 and share["geometry"] > 0
