"""mmdeploy::MMCVRoiAlign and mmcv::MMCVRoiAlign (mmcv 1.x, mmdeploy's TensorRT backend):
exported graphs run in a plain onnxruntime session.

Mode avg is checked against Paddle roi_align (the committed RoIAlign goldens, the boxes
turned into 5-column rois); mode max against a literal loop reading of mmcv's CPU kernel.
"""

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, checker, helper, shape_inference

from tests import literal
import ort_roi
from tests.conftest import load_golden, tolerance
from ort_roi import ops
from ort_roi.graph.schemas import SHAPE_INFERENCE

ROI_ALIGN_CASES = load_golden("roi_align")


DOMAINS = ("mmdeploy", "mmcv")


def mmdeploy_graph(dtype=TensorProto.FLOAT, domain="mmdeploy", **attrs):
    """A graph as mmdeploy (or mmcv 1.x: domain mmcv) writes it: every attribute explicit."""
    attrs = {"output_height": 7, "output_width": 7, "spatial_scale": 0.25,
             "sampling_ratio": 0, "mode": "avg", "aligned": 1, **attrs}
    node = helper.make_node("MMCVRoiAlign", ["input", "rois"], ["output"],
                            domain=domain, name="roi_extractor", **attrs)
    g = helper.make_graph([node], "mmdeploy_roi", [
        helper.make_tensor_value_info("input", dtype, [1, "C", "H", "W"]),
        helper.make_tensor_value_info("rois", dtype, ["R", 5])],
        [helper.make_tensor_value_info("output", dtype, ["R", "C", None, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(domain, 1)],
                             ir_version=9)


def _plain(model):
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("case", ROI_ALIGN_CASES, ids=[c["name"] for c in ROI_ALIGN_CASES])
def test_avg_matches_paddle_roi_align_on_five_column_rois(case, domain):
    X, boxes, counts = (case["inputs"][k] for k in ("X", "boxes", "boxes_num"))
    batch = np.repeat(np.arange(X.shape[0]), counts).astype(X.dtype)
    rois = np.concatenate([batch[:, None], boxes], 1)
    a = case["attrs"]
    m = mmdeploy_graph(helper.np_dtype_to_tensor_dtype(X.dtype), domain,
                       output_height=a.get("pooled_height", 1),
                       output_width=a.get("pooled_width", 1),
                       spatial_scale=a.get("spatial_scale", 1.0),
                       sampling_ratio=a.get("sampling_ratio", -1), mode="avg",
                       aligned=a.get("aligned", 1))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = X.shape[0]
    got = _plain(m).run(None, {"input": X, "rois": rois})[0]
    expected = case["expected"]
    if case["nan_to_zero"]:  # Paddle's 0/0, our (and mmcv's) 0
        expected = np.nan_to_num(expected, nan=0.0)
    np.testing.assert_allclose(got, expected, **tolerance("RoIAlign", a, X.dtype))


@pytest.mark.parametrize("domain", DOMAINS)
def test_exported_graph_checks_infers_and_runs(domain):
    m = mmdeploy_graph(domain=domain)
    checker.check_model(m, full_check=True)
    if SHAPE_INFERENCE:  # onnx >= 1.19
        out = shape_inference.infer_shapes(m, strict_mode=True).graph.output[0]
        dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
        assert dims == ["R", "C", 7, 7]
    X = np.random.default_rng(0).standard_normal((1, 4, 20, 24)).astype(np.float32)
    rois = np.array([[0, 4, 4, 60, 44], [0, 10, 0, 95, 79]], np.float32)
    got = _plain(m).run(None, {"input": X, "rois": rois})[0]
    want = ops.roi_align(X, rois[:, 1:], np.array([2]), pooled_height=7, pooled_width=7,
                             spatial_scale=0.25, sampling_ratio=0, aligned=1)
    np.testing.assert_array_equal(got, want)
    assert np.abs(got).sum() > 0


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([np.float32, np.float64]), st.integers(1, 3),
       st.integers(1, 3), st.sampled_from([0, 1, 2, 3]), st.sampled_from([0, 1]),
       st.sampled_from([1.0, 0.5, 0.25]))
def test_max_mode_matches_mmcv_loop(seed, dtype, ph, pw, sr, aligned, scale):
    rng = np.random.default_rng(seed)
    N, C, H, W = 2, 2, int(rng.integers(1, 8)), int(rng.integers(1, 8))
    X = rng.standard_normal((N, C, H, W)).astype(dtype)
    R = int(rng.integers(0, 4))
    xy = rng.uniform(-4, 16, (R, 2))
    wh = rng.uniform(-1, 12, (R, 2))  # some inverted boxes too
    rois = np.concatenate([rng.integers(0, N, (R, 1)), xy, xy + wh], 1).astype(dtype)
    a = dict(output_height=ph, output_width=pw, spatial_scale=scale, sampling_ratio=sr,
             mode="max", aligned=aligned)
    got = ops.mmcv_roi_align(X, rois, **a)
    want = literal.mmcv_roi_align(X, rois, **a)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("domain", DOMAINS)
def test_max_mode_in_a_plain_session(domain):
    X = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6) % 7
    rois = np.array([[1, 0, 0, 5, 5], [0, 2, 1, 4, 3]], np.float32)
    m = mmdeploy_graph(domain=domain, output_height=2, output_width=2, spatial_scale=1.0,
                       sampling_ratio=2, mode="max")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    got = _plain(m).run(None, {"input": X, "rois": rois})[0]
    want = literal.mmcv_roi_align(X, rois, output_height=2, output_width=2, sampling_ratio=2,
                                  mode="max")
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bad_rois_through_the_front_door():
    sess = ort_roi.InferenceSession(mmdeploy_graph())
    X = np.zeros((1, 2, 8, 8), np.float32)
    with pytest.raises(ort_roi.RoiOpError, match="MMCVRoiAlign.*'rois'.*batch index 3"):
        sess.run(None, {"input": X, "rois": np.array([[3, 0, 0, 4, 4]], np.float32)})


# --- MMDeploy's onnxruntime export of MMDetection's Faster / Mask R-CNN -----------------------
# ort_roi/data/mmdeploy_stage_{bbox,mask}_{11,16}.onnx: the SingleRoIExtractor stages cut by
# tools/mmdeploy_graphs.py from mmdeploy 1.3.1's whole-model exports (mmdet 3.3.0 R50-FPN,
# the bbox stage from Faster R-CNN, the mask stage from Mask R-CNN; opset 11 is MMDeploy's
# configs', 16 the first where RoiAlign keeps aligned itself).

STAGE_CASES = [(kind, opset) for kind in ("bbox", "mask") for opset in (11, 16)]
STAGE_POOLED = {"bbox": 7, "mask": 14}
STAGE_IMAGE = (160, 224)
STAGE_SCALES = (0.25, 0.125, 0.0625, 0.03125)
#: box sides either side of mmdet's level borders, floor(log2(side / 56 + 1e-6)) clipped to
#: 0..3: 1 from 112, 2 from 224, 3 from 448
STAGE_BORDERS = [111.99, 112.0, 112.01, 223.99, 224.0, 447.99, 448.0, 600.0]


def _stage(kind, opset):
    from importlib import resources

    import onnx
    return onnx.load_from_string(resources.files("ort_roi").joinpath(
        f"data/mmdeploy_stage_{kind}_{opset}.onnx").read_bytes())


def _stage_feed(seed=0, n=40, sides=(1.0, 400.0), borders=True):
    """Four FPN maps of a 160 x 224 image and rois [R, 5] over every level, boxes below one
    map pixel among them (sides from 1 px), and boxes on the level borders."""
    rng = np.random.default_rng(seed)
    feed = {f"feat{k}": rng.standard_normal((1, 256, int(STAGE_IMAGE[0] * s),
                                             int(STAGE_IMAGE[1] * s))).astype(np.float32)
            for k, s in enumerate(STAGE_SCALES)}
    xy = rng.uniform(0, 150, (n, 2))
    side = np.exp(rng.uniform(*np.log(sides), (n, 1)))
    boxes = [np.concatenate([xy, xy + side * rng.uniform(0.7, 1.4, (n, 2))], 1)]
    if borders:
        boxes.append(np.array([[4.0, 6.0, 4.0 + s, 6.0 + s] for s in STAGE_BORDERS]))
    boxes = np.concatenate(boxes)
    feed["rois"] = np.concatenate([np.zeros((len(boxes), 1)), boxes], 1).astype(np.float32)
    return feed


def _mmdet_levels(boxes):
    """mmdet's SingleRoIExtractor.map_roi_levels in float32, as the graph computes it."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    x = np.sqrt(w * h) / np.float32(56) + np.float32(1e-6)
    return np.clip(np.floor(np.log(x) / np.float32(np.log(2))), 0, 3).astype(int)


def _run_stage(model, feed, ours=True):
    so = ort_roi.session_options() if ours else ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feed)[0]


def _convert_stage(model, **kw):
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_roi.convert(model, report=True, **kw)


def _ops(model):
    return [(n.domain, n.op_type) for n in model.graph.node]


@pytest.mark.parametrize("kind,opset", STAGE_CASES)
def test_mmdeploy_stage_is_the_form_mmdeploy_writes(kind, opset):
    """What MMDeploy's single_roi_extractor__forward and roi_align symbolic write: per level
    NonZero(Equal(levels, l)) selecting rows of rois padded with 2 x 4 zero rois, RoiAligns
    on them (at opset 11 the boxes shifted by -0.5 / scale, aligned=True written out; at 16
    half_pixel), ScatterND merges into zeros padded the same way, and a Slice dropping the
    8 padding rows."""
    from onnx import numpy_helper
    m = _stage(kind, opset)
    ops = [op for _, op in _ops(m)]
    assert [ops.count(op) for op in ("RoiAlign", "ScatterND", "NonZero", "Slice")] == [4, 4, 4, 5]
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node
              if n.op_type == "Constant"}
    made = {o: n for n in m.graph.node for o in n.output}
    for l, ra in enumerate(n for n in m.graph.node if n.op_type == "RoiAlign"):
        a = {x.name: helper.get_attribute_value(x) for x in ra.attribute}
        assert a["spatial_scale"] == STAGE_SCALES[l] and a["output_height"] == STAGE_POOLED[kind]
        shift = made[ra.input[1]]
        if opset == 11:
            assert "coordinate_transformation_mode" not in a  # output_half_pixel
            assert shift.op_type == "Add" and consts[shift.input[1]].tolist() == [-0.5 / STAGE_SCALES[l]]
        else:
            assert a["coordinate_transformation_mode"] == b"half_pixel"
            assert shift.op_type == "Gather"
    last = made["roi_feats"]
    assert last.op_type == "Slice" and consts[last.input[1]].tolist() == [8]


@pytest.mark.parametrize("kind,opset", STAGE_CASES)
def test_mmdeploy_stage_computes_mmdets_levels_and_the_shifted_roi_align(kind, opset):
    """The native graph, in onnxruntime, is mmdet's level rule and per level RoIAlign: at
    opset 11 aligned=0 on boxes shifted by -0.5 / scale (so boxes under one map pixel are
    stretched to one, unlike mmcv's aligned=True); at 16 aligned=1."""
    f = _stage_feed()
    boxes = f["rois"][:, 1:]
    levels = _mmdet_levels(boxes)
    assert set(levels) == {0, 1, 2, 3}
    assert list(levels[-len(STAGE_BORDERS):]) == [0, 1, 1, 1, 2, 2, 3, 3]
    got = _run_stage(_stage(kind, opset), f, ours=False)
    p = STAGE_POOLED[kind]
    want = np.zeros_like(got)
    for l, s in enumerate(STAGE_SCALES):
        rows = levels == l
        b = boxes[rows] - np.float32(0.5 / s) if opset == 11 else boxes[rows]
        want[rows] = ops.roi_align(f[f"feat{l}"], b, np.array([rows.sum()]), pooled_height=p,
                                   pooled_width=p, spatial_scale=s, sampling_ratio=0,
                                   aligned=int(opset == 16))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
    if opset == 11:  # not mmcv's aligned=True where a box is under one map pixel
        tiny = np.flatnonzero((levels == 0) & ((boxes[:, 2] - boxes[:, 0]) * 0.25 < 1))
        assert len(tiny) > 0
        r = tiny[:1]
        v1 = ops.roi_align(f["feat0"], boxes[r], np.array([1]), pooled_height=p, pooled_width=p,
                           spatial_scale=0.25, sampling_ratio=0, aligned=1)
        assert np.abs(v1 - got[r]).max() > 1e-3


@pytest.mark.parametrize("kind,opset", STAGE_CASES)
def test_mmdeploy_stage_converts_and_computes_what_the_native_graph_does(kind, opset):
    native = _stage(kind, opset)
    conv, done = _convert_stage(native)
    assert _ops(conv).count(("ort_roi", "RoiAlign")) == 4
    assert _ops(conv).count(("", "ScatterND")) == 4  # not fused
    for f in (_stage_feed(), _stage_feed(1, 30, (2.0, 100.0), borders=False)):
        want, got = _run_stage(native, f, ours=False), _run_stage(conv, f)
        assert got.shape == (len(f["rois"]), 256, STAGE_POOLED[kind], STAGE_POOLED[kind])
        assert np.abs(want).reshape(len(want), -1).sum(1).min() > 0  # every row pooled
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
