"""Small calls (issue 63): the scalar paths a W6-sized call takes give the bits of the array
paths they stand in for, on a few hundred random small calls each, with the inputs that
break such code (degenerate, reversed and off-map boxes, .5 ties, tiny fractions, huge
values, zeros of both signs and NaN in the map, float32 and float64); the fast accepts of
the checks leave every error as it was. The small path the bridge tries before each kernel
(``Op.small``, kernels/small.py) gives the kernel's output bit for bit or declines, directly
and through real sessions, and every check a W6-sized call can fail still fails there with
the kernel's words."""

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


@pytest.mark.parametrize("path", ["pool_max_few", "_pool_max_bins"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_max_pool_few_bins_give_pool_max_bits(dtype, path, monkeypatch):
    """The few bins' paths (scalar bins; a max per bin in Python's numbers, pool_max_few, or
    by NumPy, _pool_max_bins) against roi_pool_bins and pool_max (arrays), on maps with
    zeros of both signs and NaN: the same output, bit for bit, wherever they answer (a max
    of 0 or NaN they cannot promise goes to the arrays)."""
    monkeypatch.setattr(max_pool_kernel, "FEW_MAXIMA", 10**6)  # (exact at any size)
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
            few = (max_pool_kernel.pool_max_few(X, batch.tolist(), boxes.ravel().tolist(), ph,
                                                pw, scale) if path == "pool_max_few" else
                   max_pool_kernel._pool_max_bins(X, batch, boxes, ph, pw, scale))
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
    assert bench_small.category("/x/ort_roi/kernels/small.py") == "kernel"
    assert bench_small.category("/x/ort_roi/runtime/bridge.py") == "bridge"
    assert bench_small.category("/x/numpy/_core/fromnumeric.py") is None
    X = np.ones((1, 1, 4, 4), np.float32)
    share = bench_small.breakdown(lambda: ops.roi_align(X, np.zeros((1, 4), np.float32),
                                                        np.array([1])), calls=50)
    assert share["checks"] > 0 and share["kernel"] > 0 and share["geometry"] > 0


# --- the small path the bridge tries first (Op.small, kernels/small.py) ------------------------

SMALL_OPS = ("RoIAlign", "RoiAlign", "RoIPool", "ROIPooling", "PSROIPool")


def _small_call(rng, op: str, dtype):
    """(inputs, attributes) of one random small call of ``op``: maps with NaN, inf and zeros
    of both signs, the boxes of ``_boxes`` (off the map, reversed, .5 ties, huge), every
    image count (some zero), every geometry and grid."""
    N, C, H, W, R = (int(v) for v in rng.integers(1, [3, 4, 7, 7, 5]))
    ph, pw = (int(v) for v in rng.integers(1, 4, 2))
    if op == "PSROIPool":  # one channel per output channel and bin
        C *= ph * pw
    X = rng.standard_normal((N, C, H, W)).astype(dtype)
    kind = rng.integers(6)
    if kind == 0:
        X.flat[rng.integers(X.size)] = rng.choice([np.nan, np.inf, -np.inf])
    elif kind in (1, 2):
        X[X < 0.3] = 0.0 if kind == 1 else -0.0
    elif kind == 3:
        X[X < 0.3] = rng.choice([0.0, -0.0], int((X < 0.3).sum()))
    boxes = _boxes(rng, R, dtype)
    counts = np.bincount(rng.integers(0, N, R), minlength=N).astype(rng.choice([np.int32, np.int64]))
    batch = np.repeat(np.arange(N), counts)
    scale = float(np.float32(rng.choice([1.0, 0.5, 0.25, 1 / 3, 2.0, 1e30])))
    if op == "RoIAlign":
        return (X, boxes, counts), dict(pooled_height=ph, pooled_width=pw, spatial_scale=scale,
                                        sampling_ratio=int(rng.choice([-1, 0, 1, 2, 3])),
                                        aligned=int(rng.integers(2)))
    if op == "RoiAlign":
        return (X, boxes, batch.astype(counts.dtype)), dict(
            output_height=ph, output_width=pw, spatial_scale=scale,
            sampling_ratio=int(rng.choice([0, 1, 2, 3])),
            coordinate_transformation_mode=str(rng.choice(["half_pixel", "output_half_pixel"])),
            mode=str(rng.choice(["avg", "avg", "max"])))
    if op == "RoIPool":
        return (X, boxes, counts), dict(pooled_height=ph, pooled_width=pw, spatial_scale=scale)
    if op == "PSROIPool":
        return (X, boxes, counts), dict(output_channels=C // (ph * pw), pooled_height=ph,
                                        pooled_width=pw, spatial_scale=scale)
    method = str(rng.choice(["max", "bilinear"]))
    if method == "bilinear" and rng.integers(2):  # normalized boxes, some past the edges
        boxes = np.where(rng.integers(0, 3, (R, 4)) == 0, rng.choice([0.0, 0.5, 1.0], (R, 4)),
                         rng.uniform(-0.2, 1.2, (R, 4))).astype(dtype)
    rois = np.concatenate([batch[:, None].astype(dtype), boxes], 1)
    return (X, rois), dict(pooled_h=ph, pooled_w=pw, spatial_scale=scale, method=method)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", SMALL_OPS)
def test_the_small_path_gives_the_kernels_bits_or_declines(op, dtype):
    """Each op's small path (``Op.small``, called as the bridge calls it: the node's resolved
    attributes) against its kernel on random small calls: where it answers, the kernel's
    output bit for bit (dtype, shape, every bit); where the kernel refuses the input, it
    declines (the kernel then raises, as before). It answers most float32 calls (float64:
    the max pooling ops; RoIAlign's scalar weights are float32's)."""
    from ort_roi.ops import entry, kernel
    from ort_roi.spec import DOMAIN

    spec = next(s for s in ops.SPECS + tuple(f.spec for f in ops.FORMS)
                if s.name == op and s.domain == DOMAIN)
    small, kern = entry(spec).small, kernel(spec)
    rng = np.random.default_rng(6300 + SMALL_OPS.index(op))
    answered = 0
    for _ in range(CALLS):
        inputs, attrs = _small_call(rng, op, dtype)
        y = small(*inputs, **spec.resolve(attrs))
        try:
            want = kern(*inputs, **attrs)
        except ort_roi.RoiOpError:
            assert y is None, (inputs, attrs)
            continue
        if y is None:
            continue
        answered += 1
        assert y.dtype == want.dtype and y.shape == want.shape, (inputs, attrs)
        assert np.array_equal(_bits(y), _bits(want)), (inputs, attrs, y, want)
    if dtype == np.float64 and op in ("RoIAlign", "RoiAlign"):
        assert answered == 0
    else:
        assert answered > CALLS // 8, answered


def _session(op: str, inputs, attrs):
    """A plain onnxruntime session of the one-node model, and its feed."""
    import onnxruntime as ort

    from ort_roi import builders

    floats = [a.dtype for a in inputs if a.dtype.kind == "f"]
    ints = [a.dtype for a in inputs if a.dtype.kind == "i"] or [np.dtype(np.int64)]
    m = builders.single_op_model(op, floats[0], ints[0], **attrs)
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    return sess, dict(zip([i.name for i in sess.get_inputs()], inputs))


@pytest.mark.parametrize("op", SMALL_OPS)
def test_a_session_takes_the_small_path_with_the_kernels_output(op, monkeypatch):
    """Through the real bridge (a plain onnxruntime session, the attributes as the node
    holds them): random small calls give the kernel's output bit for bit, most of them
    by the small path (counted where the bridge takes it)."""
    from ort_roi.ops import entry, kernel
    from ort_roi.runtime import bridge
    from ort_roi.spec import DOMAIN

    taken = []
    real = bridge._small
    monkeypatch.setattr(bridge, "_small", lambda *a: taken.append(real(*a)) or taken[-1])
    kern = kernel(entry((DOMAIN, op)).spec)
    rng = np.random.default_rng(63)
    runs = 0
    for _ in range(16):
        inputs, attrs = _small_call(rng, op, np.float32)
        inputs[0][...] = np.nan_to_num(inputs[0])  # (finite maps)
        attrs.update({"mode": "avg"} if "mode" in attrs else {})  # (max: the kernel's alone)
        try:
            want = kern(*inputs, **attrs)
        except ort_roi.RoiOpError:
            continue
        sess, feed = _session(op, inputs, attrs)
        y = sess.run(None, feed)[0]
        runs += 1
        assert np.array_equal(_bits(y), _bits(want)), (inputs, attrs)
    assert len(taken) == runs
    assert sum(t is not None for t in taken) > runs // 4, taken


def test_w6_through_a_session_takes_the_small_path(monkeypatch):
    """``ort-roi bench --small``'s W6 RoIAlign and ROIPooling calls are the small path's."""
    from ort_roi.cli import bench_small
    from ort_roi.runtime import bridge

    taken = []
    real = bridge._small
    monkeypatch.setattr(bridge, "_small", lambda *a: taken.append(real(*a)) or taken[-1])
    for label, ours, _ in bench_small.cases()[:4]:
        taken.clear()
        ours()
        assert len(taken) == 1 and taken[0] is not None, label


def _w6_inputs(op: str):
    """A W6-sized good call of ``op``: (inputs, attributes)."""
    X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    boxes = np.array([[0, 0, 2, 2], [1, 1, 3, 3]], np.float32)
    if op == "ROIPooling":
        return [X, np.concatenate([np.zeros((2, 1), np.float32), boxes], 1)], \
            dict(pooled_h=1, pooled_w=1, spatial_scale=1.0)
    if op == "RoiAlign":
        return [X, boxes, np.zeros(2, np.int64)], dict(output_height=1, output_width=1)
    if op == "PSROIPool":
        return [X, boxes, np.array([2], np.int32)], dict(output_channels=1, pooled_height=1,
                                                         pooled_width=1)
    return [X, boxes, np.array([2], np.int32)], dict(pooled_height=1, pooled_width=1)


def _spoiled(op: str):
    """(what is spoiled, inputs, attributes) of W6-sized calls a check refuses: each check
    of the op's inputs and an attribute."""
    cases = []
    for what, spoil in [
            ("a NaN corner", lambda i: i[1].__setitem__((1, -1), np.nan)),
            ("an infinite corner", lambda i: i[1].__setitem__((0, -2), np.inf)),
            ("boxes of another dtype", lambda i: i.__setitem__(1, i[1].astype(np.float64))),
            ("boxes of rank 1", lambda i: i.__setitem__(1, i[1].ravel())),
            ("a map of rank 3", lambda i: i.__setitem__(0, i[0][0])),
            ("an integer map", lambda i: i.__setitem__(0, i[0].astype(np.int32)))]:
        inputs, attrs = _w6_inputs(op)
        spoil(inputs)
        cases.append((what, inputs, attrs))
    if op == "PSROIPool":  # one channel per output channel and bin
        inputs, attrs = _w6_inputs(op)
        cases.append(("two channels for one", [np.concatenate([inputs[0]] * 2, 1), *inputs[1:]],
                      attrs))
    if op in ("RoIAlign", "RoiAlign"):  # (max pooling takes any finite box)
        inputs, attrs = _w6_inputs(op)
        inputs[1][0, [0, 2]] = -3e38, 3e38
        cases.append(("an overflowing size", inputs, attrs))
    inputs, attrs = _w6_inputs(op)
    if op == "ROIPooling":
        for v in (1.0, 0.5, -1.0):
            i, a = _w6_inputs(op)
            i[1][1, 0] = v
            cases.append((f"batch index {v}", i, a))
    elif op == "RoiAlign":
        for v in (1, -1):
            i, a = _w6_inputs(op)
            i[2][1] = v
            cases.append((f"batch index {v}", i, a))
        i, a = _w6_inputs(op)
        cases.append(("one index for two boxes", [*i[:2], i[2][:1]], a))
    else:
        for counts in ([1], [3], [-1, 3], [[2]]):
            i, a = _w6_inputs(op)
            cases.append((f"counts {counts}", [*i[:2], np.array(counts, np.int32)], a))
    attr = {"ROIPooling": "pooled_h", "RoiAlign": "output_height"}.get(op, "pooled_height")
    cases.append((f"{attr} 0", inputs, {**attrs, attr: 0}))
    cases.append(("scale -1", inputs, {**attrs, "spatial_scale": -1.0}))
    return cases


@pytest.mark.parametrize("op", SMALL_OPS)
def test_w6_sized_calls_fail_through_a_session_as_the_kernel_does(op):
    """Each check a W6-sized call can fail: the small path declines it, and through the front
    door (the small path in front of the kernel) the kernel's error comes, word for word
    (the front door adds where: the node and the tensor). The unspoiled call computes."""
    from ort_roi.ops import entry, kernel
    from ort_roi.spec import DOMAIN

    kern = kernel(entry((DOMAIN, op)).spec)
    inputs, attrs = _w6_inputs(op)
    sess = ort_roi.InferenceSession(builders_model(op, inputs, attrs))
    assert np.array_equal(sess.run(None, _feed(sess, inputs))[0], kern(*inputs, **attrs))
    for what, inputs, attrs in _spoiled(op):
        with pytest.raises(ort_roi.RoiOpError) as direct:
            kern(*inputs, **attrs)
        if "attribute" not in str(direct.value):
            assert entry((DOMAIN, op)).small(*inputs, **entry((DOMAIN, op)).spec.resolve(
                attrs)) is None, what
        if "dtype" in what or "integer" in what:  # (a session refuses these by the graph's types)
            continue
        with pytest.raises(ort_roi.RoiOpError) as session:  # (an attribute: by the builder)
            sess = ort_roi.InferenceSession(builders_model(op, inputs, attrs))
            sess.run(None, _feed(sess, inputs))
        said = str(direct.value).split(": ", 1)[1].split(": ", 1)[-1]
        assert said in str(session.value), (what, str(direct.value), str(session.value))


def builders_model(op: str, inputs, attrs):
    """The one-node model of ``op`` for these inputs' dtypes (float: the boxes')."""
    from ort_roi import builders

    ints = [a.dtype for a in inputs[2:]] or [np.dtype(np.int64)]
    return builders.single_op_model(op, inputs[1].dtype, ints[0], **attrs)


def _feed(sess, inputs) -> dict:
    return dict(zip([i.name for i in sess.get_inputs()], inputs))


def test_the_small_path_declines_forced_strategies_and_ignores_seterr(monkeypatch):
    """A forced strategy is the kernel's to run (tests force one alone); NumPy's seterr set
    to raise does not turn a small call into an error (the small path computes quietly, as
    the kernel): the kernel's output, through a session."""
    from ort_roi.kernels.cpu import strategies
    from ort_roi.ops import entry
    from ort_roi.spec import DOMAIN

    for op, force in (("RoIAlign", dict(align="crops")), ("RoIPool", dict(max_pool="table"))):
        inputs, attrs = _w6_inputs(op)
        spec = entry((DOMAIN, op)).spec
        assert entry(spec).small(*inputs, **spec.resolve(attrs)) is not None
        with strategies.force(**force):
            assert entry(spec).small(*inputs, **spec.resolve(attrs)) is None
    inputs, attrs = _w6_inputs("RoIAlign")
    inputs[1][0] = [1e-30, 1e-30, 2, 2]  # 1e-30 * 0.25 underflows to a subnormal
    attrs["spatial_scale"] = 0.25
    want = ops.roi_align(*inputs, **attrs)
    sess, feed = _session("RoIAlign", inputs, attrs)
    with np.errstate(all="raise"):
        y = sess.run(None, feed)[0]
    assert np.array_equal(_bits(y), _bits(want))


def test_nan_outputs_are_the_kernels():
    """Which NaN an operation of two NaNs gives (sign, payload) differs between NumPy's
    scalars and its arrays (found by review): where an output of bilinear ROIPooling or
    PSROIPool is NaN, the small path leaves the call to the kernel, whose bits come out."""
    from ort_roi.ops import entry
    from ort_roi.spec import DOMAIN

    X = np.broadcast_to(np.array([np.nan, -np.nan], np.float32).reshape(1, 1, 1, 2),
                        (1, 2, 1, 2)).copy()
    bilinear = entry((DOMAIN, "ROIPooling"))
    rois = np.array([[0, 0.5, 0, 0.5, 0]], np.float32)
    attrs = dict(pooled_h=1, pooled_w=1, spatial_scale=1.0, method="bilinear")
    assert bilinear.small(X, rois, **bilinear.spec.resolve(attrs)) is None
    ps = entry((DOMAIN, "PSROIPool"))
    args = (X, np.array([[0, 0, 1, 0]], np.float32), np.array([1], np.int64))
    attrs = dict(output_channels=2, spatial_scale=1.0, pooled_height=1, pooled_width=1)
    assert ps.small(*args, **ps.spec.resolve(attrs)) is None
    for op, inputs, attrs in (("ROIPooling", (X, rois), dict(pooled_h=1, pooled_w=1,
                                                             spatial_scale=1.0,
                                                             method="bilinear")),
                              ("PSROIPool", args, attrs)):
        sess, feed = _session(op, inputs, attrs)
        assert np.array_equal(_bits(sess.run(None, feed)[0]),
                              _bits(entry((DOMAIN, op)).kernel(*inputs, **attrs)))


def test_the_small_path_is_quiet():
    """No floating-point warning leaves the small path, as none leaves the kernel: inf and
    NaN in X through the products, a huge box whose samples overflow T (found by review: a
    fixed sampling ratio of 3 on a box of +-8e37), tiny maps under np.seterr(under="warn");
    each the kernel's output."""
    import warnings

    from ort_roi.ops import entry
    from ort_roi.spec import DOMAIN

    spec = entry((DOMAIN, "RoIAlign")).spec
    non_finite, _ = _w6_inputs("RoIAlign")
    non_finite[0][0, 0, 1, 1], non_finite[0][0, 0, 2, 2] = np.inf, -np.inf
    huge, _ = _w6_inputs("RoIAlign")
    huge[1][...] = [[-8e37, -8e37, 8e37, 8e37], [-8e37, -0.0, -0.5, -0.0]]
    tiny, _ = _w6_inputs("RoIAlign")
    tiny[0][...] = 1.2e-38
    for inputs, attrs in [(non_finite, dict(pooled_height=1, pooled_width=1)),
                          (huge, dict(pooled_height=3, pooled_width=1, sampling_ratio=3,
                                      aligned=0)),
                          (tiny, dict(pooled_height=2, pooled_width=2))]:
        with warnings.catch_warnings(), np.errstate(all="warn"):
            warnings.simplefilter("error")
            y = entry(spec).small(*inputs, **spec.resolve(attrs))
        assert y is not None
        assert np.array_equal(_bits(y), _bits(ops.roi_align(*inputs, **attrs))), attrs
    sess, feed = _session("RoIAlign", huge, dict(pooled_height=3, pooled_width=1,
                                                 sampling_ratio=3, aligned=0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = sess.run(None, feed)[0]
    assert np.isfinite(y).all()
