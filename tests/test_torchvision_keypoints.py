"""Keypoint R-CNN's decoding (torchvision roi_heads.heatmaps_to_keypoints) as one
HeatmapsToKeypoints node: the kernel against its definition and against onnxruntime's own
Resize + ArgMax (torchvision's exported Loop, bit for bit), convert's fusion of that Loop at
opsets 11 to 17, ort_roi.torch_export through both exporters, and the op's bad inputs. The
torch parts skip without torch (pip install '.[torchvision]')."""

import io
import json
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import ort_roi
from tests.defs import heatmaps_to_keypoints as definition
from ort_roi.graph.builders import single_op_model
from ort_roi.ops import heatmaps_to_keypoints as kernel

OP = "HeatmapsToKeypoints"


def _case(seed=0, R=7, K=5, H=12, W=10, dtype=np.float32):
    rng = np.random.default_rng(seed)
    maps = rng.standard_normal((R, K, H, W)).astype(dtype)
    xy = rng.uniform(-20, 200, (R, 2))
    wh = np.exp(rng.uniform(-1, 5, (R, 2)))  # 0.4 .. 150 px
    rois = np.concatenate([xy, xy + wh], 1).astype(dtype)
    if R >= 3:
        rois[0] = [10, 10, 10, 10]  # zero size: 1 x 1
        rois[1] = [60, 50, 20, 10]  # inverted: 1 x 1
        rois[2] = [3.25, 4.5, 3.5, 90.75]  # thin
    return maps, rois


def _ort_loop_reference(maps, rois):
    """What torchvision's exported graph computes, by onnxruntime's own nodes: per box a
    Resize (cubic, -0.75, half_pixel) to ceil(h) x ceil(w), ArgMax of each map, the score
    gathered, then the keypoint arithmetic in float32."""
    X = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, None, None, None])
    S = helper.make_tensor_value_info("s", onnx.TensorProto.INT64, [4])
    Y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    A = helper.make_tensor_value_info("a", onnx.TensorProto.INT64, None)
    nodes = [helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode="cubic",
                              coordinate_transformation_mode="half_pixel", cubic_coeff_a=-0.75),
             helper.make_node("Shape", ["y"], ["shape"]),
             helper.make_node("Constant", [], ["flat"], value=helper.make_tensor(
                 "flat", onnx.TensorProto.INT64, [3], [1, maps.shape[1], -1])),
             helper.make_node("Reshape", ["y", "flat"], ["yf"]),
             helper.make_node("ArgMax", ["yf"], ["a"], axis=2, keepdims=0)]
    m = helper.make_model(helper.make_graph(nodes, "g", [X, S], [Y, A]),
                          opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    f = np.float32
    keypoints = np.ones((len(rois), maps.shape[1], 3), f)
    scores = np.zeros((len(rois), maps.shape[1]), f)
    for r, (x1, y1, x2, y2) in enumerate(rois):
        w, h = max(x2 - x1, f(1)), max(y2 - y1, f(1))
        wc, hc = np.ceil(w), np.ceil(h)
        y, a = s.run(None, {"x": maps[r:r + 1], "s": np.array([1, maps.shape[1], hc, wc],
                                                               np.int64)})
        pos = a[0]
        x_int, y_int = pos % int(wc), pos // int(wc)
        keypoints[r, :, 0] = (f(0.5) + x_int.astype(f)) * (w / wc) + x1
        keypoints[r, :, 1] = (f(0.5) + y_int.astype(f)) * (h / hc) + y1
        scores[r] = y[0].reshape(maps.shape[1], -1)[np.arange(maps.shape[1]), pos]
    return keypoints, scores


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_kernel_equals_its_definition(dtype):
    maps, rois = _case(1, dtype=dtype)
    got, want = kernel(maps, rois), definition(maps, rois)
    for g, w in zip(got, want):
        assert g.dtype == dtype
        np.testing.assert_array_equal(g, w)
    assert np.abs(got[0][..., :2]).sum() > 0 and (got[0][..., 2] == 1).all()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_equals_onnxruntimes_resize_and_argmax_bit_for_bit(seed):
    maps, rois = _case(seed, R=9, K=17, H=56, W=56)
    for g, w in zip(kernel(maps, rois), _ort_loop_reference(maps, rois)):
        np.testing.assert_array_equal(g, w)


def test_kernel_blocks_of_rows_find_the_first_maximum():
    """A box whose roi map spans several row blocks, its maximum tied across blocks."""
    maps = np.zeros((1, 2, 4, 4), np.float32)
    rois = np.array([[0, 0, 300, 4000]], np.float32)  # 4000 x 300 px x 2 maps: 3 blocks
    kp, scores = kernel(maps, rois)  # all equal: the first pixel
    np.testing.assert_array_equal(kp[0, :, :2], [[0.5, 0.5], [0.5, 0.5]])
    maps[0, 1, 3, 0] = 1.0  # the bottom: its maximum in the last block
    kp, scores = kernel(maps, rois)
    for g, w in zip((kp, scores), _ort_loop_reference(maps, rois)):
        np.testing.assert_array_equal(g, w)
    assert kp[0, 1, 1] > 3500


def test_plain_session_runs_it():
    maps, rois = _case(4)
    s = ort.InferenceSession(single_op_model(OP).SerializeToString(), ort_roi.session_options(),
                             providers=["CPUExecutionProvider"])
    got = s.run(None, {"maps": maps, "rois": rois})
    for g, w in zip(got, kernel(maps, rois)):
        np.testing.assert_array_equal(g, w)
    empty = s.run(None, {"maps": maps[:0], "rois": rois[:0]})
    assert [e.shape for e in empty] == [(0, 5, 3), (0, 5)]
    inferred = onnx.shape_inference.infer_shapes(single_op_model(OP), strict_mode=True)
    dims = [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
            for o in inferred.graph.output]
    assert dims == [["R", "K", 3], ["R", "K"]]


@pytest.mark.parametrize("maps, rois, message", [
    (np.zeros((2, 3, 4, 4), np.float32), np.zeros((3, 4), np.float32),
     "input 'rois'.*one row per box of maps \\(R = 2\\), got 3"),
    (np.zeros((1, 3, 4, 4), np.float32), np.array([[0, 0, np.nan, 4]], np.float32),
     "input 'rois'.*row 0 has a non-finite coordinate nan"),
    (np.zeros((1, 3, 4, 4), np.float32), np.array([[0, 0, 1e5, 1e5]], np.float32),
     "input 'rois'.*row 0 .* asks for a 100000 x 100000 roi map, over the limit"),
    (np.zeros((1, 3, 4), np.float32), np.zeros((1, 4), np.float32),
     "input 'maps'.*must have rank 4"),
    (np.zeros((1, 3, 4, 4), np.float32), np.zeros((1, 4), np.float64),
     "input 'rois'.*must have the dtype of X"),
])
def test_bad_inputs_raise_naming_op_input_and_value(maps, rois, message):
    with pytest.raises(ort_roi.RoiOpError, match=f"{OP}.*{message}"):
        kernel(maps, rois)
    front = ort_roi.InferenceSession(single_op_model(OP, dtype=maps.dtype))
    if "dtype of X" in message:  # the front door refuses the feed by the graph's types
        message = "input 'rois'.*declared tensor\\(float\\), got tensor\\(double\\)"
    with pytest.raises(ort_roi.RoiOpError, match=f"{OP}.*{message}"):
        front.run(None, {"maps": maps, "rois": rois})


# --- torchvision: the exported Loop, fused; torch_export ------------------------------------

def _torch():
    torch = pytest.importorskip("torch",
                                reason="needs torchvision: pip install '.[torchvision]'")
    pytest.importorskip("torchvision",
                        reason="needs torchvision: pip install '.[torchvision]'")
    from torchvision.models.detection import roi_heads

    class Decode(torch.nn.Module):
        def forward(self, maps, rois):
            return roi_heads.heatmaps_to_keypoints(maps, rois)

    return torch, Decode().eval()


def _export(fn, module, args, **kw):
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(module, args, buf, input_names=["maps", "rois"], **kw)
    return onnx.load_from_string(buf.getvalue())


def _run(model, maps, rois, ours=True):
    so = ort_roi.session_options() if ours else ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"maps": maps, "rois": rois})


@pytest.mark.parametrize("opset", [11, 12, 13, 14, 15, 16, 17])
def test_convert_fuses_torchvisions_exported_loop_bit_for_bit(opset):
    torch, module = _torch()
    maps, rois = _case(5, R=6, K=17, H=56, W=56)
    native = _export(torch.onnx.export, module, (torch.from_numpy(maps), torch.from_numpy(rois)),
                     opset_version=opset, dynamo=False,
                     dynamic_axes={"maps": {0: "R"}, "rois": {0: "R"}})
    assert "Loop" in [n.op_type for n in native.graph.node]
    conv = ort_roi.convert(native)
    ops = [(n.domain, n.op_type) for n in conv.graph.node]
    assert ("ort_roi", OP) in ops and ("", "Loop") not in ops
    for m, r in ((maps, rois), _case(6, R=11, K=17, H=56, W=56), _case(7, R=0, K=17, H=56, W=56)):
        want = _run(native, m, r, ours=False)
        got = _run(conv, m, r)
        for g, w in zip(got, want):
            assert g.shape == w.shape
            np.testing.assert_array_equal(g, w)
    with torch.no_grad():
        eager = module(torch.from_numpy(maps), torch.from_numpy(rois))
    got = _run(conv, maps, rois)
    np.testing.assert_array_equal(got[0], eager[0].numpy())  # the positions
    np.testing.assert_allclose(got[1], eager[1].numpy(), atol=1e-4)  # torch's bicubic rounds otherwise


def test_a_loop_that_does_not_match_exactly_is_left_as_it_is_and_said_why():
    torch, module = _torch()
    maps, rois = _case(5, R=3, K=17, H=56, W=56)
    native = _export(torch.onnx.export, module, (torch.from_numpy(maps), torch.from_numpy(rois)),
                     opset_version=17, dynamo=False,
                     dynamic_axes={"maps": {0: "R"}, "rois": {0: "R"}})
    loop = next(n for n in native.graph.node if n.op_type == "Loop")
    resize = next(n for n in loop.attribute[0].g.node if n.op_type == "Resize")
    for a in resize.attribute:
        if a.name == "cubic_coeff_a":
            a.f = -0.5  # another cubic: not torchvision's decoding
    with pytest.warns(UserWarning, match="reads like torchvision's keypoint decoding but does "
                                         "not match it exactly.*cubic_coeff_a=-0.5"):
        conv = ort_roi.convert(native)
    assert "Loop" in [n.op_type for n in conv.graph.node]


def test_the_stored_loop_bodies_are_what_this_torch_writes():
    """ort_roi/data/torchvision_loops.json, made by tools/export_torchvision.py, is current."""
    pytest.importorskip("torch", reason="needs torchvision: pip install '.[torchvision]'")
    from importlib import resources

    from tools import export_torchvision as tool
    stored = json.loads(resources.files("ort_roi").joinpath(
        "data/torchvision_loops.json").read_text())
    assert tool.loop_bodies() == stored  # both Loops (the mask Loop checked at a second size)


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_torch_export_writes_one_node_equal_to_eager(exporter):
    torch, module = _torch()
    maps, rois = _case(8, R=5, K=17, H=56, W=56)
    args = (torch.from_numpy(maps), torch.from_numpy(rois))
    if exporter == "torchscript":
        kw = dict(dynamo=False, opset_version=17, dynamic_axes={"maps": {0: "R"}, "rois": {0: "R"}})
    else:
        R = torch.export.Dim("R")
        kw = dict(dynamo=True, dynamic_shapes=({0: R}, {0: R}))
    model = _export(ort_roi.torch_export, module, args, **kw)
    assert [(n.domain, n.op_type) for n in model.graph.node] == [("ort_roi", OP)]
    for m, r in ((maps, rois), _case(9, R=8, K=17, H=56, W=56)):
        got = _run(model, m, r)
        with torch.no_grad():
            eager = module(torch.from_numpy(m), torch.from_numpy(r))
        np.testing.assert_array_equal(got[0], eager[0].numpy())
        np.testing.assert_allclose(got[1], eager[1].numpy(), atol=1e-4)
        for g, w in zip(got, kernel(m, r)):
            np.testing.assert_array_equal(g, w)
    from torchvision.models.detection import roi_heads

    assert not hasattr(roi_heads.heatmaps_to_keypoints, "original")  # torchvision's is back


def test_validate_runs_a_converted_keypoint_graph_against_the_definition(tmp_path, capsys):
    torch, module = _torch()
    maps, rois = _case(10, R=4, K=17, H=56, W=56)
    native = _export(torch.onnx.export, module, (torch.from_numpy(maps), torch.from_numpy(rois)),
                     opset_version=17, dynamo=False,
                     dynamic_axes={"maps": {0: "R"}, "rois": {0: "R"}})
    path = tmp_path / "keypoints.onnx"
    onnx.save(ort_roi.convert(native), path)
    from ort_roi.cli import main as cli

    assert cli.main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "rows equal its definition" in out
