"""The verdicts users act on: ``ort-roi validate``, ``info`` and ``convert`` agree with each
other and with the facts on the exporters' graphs the package and the tests hold.

- validate knows what convert knows: a graph convert would rewrite holds RoI work; where the
  rewrite changes what the graph computes (an exporter's form that ONNX reads otherwise than
  its framework: tf2onnx's crop_and_resize, mx2onnx's RoiAlign) the verdict is DIFFERS (exit
  3), with the difference measured on the same inputs; where it computes the same (a fused
  torchvision stage) OK, with the same outputs and the speed measured.
- info checks what it claims: a plain session is tried before "runs it as it is", a node
  onnxruntime has no kernel for is not called native, and every node no runtime here provides
  is named.
- the three commands say the same plain words about a file that is missing, empty or not a
  model, and convert names an output path it cannot write.
"""

import os
import re

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

import ort_roi
from ort_roi.cli import main as cli
from ort_roi.cli.effect import ROUNDING, Effect, convert_effect
from ort_roi.cli.validate import EXIT, validate
from ort_roi.cli.verdicts import Validation, print_validation
from tests import cases as C
from tests import crop_cases
from tests.graph_helpers import convert_quietly
from tests.test_multilevel import mmdeploy_node_model
from tests.test_origin import feed, handmade, mx  # noqa: F401 - mx: a fixture

DATA = os.path.join(os.path.dirname(ort_roi.__file__), "data")
MODELS = os.path.join(os.path.dirname(__file__), "..", "models")
TF_GRAPHS = ["tf2onnx_crop_and_resize_loop_14.onnx", "tf2onnx_crop_and_resize_contrib_14.onnx",
             "tf2onnx_crop_and_resize_loop_7.onnx", "tf2onnx_crop_and_resize_contrib_7.onnx"]


def _save(tmp_path, m, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(m, path)
    return path


# --- 1. validate knows what convert knows ----------------------------------------------------

@pytest.mark.parametrize("name", TF_GRAPHS)
def test_tf2onnx_crop_and_resize_differs_and_says_convert(name, capsys):
    """Before: the Loop form was "OK ... nothing here for ort_roi", the contrib form FAILED
    (its generated box_indices had 1 row for 6 boxes)."""
    path = os.path.join(DATA, name)
    assert cli.main(["validate", path]) == EXIT["DIFFERS"] == 3
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: DIFFERS: ") and "run `ort-roi convert" in out, out
    assert "nothing here for ort_roi" not in out and "FAILED" not in out, out
    assert "changes what it computes: 1 x tf.image.crop_and_resize as tf2onnx writes it" in out
    assert "box_indices [6]" in out, out  # one batch index per box


def test_tf2onnx_difference_is_measured_on_the_users_inputs(tmp_path, capsys):
    """Boxes ending at 1.0 whose last sample TF puts above H - 1 (tests/crop_cases.py), given
    with --inputs: the difference is measured on them (TF writes the extrapolation value,
    -7, where onnxruntime interpolates). On the generated boxes the readings agree, and
    validate says the difference was not reached rather than that there is none."""
    path = os.path.join(DATA, "tf2onnx_crop_and_resize_loop_14.onnx")
    generated = validate(path)
    assert generated.verdict == "DIFFERS" and not generated.effect.differs
    assert cli.main(["validate", path]) == 3
    assert "(the inputs did not reach it)" in capsys.readouterr().out
    case = next(c for c in crop_cases.cases() if c["name"] == "ends_at_one_16x16_14")
    m = onnx.load(path)
    loop = next(n for n in m.graph.node if n.op_type == "Loop")
    assert case["attrs"]["crop_height"] == 14 and loop is not None
    inputs = dict(case["inputs"])
    npz = str(tmp_path / "in.npz")
    np.savez(npz, **inputs)
    v = validate(path, inputs=dict(np.load(npz)))
    assert v.verdict == "DIFFERS" and v.effect.differs, v.effect
    assert v.effect.max_diff > 1.0, v.effect.max_diff
    assert cli.main(["validate", path, "--inputs", npz]) == 3
    out = capsys.readouterr().out
    assert "on these inputs the converted graph's outputs differ: " in out, out


def test_mx2onnx_roi_align_differs_by_what_mxnet_computes(tmp_path, capsys, mx):
    """mx2onnx's RoiAlign stamped opset 16 (ONNX reads half_pixel; MXNet computes
    output_half_pixel): DIFFERS, the difference measured on MXNet's own golden inputs, and
    the converted graph's outputs are MXNet's."""
    m = handmade()
    m.graph.name, m.producer_name = "mxnet_converted_model", ""
    path = _save(tmp_path, m)
    assert cli.main(["validate", path]) == 3
    out = capsys.readouterr().out
    assert "changes what it computes: 1 x MXNet's contrib.ROIAlign as mx2onnx writes it" in out
    # the generated boxes lie on the declared [2, 3, 10, 12] map (its size over spatial_scale
    # 0.5), so every pooled value is read from the map and every one differs
    assert "on these inputs the converted graph's outputs differ: y: 882 of 882 values" in out
    v = validate(path, inputs=feed(mx))
    assert v.verdict == "DIFFERS" and v.effect.differs, v.effect
    assert v.effect.max_diff > 0.01, v.effect.max_diff


def test_torchvision_stage_runs_as_it_is_and_convert_is_measured(capsys):
    """An exact rewrite (the fused stage computes what the 217 nodes computed): OK, the same
    outputs on the same inputs, and the speed of both measured."""
    path = os.path.join(DATA, "torchvision_stage_14.onnx")
    assert cli.main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: OK: "), out
    assert "1 x torchvision MultiScaleRoIAlign stage (217 nodes) -> ort_roi::PyramidRoIAlign" in out
    same = re.search(r"the converted graph's outputs are the same \(max \|diff\| ([0-9.e+-]+),",
                     out)  # float32 rounding (the maps reach every level now: 3.6e-07)
    assert same and float(same.group(1)) < 1e-6, out
    assert "(4 of 4 RoI node(s) exercised)" in out.splitlines()[0], out
    assert "speed on these inputs: " in out and "changes what it computes" not in out, out
    v = validate(path)
    assert v.effect.native_s > 0 and v.effect.converted_s > 0 and not v.effect.differs
    assert 1 <= v.effect.rounds <= 5
    assert re.search(r"(x as fast|x slower: it computes the same, so convert gains nothing here"
                     r"|about as fast); (one round each: a rough measure|median of [2-5] "
                     r"interleaved rounds)\)",
                     out), out


def test_several_models_exit_with_the_worst_verdict(tmp_path):
    loop = os.path.join(DATA, "tf2onnx_crop_and_resize_loop_14.onnx")
    ok = os.path.join(MODELS, "rfcn_head.onnx")
    missing = str(tmp_path / "missing.onnx")
    assert cli.main(["validate", ok]) == 0
    assert cli.main(["validate", ok, loop]) == 3
    assert cli.main(["validate", loop, missing, ok]) == 1


def test_inputs_file_is_used_and_a_stray_name_is_unchecked_not_failed(tmp_path, capsys):
    path = os.path.join(MODELS, "mask_rcnn_head.onnx")
    mine = {"boxes": np.array([[1, 2, 30, 40], [5, 5, 90, 60], [0, 0, 383, 511]], np.float32),
            "boxes_num": np.array([3], np.int64)}
    npz = str(tmp_path / "in.npz")
    np.savez(npz, **mine)
    assert cli.main(["validate", path, "--inputs", npz]) == 0
    out = capsys.readouterr().out
    assert "boxes [3, 4]" in out and "all 3 rows equal its definition" in out, out
    assert "boxes, boxes_num given, the rest generated" in out, out
    np.savez(npz, box=mine["boxes"])
    assert cli.main(["validate", path, "--inputs", npz]) == EXIT["UNCHECKED"] == 4
    out = capsys.readouterr().out
    assert "UNCHECKED" in out and "'box'" in out and "FAILED" not in out, out


# --- 3. info checks what it claims -----------------------------------------------------------

def _broken(tmp_path):
    """docs/graphs.md's broken.onnx: fast_rcnn_head.onnx without its node's pooled_h."""
    m = onnx.load(os.path.join(MODELS, "fast_rcnn_head.onnx"))
    node = next(n for n in m.graph.node if n.op_type == "ROIPooling")
    keep = [a for a in node.attribute if a.name != "pooled_h"]
    del node.attribute[:]
    node.attribute.extend(keep)
    return _save(tmp_path, m, "broken.onnx")


def test_info_never_calls_a_broken_model_runnable(tmp_path, capsys):
    path = _broken(tmp_path)
    assert cli.main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "runs it as it is" not in out, out
    assert "cannot run it as it is: " in out, out
    assert "convert would refuse it: " in out and "pooled_h" in out, out
    assert cli.main(["validate", path]) == 1


def _tensorrt_export():
    """MMDeploy's TensorRT export, in small: its multi-level RoI node, then GatherTopk and
    TRTBatchedNMS (TensorRT plugins nothing in onnxruntime runs)."""
    m = mmdeploy_node_model(C.multilevel_cases(28)[6])
    g = m.graph
    g.node.append(helper.make_node("GatherTopk", ["output", "rois"], ["topk"], domain="mmdeploy",
                                   name="topk"))
    g.node.append(helper.make_node("TRTBatchedNMS", ["topk", "rois"], ["dets", "labels"],
                                   domain="mmdeploy", name="nms", background_label_id=-1))
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None)
                     for n in ("dets", "labels")])
    return m


def test_info_names_every_node_no_runtime_provides(tmp_path, capsys):
    path = _save(tmp_path, _tensorrt_export())
    assert cli.main(["info", path]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime runs it natively" not in out, out
    assert ("mmdeploy::MMCVMultiLevelRoiAlign (mmdeploy MMCVMultiLevelRoiAlign" in out
            or "mmdeploy::MMCVMultiLevelRoiAlign (" in out), out
    assert "no runtime here runs it as written (onnxruntime has no kernel for it)" in out, out
    assert ("needs what no runtime here provides (neither onnxruntime nor ort_roi runs these "
            "nodes, before or after convert): mmdeploy::GatherTopk (1 node), "
            "mmdeploy::TRTBatchedNMS (1 node)") in out, out
    assert "after convert, a plain onnxruntime session with ort_roi.session_options() still " \
           "cannot run it: onnxruntime refuses it" in out, out


def test_info_tries_a_plain_session_before_saying_it_runs(capsys):
    for name in ("rfcn_head.onnx", "mask_rcnn_head.onnx"):
        assert cli.main(["info", os.path.join(MODELS, name)]) == 0
        out = capsys.readouterr().out
        assert "runs it as it is (tried: it ran on generated inputs (" in out, out
        assert "needs what no runtime here provides" not in out, out
    loop = os.path.join(DATA, "tf2onnx_crop_and_resize_loop_14.onnx")
    assert cli.main(["info", loop]) == 0
    out = capsys.readouterr().out
    assert "onnxruntime runs this model without ort_roi" not in out, out
    assert "changes what it computes: 1 x tf.image.crop_and_resize" in out, out


# --- 4. plain words for files ----------------------------------------------------------------

def _files(tmp_path):
    text = tmp_path / "notes.onnx"
    text.write_text("this is a text file, not a model\n")
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    return {"missing": (str(tmp_path / "missing.onnx"), "no such file"),
            "text": (str(text), "not an ONNX model"),
            "empty": (str(empty), "an empty file (0 bytes), not an ONNX model")}


@pytest.mark.parametrize("kind", ["missing", "text", "empty"])
def test_the_three_commands_say_the_same_plain_words(tmp_path, capsys, kind):
    path, words = _files(tmp_path)[kind]
    assert cli.main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: FAILED: {words}"), out
    assert "onnxruntime" not in out and "Wire format" not in out.split("(")[0], out
    assert cli.main(["info", path]) == 1
    assert f"ort-roi info: {path}: {words}" in capsys.readouterr().err
    assert cli.main(["convert", path, str(tmp_path / "out.onnx")]) == 1
    assert f"ort-roi convert: {path}: {words}" in capsys.readouterr().err


def test_convert_names_an_output_path_it_cannot_write(tmp_path, capsys):
    src = os.path.join(MODELS, "rfcn_head.onnx")
    out = str(tmp_path / "missing" / "dir" / "out.onnx")
    assert cli.main(["convert", src, out]) == 1
    err = capsys.readouterr().err
    assert f"cannot write the output {out}: its folder " in err and "does not exist" in err, err
    assert cli.main(["convert", src, str(tmp_path)]) == 1
    assert f"cannot write the output {tmp_path}: it is a folder" in capsys.readouterr().err


# --- where convert's outputs differ without a repair: rounding magnified, or a defect ------

def _pooling(scale=0.25) -> onnx.ModelProto:
    """ONNX RoiAlign (opset 16, adaptive sampling: convert moves it onto ort_roi's kernel,
    which sums in another order than onnxruntime's) of 30 boxes."""
    g = helper.make_graph(
        [helper.make_node("RoiAlign", ["x", "boxes", "batch"], ["pooled"], name="pool",
                          output_height=7, output_width=7, sampling_ratio=0,
                          spatial_scale=scale)],
        "g", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [1, 8, 40, 48]),
              helper.make_tensor_value_info("boxes", onnx.TensorProto.FLOAT, [30, 4]),
              helper.make_tensor_value_info("batch", onnx.TensorProto.INT64, [30])],
        [helper.make_tensor_value_info("pooled", onnx.TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def _pooling_feed() -> dict:
    rng = np.random.default_rng(0)
    xy = rng.uniform(0, 150, (30, 2))
    return {"x": (rng.standard_normal((1, 8, 40, 48)) * 100).astype(np.float32),
            "boxes": np.concatenate([xy, xy + rng.uniform(20, 150, (30, 2))], 1
                                    ).astype(np.float32),
            "batch": np.zeros(30, np.int64)}


def _straddling(m: onnx.ModelProto, feed: dict) -> np.float32:
    """A threshold between onnxruntime's and ort_roi's value of one element of ``m``'s
    output (the smaller of the two: Greater is true for the larger alone); skips where the
    two kernels round alike everywhere on this CPU."""
    native = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]
                                  ).run(None, feed)[0]
    ours = ort.InferenceSession(convert_quietly(m)[0].SerializeToString(),
                                ort_roi.session_options(), providers=["CPUExecutionProvider"]
                                ).run(None, feed)[0]
    apart = np.argwhere(native != ours)
    if not len(apart):
        pytest.skip("onnxruntime's and ort_roi's kernels round alike on this CPU")
    assert np.abs(native - ours).max() <= ROUNDING * np.abs(native).max()
    at = tuple(apart[0])
    return min(native[at], ours[at])


def _then(m: onnx.ModelProto, threshold, boxes_of=None) -> onnx.ModelProto:
    """``m`` with its output y compared: Greater(y, threshold) as the int32 output "flags";
    with ``boxes_of`` (a RoiAlign model), 20 x the parity of the flags' count added to the
    boxes of a second RoiAlign (``boxes_of``'s node, renamed "pool2"), whose output is then
    the model's."""
    m = onnx.ModelProto.FromString(m.SerializeToString())
    y = m.graph.output[0].name
    del m.graph.output[:]
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array(threshold, np.float32),
                                                            "t"))
    m.graph.node.extend([helper.make_node("Greater", [y, "t"], ["above"]),
                         helper.make_node("Cast", ["above"], ["flags"],
                                          to=onnx.TensorProto.INT32)])
    if boxes_of is None:
        m.graph.output.append(helper.make_tensor_value_info("flags", onnx.TensorProto.INT32,
                                                            None))
        return m
    second = onnx.NodeProto.FromString(boxes_of.graph.node[0].SerializeToString())
    second.name, second.input[1], second.output[0] = "pool2", "boxes2", "pooled2"
    m.graph.initializer.extend([onnx.numpy_helper.from_array(np.array(20, np.float32), "k"),
                                onnx.numpy_helper.from_array(np.array(2, np.int32), "two")])
    m.graph.node.extend([  # the parity of the count of flags: one flip moves every box
        helper.make_node("ReduceSum", ["flags"], ["count"], keepdims=0),
        helper.make_node("Mod", ["count", "two"], ["parity"]),
        helper.make_node("Cast", ["parity"], ["flag"], to=onnx.TensorProto.FLOAT),
        helper.make_node("Mul", ["flag", "k"], ["shift"]),
        helper.make_node("Add", ["boxes", "shift"], ["boxes2"]), second])
    m.graph.output.append(helper.make_tensor_value_info("pooled2", onnx.TensorProto.FLOAT,
                                                        None))
    return m


def test_outputs_that_differ_by_rounding_a_selection_magnified_are_no_defect(capsys):
    """convert moves a RoiAlign onto ort_roi's kernel, whose sums round otherwise in the last
    bit; a threshold set between the two kernels' values of one bin flips a Greater. The
    graph's output differs, but the rewritten node, fed the same, agrees to rounding: validate
    says so, not "a defect"."""
    f = _pooling_feed()
    m = _then(_pooling(), _straddling(_pooling(), f))
    conv, done = convert_quietly(m)
    e = convert_effect(m, conv, done, f)
    assert e.differs == ["flags: 1 of 11760 values differ"], e.differs
    assert not e.at_rewrite and not e.untraced and e.rounding.startswith(
        "every rewritten node (1 of 1), fed what the original graph fed it, computes what the "
        "graph did to rounding: largest |diff| "), e.rounding
    assert e.rounding.endswith("this graph's selections (Greater x1) may pick otherwise: no "
                               "defect of ort_roi's in this run"), e.rounding
    v = validate(m, inputs=f)
    assert v.verdict == "OK" and v.effect.rounding == e.rounding
    print_validation("m.onnx", v)
    out = capsys.readouterr().out
    assert "flags: 1 of 11760 values differ" in out and "please report it" not in out, out


def test_a_node_fed_what_rounding_upstream_changed_is_judged_on_what_it_was_fed():
    """The first RoiAlign's rounding flips a Greater whose result moves the second RoiAlign's
    boxes by 20 px: the second's output differs by far more than rounding, but it is judged
    on the boxes the original graph fed it (its part of the graph run apart), where it agrees:
    both nodes judged, none a defect. Before, it was skipped as 'fed other inputs'."""
    f = _pooling_feed()
    m = _then(_pooling(), _straddling(_pooling(), f), boxes_of=_pooling())
    conv, done = convert_quietly(m)
    assert [n.name for n in conv.graph.node if n.domain == "ort_roi"] == ["pool", "pool2"]
    e = convert_effect(m, conv, done, f)
    assert e.differs and e.differs[0].startswith("pooled2: "), e.differs
    assert not e.at_rewrite and not e.untraced, e
    assert e.rounding.startswith("every rewritten node (2 of 2), fed what the original graph "
                                 "fed it, computes what the graph did to rounding"), e.rounding


def test_a_fused_stage_is_traced_through_the_cast_convert_adds_after_it():
    """torchvision's stage, fused, writes its float32 result under a new name and a Cast back
    to the graph's tensor: the trace follows that Cast and compares the stage's output."""
    rng = np.random.default_rng(1)
    f = {f"p{k}": rng.standard_normal((1, 256, 128 >> k, 160 >> k)).astype(np.float32)
         for k in range(2, 6)}
    xy = rng.uniform(0, 100, (20, 2))
    f["boxes"] = np.concatenate([xy, xy + rng.uniform(8, 120, (20, 2))], 1).astype(np.float32)
    stage = onnx.load(os.path.join(DATA, "torchvision_stage_14.onnx"))
    m = _then(stage, _straddling(stage, f))
    conv, done = convert_quietly(m)
    fused = [n for n in conv.graph.node if n.domain == "ort_roi"]
    assert len(fused) == 1 and fused[0].output[0] != "pooled"  # renamed, then cast
    e = convert_effect(m, conv, done, f)
    assert e.differs and not e.at_rewrite, e
    assert "every rewritten node (1 of 1), fed what the original graph fed it" in e.rounding \
        and " on values up to 0 " not in e.rounding, e.rounding


def test_a_rewritten_node_that_computes_otherwise_is_named_as_a_defect(capsys):
    """The same check finds a rewrite that does change the numbers: a converted graph whose
    ort_roi node pools at another scale, fed the same inputs, differs beyond rounding and is
    named."""
    m = _pooling()
    conv, done = convert_quietly(m)
    wrong, _ = convert_quietly(_pooling(scale=0.3))
    e = convert_effect(m, wrong, done, _pooling_feed())
    assert e.differs and e.rounding is None
    assert len(e.at_rewrite) == 1 and e.at_rewrite[0].startswith(
        "node 'pool' (RoiAlign), fed what the original graph fed it, output 'pooled' differs "
        "by up to "), e.at_rewrite
    v = Validation(effect=e)
    assert v.verdict == "DEFECT" and EXIT[v.verdict] == 5
    print_validation("m.onnx", v)
    out = capsys.readouterr().out
    assert out.startswith("m.onnx: DEFECT: ") and ("changed them: node 'pool' (RoiAlign), fed "
                                                    "what the original graph fed it, output "
                                                    "'pooled' differs by up to") in out
    assert "a defect of ort_roi's, please report it" in out, out


def test_a_difference_that_cannot_be_traced_is_not_called_rounding(capsys):
    """Where not every rewritten node could be judged, the report says it could not tell,
    names the node, and the verdict is no OK (before: OK, exit 0)."""
    m = _pooling()
    conv, done = convert_quietly(m)
    v = Validation(effect=Effect(done, differs=["y: 1 of 9 values differ"],
                                 untraced=["node 'pool' (RoiAlign): why"]))
    assert v.verdict == "DEFECT"
    print_validation("m.onnx", v)
    out = capsys.readouterr().out
    assert out.startswith("m.onnx: DEFECT: ") and "not every rewritten node could be judged" \
        in out, out
    assert "which rewritten node did could not be told" in out and "no defect" not in out, out
    assert "not judged: node 'pool' (RoiAlign): why" in out, out
