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
