"""convert fuses torchvision's stage and Loops only when every matched node is exactly what
torch.onnx writes: one attribute (or constant) changed in a real exported graph and the
subgraph stays as it is, a note names the node and the attribute, and the converted graph
computes what the native one does in onnxruntime. convert re-fuses its own ``--to onnx``
output; it says what it did not do (dynamo's ScatterND merges, ort_roi nodes that stay with
--to onnx) and gives the caller its notes; ``ort-roi convert`` refuses a file that is no model.
The stage tests read ort_roi/data/torchvision_stage_7.onnx (torch.onnx, opset 17); the Loop,
round-trip-at-other-opsets and dynamo tests need torch (pip install '.[torchvision]')."""

import warnings
from importlib import resources

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import ort_roi
from tests.graph_helpers import convert_quietly, nodes, op_types, run, set_attr
from ort_roi.graph.builders import single_op_model
from ort_roi.graph.toolkit import GraphIndex


def _stage() -> onnx.ModelProto:
    return onnx.load_from_string(resources.files("ort_roi").joinpath(
        "data/torchvision_stage_7.onnx").read_bytes())


def _stage_feed(seed=0, n=40):
    rng = np.random.default_rng(seed)
    feed = {f"p{k}": rng.standard_normal((1, 256, 320 // s, 320 // s)).astype(np.float32)
            for k, s in zip(range(2, 6), (4, 8, 16, 32))}
    xy = rng.uniform(0, 300, (n, 2))
    wh = np.exp(rng.uniform(0.5, 5.6, (n, 2)))  # 1.6 .. 270 px: every level
    feed["boxes"] = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    return feed






def _const_node(model, name):
    return next(n for n in model.graph.node if n.output[0] == name)


def _consumers(model, name):
    return [n for n in model.graph.node if name in n.input]


# --- the stage: each mutation keeps the native graph valid ---------------------------------

def _reduction_mul(m):
    set_attr(nodes(m, "ScatterElements")[1], "reduction", "mul")
    return "ScatterElements_1", "reduction='mul'"


def _reduction_add(m):
    set_attr(nodes(m, "ScatterElements")[3], "reduction", "add")
    return "ScatterElements_3", "reduction='add'"


def _zeros_value(m):
    cos = next(n for n in nodes(m, "ConstantOfShape")
               if _consumers(m, n.output[0])[0].op_type == "ScatterElements")
    set_attr(cos, "value", numpy_helper.from_array(np.array([1.5], np.float32)))
    return cos.name.rsplit("/", 1)[1], "value=a float32 tensor [1.5]"


def _zeros_shape(m):
    """The zeros' dimensions 2 and 3 read the other way round (7 x 7: the same numbers)."""
    cos = next(n for n in nodes(m, "ConstantOfShape")
               if _consumers(m, n.output[0])[0].op_type == "ScatterElements")
    concat = _const_node(m, cos.input[0])
    gathers = [_const_node(m, _const_node(m, u).input[0]) for u in concat.input[2:]]
    gathers[0].input[1], gathers[1].input[1] = gathers[1].input[1], gathers[0].input[1]
    return gathers[0].name.rsplit("/", 1)[1], "reads 3 as input 1 where torch.onnx writes 2"


def _shape_end(m):
    """Shape of the first level's result with end=4 (all of it: the same numbers)."""
    first = nodes(m, "ScatterElements")[0]
    shape = next(n for n in _consumers(m, first.input[2]) if n.op_type == "Shape")
    set_attr(shape, "end", 4)
    return shape.name.rsplit("/", 1)[1], "end=4"


def _other_split_output(m):
    """Split into [0, 1] columns, the Squeeze reading the second: the same selection."""
    split = nodes(m, "Split")[2]
    _const_node(m, split.input[1]).attribute[0].t.CopyFrom(
        numpy_helper.from_array(np.array([0, 1], np.int64)))
    split.output.insert(0, split.output[0] + "_empty")
    return split.name.rsplit("/", 1)[1], "reads [0, 1] as input 1 where torch.onnx writes [1]"


def _split_axis(m):
    """Split along axis -1 (the same axis of the [n, 1] selection)."""
    split = nodes(m, "Split")[1]
    set_attr(split, "axis", -1)
    return split.name.rsplit("/", 1)[1], "axis=-1"


def _slice_columns(m):
    """The batch column taken by Slice(0 : 5 : 5) instead of Gather([0]): the same column."""
    g = GraphIndex(m.graph)
    gather = next(n for n in m.graph.node if n.op_type == "Gather"
                  and _consumers(m, n.output[0])[0].op_type == "Squeeze"
                  and g.const(n.input[1]) is not None
                  and np.array_equal(g.const(n.input[1]), [0]))
    consts = []
    for k, v in enumerate(([0], [5], [1], [5])):
        name = f"{gather.name}_slice_{k}"
        consts.append(helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
            np.array(v, np.int64))))
    at = list(m.graph.node).index(gather)
    new = helper.make_node("Slice", [gather.input[0], *(c.output[0] for c in consts)],
                           [gather.output[0]], name=gather.name + "_as_slice")
    m.graph.node.remove(gather)
    for k, n in enumerate([*consts, new]):
        m.graph.node.insert(at + k, n)
    return "_as_slice", "not a Gather"


def _roialign_max(m):
    set_attr(nodes(m, "RoiAlign")[2], "mode", "max")
    return "RoiAlign_2", "mode='max'"


STAGE_MUTATIONS = [_reduction_mul, _reduction_add, _zeros_value, _zeros_shape, _shape_end,
                   _other_split_output, _split_axis, _slice_columns, _roialign_max]


@pytest.mark.parametrize("mutate", STAGE_MUTATIONS, ids=lambda f: f.__name__.strip("_"))
def test_a_stage_differing_in_one_attribute_is_not_fused_and_said_why(mutate):
    native = _stage()
    where, what = mutate(native)
    conv, done = convert_quietly(native, roialign_max="onnx")
    assert ("ort_roi", "PyramidRoIAlign_L4") not in op_types(conv)
    assert ("", "ScatterElements") in op_types(conv)
    note = next(n for n in done.notes if "MultiScaleRoIAlign" in n)
    assert "does not match it exactly" in note and where in note and what in note, note
    feed = _stage_feed()
    want = run(native, feed, ours=False)[0]
    got = run(conv, feed)[0]
    assert np.abs(want).sum() > 0
    # (unfused, each RoiAlign runs as ort_roi::RoiAlign: within float32 rounding of onnxruntime's)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_the_unmutated_stage_is_fused_and_equal():
    """(the mutations' control: the same graph and feed, fused)"""
    native = _stage()
    conv, done = convert_quietly(native)
    assert op_types(conv).count(("ort_roi", "PyramidRoIAlign_L4")) == 1 and not done.notes
    feed = _stage_feed()
    np.testing.assert_allclose(run(conv, feed)[0], run(native, feed, ours=False)[0],
                               rtol=1e-5, atol=1e-5)


def test_reduction_mul_was_fused_as_an_assignment_before():
    """What the note prevents: with reduction="mul" the native merge multiplies into zeros;
    a fusion would assign (the difference the issue measured)."""
    native = _stage()
    _reduction_mul(native)
    feed = _stage_feed()
    plain = run(_stage(), feed, ours=False)[0]
    mul = run(native, feed, ours=False)[0]
    assert np.abs(plain - mul).max() > 0.5  # a fused (assigning) graph would be this wrong
    np.testing.assert_allclose(run(convert_quietly(native, roialign_max="onnx")[0], feed)[0],
                               mul, rtol=1e-5, atol=1e-5)


def test_results_cast_to_another_type_are_fused_with_that_cast():
    """Every level's RoiAlign result cast to double and the zeros double: fused, the Cast
    kept after the fused node, so the output keeps its type and values."""
    native = _stage()
    for s in nodes(native, "ScatterElements"):
        set_attr(_const_node(native, s.input[2]), "to", onnx.TensorProto.DOUBLE)
    cos = next(n for n in nodes(native, "ConstantOfShape")
               if _consumers(native, n.output[0])[0].op_type == "ScatterElements")
    set_attr(cos, "value", numpy_helper.from_array(np.array([0.0], np.float64)))
    native.graph.output[0].type.tensor_type.elem_type = onnx.TensorProto.DOUBLE
    conv, done = convert_quietly(native)
    assert op_types(conv).count(("ort_roi", "PyramidRoIAlign_L4")) == 1, done.notes
    feed = _stage_feed()
    want, got = run(native, feed, ours=False)[0], run(conv, feed)[0]
    assert got.dtype == want.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)


# --- the round trip --------------------------------------------------------------------

def _round_trip(native, feed):
    conv = ort_roi.convert(native)
    back = ort_roi.convert(conv, "onnx")
    assert all(d == "" for d, _ in op_types(back))
    again, done = ort_roi.convert(back, report=True)
    assert op_types(again).count(("ort_roi", "PyramidRoIAlign_L4")) == 1, done.notes
    assert ("", "ScatterElements") not in op_types(again) and not done.notes
    want = run(native, feed, ours=False)[0]
    np.testing.assert_array_equal(run(back, feed, ours=False)[0], want)
    np.testing.assert_array_equal(run(again, feed)[0], run(conv, feed)[0])
    np.testing.assert_allclose(run(again, feed)[0], want, rtol=1e-5, atol=1e-5)


def test_convert_fuses_its_own_to_onnx_output_again():
    _round_trip(_stage(), _stage_feed())


@pytest.mark.parametrize("opset", [11, 13, 15, 16])
def test_the_round_trip_at_other_opsets(opset):
    pytest.importorskip("torch", reason="needs torchvision: pip install '.[torchvision]'")
    from tests.test_torchvision_stage import Pooler, _export, _feed, _inputs

    args = _inputs()
    native = _export(Pooler().eval(), args, opset)
    _round_trip(native, _feed(native, args))


# --- the Loops ---------------------------------------------------------------------------

def _keypoints(opset=17):
    from tests.test_torchvision_keypoints import _case, _export, _torch

    torch, module = _torch()
    maps, rois = _case(5, R=4, K=17, H=56, W=56)
    native = _export(torch.onnx.export, module, (torch.from_numpy(maps), torch.from_numpy(rois)),
                     opset_version=opset, dynamo=False,
                     dynamic_axes={"maps": {0: "R"}, "rois": {0: "R"}})
    return native, {"maps": maps, "rois": rois}


def _masks(opset=17):
    from tests.test_torchvision_masks import _DYNAMIC, _detections, _export, _torch

    torch, module = _torch()
    masks, boxes = _detections(5, 5)
    native = _export(torch.onnx.export, module, (torch.from_numpy(masks),
                                                 torch.from_numpy(boxes)),
                     opset_version=opset, dynamo=False, dynamic_axes=_DYNAMIC)
    return native, {"masks": masks, "boxes": boxes}


def _body_resize(m, name, value):
    loop = nodes(m, "Loop")[0]
    resize = next(n for n in loop.attribute[0].g.node if n.op_type == "Resize")
    set_attr(resize, name, value)
    return "Loop", f"{name}={value!r}"


def _kp_resize_mode(m):
    return _body_resize(m, "mode", "linear")


def _kp_resize_coordinates(m):
    return _body_resize(m, "coordinate_transformation_mode", "pytorch_half_pixel")


def _kp_clip_max(m):
    """The box side clamped to at most 1e9 too (no box is that large: the same numbers)."""
    clip = nodes(m, "Clip")[0]
    c = helper.make_node("Constant", [], ["big"], value=numpy_helper.from_array(
        np.array(1e9, np.float32)))
    m.graph.node.insert(list(m.graph.node).index(clip), c)
    if len(clip.input) > 2:
        clip.input[2] = "big"
    else:
        clip.input.append("big")
    return clip.name, "does not clamp"


def _mask_resize_mode(m):
    return _body_resize(m, "mode", "nearest")


def _mask_trip_count(m):
    """The trip count taken by a Gather with its axis written out as -1 (of a 1-D shape: the
    same element)."""
    trips = next(n for n in m.graph.node if n.output[0] == nodes(m, "Loop")[0].input[0])
    set_attr(trips, "axis", -1)
    return trips.name, "axis=-1"


@pytest.mark.parametrize("build,mutate", [
    (_keypoints, _kp_resize_mode), (_keypoints, _kp_resize_coordinates),
    (_keypoints, _kp_clip_max), (_masks, _mask_resize_mode), (_masks, _mask_trip_count)],
    ids=lambda f: f.__name__.strip("_"))
def test_a_loop_differing_in_one_attribute_is_not_fused_and_said_why(build, mutate):
    pytest.importorskip("torch", reason="needs torchvision: pip install '.[torchvision]'")
    native, feed = build()
    where, what = mutate(native)
    conv, done = convert_quietly(native)
    assert ("", "Loop") in op_types(conv)
    assert not any(d == "ort_roi" for d, _ in op_types(conv))
    note = next(n for n in done.notes if "(Loop) reads like" in n)
    assert "does not match it exactly" in note and where in note and what in note, note
    want = run(native, feed, ours=False)
    for g, w in zip(run(conv, feed), want):
        np.testing.assert_array_equal(g, w)


# --- what convert did not do ---------------------------------------------------------------

def test_a_dynamo_exported_stage_is_left_with_a_note():
    torch = pytest.importorskip("torch",
                                reason="needs torchvision: pip install '.[torchvision]'")
    from tests.test_torchvision_stage import Pooler, _inputs

    args = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        native = torch.onnx.export(Pooler().eval(), args, dynamo=True,
                                   input_names=["f0", "f1", "f2", "f3", "boxes_a", "boxes_b"],
                                   verbose=False).model_proto
    assert ("", "ScatterND") in op_types(native)
    conv, done = convert_quietly(native)
    notes = [n for n in done.notes if "ScatterND" in n]
    assert len(notes) == 1 and "dynamo" in notes[0] and "RoiAlign" in notes[0], done.notes
    assert ("", "ScatterND") in op_types(conv) and ("ort_roi", "RoiAlign") in op_types(conv)
    feed = {i.name: a.numpy() for i, a in zip(native.graph.input, args)}
    np.testing.assert_allclose(run(conv, feed)[0], run(native, feed, ours=False)[0],
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", ["HeatmapsToKeypoints", "PasteMasks"])
def test_to_onnx_says_which_ort_roi_nodes_stay(op):
    model = single_op_model(op)
    with pytest.warns(UserWarning, match=f"ort_roi::{op} stays: it has no standard ONNX form"):
        back, done = ort_roi.convert(model, "onnx", report=True)
    assert [n.op_type for n in back.graph.node] == [op]
    assert len(done.notes) == 1 and "'" + back.graph.node[0].name in done.notes[0] or op in \
        done.notes[0]


def test_convert_returns_its_summary_when_asked():
    native = _stage()
    plain = ort_roi.convert(native)  # as before: the model alone
    assert isinstance(plain, onnx.ModelProto)
    conv, done = convert_quietly(native)
    assert conv == plain
    assert done.exporter == "torch.onnx" and "graph name 'main_graph'" in done.evidence
    assert done.summary() == f"exporter: torch.onnx ({done.evidence}); 1 x torchvision " \
                             f"MultiScaleRoIAlign stage (217 nodes) -> ort_roi::PyramidRoIAlign"
    assert done.moved[0][2] == "ort_roi::PyramidRoIAlign" and done.notes == []


@pytest.mark.parametrize("content", [b"", b"hello, not a model\n", bytes(range(256)) * 4])
def test_cli_convert_of_a_file_that_is_no_model_exits_1(tmp_path, capsys, content):
    from ort_roi.cli import main as cli

    src, out = tmp_path / "in.onnx", tmp_path / "out.onnx"
    src.write_bytes(content)
    assert cli.main(["convert", str(src), str(out)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("ort-roi convert: ") and "not an ONNX model" in err, err
    assert not out.exists()


def test_convert_of_a_model_without_a_graph_raises():
    with pytest.raises(ValueError, match="not an ONNX model: it holds no graph"):
        ort_roi.convert(onnx.ModelProto())
