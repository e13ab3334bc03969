"""Errors name the op, the node, the graph's tensor (and the spec's input) and the value: through
the front door (RoiOpError) and in the log line of a plain onnxruntime session."""

import logging

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_roi


def two_level_graph(same_attrs=False):
    """Two RoiAlign nodes, 'level_p2' and 'level_p3', each with its own boxes and indices."""
    nodes = [helper.make_node("RoiAlign", ["p2", "r1", "b1"], ["y1"], name="level_p2",
                              output_height=2, output_width=2, sampling_ratio=2,
                              spatial_scale=0.25),
             helper.make_node("RoiAlign", ["p3", "r2", "b2"], ["y2"], name="level_p3",
                              output_height=2, output_width=2, sampling_ratio=2,
                              spatial_scale=0.25 if same_attrs else 0.125)]
    f = TensorProto.FLOAT
    g = helper.make_graph(nodes, "two_levels", [
        helper.make_tensor_value_info("p2", f, [2, 3, 16, 16]),
        helper.make_tensor_value_info("p3", f, [2, 3, 8, 8]),
        helper.make_tensor_value_info("r1", f, ["R1", 4]),
        helper.make_tensor_value_info("b1", TensorProto.INT64, ["R1"]),
        helper.make_tensor_value_info("r2", f, ["R2", 4]),
        helper.make_tensor_value_info("b2", TensorProto.INT64, ["R2"])],
        [helper.make_tensor_value_info("y1", f, None), helper.make_tensor_value_info("y2", f, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=9)


def feed(bad_b2=3):
    rng = np.random.default_rng(0)
    boxes = np.array([[2, 2, 30, 30], [8, 4, 40, 20]], np.float32)
    return {"p2": rng.standard_normal((2, 3, 16, 16)).astype(np.float32),
            "p3": rng.standard_normal((2, 3, 8, 8)).astype(np.float32),
            "r1": boxes, "b1": np.array([0, 1], np.int64),
            "r2": boxes, "b2": np.array([bad_b2, 0], np.int64)}


EXPECT = ("RoiAlign", "node 'level_p3'", "input 'batch_indices'", "tensor 'b2'",
          "box 0 has batch index 3", "[0, 2)")


@pytest.mark.parametrize("same_attrs", [False, True], ids=["attributes differ", "same attributes"])
def test_front_door_names_node_and_tensor(same_attrs):
    sess = ort_roi.InferenceSession(two_level_graph(same_attrs))
    with pytest.raises(ort_roi.RoiOpError) as e:
        sess.run(None, feed())
    for fragment in EXPECT:
        assert fragment in str(e.value), (fragment, str(e.value))
    assert (e.value.node, e.value.tensor, e.value.op) == ("level_p3", "b2", "RoiAlign")
    assert "level_p2" not in str(e.value)
    sess.run(None, feed(bad_b2=1))  # the session stays usable


@pytest.mark.parametrize("same_attrs", [False, True], ids=["attributes differ", "same attributes"])
@pytest.mark.parametrize("source", ["bytes", "path"])
def test_plain_session_log_names_node_and_tensor(same_attrs, source, tmp_path, caplog):
    m = ort_roi.convert(two_level_graph(same_attrs))
    if source == "path":
        onnx.save(m, tmp_path / "m.onnx")
        model = str(tmp_path / "m.onnx")
    else:
        model = m.SerializeToString()
    sess = ort.InferenceSession(model, ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    with caplog.at_level(logging.ERROR, logger="ort_roi"):
        y1, y2 = sess.run(None, feed())
    assert np.isnan(y2).all() and np.isfinite(y1).all()
    for fragment in EXPECT:
        assert fragment in caplog.text, (fragment, caplog.text)
    assert "level_p2" not in caplog.text


def test_attribute_errors_name_the_node():
    m = two_level_graph()
    m.graph.node[1].attribute.append(helper.make_attribute("mode", "sum"))
    with pytest.raises(ort_roi.RoiOpError) as e:
        ort_roi.InferenceSession(m)
    assert e.value.node == "level_p3"
    assert str(e.value).startswith("RoiAlign (node 'level_p3'): attribute 'mode'")


# --- the front door raises RoiOpError for what onnxruntime refuses, naming file, node, tensor ---

def test_front_door_names_a_feed_of_the_wrong_shape():
    """boxes [R, 3] against a declared [R, 4]: onnxruntime refuses the feed itself
    (InvalidArgument); the front door says which op, node, input and tensor."""
    from ort_roi import builders

    node = builders.roi_align("X", "rois", "n", "Y", name="align", pooled_height=2,
                              pooled_width=2)
    m = builders.make_model([node], [builders.tensor("X", "float32", [1, 3, 8, 8]),
                                     builders.tensor("rois", "float32", ["R", 4]),
                                     builders.tensor("n", "int32", [1])],
                            [builders.tensor("Y", "float32", None)])
    sess = ort_roi.InferenceSession(m)
    X = np.zeros((1, 3, 8, 8), np.float32)
    with pytest.raises(ort_roi.RoiOpError) as e:
        sess.run(None, {"X": X, "rois": np.zeros((2, 3), np.float32), "n": np.array([2], np.int32)})
    msg = str(e.value)
    for fragment in ("RoIAlign", "node 'align'", "input 'boxes'", "tensor 'rois'", "[R, 4]",
                     "[2, 3]"):
        assert fragment in msg, (fragment, msg)
    with pytest.raises(ort_roi.RoiOpError, match=r"Required inputs \(\['n'\]\) are missing"):
        sess.run(None, {"X": X, "rois": np.zeros((2, 4), np.float32)})


def test_front_door_names_a_file_that_is_not_onnx(tmp_path):
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"this is not a model")
    with pytest.raises(ort_roi.RoiOpError) as e:
        ort_roi.InferenceSession(str(junk))
    assert str(junk) in str(e.value) and "ONNX" in str(e.value)
    with pytest.raises(ort_roi.RoiOpError, match="bytes"):
        ort_roi.InferenceSession(b"\x00\x01 not a model either")


# --- SessionOptions: registration once per object, nothing else changed ------------------------

def test_session_options_register_once_and_change_nothing_else():
    from ort_roi import builders

    m = builders.single_op_model("RoIAlign", pooled_height=2, pooled_width=2)
    X = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    good = {"X": X, "boxes": np.array([[0, 0, 3, 3]], np.float32),
            "boxes_num": np.array([1], np.int32)}
    so = ort_roi.session_options()
    assert ort_roi.session_options(ort_roi.session_options(so)) is so
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    so.intra_op_num_threads = 1
    front = ort_roi.InferenceSession(m, so)  # registered already: no second registration
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL and so.intra_op_num_threads == 1
    plain = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
    np.testing.assert_array_equal(front.run(None, good)[0], plain.run(None, good)[0])
    # the caller asked for the parallel executor: still raised, placed
    with pytest.raises(ort_roi.RoiOpError, match=r"RoIAlign \(node '<unnamed RoIAlign>'\): "
                                                 r"input 'boxes_num' \(tensor 'boxes_num'\)"):
        front.run(None, dict(good, boxes_num=np.array([3], np.int32)))
    assert np.isfinite(front.run(None, good)[0]).all()


def test_front_door_raises_from_iobinding_and_ort_values():
    """run_with_iobinding and run_with_ort_values carry run's errors (not a NaN output)."""
    sess = ort_roi.InferenceSession(two_level_graph())
    for bad, ok in ((feed(), False), (feed(bad_b2=1), True)):
        binding = sess.io_binding()
        for name, value in bad.items():
            binding.bind_cpu_input(name, value)
        for out in ("y1", "y2"):
            binding.bind_output(out)
        values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in bad.items()}
        if ok:
            sess.run_with_iobinding(binding)
            got = binding.copy_outputs_to_cpu()
            want = sess.run(None, bad)
            np.testing.assert_array_equal(got[1], want[1])
            outs = sess.run_with_ort_values(["y2"], values)
            np.testing.assert_array_equal(outs[0].numpy(), want[1])
            assert np.isfinite(want[1]).all()
            continue
        for call in (lambda: sess.run_with_iobinding(binding),
                     lambda: sess.run_with_ort_values(["y1", "y2"], values)):
            with pytest.raises(ort_roi.RoiOpError) as e:
                call()
            for fragment in EXPECT:
                assert fragment in str(e.value), (fragment, str(e.value))


def test_front_door_run_async_hands_the_error_to_the_callback():
    sess = ort_roi.InferenceSession(two_level_graph())
    got = {}

    def callback(outputs, user_data, err):
        got[user_data] = (outputs, err)

    threads = [sess.run_async(None, feed(), callback, "bad"),
               sess.run_async(None, feed(bad_b2=1), callback, "good")]
    for t in threads:
        t.join(300)  # (a hang guard: the runs end in well under a second)
    outputs, err = got["bad"]
    assert outputs == [] and all(fragment in err for fragment in EXPECT), err
    outputs, err = got["good"]
    assert err == "" and len(outputs) == 2
    np.testing.assert_array_equal(outputs[1], sess.run(None, feed(bad_b2=1))[1])


def test_front_door_raises_our_error_when_a_later_node_fails_on_its_output():
    """An op of ours rejects its input (its outputs become fallbacks), then an onnxruntime
    node fails on them (a Gather out of bounds): the front door raises our error, naming the
    op and input, not onnxruntime's nor a 'feed' error."""
    from ort_roi.graph import builders

    dist = builders.make_node("DistributeFpnProposals_L1", ["rois", "num"],
                              ["r0", "n0", "restore"], name="levels", min_level=4, max_level=4)
    m = builders.make_model(
        [dist, helper.make_node("Squeeze", ["restore", "axis"], ["idx"]),
         helper.make_node("Gather", ["r0", "idx"], ["out"], axis=0, name="restore_order")],
        [builders.tensor("rois", "float32", ["R", 4]), builders.tensor("num", "int32", [1])],
        [builders.tensor("out", "float32", None)],
        initializers=[onnx.numpy_helper.from_array(np.array([1], np.int64), "axis")])
    with pytest.warns(UserWarning, match="'restore_order' .* left unfused"):  # the Squeeze
        sess = ort_roi.InferenceSession(m)
    rois = np.array([[0, 0, 10, 10], [5, 5, 50, 50], [1, 1, 300, 300]], np.float32)
    np.testing.assert_array_equal(sess.run(None, {"rois": rois,
                                                  "num": np.array([3], np.int32)})[0], rois)
    bad = {"rois": rois, "num": np.array([2], np.int32)}
    binding = sess.io_binding()
    for name, value in bad.items():
        binding.bind_cpu_input(name, value)
    binding.bind_output("out")
    values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in bad.items()}
    for call in (lambda: sess.run(None, bad), lambda: sess.run_with_iobinding(binding),
                 lambda: sess.run_with_ort_values(["out"], values)):
        with pytest.raises(ort_roi.RoiOpError) as e:
            call()
        assert (e.value.op, e.value.node, e.value.tensor) == ("DistributeFpnProposals_L1",
                                                             "levels", "num"), str(e.value)
        assert "must sum to R = 3 (the rows of fpn_rois), got [2]" in str(e.value)


# --- the front door checks at creation what a node's types and attributes say together -------

def _one_node(op, name, dtype=np.float32, types=None, **attrs):
    """A one-node model of ``op`` named ``name``; ``types``: graph input -> its elem type."""
    from ort_roi.graph.builders import single_op_model

    m = single_op_model(op, dtype=dtype, **attrs)
    m.graph.node[0].name = name
    for vi in m.graph.input:
        if vi.name in (types or {}):
            vi.type.tensor_type.elem_type = types[vi.name]
    return m


def _stage_feed():
    X = np.arange(8 * 8 * 10, dtype=np.float32).reshape(1, 8, 8, 10) / 10
    return {"fpn_rois": np.array([[0, 0, 12, 12], [4, 4, 40, 30]], np.float32),
            "rois_num": np.array([2], np.int32), "feat_0": X, "feat_1": X[:, :, :4, :5]}


STAGE = dict(min_level=2, max_level=3, spatial_scale_0=0.25, spatial_scale_1=0.125,
             pooled_height=2, pooled_width=2)


@pytest.mark.parametrize("op, attrs, other, node", [
    ("GenerateProposals", {}, "bbox_deltas", "rpn"),
    ("DistributeRoIAlign_L2", STAGE, "feat_1", "roi_stage"),
])
def test_front_door_names_the_input_whose_type_differs_from_the_others(op, attrs, other, node):
    """Trust, round 3 (1): one float64 input among float32 ones of an op whose T inputs share
    one type: onnxruntime finds no kernel ("no kernel def matches node inputs"); the front
    door names the node, the input and both types."""
    from tests import proposal_cases as P

    m = _one_node(op, node, types={other: TensorProto.DOUBLE}, **attrs)
    with pytest.raises(ort_roi.RoiOpError) as e:
        ort_roi.InferenceSession(m)
    msg = str(e.value)
    first = "scores" if op == "GenerateProposals" else "fpn_rois"
    for fragment in (f"{op} (node '{node}')", f"input '{other}'", f"tensor '{other}'",
                     f"dtype of {first} (float32)", "got float64"):
        assert fragment in msg, (fragment, msg)
    assert (e.value.op, e.value.node, e.value.tensor) == (op, node, other)
    # a graph of one type still makes a session that runs
    if op == "GenerateProposals":
        case = P.generate("ok", N=1, A=2, H=4, W=5)
        feed, m = case["inputs"], _one_node(op, node, **case["attrs"])
    else:
        feed, m = _stage_feed(), _one_node(op, node, **attrs)
    outs = ort_roi.InferenceSession(m).run(None, feed)
    assert all(np.isfinite(y).all() for y in outs)


@pytest.mark.parametrize("op, attrs", [
    ("DistributeFpnProposals_L4", dict(min_level=2, max_level=4)),
    ("DistributeRoIAlign_L2", dict(STAGE, max_level=4)),
])
def test_front_door_checks_the_levels_against_the_op_at_creation(op, attrs, caplog):
    """Trust, round 3 (2): max_level - min_level + 1 levels against the op's L: refused at
    creation naming the node and both attributes with their values (the run said "attributes:
    give 11 outputs; the node declares 9"); a plain session's log names them too."""
    good = dict(attrs, max_level=attrs["min_level"] + int(op[-1]) - 1)
    m = _one_node(op, "levels", **good)
    for a in m.graph.node[0].attribute:
        if a.name == "max_level":
            a.i = 4
    L = op[-1]
    expect = (f"{op} (node 'levels')", "attribute 'max_level'",
              f"max_level - min_level + 1 must be {L}", "max_level = 4", "min_level = 2")
    with pytest.raises(ort_roi.RoiOpError) as e:
        ort_roi.InferenceSession(m)
    for fragment in expect:
        assert fragment in str(e.value), (fragment, str(e.value))
    if op.startswith("DistributeFpn"):
        feed = {"fpn_rois": np.array([[0, 0, 10, 10], [0, 0, 900, 900]], np.float32),
                "rois_num": np.array([2], np.int32)}
        plain = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                     providers=["CPUExecutionProvider"])
        with caplog.at_level(logging.ERROR, logger="ort_roi"):
            plain.run(None, feed)
        for fragment in expect[1:]:
            assert fragment in caplog.text, (fragment, caplog.text)
        assert "give 7 outputs" not in caplog.text
    else:
        feed = _stage_feed()
    sess = ort_roi.InferenceSession(_one_node(op, "levels", **good))  # a good one still runs
    assert all(np.isfinite(y).all() for y in sess.run(None, feed))


@pytest.mark.parametrize("how", ["file", "bytes", "ModelProto"])
def test_front_door_names_an_empty_model(how, tmp_path):
    """Trust, round 3 (4): zero bytes decode as a model without a graph: RoiOpError (it was a
    ValueError from the rewrite), naming the file."""
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    model = {"file": str(empty), "bytes": b"", "ModelProto": onnx.ModelProto()}[how]
    with pytest.raises(ort_roi.RoiOpError) as e:
        ort_roi.InferenceSession(model)
    msg = str(e.value)
    assert "cannot be read as an ONNX model" in msg and "holds no graph" in msg, msg
    assert {"file": str(empty), "bytes": "the 0 bytes given",
            "ModelProto": "the ModelProto given"}[how] in msg, msg


def test_a_failing_node_of_the_graph_itself_is_not_called_a_feed_error():
    """A feed that fits the declared inputs, and a native node of the graph that fails (a
    Gather out of bounds, as inside torchvision's own graph): the error says the run failed
    and names the node, not "feed"."""
    from onnx import TensorProto, helper

    g = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="gather_boxes")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [1])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 9
    sess = ort_roi.InferenceSession(m)
    with pytest.raises(ort_roi.RoiOpError) as e:
        sess.run(None, {"x": np.zeros(3, np.float32), "i": np.array([7])})
    assert e.value.name == "run" and "gather_boxes" in str(e.value)
    assert "feed" not in str(e.value).split(":")[1]
    assert sess.run(None, {"x": np.arange(3, dtype=np.float32), "i": np.array([2])})[0] == 2


# --- one check of per-image counts -------------------------------------------------------------

def _count_calls(counts):
    """RoIAlign (boxes_num), DistributeFpnProposals and CollectFpnProposals (rois_num) over 3
    boxes and 10 images with the per-image ``counts``: (the call, the input, the rows)."""
    from ort_roi import ops

    boxes = np.array([[0, 0, 10, 10], [0, 0, 100, 100], [5, 5, 90, 90]], np.float32)
    X = np.zeros((10, 2, 8, 8), np.float32)
    return [(lambda: ops.roi_align(X, boxes, counts, pooled_height=2, pooled_width=2),
             "RoIAlign", "boxes_num", "R = 3 (the rows of the boxes)"),
            (lambda: ops.distribute_fpn_proposals(boxes, counts, min_level=2, max_level=5),
             "DistributeFpnProposals_L4", "rois_num", "R = 3 (the rows of fpn_rois)"),
            (lambda: ops.collect_fpn_proposals(boxes, np.ones((3, 1), np.float32), counts,
                                               post_nms_topN=2),
             "CollectFpnProposals_L1", "rois_num_0", "R_0 = 3 (the rows of rois_0)")]


@pytest.mark.parametrize("k", range(3))
def test_per_image_counts_have_one_check(k):
    """Every op's per-image counts go through one check (kernels.checks.image_counts): the
    same messages, a long list shown by its first 6 counts (DistributeFpnProposals and
    CollectFpnProposals had their own copies, which printed all N)."""
    short = np.array([1, 1] + [0] * 8, np.int32)
    call, op, name, rows = _count_calls(short)[k]
    with pytest.raises(ort_roi.RoiOpError) as e:
        call()
    assert (e.value.op, e.value.name) == (op, f"input '{name}'")
    assert str(e.value).endswith(f"must sum to {rows}, got [1, 1, 0, 0, 0, 0, ...]"), str(e.value)
    negative = np.array([4, 0, -1] + [0] * 7, np.int64)
    call, *_ = _count_calls(negative)[k]
    with pytest.raises(ort_roi.RoiOpError) as e:
        call()
    assert str(e.value).endswith("count 2 is negative: -1"), str(e.value)
