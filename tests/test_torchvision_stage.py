"""torchvision's RoI stage: MultiScaleRoIAlign exported by torch.onnx (TorchScript, opsets 11 to
17) is fused at convert into one PyramidRoIAlign node; ort_roi.torch_export writes the stage,
roi_align, roi_pool, ps_roi_align and ps_roi_pool as ort_roi nodes through both exporters.
Skipped without torch (pip install '.[torchvision]')."""

import io
import warnings
from collections import OrderedDict

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import ort_roi
from tests.graph_helpers import op_types

torch = pytest.importorskip("torch", reason="needs torchvision: pip install '.[torchvision]'")
tv = pytest.importorskip("torchvision",
                         reason="needs torchvision: pip install '.[torchvision]'")
from torchvision.ops import MultiScaleRoIAlign  # noqa: E402

IMAGE = (64, 80)  # H, W of the images the boxes live in
NAMES = ["0", "1", "2", "3"]


class Pooler(torch.nn.Module):
    """MultiScaleRoIAlign over a four-level pyramid (strides 4 to 32), two images."""

    def __init__(self, output_size=7, sampling_ratio=2):
        super().__init__()
        self.pool = MultiScaleRoIAlign(NAMES, output_size, sampling_ratio)

    def forward(self, f0, f1, f2, f3, boxes_a, boxes_b):
        feats = OrderedDict(zip(NAMES, (f0, f1, f2, f3)))
        return self.pool(feats, [boxes_a, boxes_b], [IMAGE, IMAGE])


def _inputs(seed=0, n_a=9, n_b=5, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    feats = [torch.randn(2, 4, IMAGE[0] // s, IMAGE[1] // s, generator=g, dtype=dtype)
             for s in (4, 8, 16, 32)]

    def boxes(n):
        xy = torch.rand(n, 2, generator=g) * torch.tensor([IMAGE[1], IMAGE[0]])
        wh = torch.exp(torch.rand(n, 2, generator=g) * 5.5) + 1  # 2 .. 250 px: every level
        b = torch.cat([xy - wh / 2, xy + wh / 2], 1).to(dtype)
        if n > 3:
            b[0] = torch.tensor([10, 10, 10, 10])  # zero size
            b[1] = torch.tensor([60, 50, 20, 10])  # inverted
            b[2] = torch.tensor([200, 150, 260, 300])  # off the image
        return b
    return (*feats, boxes(n_a), boxes(n_b))


def _feed(model, args):
    names = [i.name for i in model.graph.input]
    return dict(zip(names, [a.numpy() for a in args]))


def _export(module, args, opset, **kw):
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, opset_version=opset, dynamo=False,
                          input_names=["f0", "f1", "f2", "f3", "boxes_a", "boxes_b"],
                          dynamic_axes={"boxes_a": [0], "boxes_b": [0]}, **kw)
    return onnx.load_from_string(buf.getvalue())



@pytest.mark.parametrize("opset", [11, 12, 13, 14, 15, 16, 17])
def test_convert_fuses_the_exported_stage(opset):
    module = Pooler().eval()
    args = _inputs()
    native = _export(module, args, opset)
    assert ("", "ScatterElements") in op_types(native) and op_types(native).count(("", "RoiAlign")) == 4
    conv = ort_roi.convert(native)
    ops = op_types(conv)
    assert ops.count(("ort_roi", "PyramidRoIAlign_L4")) == 1
    assert ("", "ScatterElements") not in ops and ("", "RoiAlign") not in ops
    assert ("", "NonZero") not in ops  # the per-level selections are gone
    assert len(conv.graph.node) < len(native.graph.node) - 40
    feed = _feed(native, args)
    want = ort.InferenceSession(native.SerializeToString(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    got = ort.InferenceSession(conv.SerializeToString(), ort_roi.session_options(),
                               providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with torch.no_grad():
        eager = module(*args).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got, eager, rtol=1e-5, atol=1e-5)
    assert np.abs(got).sum() > 0
    # other box counts, one image without boxes: the same graph
    args2 = _inputs(seed=3, n_a=0, n_b=17)
    feed = _feed(native, args2)
    got = ort.InferenceSession(conv.SerializeToString(), ort_roi.session_options(),
                               providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, module(*args2).numpy(), rtol=1e-5, atol=1e-5)


def test_a_stage_that_does_not_match_exactly_is_left_as_it_is_and_said_why():
    native = _export(Pooler().eval(), _inputs(), 17)
    ra = [n for n in native.graph.node if n.op_type == "RoiAlign"][2]
    for a in ra.attribute:
        if a.name == "output_height":
            a.i = 5  # one level pools to another size: not torchvision's stage
    with pytest.warns(UserWarning, match="starts like torchvision's MultiScaleRoIAlign merge but "
                                         "does not match it exactly.*pools with"):
        conv = ort_roi.convert(native)
    assert ("", "ScatterElements") in op_types(conv)
    assert ("ort_roi", "PyramidRoIAlign_L4") not in op_types(conv)
    assert op_types(conv).count(("ort_roi", "RoiAlign")) == 4  # each RoiAlign still moved


def test_convert_without_fusion_and_back_to_standard_onnx():
    module = Pooler().eval()
    args = _inputs()
    native = _export(module, args, 17)
    assert ("ort_roi", "PyramidRoIAlign_L4") not in op_types(ort_roi.convert(native, fuse=False))
    conv = ort_roi.convert(native)
    back = ort_roi.convert(conv, "onnx")
    assert all(d == "" for d, _ in op_types(back))
    feed = _feed(native, args)
    got = ort.InferenceSession(back.SerializeToString(),
                               providers=["CPUExecutionProvider"]).run(None, feed)[0]
    with torch.no_grad():
        np.testing.assert_allclose(got, module(*args).numpy(), rtol=1e-5, atol=1e-5)


def test_front_door_fuses_too():
    module = Pooler().eval()
    args = _inputs()
    native = _export(module, args, 16)
    sess = ort_roi.InferenceSession(native)
    with torch.no_grad():
        np.testing.assert_allclose(sess.run(None, _feed(native, args))[0], module(*args).numpy(),
                                   rtol=1e-5, atol=1e-5)


def test_cli_convert_fuses_unless_told_not_to(tmp_path, capsys):
    from ort_roi.cli import main as cli

    src = tmp_path / "pooler.onnx"
    onnx.save(_export(Pooler().eval(), _inputs(), 17), src)
    assert cli.main(["convert", str(src), str(tmp_path / "fused.onnx")]) == 0
    assert "PyramidRoIAlign" in capsys.readouterr().out
    fused = onnx.load(tmp_path / "fused.onnx")
    assert op_types(fused).count(("ort_roi", "PyramidRoIAlign_L4")) == 1
    assert cli.main(["convert", str(src), str(tmp_path / "plain.onnx"), "--no-fuse"]) == 0
    plain = onnx.load(tmp_path / "plain.onnx")
    assert ("ort_roi", "PyramidRoIAlign_L4") not in op_types(plain)
    assert op_types(plain).count(("ort_roi", "RoiAlign")) == 4
    assert cli.main(["convert", str(tmp_path / "fused.onnx"), str(tmp_path / "back.onnx"),
                     "--to", "onnx"]) == 0
    assert all(d == "" for d, _ in op_types(onnx.load(tmp_path / "back.onnx")))


def test_front_door_without_fusion():
    module = Pooler().eval()
    args = _inputs()
    native = _export(module, args, 17)
    sess = ort_roi.InferenceSession(native, fuse=False)
    with torch.no_grad():
        np.testing.assert_allclose(sess.run(None, _feed(native, args))[0], module(*args).numpy(),
                                   rtol=1e-5, atol=1e-5)


class TwoPoolers(torch.nn.Module):
    """A box pooler (7 x 7) and a mask pooler (14 x 14) over the same maps and boxes, as in
    Mask R-CNN: two stages in one graph."""

    def __init__(self):
        super().__init__()
        self.box = MultiScaleRoIAlign(NAMES, 7, 2)
        self.mask = MultiScaleRoIAlign(NAMES, 14, 2)

    def forward(self, f0, f1, f2, f3, boxes_a, boxes_b):
        feats = OrderedDict(zip(NAMES, (f0, f1, f2, f3)))
        return (self.box(feats, [boxes_a, boxes_b], [IMAGE, IMAGE]),
                self.mask(feats, [boxes_a[:3], boxes_b], [IMAGE, IMAGE]))


def test_two_stages_in_one_graph_are_both_fused():
    module = TwoPoolers().eval()
    args = _inputs()
    native = _export(module, args, 17)
    conv = ort_roi.convert(native)
    assert op_types(conv).count(("ort_roi", "PyramidRoIAlign_L4")) == 2
    assert ("", "ScatterElements") not in op_types(conv)
    got = ort.InferenceSession(conv.SerializeToString(), ort_roi.session_options(),
                               providers=["CPUExecutionProvider"]).run(None, _feed(native, args))
    with torch.no_grad():
        want = module(*args)
    assert got[0].shape[2:] == (7, 7) and got[1].shape[2:] == (14, 14)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)
