"""mmdeploy's MMCVMultiLevelRotatedRoiAlign (TensorRT plugin; MMRotate's RotatedSingleRoIExtractor
under mmdeploy's TensorRT config), run through convert and the front door as
MultiLevelRotatedRoiAlign_L{L} (the bridge cannot register a variable number of inputs or list
attributes: a plain session on the graph as exported refuses it at creation, naming the fix).

Oracles: (a) a literal loop of the plugin's CUDA kernel (tests/literal.py: its level rule,
fma's, fmaxf's, float-to-int conversions and bilinear lerps); (b) for aligned=1, sampling_ratio
> 0, clockwise=0 and boxes at least a pixel wide on their level, MMCVRoIAlignRotated per level
as OpenVINO reads it from ONNX; for aligned=0, ort_roi's MMCVRoIAlignRotated (mmcv's) per level,
whose geometry the plugin's equals there.
"""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import ort_roi
from ort_roi import ops
from ort_roi.definitions.rotated import plugin_bilinear
from ort_roi.levels import mmdeploy_rotated_levels
from ort_roi.runtime.bridge import GUARD_ATTR
from tests import cases as C
from tests import literal
from tests import oracles as O
from tests.test_cupy import host_cupy, host_lib  # noqa: F401 - fixtures
from tests.test_multilevel import mmdeploy_node_model

needs_openvino = pytest.mark.skipif(not O.openvino_available(),
                                    reason="needs openvino: pip install '.[parity]'")

NODE = "MMCVMultiLevelRotatedRoiAlign"


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-9,
                                                                                 atol=1e-9)


def _plain(model):
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


def node_model(case, domain="mmdeploy"):
    """The node as mmdeploy's symbolic writes it (its attributes output_height, output_width,
    clockwise, sampling_ratio, roi_scale_factor, finest_scale, featmap_strides, aligned)."""
    return mmdeploy_node_model(case, domain, NODE)


def _split(case):
    a = dict(case["attrs"])
    args = list(case["inputs"].values())
    strides = [a.pop(f"stride_{i}") for i in range(len(args) - 1)]
    return args, dict(a, featmap_strides=strides)


def _literal(case):
    args, a = _split(case)
    return literal.mmdeploy_multi_level_rotated_roi_align(*args, **a)


CASES = C.rotated_multilevel_cases(12)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_matches_the_plugin_loop_through_convert_and_front_door(case):
    m = node_model(case)
    want = _literal(case)
    L = len(case["inputs"]) - 1
    conv = ort_roi.convert(m)
    node = conv.graph.node[0]
    assert (node.domain, node.op_type) == ("ort_roi", f"MultiLevelRotatedRoiAlign_L{L}")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert [attrs[f"stride_{i}"] for i in range(L)] == [float(s) for s in C.STRIDES[:L]]
    for got in (_plain(conv).run(None, case["inputs"])[0],
                ort_roi.InferenceSession(m).run(None, case["inputs"])[0]):
        assert got.shape == want.shape and got.dtype == want.dtype
        np.testing.assert_allclose(got, want, **_tol(want.dtype))
    assert want.size == 0 or (want != 0).any()


@pytest.mark.parametrize("seed", range(6))
def test_kernel_and_definition_match_the_plugin_loop_on_random_cases(seed):
    """Many random rows: every level, angles beyond +-pi, zero / negative / sub-pixel sizes,
    centres off the map, every attribute combination; float32 (the plugin's) and float64."""
    rng = np.random.default_rng(100 + seed)
    for k in range(8):
        L = int(rng.integers(1, 6))
        dtype = (np.float32, np.float64)[k % 2]
        boxes, feats = C.fpn_inputs(rng, L, 2, dtype, R=12, C=2)
        R = len(boxes)
        rois = np.stack([rng.integers(0, 2, R), rng.uniform(-60, 380, R),
                         rng.uniform(-60, 320, R), boxes[:, 2] - boxes[:, 0],
                         boxes[:, 3] - boxes[:, 1], rng.uniform(-4, 4, R)], 1)
        rois[rng.integers(0, R), 3:5] = 0
        rois[rng.integers(0, R), 3] *= -1
        a = dict(output_height=int(rng.integers(1, 4)), output_width=int(rng.integers(1, 4)),
                 sampling_ratio=int(rng.choice([0, 1, 2, -1])), aligned=int(rng.integers(2)),
                 clockwise=int(rng.integers(2)),
                 roi_scale_factor=float(rng.choice([-1.0, 0.0, 1.2, 0.7])),
                 finest_scale=int(rng.choice([56, 32])),
                 featmap_strides=[float(s) for s in C.STRIDES[:L]])
        rois = rois.astype(dtype)
        want = literal.mmdeploy_multi_level_rotated_roi_align(rois, *feats, **a)
        got = ops.multi_level_rotated_roi_align(rois, *feats, **a)
        np.testing.assert_allclose(got, want, **_tol(dtype))
        strides = a.pop("featmap_strides")
        d = ops.define(("ort_roi", f"MultiLevelRotatedRoiAlign_L{L}"), rois, *feats, **a,
                       **{f"stride_{i}": s for i, s in enumerate(strides)})
        np.testing.assert_allclose(d, want, **_tol(dtype))


def test_levels_are_the_plugins_rule_before_the_rescale():
    """sqrtf(w * h) / finest_scale + 1e-6 (the double literal), log2f, floor, clamp; every
    level is reached; a negative area's NaN is level 0; roi_scale_factor changes the size
    pooled, not the level: each map holds its level's index, each box one sample at its
    centre, so the output is the level the box was pooled from."""
    rng = np.random.default_rng(3)
    w, h = np.exp(rng.uniform(np.log(2), np.log(2000), (2, 300)))
    rois = np.stack([np.zeros(300), np.full(300, 8.0), np.full(300, 8.0), w, h,
                     rng.uniform(-4, 4, 300)], 1).astype(np.float32)
    rois[:4, 3:5] = [[56, 56], [112, 112], [-10, 30], [1e20, 1e20]]
    level = mmdeploy_rotated_levels(rois, 56, 4)
    assert set(level.tolist()) == {0, 1, 2, 3}
    assert level[:4].tolist() == [0, 1, 0, 3]  # log2(1 + 1e-6) floors to 0; NaN: 0; inf: L-1
    maps = [np.full((1, 1, 4, 4), i, np.float32) for i in range(4)]
    a = dict(output_height=1, output_width=1, sampling_ratio=1, roi_scale_factor=3.0)
    rows = rois[[0, 1, 2] + list(range(4, 300))]
    got = ops.multi_level_rotated_roi_align(rows, *maps, **a)
    np.testing.assert_array_equal(got.ravel(), mmdeploy_rotated_levels(rows, 56, 4))
    np.testing.assert_array_equal(
        literal.mmdeploy_multi_level_rotated_roi_align(rows[:40], *maps, **a), got[:40])


def test_the_plugins_arithmetic_where_it_is_not_mmcvs():
    """Sizes at least 1 also when aligned (mmcv keeps 0 and refuses negative ones); the
    centre one fma; the bilinear sample fma lerps equal to mmcv's weights up to rounding."""
    rng = np.random.default_rng(5)
    X = rng.standard_normal((1, 2, 16, 16)).astype(np.float32)
    zero = np.array([[0, 20, 24, 0, 0, 0.3]], np.float32)
    a = dict(output_height=2, output_width=2, sampling_ratio=2, aligned=1,
             featmap_strides=[4.0])
    fused = ops.multi_level_rotated_roi_align(zero, X, **a)
    np.testing.assert_allclose(fused, literal.mmdeploy_multi_level_rotated_roi_align(
        zero, X, **a), rtol=1e-6, atol=1e-6)
    mmcv = ops.mmcv_roi_align_rotated(X, zero, output_height=2, output_width=2,
                                      spatial_scale=0.25, sampling_ratio=2, aligned=1)
    assert not np.allclose(fused, mmcv)  # mmcv samples a 0x0 box at its centre only
    neg = zero.copy()
    neg[0, 3] = -8
    assert np.isfinite(ops.multi_level_rotated_roi_align(neg, X, **a)).all()
    with pytest.raises(ort_roi.RoiOpError, match="non-negative|negative"):
        ops.mmcv_roi_align_rotated(X, neg, output_height=2, output_width=2, spatial_scale=0.25,
                                   sampling_ratio=2, aligned=1)
    y, x = rng.uniform(-1.5, 17, (2, 5000)).astype(np.float32)
    from ort_roi.definitions.common import bilinear
    np.testing.assert_allclose(plugin_bilinear(X[0], y, x), bilinear(X[0], y, x), rtol=1e-5,
                               atol=1e-5)


def test_aligned_0_is_mmcv_roi_align_rotated_per_level():
    """aligned=0: the plugin's geometry is mmcv's (centre c*s either way, sizes at least 1 in
    both), so each row equals ort_roi's MMCVRoIAlignRotated on its level."""
    rng = np.random.default_rng(9)
    case = C.rotated_multilevel_cases(9)[6]  # 4 levels
    rois = case["inputs"]["rois"].astype(np.float64)
    feats = [f.astype(np.float64) for k, f in case["inputs"].items() if k != "rois"]
    rois[:, 5] = rng.uniform(-np.pi, np.pi, len(rois))
    for cw in (0, 1):
        a = dict(output_height=3, output_width=2, sampling_ratio=2, aligned=0, clockwise=cw)
        got = ops.multi_level_rotated_roi_align(rois, *feats, featmap_strides=C.STRIDES[:4],
                                                **a)
        level = mmdeploy_rotated_levels(rois, 56, 4)
        assert len(set(level.tolist())) >= 3
        for r in range(len(rois)):
            one = ops.mmcv_roi_align_rotated(feats[level[r]], rois[r:r + 1],
                                             spatial_scale=1 / C.STRIDES[level[r]], **a)
            np.testing.assert_allclose(got[r:r + 1], one, rtol=1e-12, atol=1e-12)


@pytest.mark.parity
@needs_openvino
@pytest.mark.parametrize("seed", [1, 2])
def test_aligned_1_is_openvinos_mmcv_roi_align_rotated_per_level(seed):
    """aligned=1, float32, clockwise=0, sampling_ratio > 0 (what OpenVINO computes as mmcv),
    boxes at least a pixel on their level (below it the plugin pools 1 x 1, mmcv the box):
    each level's rows through OpenVINO reading mmdeploy::MMCVRoIAlignRotated from ONNX equal
    the fused op (the plugin's one-fma centre is within rounding of mmcv's)."""
    rng = np.random.default_rng(seed)
    boxes, feats = C.fpn_inputs(rng, 4, 2, np.float32, R=60)
    boxes = boxes[3:]
    w, h = np.abs(boxes[:, 2] - boxes[:, 0]) + 4, np.abs(boxes[:, 3] - boxes[:, 1]) + 4
    R = len(boxes)
    rois = np.stack([rng.integers(0, 2, R), (boxes[:, 0] + boxes[:, 2]) / 2,
                     (boxes[:, 1] + boxes[:, 3]) / 2, w, h,
                     rng.uniform(-np.pi, np.pi, R)], 1).astype(np.float32)
    level = mmdeploy_rotated_levels(rois, 56, 4)
    assert set(level.tolist()) == {0, 1, 2, 3}
    for sr in (1, 2):
        a = dict(output_height=3, output_width=3, sampling_ratio=sr, aligned=1, clockwise=0)
        got = ops.multi_level_rotated_roi_align(rois, *feats, featmap_strides=C.STRIDES[:4],
                                                **a)
        for lv in range(4):
            idx = np.flatnonzero(level == lv)
            want = O.openvino_rotated(dict(
                inputs=dict(input=feats[lv], rois=rois[idx]),
                attrs=dict(a, spatial_scale=float(np.float32(1 / C.STRIDES[lv])))))
            np.testing.assert_allclose(got[idx], want, rtol=1e-4, atol=1e-4)


def test_nan_rows_never_abort():
    """The plugin gives a NaN row finite numbers (its fmaxf takes a NaN size as 1 and clamps
    NaN coordinates to pixel 0, its level is 0): ort_roi refuses the row instead, naming it
    (front door: RoiOpError; plain session: the op's NaN output, no abort)."""
    case = next(c for c in CASES if len(c["inputs"]) == 5 and len(c["inputs"]["rois"])
                and c["inputs"]["rois"].dtype == np.float32)
    feed = dict(case["inputs"])
    rois = feed["rois"].copy()
    rois[2, 1:] = np.nan
    want = _literal(dict(case, inputs=dict(feed, rois=rois)))
    assert np.isfinite(want).all()
    feat0 = feed["feat_0"][int(rois[2, 0])]
    np.testing.assert_allclose(want[2], np.broadcast_to(feat0[:, :1, :1], want[2].shape),
                               rtol=1e-6)  # every sample at pixel (0, 0) of level 0
    m = node_model(case)
    with pytest.raises(ort_roi.RoiOpError, match=r"MultiLevelRotatedRoiAlign_L4.*'rois'.*row 2"):
        ort_roi.InferenceSession(m).run(None, dict(feed, rois=rois))
    out = _plain(ort_roi.convert(m)).run(None, dict(feed, rois=rois))[0]
    assert out.shape == want.shape and np.isnan(out).all()


@pytest.mark.parametrize("levels", [4, 3])
def test_plain_session_refuses_the_exported_node_at_creation(levels):
    case = next(c for c in CASES if len(c["inputs"]) == levels + 1)
    m = node_model(case)
    with pytest.raises(Exception) as e:
        _plain(m)
    if levels == 4:
        assert GUARD_ATTR in str(e.value)
    assert ort_roi.InferenceSession(m).run(None, case["inputs"])


def test_bad_inputs_are_named():
    case = next(c for c in CASES if len(c["inputs"]) == 5 and len(c["inputs"]["rois"]))
    m = node_model(case)
    feed = dict(case["inputs"])
    with pytest.raises(ort_roi.RoiOpError,
                       match=r"MultiLevelRotatedRoiAlign_L4.*'rois'.*\[R, 6\].*\[14, 5\]"):
        ort_roi.InferenceSession(m).run(None, dict(feed, rois=feed["rois"][:, :5]))
    rois = feed["rois"].copy()
    rois[4, 0] = 2
    with pytest.raises(ort_roi.RoiOpError, match=r"'rois'.*row 4.*batch index 2.*\[0, 2\)"):
        ort_roi.InferenceSession(m).run(None, dict(feed, rois=rois))
    big = feed["rois"].copy()
    big[1, 3] = np.finfo(big.dtype).max
    with pytest.raises(ort_roi.RoiOpError, match=r"MultiLevelRotatedRoiAlign_L4.*'rois'.*row 1"):
        ops.multi_level_rotated_roi_align(big, *list(feed.values())[1:],
                                          featmap_strides=[0.5, 8.0, 16.0, 32.0],
                                          roi_scale_factor=4.0)
    neg = node_model(dict(case, attrs=dict(case["attrs"], stride_1=-8.0)))
    with pytest.raises(ort_roi.RoiOpError, match=r"stride_1.*> 0.*-8"):
        ort_roi.InferenceSession(neg)
    with pytest.raises(ort_roi.RoiOpError, match=r"featmap_strides.*one value per feature map"):
        ops.multi_level_rotated_roi_align(feed["rois"], *list(feed.values())[1:],
                                          featmap_strides=[4.0, 8.0])


@pytest.mark.parametrize("L", [1, 2, 4, 5])
def test_goes_back_to_its_node(L):
    case = next(c for c in C.rotated_multilevel_cases(41) if len(c["inputs"]) == L + 1)
    m = node_model(case)
    conv = ort_roi.convert(m)
    back = ort_roi.convert(conv, "onnx")
    node = back.graph.node[0]
    assert (node.domain, node.op_type) == ("mmdeploy", NODE)
    feed = case["inputs"]
    np.testing.assert_array_equal(ort_roi.InferenceSession(back).run(None, feed)[0],
                                  ort_roi.InferenceSession(m).run(None, feed)[0])


def test_generated_inputs_reach_every_level():
    """validate's generated rotated rows are drawn by the node's own rule, cycling over its
    levels (w, h of boxes sized for each level)."""
    from ort_roi.graph.inputs import generate_inputs

    case = next(c for c in CASES if len(c["inputs"]) == 5 and len(c["inputs"]["rois"]))
    for m in (node_model(case), ort_roi.convert(node_model(case))):
        rois = generate_inputs(m, r=8)["rois"]
        assert rois.shape == (8, 6)
        assert mmdeploy_rotated_levels(rois, 56, 4).tolist() == [0, 1, 2, 3] * 2


def test_the_node_oriented_rcnn_exports():
    """The node as mmdeploy 1.3.1 writes it for Oriented R-CNN / RoI Transformer (TensorRT
    config, checked on an export): aligned=1, clockwise=1, sampling_ratio=2, output 7 x 7,
    roi_scale_factor=1.0 (the rewriter's default: w, h times 1), finest_scale=56, strides
    4 .. 32; rois from a Reshape [R, 6], four FPN maps of 256 channels (8 here)."""
    rng = np.random.default_rng(66)
    feats = [rng.standard_normal((1, 8, 200 // s, 240 // s)).astype(np.float32)
             for s in (4, 8, 16, 32)]
    R = 50
    wh = np.exp(rng.uniform(np.log(8), np.log(600), (R, 2)))
    rois = np.stack([np.zeros(R), rng.uniform(0, 960, R), rng.uniform(0, 800, R), wh[:, 0],
                     wh[:, 1], rng.uniform(-np.pi / 2, np.pi / 2, R)], 1).astype(np.float32)
    attrs = dict(output_height=7, output_width=7, sampling_ratio=2, aligned=1, clockwise=1,
                 roi_scale_factor=1.0, finest_scale=56,
                 **{f"stride_{i}": float(s) for i, s in enumerate((4, 8, 16, 32))})
    case = dict(inputs=dict(rois=rois, **{f"feat_{i}": f for i, f in enumerate(feats)}),
                attrs=attrs)
    m = node_model(case)
    types = {a.name: a.type for a in m.graph.node[0].attribute}
    assert types["featmap_strides"] == 6 and types["roi_scale_factor"] == 1  # FLOATS, FLOAT
    assert set(mmdeploy_rotated_levels(rois, 56, 4).tolist()) == {0, 1, 2, 3}
    got = ort_roi.InferenceSession(m).run(None, case["inputs"])[0]
    np.testing.assert_allclose(got, _literal(case), rtol=1e-4, atol=1e-4)


def test_cuda_source_on_host_matches_numpy(host_cupy):
    """CuPy maps: each level's rows through MMCVRoIAlignRotated's CUDA step (its source built
    for the host, tests/fake_cupy.py), the output a device array equal to NumPy's."""
    for case in C.rotated_multilevel_cases(17)[4:10]:
        args, a = _split(case)
        rois, *feats = args
        got = ops.multi_level_rotated_roi_align(rois, *[host_cupy.asarray(f) for f in feats],
                                                **a)
        assert isinstance(got, host_cupy.ndarray)
        np.testing.assert_allclose(np.asarray(got),
                                   ops.multi_level_rotated_roi_align(rois, *feats, **a),
                                   **_tol(rois.dtype))
