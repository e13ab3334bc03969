"""ort_roi.paddle_export on Paddle's tensor indexing that paddle2onnx 2.1 gets wrong or aborts on
(the child rewrites them; PaddleDetection's Mask R-CNN needs both): ``x[i, j]`` by tensors
(``broadcast_tensors``, which paddle2onnx aborts on, then ``gather_nd``) and ``paddle.gather``
by an index of shape [N, 1] (paddle2onnx's ONNX Gather keeps the 1: one dimension too many).
Plain onnxruntime sessions against Paddle's own output, bit for bit."""

from __future__ import annotations

import importlib.util

import numpy as np
import onnxruntime as ort
import pytest

import ort_roi

NO_EXPORTER = any(importlib.util.find_spec(m) is None for m in ("paddle2onnx", "paddle"))
pytestmark = pytest.mark.skipif(NO_EXPORTER,
                                reason="needs paddle2onnx: pip install '.[paddle]'")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    import paddle

    class Index(paddle.nn.Layer):
        def forward(self, x, i, j, idx):
            return (x[i, j],  # [N] and [1] broadcast: broadcast_tensors, gather_nd
                    paddle.gather(x, idx, axis=0), paddle.gather(x, idx, axis=1),
                    paddle.gather(x, idx, axis=-1))

    spec = [paddle.static.InputSpec([None, 5, 3, 4], "float32", "x"),
            paddle.static.InputSpec([None], "int32", "i"),
            paddle.static.InputSpec([1], "int32", "j"),
            paddle.static.InputSpec([None, 1], "int32", "idx")]
    prefix = str(tmp_path_factory.mktemp("paddle_index") / "index")
    paddle.disable_static()
    paddle.jit.save(paddle.jit.to_static(Index(), input_spec=spec, full_graph=True), prefix,
                    input_spec=spec)
    model = ort_roi.paddle_export(prefix, prefix + ".onnx")
    return prefix, model


@pytest.mark.parametrize("i, idx", [([0, 2, 5], [[3], [0], [2]]), ([4], [[1]]), ([], [])],
                         ids=["three", "one", "empty"])
def test_indexing_equals_paddle(exported, i, idx):
    import paddle

    prefix, model = exported
    assert "Tile" in {n.op_type for n in model.graph.node}  # broadcast_tensors rewritten
    x = np.random.default_rng(0).standard_normal((6, 5, 3, 4)).astype(np.float32)
    f = {"x": x, "i": np.array(i, np.int32), "j": np.array([4], np.int32),
         "idx": np.array(idx, np.int32).reshape(-1, 1)}
    got = ort.InferenceSession(prefix + ".onnx", ort_roi.session_options()).run(None, f)
    paddle.disable_static()
    layer = paddle.jit.load(prefix)
    want = layer(*(paddle.to_tensor(f[k]) for k in ("x", "i", "j", "idx")))
    assert len(got) == len(want) == 4
    # an empty index: Paddle's static program (jit.load, Paddle Inference) gives [0, 5, 3, 4]
    # for every axis, where dygraph gives x's shape with the axis 0 (as onnxruntime does)
    checked = 4 if idx else 2
    for g, w in zip(got[:checked], want[:checked]):
        w = w.numpy()
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_array_equal(g, w)
    assert got[0].shape == (len(i), 3, 4) and got[1].shape == (len(idx), 5, 3, 4)
