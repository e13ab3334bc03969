"""Property tests: every kernel, each of its fast strategies forced in turn
(kernels/cpu/strategies.py), against the op's readable definition (ort_roi.definitions).

Random shapes, dtypes, attributes and boxes, with the edge values that break kernels: .5 ties
under rounding, boxes off the map or inverted, degenerate sizes, tiny maps. Max pooling must
be bit-identical; averages agree to 1e-4 (float32) / 1e-9 (float64).
"""

from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from tests import literal
from tests import defs as D
from ort_roi import ops
from ort_roi.geometry import sampling
from ort_roi.kernels.cpu.strategies import force

SETTINGS = settings(max_examples=200, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

dtypes = st.sampled_from([np.float32, np.float64])
scales = st.sampled_from([1.0, 0.5, 0.25, 0.0625, 0.3, 2.0])
# integers, halves (rounding ties) and arbitrary values, off the map on both sides
coords = st.one_of(st.integers(-6, 24).map(float), st.integers(-12, 48).map(lambda v: v / 2),
                   st.floats(-8, 30, allow_nan=False, width=32))


@st.composite
def problem(draw, ncols=4, normalized=False, channels=None):
    dt = draw(dtypes)
    N = draw(st.integers(1, 2))
    C = channels if channels is not None else draw(st.integers(1, 3))
    H, W = draw(st.integers(1, 9)), draw(st.integers(1, 9))
    R = draw(st.integers(0, 5))
    c = st.floats(-0.25, 1.25, allow_nan=False, width=32) | st.sampled_from([0.0, 0.5, 1.0]) \
        if normalized else coords
    boxes = np.array([[draw(c) for _ in range(4)] for _ in range(R)], dt).reshape(R, 4)
    counts = np.zeros(N, np.int64)
    for b in draw(st.lists(st.integers(0, N - 1), min_size=R, max_size=R)):
        counts[b] += 1
    X = np.random.default_rng(draw(st.integers(0, 2**16))).standard_normal((N, C, H, W)).astype(dt)
    if draw(st.booleans()):  # ties in X
        X = np.round(X)
    return X, boxes, counts


def assert_close(got, want, exact):
    assert got.shape == want.shape and got.dtype == want.dtype
    if exact:
        np.testing.assert_array_equal(got, want)
    else:
        tol = 1e-4 if got.dtype == np.float32 else 1e-9
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


def _rois(boxes, counts):
    batch = np.repeat(np.arange(counts.size), counts).astype(boxes.dtype)
    return np.concatenate([batch[:, None], boxes], 1)


pooled = st.integers(1, 4)

#: Max pooling's strategies.
max_pool_strategies = pytest.mark.parametrize("strategy", ["small", "table"])


@max_pool_strategies
@SETTINGS
@given(p=problem(), ph=pooled, pw=pooled, s=scales)
def test_roi_pooling_max(strategy, p, ph, pw, s):
    X, boxes, counts = p
    rois = _rois(boxes, counts)
    a = dict(pooled_h=ph, pooled_w=pw, spatial_scale=s, method="max")
    with force(max_pool=strategy):
        got = ops.roi_pooling(X, rois, **a)
    assert_close(got, D.roi_pooling(X, rois, **a), True)


@SETTINGS
@given(problem(normalized=True), pooled, pooled)
def test_roi_pooling_bilinear(p, ph, pw):
    X, boxes, counts = p
    rois = _rois(boxes, counts)
    a = dict(pooled_h=ph, pooled_w=pw, spatial_scale=1.0, method="bilinear")
    assert_close(ops.roi_pooling(X, rois, **a), D.roi_pooling(X, rois, **a), False)


@max_pool_strategies
@SETTINGS
@given(p=problem(), ph=pooled, pw=pooled, s=scales)
def test_roi_pool(strategy, p, ph, pw, s):
    X, boxes, counts = p
    a = dict(pooled_height=ph, pooled_width=pw, spatial_scale=s)
    with force(max_pool=strategy):
        got = ops.roi_pool(X, boxes, counts, **a)
    assert_close(got, D.roi_pool(X, boxes, counts, **a), True)


@SETTINGS
@given(st.data(), pooled, pooled, st.integers(1, 3), scales)
def test_psroi_pool(data, ph, pw, oc, s):
    X, boxes, counts = data.draw(problem(channels=oc * ph * pw))
    a = dict(output_channels=oc, pooled_height=ph, pooled_width=pw, spatial_scale=s)
    assert_close(ops.psroi_pool(X, boxes, counts, **a),
                 D.psroi_pool(X, boxes, counts, **a), False)


@pytest.mark.parametrize("strategy", ["small", "crops", "taps", "planes"])
@SETTINGS
@given(p=problem(), ph=pooled, pw=pooled, s=scales, sr=st.sampled_from([-1, 0, 1, 2, 3]),
       aligned=st.sampled_from([0, 1]))
def test_roi_align(strategy, p, ph, pw, s, sr, aligned):
    """RoIAlign's strategies: small problems at once, boxes from their crops, (fixed
    sampling ratio) boxes from their taps, a step of one or several boxes, and boxes
    straight from the NCHW planes."""
    X, boxes, counts = p
    a = dict(pooled_height=ph, pooled_width=pw, spatial_scale=s, sampling_ratio=sr,
             aligned=aligned)
    with force(align=strategy, taps_step=1 + 200 * (sr % 2)):
        got = ops.roi_align(X, boxes, counts, **a)
    assert_close(got, D.roi_align(X, boxes, counts, **a), False)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_roi_align_from_crop_rows_and_crops_in_place(dtype):
    """Maps of many channels (the property problems above have 1-3): the planes over each
    crop's rows only (C >= 16, strategies.planes_rows_only; 1-row or 1-column outputs and
    crops over 31 pixels a side over every row: scale 2 makes both kinds of box), the crops
    read from the NCHW map as it is and from an NHWC copy of the whole map
    (strategies.align_crops_in_place) against the definition, and against each other: the
    same dot products, whose last bits OpenBLAS may round differently by shape."""
    rng = np.random.default_rng(11)
    for C in (16, 40):
        X = rng.standard_normal((2, C, 23, 31)).astype(dtype)
        corner, side = rng.uniform(-4, 30, (12, 2)), rng.uniform(0, 20, (12, 2))
        boxes = np.concatenate([corner, corner + side], 1).astype(dtype)
        counts = np.array([5, 7])
        for ph, pw, sr, scale in ((14, 14, 0, 0.5), (7, 5, 2, 0.5), (1, 3, -1, 0.5),
                                  (3, 1, 0, 0.5), (14, 14, 0, 2.0), (6, 7, 2, 2.0)):
            a = dict(pooled_height=ph, pooled_width=pw, spatial_scale=scale,
                     sampling_ratio=sr, aligned=1)
            want = D.roi_align(X, boxes, counts, **a)
            with force(align="planes"):
                assert_close(ops.roi_align(X, boxes, counts, **a), want, False)
            with force(align="crops", crops_in_place=True):
                in_place = ops.roi_align(X, boxes, counts, **a)
            with force(align="crops", crops_in_place=False):
                whole = ops.roi_align(X, boxes, counts, **a)
            assert_close(in_place, want, False)
            assert_close(whole, want, False)
            np.testing.assert_allclose(in_place, whole, rtol=0, atol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("ladder", ["powers of two", "every length"])
@pytest.mark.parametrize("budget", [1, 2000, 1 << 20])
def test_max_pooling_tables_of_each_kind(ladder, budget):
    """Either kind of table lengths, from one level (a window is many blocks) to as deep as
    the windows (gathers made dear), on boxes of every size up to the whole map."""
    rng = np.random.default_rng(7)
    X = np.round(rng.standard_normal((2, 5, 23, 19)) * 3).astype(np.float32)
    corner, side = rng.uniform(-4, 22, (60, 2)), rng.uniform(0, 26, (60, 2))
    boxes = np.concatenate([corner, corner + side], 1).astype(np.float32)
    counts = np.array([25, 35])
    for ph, pw in [(1, 1), (2, 3), (3, 2)]:
        a = dict(pooled_height=ph, pooled_width=pw)
        with force(max_pool="table", table_budget=budget, table_ladder=ladder):
            got = ops.roi_pool(X, boxes, counts, **a)
        np.testing.assert_array_equal(got, D.roi_pool(X, boxes, counts, **a))


@settings(max_examples=200, deadline=None)
@given(problem(), pooled, pooled, scales, st.sampled_from([1, 24, 200, 1 << 20]),
       st.sampled_from([1, 5]), st.sampled_from([1, 3, 64]),
       st.sampled_from(["powers of two", "every length"]))
def test_max_pooling_with_capped_table(p, ph, pw, s, budget, chunk, run, ladder):
    """Either kind of table lengths, as deep as the budget allows (gathers made dear):
    capped levels (windows covered by many blocks), tiny chunks, short runs."""
    X, boxes, counts = p
    a = dict(pooled_height=ph, pooled_width=pw, spatial_scale=s)
    with force(max_pool="table", table_budget=budget, table_chunk=chunk, table_run=run,
               table_ladder=ladder):
        got = ops.roi_pool(X, boxes, counts, **a)
    assert_close(got, D.roi_pool(X, boxes, counts, **a), True)


modes = st.sampled_from(["avg", "max"])


@SETTINGS
@given(p=problem(), ph=pooled, pw=pooled, s=scales, sr=st.sampled_from([0, 1, 2, 3]),
       aligned=st.sampled_from([0, 1]), mode=modes)
def test_mmcv_roi_align(p, ph, pw, s, sr, aligned, mode):
    X, boxes, counts = p
    rois = _rois(boxes, counts)
    a = dict(output_height=ph, output_width=pw, spatial_scale=s, sampling_ratio=sr,
             aligned=aligned, mode=mode)
    assert_close(ops.mmcv_roi_align(X, rois, **a), D.mmcv_roi_align(X, rois, **a), False)


@SETTINGS
@given(p=problem(), ph=pooled, pw=pooled, s=scales, sr=st.sampled_from([0, 1, 2, 3]),
       ctm=st.sampled_from(["half_pixel", "output_half_pixel"]),
       mode=st.sampled_from(["avg", "max", "onnx_max"]))
def test_onnx_roi_align(p, ph, pw, s, sr, ctm, mode):
    X, boxes, counts = p
    idx = np.repeat(np.arange(counts.size), counts)
    a = dict(output_height=ph, output_width=pw, spatial_scale=s, sampling_ratio=sr,
             coordinate_transformation_mode=ctm, mode=mode)
    assert_close(ops.onnx_roi_align(X, boxes, idx, **a), D.onnx_roi_align(X, boxes, idx, **a),
                 mode == "onnx_max")


@SETTINGS
@given(p=problem(), ph=pooled, pw=pooled, s=scales, sr=st.sampled_from([-1, 0, 2]),
       aligned=st.sampled_from([0, 1]))
def test_caffe2_roi_align(p, ph, pw, s, sr, aligned):
    X, boxes, counts = p
    rois = _rois(boxes, counts)
    a = dict(pooled_h=ph, pooled_w=pw, spatial_scale=s, sampling_ratio=sr, aligned=aligned)
    assert_close(ops.caffe2_roi_align(X, rois, **a), D.caffe2_roi_align(X, rois, **a), False)


@st.composite
def rotated_rois(draw, N, dtype):
    R = draw(st.integers(0, 4))
    rows = [[draw(st.integers(0, N - 1)), draw(coords), draw(coords),
             draw(st.floats(0, 12, allow_nan=False, width=32)),
             draw(st.floats(0, 12, allow_nan=False, width=32)),
             draw(st.floats(-4, 4, allow_nan=False, width=32))] for _ in range(R)]
    return np.array(rows, dtype).reshape(R, 6)


@pytest.mark.parametrize("strategy", ["regular", "clipped"])
@SETTINGS
@given(data=st.data(), ph=pooled, pw=pooled, s=scales, sr=st.sampled_from([0, 1, 2]),
       aligned=st.sampled_from([0, 1]), clockwise=st.sampled_from([0, 1]))
def test_mmcv_roi_align_rotated(strategy, data, ph, pw, s, sr, aligned, clockwise):
    X, _, _ = data.draw(problem())
    rois = data.draw(rotated_rois(X.shape[0], X.dtype))
    a = dict(output_height=ph, output_width=pw, spatial_scale=s, sampling_ratio=sr,
             aligned=aligned, clockwise=clockwise)
    with force(rotated=strategy):
        got = ops.mmcv_roi_align_rotated(X, rois, **a)
    assert_close(got, D.mmcv_roi_align_rotated(X, rois, **a), False)


def _every_sample():
    """RoIAlign's max over every sample of each bin (geometry.sampling.max_sample_positions keeps them
    all below SAMPLES_PER_PIXEL * (size + 2) a bin side: out of reach here)."""
    return mock.patch.object(sampling, "SAMPLES_PER_PIXEL", 1 << 40)


@pytest.mark.parametrize("per_pixel", [0, 1])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=problem(), ph=pooled, pw=pooled, s=scales, sr=st.sampled_from([0, 1, 2, 3, 9]),
       aligned=st.sampled_from([0, 1]), op=st.sampled_from(["mmcv max", "onnx_max",
                                                            "multi-level max"]))
def test_roi_align_max_of_one_sample_per_distinct_taps_is_the_max_of_every_sample(
        per_pixel, p, ph, pw, s, sr, aligned, op):
    """Issue 32 (3): the max reads, of a bin's samples with the same taps (off the map, or
    clamped to its first or last row / column), one. Forced on small boxes (0 or 1 sample
    per pixel kept before the runs are searched), kernel and definition equal the max over
    every sample bit for bit, negative values, samples off and on the border included; for
    mmcv's reading also its literal loop."""
    X, boxes, counts = p
    rois = _rois(boxes, counts)
    if op == "mmcv max":
        a = dict(output_height=ph, output_width=pw, spatial_scale=s, sampling_ratio=sr,
                 aligned=aligned, mode="max")
        args, kernel, definition = (X, rois), ops.mmcv_roi_align, D.mmcv_roi_align
    elif op == "onnx_max":
        a = dict(output_height=ph, output_width=pw, spatial_scale=s, sampling_ratio=sr,
                 mode="onnx_max", coordinate_transformation_mode=["output_half_pixel",
                                                                  "half_pixel"][aligned])
        args = (X, boxes, np.repeat(np.arange(counts.size), counts))
        kernel, definition = ops.onnx_roi_align, D.onnx_roi_align
    else:  # two levels (strides 1 and 2): mmdeploy's pool_mode 0, a max from -FLT_MAX
        a = dict(output_height=ph, output_width=pw, sampling_ratio=sr, aligned=aligned,
                 pool_mode=0, finest_scale=4, featmap_strides=(1.0, 2.0))
        args = (rois, X, X[:, :, ::2, ::2].copy())
        kernel, definition = ops.multi_level_roi_align, D.multi_level_roi_align
    with _every_sample():
        want = definition(*args, **a)
    with mock.patch.object(sampling, "SAMPLES_PER_PIXEL", per_pixel):
        assert_close(kernel(*args, **a), want, True)
        assert_close(definition(*args, **a), want, True)
    if op == "mmcv max":
        assert_close(want, literal.mmcv_roi_align(X, rois, **a), True)


@pytest.mark.parametrize("in_place", [True, False])
def test_roi_align_gives_the_same_bits_on_every_run_of_shared_boxes(in_place):
    """Two threads share the boxes (parallel.for_ranges); whichever thread takes which box,
    each run gives the same bits (boxes of every shape, wider and taller, some off the
    map), from the crops in place and from the NHWC copy."""
    from ort_roi.kernels.cpu.parallel import set_num_threads

    rng = np.random.default_rng(5)
    X = rng.standard_normal((1, 64, 40, 56)).astype(np.float32)
    corner = rng.uniform(-20, 220, (80, 2))
    side = np.exp(rng.uniform(np.log(4), np.log(200), (80, 2)))
    boxes = np.concatenate([corner, corner + side], 1).astype(np.float32)
    a = dict(pooled_height=14, pooled_width=14, spatial_scale=0.25, sampling_ratio=0,
             aligned=1)
    old = set_num_threads(2)
    try:
        with force(align="crops", crops_in_place=in_place):
            first = ops.roi_align(X, boxes, np.array([80]), **a)
            for _ in range(8):
                np.testing.assert_array_equal(ops.roi_align(X, boxes, np.array([80]), **a),
                                              first)
    finally:
        set_num_threads(old)
    assert_close(first, D.roi_align(X, boxes, np.array([80]), **a), False)
