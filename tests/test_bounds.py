"""Resource bounds: peak memory on the standard workloads, huge boxes, huge coordinates."""

import tracemalloc
from unittest import mock

import numpy as np
import onnxruntime as ort
import pytest

import ort_roi
from tests import defs as D
from ort_roi import builders, ops
from ort_roi.cli import bench_workloads
from ort_roi.kernels.cpu import workspace as _workspace

from ort_roi.kernels.cpu import strategies
from ort_roi.kernels.cpu.strategies import force
from tests.versions import ORT
from tests.work import python_lines

MB = 1 << 20
WORKLOADS = ["W1_faster_rcnn_c4", "W2_mask_rcnn_p2", "W3_batch2_p3"]


def _peak_extra(fn) -> int:
    """Bytes allocated at the peak of fn() beyond what was live before (NumPy is traced)."""
    _workspace.clear()  # buffers kept from earlier runs would hide allocations
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        fn()
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def _workload(name):
    w = bench_workloads.workloads()[name]
    X, boxes, counts = bench_workloads.make_inputs(w)
    p = w["pooled"]
    align = dict(pooled_height=p, pooled_width=p, spatial_scale=w["spatial_scale"],
                 sampling_ratio=w["sampling_ratio"])
    pool = dict(pooled_height=p, pooled_width=p, spatial_scale=w["spatial_scale"])
    return X, boxes, counts, align, pool


@pytest.mark.parametrize("name", WORKLOADS)
@pytest.mark.parametrize("op", ["RoIAlign", "RoIPool"])
@pytest.mark.parametrize("path", ["kernel", "session"])
def test_peak_memory_within_twice_input_plus_output_plus_64mb(name, op, path):
    X, boxes, counts, align, pool = _workload(name)
    attrs = align if op == "RoIAlign" else pool
    out_bytes = boxes.shape[0] * X.shape[1] * attrs["pooled_height"] ** 2 * X.itemsize
    if path == "kernel":
        fn = getattr(ops, "roi_align" if op == "RoIAlign" else "roi_pool")
        run = lambda: fn(X, boxes, counts, **attrs)  # noqa: E731
    else:
        m = builders.single_op_model(op, count_dtype=counts.dtype, **attrs)
        sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                    providers=["CPUExecutionProvider"])
        feed = dict(zip([i.name for i in sess.get_inputs()], [X, boxes, counts]))
        run = lambda: sess.run(None, feed)  # noqa: E731
    extra = _peak_extra(run)
    bound = 2 * (X.nbytes + out_bytes) + 64 * MB
    if path == "session" and ORT < (1, 19):  # its run copies each output into a new array
        bound += out_bytes
    assert extra <= bound, f"{extra / MB:.0f} MB > {bound / MB:.0f} MB"


def test_million_pixel_box_with_adaptive_sampling_is_cheap():
    """A 1e6 x 1e6 box samples 1e12 points per bin: closed form, no memory or loop in
    proportion (574 lines of ort_roi's Python, 0.04 MB here; the explicit samples take 6.7 MB
    at side 3e4, in proportion to the side)."""
    X = np.random.default_rng(0).standard_normal((1, 4, 32, 32)).astype(np.float32)
    boxes = np.array([[-5e5, -5e5, 5e5, 5e5], [0, 0, 1e6, 1e6]], np.float32)
    counts = np.array([2])
    with python_lines(5000, entered=ops.roi_align):
        extra = _peak_extra(lambda: ops.roi_align(X, boxes, counts, pooled_height=7,
                                                      pooled_width=7, sampling_ratio=-1))
    y = ops.roi_align(X, boxes, counts, pooled_height=7, pooled_width=7, sampling_ratio=-1)
    assert extra < 16 * MB, f"{extra / MB:.0f} MB"
    assert np.isfinite(y).all()
    # the box is 1e6 / 7 pixels per bin: the map (32 px) lies inside the middle bin of the
    # first box, whose mean is then tiny but not zero; bins beyond the map are exactly 0
    assert (y[0, :, 0, :] == 0).all() and (y[1, :, 1:, :] == 0).all()
    assert np.abs(y[0, :, 3, 3]).max() > 0


def test_fixed_sampling_ratio_taps_stay_bounded_for_many_boxes():
    """A fixed sampling ratio computes large boxes from their taps (ph * 2g rows and
    pw * 2g columns each): their indices and pixels are made a block / a step at a time,
    not for every box at once (that took 93 MB here, blocked 20 MB). Computed from their
    crops instead, the boxes' weights are made a few hundred at a time (33 MB)."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1, 1, 1200, 1200)).astype(np.float32)
    R = 4000
    x1 = rng.uniform(0, 100, (R, 2))
    boxes = np.concatenate([x1, x1 + 1000], 1).astype(np.float32)
    a = dict(pooled_height=7, pooled_width=7, spatial_scale=1.0, sampling_ratio=40)
    counts = np.array([R])
    bins = np.full((R, 2), 1000 / 7, np.float32)
    assert strategies.align_by_taps(40, bins, 7, 7, 1200, 1200, 1).all()  # the taps path
    extra = _peak_extra(lambda: ops.roi_align(X, boxes, counts, **a))
    assert extra < 32 * MB, f"{extra / MB:.0f} MB"
    with force(align="crops"):  # from crops: 113 MB once
        extra = _peak_extra(lambda: ops.roi_align(X, boxes, counts, **a))
    assert extra < 48 * MB, f"crops: {extra / MB:.0f} MB"
    # the same boxes from their crops (the property tests hold both to the definition)
    some = (X, boxes[:50], np.array([50]))
    with force(align="crops"):
        crops = ops.roi_align(*some, **a)
    np.testing.assert_allclose(ops.roi_align(*some, **a), crops, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("grid_side", [65, 97, 130, 301])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_closed_form_weights_equal_the_explicit_samples(grid_side, dtype):
    """Grids above geometry.EXPLICIT_GRID_MAX use the closed form: it must equal summing the
    samples."""
    rng = np.random.default_rng(grid_side)
    X = rng.standard_normal((1, 3, 12, 9)).astype(dtype)
    side = grid_side * 2 - 0.5  # two bins per side, about grid_side samples per bin
    boxes = np.array([[-3.2, -1.7, side - 3.2, side - 1.7], [2.5, 0.25, 2.5 + side / 40, 9]],
                     dtype)
    a = dict(pooled_height=2, pooled_width=2, sampling_ratio=-1, aligned=1, spatial_scale=1.0)
    with force(align="crops"):
        closed = ops.roi_align(X, boxes, np.array([2]), **a)
        with force(align_weights="explicit"):
            explicit = ops.roi_align(X, boxes, np.array([2]), **a)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(closed, explicit, rtol=tol, atol=tol)
    np.testing.assert_allclose(explicit, D.roi_align(X, boxes, np.array([2]), **a),
                               rtol=tol * 10, atol=tol * 10)


@pytest.mark.parametrize("align_path", ["small", "crops", "taps", "planes"])
@pytest.mark.parametrize("v", [1e30, -1e30, 3.4e38])
def test_huge_coordinates_do_not_overflow_index_arithmetic(v, align_path):
    """Each RoIAlign strategy (the taps one once took a huge box's sample as index -2**63)."""
    X = np.random.default_rng(1).standard_normal((1, 2, 6, 7)).astype(np.float32)
    boxes = np.array([[-3.4e38, -3.4e38, v, v], [v, v, v, v]], np.float32)
    counts = np.array([2])
    pooled = ops.roi_pool(X, boxes, counts, pooled_height=1, pooled_width=1)
    if v == 3.4e38:  # the first box's size overflows to inf: the bin spans the whole map
        np.testing.assert_array_equal(pooled[0, :, 0, 0], X[0].max(axis=(1, 2)))
    np.testing.assert_array_equal(pooled, D.roi_pool(X, boxes, counts))
    assert np.isfinite(ops.psroi_pool(X, boxes, counts, output_channels=2)).all()
    mixed = np.array([[0, 0, 5, v], [v, 1, v, 4], [1, 1, 5, 5]], np.float32)  # one axis huge
    for a in [dict(sampling_ratio=-1), dict(sampling_ratio=2)]:
        with force(align=align_path):
            if v == 3.4e38:  # samples of an infinite box are undefined: an error, not NaN
                with pytest.raises(ort_roi.RoiOpError, match="row 0.*overflows float32"):
                    ops.roi_align(X, boxes, counts, **a)
            else:
                assert np.isfinite(ops.roi_align(X, boxes, counts, **a)).all()
            got = ops.roi_align(X, mixed, np.array([3]), **a)
        if a["sampling_ratio"] > 0:  # (the definition would take 1e30 adaptive samples)
            with np.errstate(over="ignore"):  # the definition's scaled huge coordinates
                want = D.roi_align(X, mixed, np.array([3]), **a)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
        else:
            assert np.isfinite(got).all()


def test_cached_buffers_stay_within_a_process_wide_budget_and_can_be_released():
    """Per-thread scratch buffers never shrank: one call on a 64 MiB input left 96 MiB cached
    per thread, for good. Now every thread's buffers together stay within the budget, least
    recently used out first, and ort_roi.release_memory() lets go of them."""
    import threading

    import onnxruntime as ort

    from ort_roi import builders

    m = builders.single_op_model("RoIAlign", pooled_height=7, pooled_width=7, sampling_ratio=2)
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    X = np.ones((1, 64, 512, 512), np.float32)  # 64 MiB
    feed = {"X": X, "boxes": np.array([[0, 0, 500, 500]] * 8, np.float32),
            "boxes_num": np.array([8], np.int32)}

    def run():
        assert np.isfinite(sess.run(None, feed)[0]).all()

    def on_threads(n):
        ts = [threading.Thread(target=run) for _ in range(n)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()

    old = _workspace.set_limit(80 << 20)
    try:
        on_threads(3)
        assert 64 << 20 <= _workspace.cached_bytes() <= 80 << 20  # one thread's NHWC copy
        _workspace.set_limit(16 << 20)  # a 64 MiB copy is no longer kept at all
        assert _workspace.cached_bytes() <= 16 << 20
        on_threads(2)
        assert _workspace.cached_bytes() <= 16 << 20
    finally:
        _workspace.set_limit(old)
    on_threads(2)
    assert _workspace.cached_bytes() <= old
    assert ort_roi.release_memory() > 0 and _workspace.cached_bytes() == 0
    run()  # and everything still works


def test_planes_make_the_weights_of_a_chunk_of_boxes_at_a_time():
    """The "planes" strategy bounds its weights as the crops do (WEIGHTS_MAX): chunks of 16
    boxes here, the same output as the crops."""
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3, 17, 23)).astype(np.float32)
    corner = rng.uniform(-3, 20, (70, 2))
    boxes = np.concatenate([corner, corner + rng.uniform(0, 15, (70, 2))], 1).astype(np.float32)
    a = dict(pooled_height=5, pooled_width=4, sampling_ratio=2)
    with mock.patch.object(strategies, "WEIGHTS_MAX", 1000), force(align="planes"):
        got = ops.roi_align(X, boxes, np.array([30, 40]), **a)
    with force(align="crops"):
        want = ops.roi_align(X, boxes, np.array([30, 40]), **a)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def _roialign_max_model(**attrs):
    """ONNX RoiAlign (opset 16) mode "max", inputs X, rois, batch."""
    from onnx import TensorProto, helper

    node = helper.make_node("RoiAlign", ["X", "rois", "batch"], ["Y"], mode="max", **attrs)
    g = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, None),
        helper.make_tensor_value_info("batch", TensorProto.INT64, None)],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)],
                             ir_version=builders.IR_VERSION)


@pytest.mark.parametrize("op", ["MMCVRoiAlign max", "RoiAlign max", "RoiAlign onnx_max",
                                "MMCVMultiLevelRoiAlign pool_mode=0"])
def test_roialign_max_of_a_huge_box_is_bounded_and_exact(op):
    """Issue 32 (3): the max visited every sample of the adaptive grid (a box of side 16000
    on an 8x8 map: 17 s a call). One sample per distinct taps now: a box of side 1e5 in
    about 5,600 lines of ort_roi's Python and 0.6 MB (every sample: 15,500 lines and 42 MB
    at side 1e4, the lines growing with its square), equal to the max over every sample
    (tests/literal.py: all 14286 x 14286 samples of a bin placed, grouped by the
    coordinates their value depends on)."""
    from tests import literal

    rng = np.random.default_rng(32)
    X = rng.standard_normal((1, 3, 8, 8)).astype(np.float32) + 1  # some negative
    side = 1e5
    rois = np.array([[0, 3.5 - side / 2, -side / 3, side / 2, 2 * side / 3]], np.float32)
    a = dict(output_height=7, output_width=7)
    reading = "onnxruntime" if op.endswith("onnx_max") else "mmcv"
    if op.startswith("MMCVRoiAlign"):
        kernel = ops.mmcv_roi_align
        run = lambda: ops.mmcv_roi_align(X, rois, mode="max", **a)  # noqa: E731
    elif op.startswith("RoiAlign"):
        mode, kernel = op.split()[1], ops.onnx_roi_align
        run = lambda: ops.onnx_roi_align(X, rois[:, 1:], np.zeros(1, np.int64),  # noqa: E731
                                             mode=mode, **a)
    else:  # one level of stride 1 (finest_scale 1: the box is on it)
        kernel = ops.multi_level_roi_align
        run = lambda: ops.multi_level_roi_align(rois, X, pool_mode=0,  # noqa: E731
                                                    featmap_strides=(1.0,), **a)
    run()
    with python_lines(20000, entered=kernel):
        extra = _peak_extra(run)
    got = run()
    want = literal.align_max_every_sample(X, rois, reading=reading, **a)
    if op.startswith("MMCVMultiLevel"):  # its empty bin is -FLT_MAX, mmcv's -10000
        want = np.where(want == -10000, np.float32(-np.finfo(np.float32).max), want)
    np.testing.assert_array_equal(got, want)
    assert (got[0, :, 2, 3] > 1).all()  # the bin over the map (its other samples are 0)
    assert (np.delete(got.reshape(3, 49), 2 * 7 + 3, axis=1) == 0).all()  # only off the map
    assert extra < 8 * MB, f"{extra / MB:.1f} MB"


def test_roialign_max_of_a_large_box_equals_onnxruntimes_own_every_sample():
    """A box of side 3000 on a 9 x 11 map (a grid of 429 samples a bin side, past
    max_sample_positions' limit of 4 a pixel): onnxruntime's own RoiAlign max visits all
    of them; ort_roi's onnx_max the same numbers, bit for bit, also through a session."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, 2, 9, 11)).astype(np.float32)
    rois = np.array([[-1500, -1200, 1500, 1800], [3, -2990, 8, 10], [-2000, 2, 1000, 6.5]],
                    np.float32)
    batch = np.array([0, 1, 1], np.int64)
    a = dict(output_height=7, output_width=5, spatial_scale=1.0, sampling_ratio=0)
    feed = {"X": X, "rois": rois, "batch": batch}
    m = _roialign_max_model(**a)
    so = ort.SessionOptions()
    so.log_severity_level = 3  # its warning that max mode "will be fixed"
    want = ort.InferenceSession(m.SerializeToString(), so,
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(
        ops.onnx_roi_align(X, rois, batch, mode="onnx_max", **a), want)
    sess = ort.InferenceSession(ort_roi.convert(m, roialign_max="onnx").SerializeToString(),
                                ort_roi.session_options(), providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(sess.run(None, feed)[0], want)
