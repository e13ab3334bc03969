"""``ort-roi validate``'s inputs respect the graph: counts and batch indices that reach a RoI
node through other nodes (paddle2onnx's Unsqueeze / Add / Squeeze of ``boxes_num``) are chosen
so that what reaches the node is valid; tf2onnx's crop_and_resize forms get a batch index per
box; the user's own inputs (``--inputs FILE.npz``); and where the generator cannot satisfy the
graph, validate says so (step "inputs"), never that the model failed. The real paddle2onnx
export of docs/paddle.md skips without Paddle (pip install '.[paddle]')."""

import os

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ort_roi.cli import main as cli
from ort_roi.cli.validate import validate
from ort_roi.graph.inputs import GivenInputsUnfit, InputsUnsatisfied, generate_inputs

DATA = os.path.join(os.path.dirname(__file__), "..", "ort_roi", "data")


def _const(name, values, dtype=TensorProto.INT64):
    return helper.make_node("Constant", [], [name], name=name,
                            value=helper.make_tensor(name, dtype, [len(values)], values))


def _head(op="Add", value=0, boxes_rows=None):
    """x, boxes and boxes_num -> ort_roi::RoIAlign as paddle2onnx writes it: boxes_num reaches
    the node through Unsqueeze, ``op`` with a constant [value] and Squeeze (its Add of 0);
    ``boxes_rows`` declared boxes rows (None: open)."""
    nodes = [_const("axes", [0]), _const("v", [value], TensorProto.INT32),
             helper.make_node("Unsqueeze", ["boxes_num", "axes"], ["u"], name="unsqueeze"),
             helper.make_node(op, ["u", "v"], ["a"], name="shift"),
             helper.make_node("Squeeze", ["a", "axes"], ["num"], name="squeeze"),
             helper.make_node("RoIAlign", ["x", "boxes", "num"], ["y"], name="align",
                              domain="ort_roi", aligned=1, pooled_height=2, pooled_width=2,
                              sampling_ratio=2, spatial_scale=0.25)]
    g = helper.make_graph(nodes, "head", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8, 32, 32]),
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [boxes_rows or "R", 4]),
        helper.make_tensor_value_info("boxes_num", TensorProto.INT32, ["M"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [boxes_rows or "R", 8, 2, 2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("ort_roi", 1)], ir_version=9)


def _save(tmp_path, m, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(m, path)
    return path


def test_counts_through_unsqueeze_add_squeeze_sum_to_the_boxes_rows():
    """paddle2onnx's chain: boxes_num was generated as [0] (no role: random) for 6 boxes."""
    feed = generate_inputs(_head(), r=6)
    assert feed["boxes"].shape == (6, 4)
    assert feed["boxes_num"].tolist() == [6] and feed["boxes_num"].dtype == np.int32
    feed = generate_inputs(_head(boxes_rows=9), r=6)
    assert feed["boxes_num"].tolist() == [9]


def test_counts_through_a_shift_are_corrected_by_what_the_nodes_add():
    """boxes_num + 2 reaches the node: boxes_num 4 makes the 6 the node needs."""
    feed = generate_inputs(_head(value=2), r=6)
    assert feed["boxes_num"].tolist() == [4]
    v = validate(_head(value=2))
    assert v.ok, v.problems
    assert len(v.compared) == 1 and v.compared[0].startswith(
        "node 'align' (ort_roi::RoIAlign): OK: all 6 rows equal its definition (within 0.0001 "
        "+ 0.0001 x |value|), max |diff| "), v.compared


def test_counts_through_a_scale_or_a_concat_with_constants_are_solved():
    """Nodes linear in boxes_num (y = A x + b): 2 * boxes_num needs 3; [2] ++ boxes_num on 2
    images needs [4] (2 + 4 boxes); each validated OK on 6 boxes."""
    feed = generate_inputs(_head(op="Mul", value=2), r=6)
    assert feed["boxes_num"].tolist() == [3]
    nodes = [_const("two", [2], TensorProto.INT32),
             helper.make_node("Concat", ["two", "boxes_num"], ["num"], name="cat", axis=0),
             helper.make_node("RoIAlign", ["x", "boxes", "num"], ["y"], name="align",
                              domain="ort_roi", aligned=1, pooled_height=2, pooled_width=2,
                              sampling_ratio=2, spatial_scale=0.25)]
    g = helper.make_graph(nodes, "cat", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 32, 32]),
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["R", 4]),
        helper.make_tensor_value_info("boxes_num", TensorProto.INT32, ["M"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["R", 8, 2, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ort_roi", 1)], ir_version=9)
    feed = generate_inputs(m, r=6)
    assert feed["boxes_num"].tolist() == [4]
    for model in (m, _head(op="Mul", value=2)):
        v = validate(model)
        assert v.ok, v.problems
        assert "all 6 rows equal its definition" in v.compared[0], v.compared


def test_validate_answers_ok_on_a_paddle2onnx_like_head(tmp_path, capsys):
    path = _save(tmp_path, _head())
    assert cli.main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert f"{path}: OK" in out, out
    assert "boxes [6, 4], boxes_num [1]" in out, out


def test_counts_no_value_can_satisfy_are_said_not_failed(tmp_path, capsys):
    """boxes_num * 0 reaches the node: no count sums to 6; validate says it cannot make the
    inputs and asks for the user's, naming the node, the input and the graph input."""
    m = _head(op="Mul", value=0)
    with pytest.raises(InputsUnsatisfied) as e:
        generate_inputs(m, r=6)
    assert ("node 'align''s input 'boxes_num' (tensor 'num') comes from 'boxes_num' through "
            "Constant -> Unsqueeze -> Mul -> Squeeze: no value of 'boxes_num' found that makes "
            "it valid there (with boxes_num = [6], it is [0], which does not sum to R = 6 (the "
            "rows of the boxes))") == str(e.value)
    v = validate(m)
    assert [step for step, _ in v.problems] == ["inputs"], v.problems
    assert v.problems[0][1].startswith("cannot generate inputs for this graph (node 'align''s")
    assert v.problems[0][1].endswith("): give your own with --inputs FILE.npz")
    path = _save(tmp_path, m)
    assert cli.main(["validate", path]) == 4
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: UNCHECKED: the generated inputs cannot satisfy this graph"), out
    assert "  inputs: cannot generate inputs for this graph (node 'align''s input 'boxes_num'" \
        in out, out
    assert "FAILED" not in out, out


def test_after_the_run_counts_that_miss_the_nodes_boxes_are_the_generators_mistake(tmp_path):
    """The boxes reach the node doubled (Concat): the generated counts [6] do not sum to its
    12 rows; the run's error is the generator's mistake, said as such, not FAILED."""
    nodes = [helper.make_node("Concat", ["boxes", "boxes"], ["b2"], name="twice", axis=0),
             helper.make_node("RoIAlign", ["x", "b2", "boxes_num"], ["y"], name="align",
                              domain="ort_roi", aligned=1, pooled_height=2, pooled_width=2,
                              sampling_ratio=2, spatial_scale=0.25)]
    g = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 32, 32]),
        helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["R", 4]),
        helper.make_tensor_value_info("boxes_num", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["K", 8, 2, 2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ort_roi", 1)], ir_version=9)
    v = validate(m)
    assert v.problems == [("inputs", "cannot generate inputs for this graph (node 'align': "
                                     "input 'boxes_num' (tensor 'boxes_num') is [6], which does "
                                     "not sum to R = 12 (the rows of the boxes); it comes from "
                                     "the generated input(s) boxes_num): give your own with "
                                     "--inputs FILE.npz")], v.problems
    # the user's own inputs are the user's: a wrong count is the run's error
    bad = validate(m, inputs={"boxes_num": np.array([5])})
    assert [s for s, _ in bad.problems] == ["run"], bad.problems
    assert "must sum to R = 12 (the rows of the boxes), got [5]" in bad.problems[0][1]
    good = validate(m, inputs={"boxes_num": np.array([12])})
    assert good.ok, good.problems
    assert "all 12 rows equal its definition" in good.compared[0], good.compared


@pytest.mark.parametrize("name", ["tf2onnx_crop_and_resize_contrib_14.onnx",
                                  "tf2onnx_crop_and_resize_contrib_7.onnx",
                                  "tf2onnx_crop_and_resize_loop_14.onnx"])
def test_tf2onnx_crop_and_resize_gets_a_batch_index_per_box(name):
    """box_indices had 1 row for 6 boxes (the contrib op refused it; the Loop, whose trip
    count is Size(box_indices), cropped 1 box); boxes were in pixels, not normalized."""
    m = onnx.load(os.path.join(DATA, name))
    feed = generate_inputs(m, r=6)
    assert feed["box_indices"].tolist() == [0] * 6
    b = feed["boxes"]
    assert b.shape == (6, 4) and (b >= 0).all() and (b <= 1).all(), b
    v = validate(m)
    assert v.ok, v.problems
    assert any("boxes [6, 4], box_indices [6]): onnxruntime runs it" in n for n in v.notes)


def test_inputs_from_an_npz_fix_the_others(tmp_path, capsys):
    """--inputs: boxes [3, 4] and boxes_num [1, 2] given; x generated with 2 images."""
    path = _save(tmp_path, _head())
    npz = str(tmp_path / "in.npz")
    boxes = np.array([[0, 0, 60, 40], [8, 8, 100, 120], [30, 4, 90, 50]], np.float32)
    np.savez(npz, boxes=boxes, boxes_num=np.array([1, 2], np.int32))
    assert cli.main(["validate", path, "--inputs", npz]) == 0
    out = capsys.readouterr().out
    assert ("inputs (x [2, 8, 32, 32], boxes [3, 4], boxes_num [2]; boxes, boxes_num given, "
            "the rest generated)") in out, out
    assert "all 3 rows equal its definition" in out, out
    feed = generate_inputs(_head(), given={"boxes": boxes,
                                           "boxes_num": np.array([1, 2], np.int32)})
    assert feed["x"].shape == (2, 8, 32, 32)
    assert feed["boxes"] is boxes and feed["boxes_num"].tolist() == [1, 2]


def test_inputs_that_are_not_the_graphs_are_named(tmp_path):
    m = _head()
    with pytest.raises(GivenInputsUnfit, match=r"given input 'rois_num' is not an input of the "
                       r"graph \(its inputs: x, boxes, boxes_num\)"):
        generate_inputs(m, given={"rois_num": np.array([1], np.int32)})
    v = validate(m, inputs={"boxes": np.zeros((2, 4))})
    assert v.problems == [("inputs", "--inputs: given input 'boxes' is float64 [2, 4]; the "
                                     "graph declares float32 [?, 4]")], v.problems
    path = _save(tmp_path, m)
    bad = str(tmp_path / "bad.npz")
    with open(bad, "w") as f:
        f.write("not an npz")
    assert cli.main(["validate", path, "--inputs", bad]) == 1


def _paddle_head(tmp_path, standard):
    """docs/paddle.md's Head, saved with paddle.jit.save and exported with export-paddle."""
    pytest.importorskip("paddle", reason="needs paddle: pip install '.[parity]'")
    pytest.importorskip("paddle2onnx", reason="needs paddle2onnx: pip install '.[paddle]'")
    import paddle
    from paddle.vision import ops

    import ort_roi

    class Head(paddle.nn.Layer):
        def forward(self, x, boxes, boxes_num):
            return (ops.roi_align(x, boxes, boxes_num, 7, 0.25, sampling_ratio=-1, aligned=True),
                    ops.roi_pool(x, boxes, boxes_num, 7, 0.25))

    spec = [paddle.static.InputSpec([None, 8, 32, 32], "float32", "x"),
            paddle.static.InputSpec([None, 4], "float32", "boxes"),
            paddle.static.InputSpec([None], "int32", "boxes_num")]
    prefix = str(tmp_path / "head" / "inference")
    paddle.jit.save(Head(), prefix, input_spec=spec)
    out = str(tmp_path / "head.onnx")
    if standard:  # roi_pool as MaxRoiPool, roi_align as RoiAlign with indices from the counts
        ort_roi.paddle_export(prefix, out, 16, standard=True)
    else:
        ort_roi.paddle_export(prefix, out)
    return out


@pytest.mark.parametrize("standard", [False, True])
def test_validate_answers_ok_on_docs_paddle_head(tmp_path, capsys, standard):
    """docs/paddle.md's own export: validate said FAILED ("must sum to R = 6 ... got [0]")."""
    path = _paddle_head(tmp_path, standard)
    assert cli.main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert f"{path}: OK" in out, out
    assert "boxes [6, 4], boxes_num [1]" in out, out
    assert out.count(": OK: all 6 rows equal its definition") == 2, out
