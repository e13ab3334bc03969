"""Live parity: fresh random cases run through the installed frameworks and through ort_roi
in a plain onnxruntime session. Paddle / OpenVINO tests skip when those are not installed
(CI installs them: pip install '.[parity]'); onnxruntime's own MaxRoiPool and RoiAlign are
always there."""

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper, TensorProto

from tests import cases as C
from tests import oracles as O
from tests.conftest import ordered, run_plain, tolerance

SEEDS = (101, 202)
needs_paddle = pytest.mark.skipif(not O.paddle_available(),
                                  reason="needs paddle: pip install '.[parity]'")
needs_openvino = pytest.mark.skipif(not O.openvino_available(),
                                    reason="needs openvino: pip install '.[parity]'")


def _check(case, expected):
    got = run_plain(case["op"], ordered(case), case["attrs"])
    if case.get("nan_to_zero"):
        expected = np.nan_to_num(expected, nan=0.0)
    np.testing.assert_allclose(got, expected, **tolerance(case["op"], case["attrs"], got.dtype))


def _cases(make):
    out = [c for seed in SEEDS for c in make(seed)]
    return pytest.mark.parametrize("case", out, ids=[c["name"] for c in out])


@pytest.mark.parity
@needs_paddle
@_cases(lambda s: C.max_pool_cases("RoIPool", s) + C.psroi_cases(s) + C.roi_align_cases(s))
def test_paddle(case):
    _check(case, O.paddle(case))


@pytest.mark.parity
@needs_openvino
@_cases(lambda s: [c for c in C.max_pool_cases("ROIPooling", s)
                   if not c["tie"] and c["inputs"]["X"].dtype == np.float32] + C.bilinear_cases(s))
def test_openvino(case):
    expected = O.openvino_roi_pooling(case)
    got = run_plain(case["op"], ordered(case), case["attrs"])
    tol = tolerance(case["op"], case["attrs"], got.dtype)
    if got.dtype == np.float64:
        tol = dict(rtol=1e-5, atol=1e-5)  # OpenVINO's CPU plugin computes float64 in float32
    np.testing.assert_allclose(got, expected, **tol)


def _ort_native(node, inputs):
    names = list(inputs)
    g = helper.make_graph([node], "g",
                          [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), None)
                           for n, a in inputs.items()],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=9)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {n: inputs[n] for n in names})[0]


@_cases(lambda s: [c for c in C.max_pool_cases("ROIPooling", s)
                   if c["inputs"]["X"].dtype == np.float32 and len(c["inputs"]["rois"])])
def test_onnxruntime_maxroipool(case):
    a = case["attrs"]
    node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"],
                            pooled_shape=[a["pooled_h"], a["pooled_w"]],
                            spatial_scale=a["spatial_scale"])
    expected = _ort_native(node, dict(X=case["inputs"]["X"], rois=case["inputs"]["rois"]))
    np.testing.assert_array_equal(run_plain(case["op"], ordered(case), a), expected)


@_cases(lambda s: [c for c in C.roi_align_cases(s)
                   if c["inputs"]["X"].dtype == np.float32 and len(c["inputs"]["boxes"])
                   and c["attrs"]["sampling_ratio"] != 0])
def test_onnxruntime_roialign(case):
    a, i = case["attrs"], case["inputs"]
    keep = ~((i["boxes"][:, 2] < i["boxes"][:, 0]) | (i["boxes"][:, 3] < i["boxes"][:, 1]))
    if a["sampling_ratio"] <= 0:  # ORT raises on inverted boxes with adaptive sampling
        i = dict(X=i["X"], boxes=i["boxes"][keep],
                 boxes_num=np.array([np.sum(keep[np.repeat(np.arange(3), i["boxes_num"]) == n])
                                     for n in range(3)], i["boxes_num"].dtype))
    batch = np.repeat(np.arange(3), i["boxes_num"]).astype(np.int64)
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], mode="avg",
                            output_height=a["pooled_height"], output_width=a["pooled_width"],
                            sampling_ratio=max(a["sampling_ratio"], 0),
                            spatial_scale=a["spatial_scale"],
                            coordinate_transformation_mode="half_pixel" if a["aligned"]
                            else "output_half_pixel")
    expected = _ort_native(node, dict(X=i["X"], rois=i["boxes"], batch_indices=batch))
    got = run_plain("RoIAlign", i, a)
    if a["aligned"] and a["sampling_ratio"] <= 0:
        expected = np.nan_to_num(expected, nan=0.0)
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-4)
