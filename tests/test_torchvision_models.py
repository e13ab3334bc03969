"""Whole torchvision detection models, two images each, through both of ort_roi's paths:
exported natively (torch.onnx, TorchScript, opset 17) then ``ort_roi.convert``ed, and exported
by ``ort_roi.torch_export``. Each RoI stage must be one PyramidRoIAlign node, Mask R-CNN's
mask pasting and Keypoint R-CNN's decoding one node per image (no Loop, no ScatterElements
left), and every output equal to the native graph's within 1e-3 on images that were not the
export's. Small models (ResNet-18 FPN, MobileNet-v3 FPN, 128 x 144 images) with seeded
random weights carrying a trained model's load (tools/torchvision_e2e.py times the full-size
ones). Skips without torch (pip install '.[torchvision]')."""

import functools
import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import ort_roi

SIZE = (128, 144)
#: model -> the ort_roi nodes its converted and exported graphs hold (two images)
EXPECTED = {
    "faster_mobilenet": {"PyramidRoIAlign_L2": 1},
    "mask_resnet18": {"PyramidRoIAlign_L4": 2, "PasteMasks": 2},
    "keypoint_resnet18": {"PyramidRoIAlign_L4": 2, "HeatmapsToKeypoints": 2},
}


def _build(kind: str):
    torch = pytest.importorskip("torch",
                                reason="needs torchvision: pip install '.[torchvision]'")
    pytest.importorskip("torchvision",
                        reason="needs torchvision: pip install '.[torchvision]'")
    from torchvision.models import detection as D
    from torchvision.models.detection.backbone_utils import resnet_fpn_backbone

    torch.manual_seed(0)
    size = dict(min_size=min(SIZE), max_size=max(SIZE))
    if kind == "faster_mobilenet":
        m = D.fasterrcnn_mobilenet_v3_large_fpn(weights=None, weights_backbone=None,
                                                num_classes=3, **size)
    else:
        backbone = resnet_fpn_backbone(backbone_name="resnet18", weights=None,
                                       trainable_layers=5)
        m = (D.MaskRCNN(backbone, num_classes=3, **size) if kind == "mask_resnet18" else
             D.KeypointRCNN(backbone, num_classes=2, num_keypoints=5, **size))
    with torch.no_grad():  # a trained model's load: proposals on every level, ~100 detections
        m.rpn.head.bbox_pred.weight.zero_()
        m.rpn.head.bbox_pred.bias.zero_()
        cls = m.roi_heads.box_predictor.cls_score
        cls.weight.mul_(0.01)
        cls.bias.fill_(-8.0)
        cls.bias[1] = 8.0
    return m.eval()


@functools.lru_cache(maxsize=None)
def _graphs(kind: str) -> dict:
    torch = pytest.importorskip("torch",
                                reason="needs torchvision: pip install '.[torchvision]'")
    model = _build(kind)
    g = torch.Generator().manual_seed(3)
    images = [torch.rand(3, *SIZE, generator=g) for _ in range(2)]

    def export(fn):
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn(model, (images,), buf, opset_version=17, dynamo=False, input_names=["a", "b"])
        return onnx.load_from_string(buf.getvalue())

    native = export(torch.onnx.export)
    return {"native": native, "converted": ort_roi.convert(native),
            "torch_export": export(ort_roi.torch_export)}


def _run(model, feed, ours: bool):
    so = ort_roi.session_options() if ours else ort.SessionOptions()
    so.log_severity_level = 3  # the native Loops warn about their outputs' shapes
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feed)


@pytest.mark.parametrize("kind", list(EXPECTED))
def test_convert_and_torch_export_own_every_roi_stage_and_equal_the_native_graph(kind):
    graphs = _graphs(kind)
    native_ops = [n.op_type for n in graphs["native"].graph.node]
    assert "ScatterElements" in native_ops
    assert ("Loop" in native_ops) == (kind != "faster_mobilenet")
    rng = np.random.default_rng(4)
    feed = {n: rng.random((3, *SIZE), dtype=np.float32) for n in ("a", "b")}
    want = _run(graphs["native"], feed, ours=False)
    assert len(want[0]) > 10  # detections to compare
    for how in ("converted", "torch_export"):
        nodes = graphs[how].graph.node
        ours = [n.op_type for n in nodes if n.domain == "ort_roi"]
        assert {op: ours.count(op) for op in set(ours)} == EXPECTED[kind], how
        assert not {"Loop", "ScatterElements"} & {n.op_type for n in nodes}, how
        got = _run(graphs[how], feed, ours=True)
        assert [g.shape for g in got] == [w.shape for w in want], how
        for g, w in zip(got, want):
            np.testing.assert_allclose(g, w, atol=1e-3, err_msg=how)
