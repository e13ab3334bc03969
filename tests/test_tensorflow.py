"""tf2onnx's tf.image.crop_and_resize, converted: ``ort-roi convert`` (and the front door)
replace the Loop over boxes and the com.microsoft::CropAndResize form by one
ort_roi::CropAndResize node, and the graph then equals TensorFlow:

- the committed graphs (tools/make_tf_graphs.py -> tests/goldens/tf2onnx_crop_and_resize.npz:
  tf2onnx 1.17's graphs of each case of tests/crop_cases.py at opsets 11-18, both forms, and
  TensorFlow's outputs) convert to one node each and equal TensorFlow bit for bit (boxes
  ending at 1.0 whose last row TF puts off the map, outside [0, 1], flipped, 1-wide crops,
  nearest ties, several images, a float64 image, maps of one row), where onnxruntime running
  tf2onnx's graph does not;
- a small two-stage model (tools/tf_e2e.py's) in both forms, its tf2onnx transpose-optimised
  NCHW map included: converted, its outputs within 1e-5 of TensorFlow's;
- a Loop or contrib node that reads like tf2onnx's but is not, exactly, stays, with a note
  naming it and the difference;
- the layer after the crops (tools/make_tf_graphs.py --layers -> tests/goldens/tf2onnx_layers.npz:
  crop_and_resize -> a Conv2D / MaxPool at opsets 11, 13, 17, both forms), which tf2onnx leaves
  half converted below opset 14 (the Loop form) or converts from a wrong shape (the contrib
  form): converted, the crops bit for bit TF's and the layer within 1e-5 relative, the repair
  in the report; where the graph's shapes do not pin TF's layer, it stays, with a note;
- live (the ``tensorflow`` extra): tf2onnx's graphs now equal the committed ones, and random
  cases exported now convert and equal TensorFlow.
"""

import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import ort_roi
from ort_roi.graph.loops import body_lines
from ort_roi.graph.toolkit import GraphIndex
from tests import crop_cases

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "goldens", "tf2onnx_crop_and_resize.npz")
CPU = ["CPUExecutionProvider"]
CASES = [c["name"] for c in crop_cases.cases()]
FORMS = ("loop", "contrib")
OP = "ort_roi::CropAndResize"


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as d:
        return {k: d[k] for k in d.files}


def graph(golden, key: str) -> onnx.ModelProto:
    return onnx.load_from_string(golden[key].tobytes())


def feed(golden, case: str) -> dict:
    return {k: golden[f"{case}:{k}"] for k in ("image", "boxes", "box_indices")}


def native(model: onnx.ModelProto, inputs: dict) -> list:
    so = ort.SessionOptions()
    so.log_severity_level = 3  # tf2onnx's contrib graph declares a wrong output shape
    return ort.InferenceSession(model.SerializeToString(), so, providers=CPU).run(None, inputs)


def ours(model: onnx.ModelProto, inputs: dict) -> list:
    sess = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=CPU)
    return sess.run(None, inputs)


def ops(model: onnx.ModelProto) -> list[str]:
    return [f"{n.domain or 'onnx'}::{n.op_type}" for n in model.graph.node]


def tf_layout(form: str, expected: np.ndarray) -> np.ndarray:
    """TensorFlow's output as tf2onnx's graph lays it out: for the contrib form with
    crop_height 1 tf2onnx reshapes the op's NCHW output to [R, crop_width, C, 1] instead of
    transposing it (a tf2onnx bug the converted graph keeps); elsewhere TF's own."""
    if form == "contrib" and expected.shape[1] == 1:
        r, _, w, c = expected.shape
        return np.ascontiguousarray(expected.transpose(0, 3, 1, 2)).reshape(r, w, c, 1)
    return expected


def test_goldens_cover_both_forms_at_every_opset(golden):
    opsets = {int(golden[f"{c}:opset"]) for c in CASES}
    assert opsets == {11, 13, 15, 17, 18}
    for c in CASES:
        assert "Loop" in {n.op_type for n in graph(golden, f"{c}:loop").graph.node}
        assert "CropAndResize" in {n.op_type for n in graph(golden, f"{c}:contrib").graph.node}


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("case", CASES)
def test_converted_equals_tensorflow(golden, case, form):
    model = graph(golden, f"{case}:{form}")
    conv, done = ort_roi.convert(model, report=True)
    assert done.notes == []
    assert [m[2] for m in done.moved] == [OP]
    assert OP in ops(conv)
    assert not {"onnx::Loop", "com.microsoft::CropAndResize", "onnx::Resize"} & set(ops(conv))
    got = ours(conv, feed(golden, case))[0]
    want = tf_layout(form, golden[f"{case}:expected"])
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, want)


def test_native_onnxruntime_is_not_tensorflow(golden):
    """Why convert replaces them: onnxruntime's Resize interpolates TF's off-the-map last
    rows (boxes ending at 1.0) and rounds nearest ties the other way; a float64 image does
    not load."""
    for case in ("ends_at_one_9x11_7", "ends_at_one_38x50_7", "nearest_ties"):
        want = golden[f"{case}:expected"]
        got = native(graph(golden, f"{case}:loop"), feed(golden, case))[0]
        assert np.abs(got - want).max() > 1.0, case
    with pytest.raises(Exception, match="Type"):
        native(graph(golden, "float64_image:loop"), feed(golden, "float64_image"))


def test_loop_converted_is_the_op_on_the_graph_inputs(golden):
    conv = ort_roi.convert(graph(golden, "ends_at_one_9x11_7:loop"))
    node = next(n for n in conv.graph.node if n.op_type == "CropAndResize")
    assert list(node.input) == ["image", "boxes", "box_indices"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs == dict(crop_height=7, crop_width=7, method=b"bilinear",
                         extrapolation_value=-7.0)
    assert ops(conv) == [OP]  # the trip count and the Reshape restating the shape went too
    contrib = ort_roi.convert(graph(golden, "ends_at_one_9x11_7:contrib"))
    assert ops(contrib) == [OP]  # both Transposes went


@pytest.mark.parametrize("method", ("bilinear", "nearest"))
@pytest.mark.parametrize("form", FORMS)
def test_small_model_converted_within_1e5_of_tensorflow(golden, method, form):
    key = f"model_{method}"
    model = graph(golden, f"{key}:{form}")
    image = {"image": golden[f"{key}:image"]}
    conv, done = ort_roi.convert(model, report=True)
    assert done.notes == [] and [m[2] for m in done.moved] == [OP]
    crops = next(n for n in conv.graph.node if n.op_type == "CropAndResize").output[0]
    assert all(n.op_type == "Transpose" for n in conv.graph.node if crops in n.input)
    want = [golden[f"{key}:expected{i}"] for i in range(3)]
    for got, w in zip(ours(conv, image), want):
        np.testing.assert_allclose(got, w, rtol=0, atol=1e-5)
    if method == "bilinear":  # one box's last column is off the map in TF's arithmetic
        assert max(np.abs(g - w).max() for g, w in zip(native(model, image), want)) > 1e-4


def test_front_door_runs_tf2onnx_graphs_as_tensorflow(golden):
    for case, form in (("ends_at_one_16x16_14", "loop"), ("nearest_ties", "contrib"),
                       ("float64_image", "loop")):
        sess = ort_roi.InferenceSession(golden[f"{case}:{form}"].tobytes())
        got = sess.run(None, feed(golden, case))[0]
        np.testing.assert_array_equal(got, golden[f"{case}:expected"])
    sess = ort_roi.InferenceSession(golden["model_bilinear:loop"].tobytes())
    got = sess.run(None, {"image": golden["model_bilinear:image"]})
    np.testing.assert_allclose(got[1], golden["model_bilinear:expected1"], rtol=0, atol=1e-5)


def _loop_body(model: onnx.ModelProto) -> onnx.GraphProto:
    loop = next(n for n in model.graph.node if n.op_type == "Loop")
    return next(a.g for a in loop.attribute if a.name == "body")


def _body_node(model, op_type: str, k: int = 0) -> onnx.NodeProto:
    return [n for n in _loop_body(model).node if n.op_type == op_type][k]


def _left_with_note(model: onnx.ModelProto, kind: str, *words: str) -> None:
    with pytest.warns(UserWarning) as caught:
        conv, done = ort_roi.convert(model, report=True)
    assert done.moved == [] and len(done.notes) == 1
    note = done.notes[0]
    assert f"({kind}) reads like tf2onnx's tf.image.crop_and_resize but does not match" in note
    assert "'CropAndResize'" in note  # the node, by name
    for w in words:
        assert w in note, note
    assert any(note in str(w.message) for w in caught)
    assert ops(conv) == ops(model)


def test_loop_not_exactly_tf2onnx_stays_with_a_note(golden):
    base = graph(golden, "outside_ext2.5:loop")  # opset 13
    m = onnx.ModelProto()
    m.CopyFrom(base)
    _body_node(m, "Resize").attribute.append(helper.make_attribute("nearest_mode", "floor"))
    _left_with_note(m, "Loop", "body node 16", "nearest_mode='floor'")
    m.CopyFrom(base)
    perm = next(a for a in _body_node(m, "Transpose", 1).attribute if a.name == "perm")
    perm.ints[:] = [0, 2, 1, 3]
    _left_with_note(m, "Loop", "body node 17", "perm=[0, 2, 1, 3]")
    m.CopyFrom(base)
    ones = next(t for t in _loop_body(m).initializer
                if numpy_helper.to_array(t).tolist() == [1.0, 1.0])
    ones.CopyFrom(numpy_helper.from_array(np.array([1.0, 2.0], np.float32), ones.name))
    _left_with_note(m, "Loop", "body node 5")
    m.CopyFrom(base)
    size = next(n for n in m.graph.node if n.op_type == "Size")
    size.input[0] = "boxes"  # the trip count: the number of box coordinates
    _left_with_note(m, "Loop", "trip count")
    m.CopyFrom(base)
    resize = _body_node(m, "Resize")
    mode = next(a for a in resize.attribute if a.name == "mode")
    mode.s = b"cubic"
    _left_with_note(m, "Loop", "mode='cubic'")


def test_contrib_not_exactly_tf2onnx_stays_with_a_note(golden):
    base = graph(golden, "outside_ext2.5:contrib")
    m = onnx.ModelProto()
    m.CopyFrom(base)
    node = next(n for n in m.graph.node if n.op_type == "CropAndResize")
    node.attribute.append(helper.make_attribute("sampling_ratio", 2))
    _left_with_note(m, "com.microsoft::CropAndResize", "'sampling_ratio'")
    m.CopyFrom(base)
    node = next(n for n in m.graph.node if n.op_type == "CropAndResize")
    m.graph.input.append(helper.make_tensor_value_info("crop", onnx.TensorProto.INT32, [2]))
    node.input[3] = "crop"
    _left_with_note(m, "com.microsoft::CropAndResize", "not a constant")


def test_contrib_on_an_nchw_map_gets_a_transpose(golden):
    """tf2onnx's transpose optimiser can hand the contrib op an NCHW map with no NHWC one
    behind it (a Conv's): convert puts a Transpose to NHWC before the op."""
    m = graph(golden, "several_images:contrib")
    pre = next(n for n in m.graph.node if n.op_type == "Transpose")
    pre.op_type, pre.input[0] = "Identity", "nchw"
    del pre.attribute[:]
    m.graph.input[0].name = "nchw"
    conv, done = ort_roi.convert(m, report=True)
    assert "ToNHWC" in done.moved[0][1] and done.notes == []
    inputs = feed(golden, "several_images")
    inputs["nchw"] = np.ascontiguousarray(inputs.pop("image").transpose(0, 3, 1, 2))
    np.testing.assert_array_equal(ours(conv, inputs)[0], golden["several_images:expected"])


# live: TensorFlow and tf2onnx


@pytest.fixture(scope="module")
def tf():
    pytest.importorskip("tf2onnx", reason="tf2onnx not installed: pip install '.[tensorflow]'")
    return pytest.importorskip(
        "tensorflow", reason="TensorFlow not installed: pip install '.[tensorflow]'")


@pytest.mark.parametrize("case", CASES[:4] + ["nearest_ties", "crop_1x5", "float64_image"])
def test_goldens_are_what_tf2onnx_writes_now(tf, golden, case):
    from tools.make_tf_graphs import tf2onnx_graph

    a = crop_cases.cases()[CASES.index(case)]["attrs"]
    for form in FORMS:
        old = graph(golden, f"{case}:{form}")
        new = tf2onnx_graph(a["crop_height"], a["crop_width"], a["method"],
                            a["extrapolation_value"], int(golden[f"{case}:opset"]),
                            form == "contrib", golden[f"{case}:image"].dtype)
        assert ops(new) == ops(old)
        if form == "loop":
            lines = [body_lines(next(n for n in m.graph.node if n.op_type == "Loop"),
                                GraphIndex(m.graph).const)[0] for m in (old, new)]
            assert lines[0] == lines[1]


@pytest.mark.parametrize("seed", range(6))
def test_tf2onnx_graphs_converted_equal_tensorflow_live(tf, seed):
    from tools.make_tf_graphs import tf2onnx_graph

    rng = np.random.default_rng(7000 + seed)
    case = crop_cases.random_case(rng)
    a, inputs = case["attrs"], case["inputs"]
    want = tf.image.crop_and_resize(inputs["image"], inputs["boxes"], inputs["box_indices"],
                                    [a["crop_height"], a["crop_width"]], method=a["method"],
                                    extrapolation_value=a["extrapolation_value"]).numpy()
    for form, opset in (("loop", (13, 15, 17)[seed % 3]), ("contrib", 17)):
        model = tf2onnx_graph(a["crop_height"], a["crop_width"], a["method"],
                              a["extrapolation_value"], opset, form == "contrib")
        conv, done = ort_roi.convert(model, report=True)
        assert [m[2] for m in done.moved] == [OP] and done.notes == []
        got = ours(conv, inputs)[0]
        np.testing.assert_array_equal(got, tf_layout(form, want))


# the layers after the crops: tools/make_tf_graphs.py --layers -> tests/goldens/tf2onnx_layers.npz
# (crop_and_resize [R, 7, 6] of a 16-channel map -> a layer; outputs the crops and the layer's)

LAYERS = os.path.join(HERE, "goldens", "tf2onnx_layers.npz")
LAYER_OPSETS = (11, 13, 17)
#: (case, form) whose layer convert repairs wherever tf2onnx got it wrong (the Loop form below
#: opset 14, the contrib form at every opset): the graph's declared output shapes, or
#: tf2onnx's code alone (a 1x1 kernel: SAME and VALID agree; VALID: no pads, and a group that
#: cannot fit the channels), leave one reading.
REPAIRED = [(c, f) for c in ("conv_same", "conv_valid_s2", "maxpool_same") for f in FORMS] + [
    ("conv1x1_mean", "loop")]
#: (case, form) whose layer stays with a note where tf2onnx got it wrong: its output is averaged
#: away, so nothing in the graph tells SAME from VALID (the Loop form) or SAME from an explicit
#: padding equal to the pads tf2onnx computed from the wrong shape (the contrib form; a 1x1
#: kernel too: SAME's pads for a 6 x 16 input are [0, 0, 1, 0]).
LEFT = [("conv_same_mean", "loop"), ("conv_same_mean", "contrib"), ("conv1x1_mean", "contrib")]


@pytest.fixture(scope="module")
def layers():
    with np.load(LAYERS) as d:
        return {k: d[k] for k in d.files}


def _layer_feed(layers, case: str) -> dict:
    return {k: layers[f"{case}:{k}"] for k in ("image", "boxes", "box_indices")}


def _quiet_convert(model: onnx.ModelProto):
    """``convert(report=True)``, its notes (also warned) not shown."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_roi.convert(model, report=True)


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


def _broken(form: str, opset: int) -> bool:
    """Where tf2onnx 1.17 writes the layer after the crops wrong."""
    return form == "contrib" or opset < 14


@pytest.mark.parametrize("opset", LAYER_OPSETS)
@pytest.mark.parametrize("case, form", REPAIRED)
def test_layer_after_the_crops_converted_equals_tensorflow(layers, case, form, opset):
    """tf2onnx's Conv2D / MaxPool after crop_and_resize: below opset 14 the Loop form's is
    half converted (NHWC crops read as NCHW, TF's HWIO kernel, no padding: onnxruntime fails
    or pools the wrong axes), the contrib form's is converted from a wrong shape at every
    opset (group crop_height // C_in, SAME pads for a crop_width x C input). Converted, the
    graph runs in a plain session: the crops bit for bit TF's, the layer within 1e-5
    (relative) of TF's; the report names the repaired node."""
    model = graph(layers, f"{case}:{form}{opset}")
    feed = _layer_feed(layers, case)
    conv, done = _quiet_convert(model)
    crops, out = ours(conv, feed)
    np.testing.assert_array_equal(crops, layers[f"{case}:crops"])
    want = layers[f"{case}:expected"]
    assert out.shape == want.shape
    assert _relative(out, want) <= 1e-5
    assert done.moved[0][2] == OP
    repaired = done.moved[1:]
    if not _broken(form, opset):
        assert repaired == [] and done.notes == []
        return
    layer = "MaxPool" if case.startswith("maxpool") else "Conv"
    assert [m[1:] for m in repaired] == [(f"onnx::{layer} as tf2onnx wrote it after "
                                          f"crop_and_resize", repaired[0][2])]
    assert repaired[0][2].startswith(f"onnx::{layer} of TF's")
    assert len(done.notes) == 1 and f"node {repaired[0][0]!r} ({layer})" in done.notes[0]
    assert "Repaired as" in done.notes[0]
    try:  # what onnxruntime makes of tf2onnx's graph
        native_out = native(model, feed)[1]
    except Exception:  # noqa: BLE001 (it refuses it: channels, group 0)
        return
    assert native_out.shape != want.shape or _relative(native_out, want) > 1e-3


def test_loop_form_conv_repair_says_why(layers):
    """Below opset 14 the note says what tf2onnx left (and why) and which reading convert
    took: SAME, the one whose output shape is the [R, 7, 6, 8] tf2onnx declared."""
    conv, done = _quiet_convert(graph(layers, "conv_same:loop13"))
    (note,) = done.notes
    assert "tf2onnx did not finish converting TF's Conv2D" in note
    assert "HWIO kernel" in note and "below opset 14" in note
    assert "Repaired as TF's Conv2D on NHWC crops, padding SAME" in note
    assert "agree with the rest of the graph" in note
    nodes = [n for n in conv.graph.node if n.op_type in ("Conv", "Transpose")]
    assert [n.op_type for n in nodes] == ["Transpose", "Conv", "Transpose"]
    attrs = {a.name: helper.get_attribute_value(a) for a in nodes[1].attribute}
    assert attrs["pads"] == [1, 1, 1, 1] and attrs["group"] == 1
    w = next(t for t in conv.graph.initializer if t.name == nodes[1].input[1])
    assert list(w.dims) == [8, 16, 3, 3]  # OIHW


@pytest.mark.parametrize("opset", LAYER_OPSETS)
@pytest.mark.parametrize("case, form", LEFT)
def test_layer_the_graph_does_not_pin_stays_with_a_note(layers, case, form, opset):
    """A Conv2D SAME whose output is averaged away: no shape in the graph tells SAME from
    VALID (the Loop form) or SAME from an explicit padding equal to tf2onnx's wrong pads (the
    contrib form), so the node stays as tf2onnx wrote it, with a note naming it, the cause,
    its readings and the way out. (The Loop form from opset 14: tf2onnx wrote it right, no
    note, equal to TF.)"""
    model = graph(layers, f"{case}:{form}{opset}")
    if not _broken(form, opset):
        conv, done = _quiet_convert(model)
        assert [m[2] for m in done.moved] == [OP] and done.notes == []
        out = ours(conv, _layer_feed(layers, case))[1]
        assert _relative(out, layers[f"{case}:expected"]) <= 1e-5
        return
    conv, done = _quiet_convert(model)
    assert [m[2] for m in done.moved] == [OP]
    (note,) = done.notes
    assert note.startswith("node 'Conv2D' (Conv): ")
    assert "the graph's shapes do not tell them apart; left as it is" in note
    if form == "loop":
        assert "padding SAME; TF's Conv2D on NHWC crops, padding VALID" in note
        assert "TF's Conv2D with data_format NCHW" not in note  # (7 rows: not 16 channels)
        assert "export at opset 14 or higher" in note
    else:
        assert "padding EXPLICIT" in note and "export without extra_opset com.microsoft" in note
    before = next(n for n in model.graph.node if n.op_type == "Conv")
    after = next(n for n in conv.graph.node if n.op_type == "Conv")
    assert after == before



@pytest.mark.parametrize("case, form, opset", [("conv_same", "loop", 11),
                                               ("conv_same", "loop", 13),
                                               ("conv_same", "contrib", 17),
                                               ("maxpool_same", "loop", 13)])
def test_layer_graphs_converted_equal_tensorflow_live(tf, layers, case, form, opset):
    """Live: tf2onnx's graph now is the committed one (its ops), and converted it equals TF
    now."""
    from tools.make_tf_graphs import layer_inputs, layer_model

    model, f = layer_model(case, opset, form == "contrib")
    assert ops(model) == ops(graph(layers, f"{case}:{form}{opset}"))
    inputs = layer_inputs()
    crops, want = (t.numpy() for t in f(**inputs))
    conv, done = _quiet_convert(model)
    got_crops, got = ours(conv, inputs)
    np.testing.assert_array_equal(got_crops, crops)
    assert _relative(got, want) <= 1e-5
    assert len(done.moved) == 2
