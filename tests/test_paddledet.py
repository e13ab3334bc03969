"""PaddleDetection's Faster R-CNN FPN (ResNet-18, random seeded weights with a trained model's
load: tools/paddledet_e2e.py) through ort_roi.paddle_export into a plain onnxruntime session:
its detections equal Paddle Inference's on the same image."""

from __future__ import annotations

import importlib.util
import os
import sys

import numpy as np
import onnxruntime as ort
import pytest

import ort_roi
from ort_roi.ops import form

NEEDS = [m for m in ("paddle", "paddle2onnx", "ppdet") if importlib.util.find_spec(m) is None]
OPS = [n for n in ("GenerateProposals", "DistributeFpnProposals_L4")
       if form(ort_roi.DOMAIN, n) is None]
pytestmark = [
    pytest.mark.skipif(bool(NEEDS), reason="needs " + ", ".join(NEEDS) + ": pip install "
                       "'ort-roi[paddle]' and `pip install --no-deps paddledet==2.6.0` with its "
                       "imports (pyyaml typeguard tqdm scipy shapely terminaltables pycocotools "
                       "opencv-python-headless requests six matplotlib scikit-learn pandas)"),
    pytest.mark.skipif(bool(OPS), reason="ort_roi does not register " + ", ".join(OPS)),
]


@pytest.fixture(scope="module")
def e2e():
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "tools"))
    try:
        import paddledet_e2e
    finally:
        sys.path.pop(0)
    return paddledet_e2e


def test_faster_rcnn_fpn_detections_equal_paddle_inference(e2e, tmp_path):
    prefix = e2e.build(str(tmp_path / "faster_rcnn_r18_fpn"), depth=18, pre_nms_top_n=300,
                       post_nms_top_n=300)
    model = ort_roi.paddle_export(prefix, prefix + ".onnx")
    kinds = sorted(n.op_type for n in model.graph.node if n.domain == "ort_roi")
    assert kinds == ["DistributeRoIAlign_L4"] + ["GenerateProposals"] * 5
    # multiclass_nms3: boxes of positive area, then those of zero area (Paddle's IoU 0 / 0)
    assert sum(n.op_type == "NonMaxSuppression" for n in model.graph.node) == 2
    sess = ort.InferenceSession(prefix + ".onnx", ort_roi.session_options())
    run, why = e2e.paddle_predictor(prefix, mkldnn=False, threads=1)
    assert run is not None, why
    for size, seed in (((256, 320), 0), ((224, 288), 1)):
        f = e2e.feeds(size, seed)
        got, want = sess.run(None, f), run(f)
        assert got[1].dtype == want[1].dtype == np.int32
        np.testing.assert_array_equal(got[1], want[1])
        assert got[0].shape == want[0].shape and got[0].shape[0] > 50
        np.testing.assert_array_equal(got[0][:, 0], want[0][:, 0])  # labels
        np.testing.assert_allclose(got[0][:, 1:], want[0][:, 1:], rtol=0, atol=1e-4)
