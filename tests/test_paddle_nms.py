"""export-paddle's ONNX form of Paddle's multiclass_nms3 (boxes [M, C, 4], scores [M, C], one
image) against Paddle's own CPU kernel, bit for bit: boxes on a coarse grid (equal coordinates,
boxes that touch), many of zero area (Paddle: two that touch have IoU 0 / 0 = NaN, the later one
suppressed), tied scores, keep_top_k cutting through ties, a background label. Live: skips
without paddle (pip install '.[paddle]')."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from ort_roi.export.paddle_cuts import multiclass_nms3

paddle = pytest.importorskip("paddle", reason="needs paddle: pip install '.[parity]'")


def _attrs(keep_top_k: int, background_label: int, nms_threshold: float = 0.5) -> dict:
    return {"score_threshold": 0.05, "nms_top_k": -1, "keep_top_k": keep_top_k,
            "nms_threshold": nms_threshold, "normalized": True, "nms_eta": 1.0,
            "background_label": background_label}


def _onnx_nms(a: dict, boxes: np.ndarray, scores: np.ndarray) -> list[np.ndarray]:
    nodes = multiclass_nms3(a, ["boxes", "scores"], ["out", "index", "num"], [3, 2], "nms")
    graph = helper.make_graph(
        nodes, "nms",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [None, None, 4]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, [None, None])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None),
         helper.make_tensor_value_info("index", TensorProto.INT32, None),
         helper.make_tensor_value_info("num", TensorProto.INT32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"boxes": boxes, "scores": scores})


def _paddle_nms(a: dict, boxes: np.ndarray, scores: np.ndarray) -> list[np.ndarray]:
    out, index, num = paddle._C_ops.multiclass_nms3(
        paddle.to_tensor(boxes), paddle.to_tensor(scores),
        paddle.to_tensor(np.array([boxes.shape[0]], np.int32)), a["score_threshold"],
        a["nms_top_k"], a["keep_top_k"], a["nms_threshold"], a["normalized"], a["nms_eta"],
        a["background_label"])
    return [out.numpy(), index.numpy(), num.numpy()]


def _case(seed: int, m: int, c: int, zero_frac: float) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    xy = rng.integers(0, 12, (m, c, 2)).astype(np.float32)
    wh = rng.integers(0 if zero_frac else 1, 5, (m, c, 2)).astype(np.float32)  # 0: none
    zero = rng.random((m, c)) < zero_frac  # a zero width, height or both
    which = rng.integers(0, 3, (m, c))
    wh[..., 0] = np.where(zero & (which != 1), 0, wh[..., 0])
    wh[..., 1] = np.where(zero & (which != 0), 0, wh[..., 1])
    boxes = np.concatenate([xy, xy + wh], axis=2) * np.float32(0.5)
    scores = (rng.integers(0, 20, (m, c)) / 20).astype(np.float32)  # ties
    return boxes, scores


@pytest.mark.parametrize("seed,m,c,zero_frac,keep,bg", [
    (0, 60, 3, 0.5, 40, -1), (1, 200, 5, 0.3, 100, 0), (2, 120, 4, 0.9, -1, -1),
    (3, 300, 2, 0.0, 50, -1), (5, 40, 3, 0.0, -1, -1), (4, 80, 6, 1.0, 30, 2)])
def test_multiclass_nms3_form_equals_paddle(seed, m, c, zero_frac, keep, bg):
    boxes, scores = _case(seed, m, c, zero_frac)
    a = _attrs(keep, bg)
    got, want = _onnx_nms(a, boxes, scores), _paddle_nms(a, boxes, scores)
    assert want[0].shape[0] > 5
    for g, w in zip(got, want):
        assert g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)


def test_zero_area_boxes_that_touch_are_suppressed_as_paddle_does():
    # class 0: three horizontal segments on y = 1: [0, 2], [2, 4] (touches the first at x = 2)
    # and [5, 6] (touches neither); a point at (6, 1) touches the third
    boxes = np.array([[0, 1, 2, 1], [2, 1, 4, 1], [5, 1, 6, 1], [6, 1, 6, 1]],
                     np.float32)[:, None, :]
    scores = np.array([[0.9], [0.8], [0.7], [0.6]], np.float32)
    a = _attrs(-1, -1)
    got, want = _onnx_nms(a, boxes, scores), _paddle_nms(a, boxes, scores)
    # Paddle keeps the 1st and 3rd
    np.testing.assert_array_equal(want[0][:, 1], np.float32([0.9, 0.7]))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
