"""Mask R-CNN's mask pasting (torchvision roi_heads.paste_masks_in_image) as one PasteMasks node:
the kernel against its definition and against onnxruntime's own Resize with the exported
Loop's slicing (bit for bit), convert's fusion of torchvision's exported Loop at opsets 11 to
17, ort_roi.torch_export through both exporters, and the op's bad inputs. The torch parts skip
without torch (pip install '.[torchvision]')."""

import io
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

from tests import cases as C
import ort_roi
from tests.defs import paste_masks as definition
from ort_roi.graph.builders import single_op_model
from ort_roi.ops import paste_masks as kernel
from ort_roi.graph.schemas import SHAPE_INFERENCE

OP = "PasteMasks"
SIZE = (50, 60)  # the image (height, width) of the exported graphs


def _case(seed=0, R=7, M=30, size=SIZE, dtype=np.float32, itype=np.int64):
    """Padded masks and integer boxes: inside the image, across its edges, off it, a zero-size
    (1 x 1) and an inverted one, thin ones."""
    rng = np.random.default_rng(seed)
    masks = rng.random((R, 1, M, M)).astype(dtype)
    xy = rng.uniform(-30, max(size) + 10, (R, 2))
    boxes = np.floor(np.concatenate([xy, xy + np.exp(rng.uniform(-1, 4.5, (R, 2)))], 1))
    if R >= 4:
        boxes[:4] = [[10, 10, 10, 10], [40, 30, 20, 10], [-80, -70, -60, -65], [3, 2, 4, 45]]
    return masks, boxes.astype(itype), np.array(size, itype)


def _ort_loop_reference(masks, boxes, size):
    """What torchvision's exported Loop computes, by onnxruntime's own Resize (linear,
    half_pixel, to h x w) per box, then the Loop's slices: the resized mask's rows
    max(y1, 0) - y1 .. min(y2 + 1, H) - y1 (columns likewise) at the image's rows from
    max(y1, 0)."""
    X = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 1, None, None])
    S = helper.make_tensor_value_info("s", onnx.TensorProto.INT64, [4])
    Y = helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, None)
    node = helper.make_node("Resize", ["x", "", "", "s"], ["y"], mode="linear",
                            coordinate_transformation_mode="half_pixel")
    m = helper.make_model(helper.make_graph([node], "g", [X, S], [Y]),
                          opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    s = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    H, W = (int(v) for v in size)
    out = np.zeros((len(boxes), H, W), np.float32)
    for r, (x1, y1, x2, y2) in enumerate(boxes.tolist()):
        w, h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        top, bottom, left, right = max(y1, 0), min(y2 + 1, H), max(x1, 0), min(x2 + 1, W)
        if bottom <= top or right <= left:
            continue
        resized = s.run(None, {"x": masks[r:r + 1, :1], "s": np.array([1, 1, h, w])})[0][0, 0]
        out[r, top:bottom, left:right] = resized[top - y1:bottom - y1, left - x1:right - x1]
    return out


@pytest.mark.parametrize("dtype, itype", [(np.float32, np.int64), (np.float64, np.int32)])
def test_kernel_equals_its_definition(dtype, itype):
    for args in [_case(1, dtype=dtype, itype=itype), _case(2, R=5, M=7, size=(9, 40),
                                                           dtype=dtype, itype=itype)]:
        got, want = kernel(*args), definition(*args)
        assert got.dtype == dtype and got.shape == (len(args[1]), *args[2])
        np.testing.assert_array_equal(got, want)
        assert got.any()
    for case in C.mask_cases(3):
        args = list(case["inputs"].values())
        np.testing.assert_array_equal(kernel(*args), definition(*args))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_kernel_equals_onnxruntimes_resize_and_the_loops_slices_bit_for_bit(seed):
    args = _case(seed, R=12, M=30 - seed, size=(50 + 7 * seed, 60))
    np.testing.assert_array_equal(kernel(*args), _ort_loop_reference(*args))


def test_a_box_on_the_whole_image_and_beyond_it():
    masks, _, size = _case(4, R=2)
    boxes = np.array([[0, 0, 59, 49], [-500, -400, 700, 600]], np.int64)
    got = kernel(masks, boxes, size)
    np.testing.assert_array_equal(got, _ort_loop_reference(masks, boxes, size))
    assert (got[0] > 0).all() and (got[1] > 0).all()


def test_plain_session_runs_it_and_the_schema_infers_the_image_size():
    masks, boxes, size = _case(5)
    model = single_op_model(OP, count_dtype=np.int64)
    s = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                             providers=["CPUExecutionProvider"])
    got = s.run(None, {"masks": masks, "boxes": boxes, "image_size": size})[0]
    np.testing.assert_array_equal(got, kernel(masks, boxes, size))
    empty = s.run(None, {"masks": masks[:0], "boxes": boxes[:0], "image_size": size})[0]
    assert empty.shape == (0, *SIZE)
    if not SHAPE_INFERENCE:  # onnx < 1.19
        return
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert [d.dim_param or d.dim_value for d in
            inferred.graph.output[0].type.tensor_type.shape.dim] == ["R", "height", "width"]
    model.graph.initializer.append(numpy_helper.from_array(size, "image_size"))
    del model.graph.input[2]
    inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True)
    assert [d.dim_param or d.dim_value for d in
            inferred.graph.output[0].type.tensor_type.shape.dim] == ["R", *SIZE]


_M = np.zeros((2, 1, 4, 4), np.float32)
_B = np.zeros((2, 4), np.int64)
_S = np.array(SIZE, np.int64)


@pytest.mark.parametrize("masks, boxes, size, message", [
    (_M, np.zeros((3, 4), np.int64), _S, "input 'boxes'.*one row per mask \\(R = 2\\), got 3"),
    (_M, np.zeros((2, 5), np.int64), _S, "input 'boxes'.*must have shape \\[R, 4\\], got "
                                         "\\[2, 5\\]"),
    (_M, np.array([[0, 0, 1 << 40, 4]] * 2), _S, "input 'boxes'.*row 0 \\[0, 0, 1099511627776, "
                                                  "4\\] has a coordinate outside"),
    (_M, _B, np.array([0, 60]), "input 'image_size'.*at least 1 x 1, got \\[0, 60\\]"),
    (_M, _B, np.array([50, 60, 1]), "input 'image_size'.*must have shape \\[2\\] = \\(height, "
                                    "width\\), got \\[3\\]"),
    (_M, _B, np.array([1 << 14, 1 << 14]), "input 'image_size'.*asks for 2 masks of 16384 x "
                                           "16384, over the limit"),
    (np.zeros((2, 1, 4), np.float32), _B, _S, "input 'masks'.*must have rank 4"),
])
def test_bad_inputs_raise_naming_op_input_and_value(masks, boxes, size, message):
    with pytest.raises(ort_roi.RoiOpError, match=f"{OP}.*{message}"):
        kernel(masks, boxes, size)
    front = ort_roi.InferenceSession(single_op_model(OP, count_dtype=np.int64))
    with pytest.raises(ort_roi.RoiOpError, match=f"{OP}.*{message}"):
        front.run(None, {"masks": masks, "boxes": boxes, "image_size": size})


def test_float_boxes_are_refused_by_the_kernel():
    with pytest.raises(ort_roi.RoiOpError, match="PasteMasks.*input 'boxes'.*must be int32 or "
                                                 "int64, got float32"):
        kernel(_M, _B.astype(np.float32), _S)


# --- torchvision: the exported Loop, fused; torch_export ------------------------------------

def _torch():
    torch = pytest.importorskip("torch",
                                reason="needs torchvision: pip install '.[torchvision]'")
    pytest.importorskip("torchvision",
                        reason="needs torchvision: pip install '.[torchvision]'")
    from torchvision.models.detection import roi_heads

    class Paste(torch.nn.Module):
        def forward(self, masks, boxes):
            return roi_heads.paste_masks_in_image(masks, boxes, SIZE)

    return torch, Paste().eval()


def _detections(seed, R):
    """What Mask R-CNN pastes: sigmoid masks [R, 1, 28, 28], float boxes clipped to the image
    (torchvision's eager pasting fails on a box beyond it), some at its edges, thin ones."""
    rng = np.random.default_rng(seed)
    masks = rng.random((R, 1, 28, 28)).astype(np.float32)
    xy = rng.uniform(-10, 55, (R, 2))
    boxes = np.concatenate([xy, xy + np.exp(rng.uniform(-1, 4, (R, 2)))], 1)
    boxes = np.clip(boxes, 0, [SIZE[1], SIZE[0]] * 2).astype(np.float32)
    return masks, boxes


def _export(fn, module, args, **kw):
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(module, args, buf, input_names=["masks", "boxes"], **kw)
    return onnx.load_from_string(buf.getvalue())


def _run(model, masks, boxes, ours=True):
    so = ort_roi.session_options() if ours else ort.SessionOptions()
    so.log_severity_level = 3  # the native Loop warns about its output's shape
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"masks": masks, "boxes": boxes})[0]


_DYNAMIC = {"masks": {0: "R"}, "boxes": {0: "R"}}


@pytest.mark.parametrize("opset", [11, 12, 13, 14, 15, 16, 17])
def test_convert_fuses_torchvisions_exported_loop_bit_for_bit(opset):
    torch, module = _torch()
    masks, boxes = _detections(5, 6)
    native = _export(torch.onnx.export, module, (torch.from_numpy(masks),
                                                 torch.from_numpy(boxes)),
                     opset_version=opset, dynamo=False, dynamic_axes=_DYNAMIC)
    assert "Loop" in [n.op_type for n in native.graph.node]
    conv = ort_roi.convert(native)
    ops = [(n.domain, n.op_type) for n in conv.graph.node]
    assert ("ort_roi", OP) in ops and ("", "Loop") not in ops
    for m, b in ((masks, boxes), _detections(6, 11), _detections(7, 0)):
        want, got = _run(native, m, b, ours=False), _run(conv, m, b)
        assert got.shape == want.shape == (len(m), 1, *SIZE)
        np.testing.assert_array_equal(got, want)
    with torch.no_grad():
        eager = module(torch.from_numpy(masks), torch.from_numpy(boxes)).numpy()
    np.testing.assert_allclose(_run(conv, masks, boxes), eager, atol=1e-5)


def test_a_loop_that_does_not_match_exactly_is_left_as_it_is_and_said_why():
    torch, module = _torch()
    masks, boxes = _detections(5, 3)
    native = _export(torch.onnx.export, module, (torch.from_numpy(masks),
                                                 torch.from_numpy(boxes)),
                     opset_version=17, dynamo=False, dynamic_axes=_DYNAMIC)
    loop = next(n for n in native.graph.node if n.op_type == "Loop")
    resize = next(n for n in loop.attribute[0].g.node if n.op_type == "Resize")
    for a in resize.attribute:
        if a.name == "coordinate_transformation_mode":
            a.s = b"align_corners"  # another resize: not torchvision's pasting
    with pytest.warns(UserWarning, match="reads like torchvision's mask pasting but does not "
                                         "match it exactly.*align_corners"):
        conv = ort_roi.convert(native)
    assert "Loop" in [n.op_type for n in conv.graph.node]


def _export_dynamic_size(fn, masks, boxes):
    """A module pasting into an image whose size is the graph's (its height and width
    dynamic), exported by ``fn``; returns (the model, the module)."""
    torch, _ = _torch()
    from torchvision.models.detection import roi_heads

    class Paste(torch.nn.Module):
        def forward(self, image, masks, boxes):
            return roi_heads.paste_masks_in_image(masks, boxes, image.shape[-2:])

    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(Paste().eval(), (torch.zeros(3, *SIZE), torch.from_numpy(masks),
                            torch.from_numpy(boxes)), buf, opset_version=17, dynamo=False,
           input_names=["image", "masks", "boxes"],
           dynamic_axes={"image": {1: "H", 2: "W"}, **_DYNAMIC})
    return onnx.load_from_string(buf.getvalue()), Paste().eval()


def test_a_dynamic_image_size_keeps_the_loop_and_says_why():
    """Exported with the image's size dynamic, the Loop reads it from the graph (not a
    constant of its body): convert leaves it (a limitation, docs/limitations.md)."""
    torch, _ = _torch()
    native, _ = _export_dynamic_size(torch.onnx.export, *_detections(8, 3))
    with pytest.warns(UserWarning, match="reads like torchvision's mask pasting but does not "
                                         "match it exactly"):
        conv = ort_roi.convert(native)
    assert "Loop" in [n.op_type for n in conv.graph.node]


@pytest.mark.parametrize("exporter", ["torchscript", "dynamo"])
def test_torch_export_writes_one_node_equal_to_eager(exporter):
    torch, module = _torch()
    masks, boxes = _detections(9, 5)
    args = (torch.from_numpy(masks), torch.from_numpy(boxes))
    if exporter == "torchscript":
        kw = dict(dynamo=False, opset_version=17, dynamic_axes=_DYNAMIC)
    else:
        R = torch.export.Dim("R")
        kw = dict(dynamo=True, dynamic_shapes=({0: R}, {0: R}))
    model = _export(ort_roi.torch_export, module, args, **kw)
    ops = [(n.domain, n.op_type) for n in model.graph.node]
    assert ("ort_roi", OP) in ops and ("", "Loop") not in ops
    for m, b in ((masks, boxes), _detections(10, 8), _detections(11, 0)):
        with torch.no_grad():
            eager = module(torch.from_numpy(m), torch.from_numpy(b)).numpy()
        got = _run(model, m, b)
        assert got.shape == eager.shape
        np.testing.assert_allclose(got, eager, atol=1e-5)  # torch's interpolate rounds otherwise
    from torchvision.models.detection import roi_heads, transform

    for fn in (roi_heads.paste_masks_in_image, transform.paste_masks_in_image,
               roi_heads._onnx_paste_masks_in_image_loop):
        assert not hasattr(fn, "original")  # torchvision's are back


def test_torch_export_with_a_dynamic_image_size():
    """TorchScript: the image size reaches the node as a computed [2] input."""
    torch, _ = _torch()
    masks, boxes = _detections(12, 4)
    model, module = _export_dynamic_size(ort_roi.torch_export, masks, boxes)
    assert ("ort_roi", OP) in [(n.domain, n.op_type) for n in model.graph.node]
    s = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                             providers=["CPUExecutionProvider"])
    image = np.zeros((3, 41, 70), np.float32)
    got = s.run(None, {"image": image, "masks": masks, "boxes": boxes})[0]
    with torch.no_grad():
        eager = module(torch.from_numpy(image), torch.from_numpy(masks),
                       torch.from_numpy(boxes)).numpy()
    assert got.shape == eager.shape == (4, 1, 41, 70)
    np.testing.assert_allclose(got, eager, atol=1e-5)


def test_validate_runs_a_converted_mask_graph_against_the_definition(tmp_path, capsys):
    torch, module = _torch()
    masks, boxes = _detections(13, 4)
    native = _export(torch.onnx.export, module, (torch.from_numpy(masks),
                                                 torch.from_numpy(boxes)),
                     opset_version=17, dynamo=False, dynamic_axes=_DYNAMIC)
    path = tmp_path / "masks.onnx"
    onnx.save(ort_roi.convert(native), path)
    from ort_roi.cli import main as cli

    assert cli.main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "rows equal its definition" in out
