"""PaddleDetection's Faster R-CNN FPN, Cascade R-CNN FPN and Mask R-CNN FPN (ResNet-18, random
seeded weights with a trained model's load: tests/paddle_models.py) through
ort_roi.paddle_export into a plain onnxruntime session: their detections (and masks) equal
Paddle Inference's on the same image."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort

import ort_roi
from tests import paddle_models as models

pytestmark = models.needs_paddledet("GenerateProposals", "DistributeFpnProposals_L4")


def _exported(tmp_path, name: str, threads: int, **build):
    """The model ``models.build`` makes, exported by ort_roi.paddle_export: (the ONNX model,
    its kinds of ort_roi nodes, a plain session on it, Paddle Inference's run of the
    program)."""
    prefix = models.build(str(tmp_path / name), depth=18, pre_nms_top_n=300,
                          post_nms_top_n=300, **build)
    model = ort_roi.paddle_export(prefix, prefix + ".onnx")
    kinds = sorted(n.op_type for n in model.graph.node if n.domain == "ort_roi")
    sess = ort.InferenceSession(prefix + ".onnx", ort_roi.session_options())
    run, why = models.paddle_predictor(prefix, mkldnn=False, threads=threads)
    assert run is not None, why
    return model, kinds, sess, run


def test_faster_rcnn_fpn_detections_equal_paddle_inference(tmp_path):
    model, kinds, sess, run = _exported(tmp_path, "faster_rcnn_r18_fpn", threads=1)
    assert kinds == ["DistributeRoIAlign_L4"] + ["GenerateProposals"] * 5
    # multiclass_nms3: boxes of positive area, then those of zero area (Paddle's IoU 0 / 0)
    assert sum(n.op_type == "NonMaxSuppression" for n in model.graph.node) == 2
    for size, seed in (((256, 320), 0), ((224, 288), 1)):
        f = models.feeds(size, seed)
        got, want = sess.run(None, f), run(f)
        assert got[1].dtype == want[1].dtype == np.int32
        assert got[0].shape == want[0].shape and got[0].shape[0] > 50
        models.assert_detections_equal(got, want)


def test_cascade_rcnn_fpn_detections_equal_paddle_inference(tmp_path):
    """Cascade R-CNN: three box stages, each pooling the previous stage's boxes through the
    FPN levels (a CascadeHead patch for Paddle 3.3: tests/paddle_models.py), each fused."""
    model, kinds, sess, run = _exported(tmp_path, "cascade_rcnn_r18_fpn", threads=2,
                                        calibrate=(256, 320), arch="cascade_rcnn")
    assert kinds == ["DistributeRoIAlign_L4"] * 3 + ["GenerateProposals"] * 5
    # each stage's CascadeTwoFCHead flattens its pooled rois: Flatten, empty-safe
    assert sum(n.op_type == "Flatten" for n in model.graph.node) == 3
    for size, seed in (((256, 320), 0), ((224, 288), 1)):
        f = models.feeds(size, seed)
        got, want = sess.run(None, f), run(f)
        # keep_top_k rows and the row PaddleDetection's export_onnx post-processing appends
        assert got[0].shape == want[0].shape == (101, 6)
        models.assert_detections_equal(got, want)


def test_mask_rcnn_fpn_detections_and_masks_equal_paddle_inference(tmp_path):
    from tools.paddledet_e2e import mask_probe

    model, kinds, sess, run = _exported(
        tmp_path, "mask_rcnn_r18_fpn", threads=2, calibrate=(224, 288), arch="mask_rcnn",
        keep_top_k=40)  # 40 masks: Paddle runs the mask head's convs slowly
    # the box head's FPN RoI stage and the mask head's (on the final boxes), each fused
    assert kinds == ["DistributeRoIAlign_L4"] * 2 + ["GenerateProposals"] * 5
    # MaskPostProcess pastes with grid_sample (paddle2onnx's GridSample); broadcast_tensors
    # (MaskHead's mask_logit[index, labels]) became Tile nodes
    assert sum(n.op_type == "GridSample" for n in model.graph.node) == 1
    assert sum(n.op_type == "Tile" for n in model.graph.node) == 2
    for size, seed in (((224, 288), 0), ((192, 256), 1)):
        f = models.feeds(size, seed)
        got, want = sess.run(None, f), run(f)
        assert [g.dtype for g in got] == [w.dtype for w in want] == [np.float32, np.int32,
                                                                      np.int32]
        # keep_top_k rows and the row PaddleDetection's export_onnx post-processing appends
        assert got[0].shape == want[0].shape == (41, 6)
        models.assert_detections_equal(got, want)
        assert got[2].shape == want[2].shape == (got[0].shape[0], *size)
        assert set(np.unique(want[2])) == {0, 1} and want[2].sum() > 2000
        # a pixel may flip where Paddle's value before the 0.5 threshold is within float noise
        assert (got[2] != want[2]).sum() <= 4
    # before the threshold: onnxruntime within 1e-4 of Paddle, and a pixel differs only where
    # Paddle's value is nearer 0.5 than that difference
    prefix = str(tmp_path / "mask_rcnn_r18_fpn")
    res = mask_probe(prefix, prefix + ".onnx", f, str(tmp_path), threads=2, reference=want)
    assert res["probe_outputs_equal_program"]
    assert res["max_pre_threshold_diff"] <= 1e-4
    assert res["max_distance_from_threshold_at_differ"] <= res["max_pre_threshold_diff"]
    # the paste alone (onnxruntime's GridSample on Paddle's masks and boxes) is float rounding:
    # the difference before the threshold comes from the boxes and the mask head
    assert res["max_paste_alone_diff"] <= 1e-6
