"""Multi-level (FPN) RoIAlign nodes: OpenVINO's ExperimentalDetectronROIFeatureExtractor and
mmdeploy's MMCVMultiLevelRoiAlign, run through convert and the front door (the bridge cannot
register a variable number of inputs or list attributes, so a plain session on the graph as
exported refuses it at session creation, naming the fix).

Oracles: OpenVINO reading the exported node from ONNX (committed goldens, and live when
installed); for mmdeploy's node, a literal loop of its plugin kernel (tests/literal.py) and
its level rule composed with the single-level MMCVRoiAlign (itself checked against Paddle).
"""

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper

from tests import cases as C
from tests import literal
from tests import oracles as O
import ort_roi
from tests.conftest import load_golden
from ort_roi import ops
from ort_roi.cli import main as cli
from ort_roi.runtime.bridge import GUARD_ATTR
from ort_roi.graph.schemas import SHAPE_INFERENCE
from ort_roi.levels import mmdeploy_levels, openvino_levels

needs_openvino = pytest.mark.skipif(not O.openvino_available(),
                                    reason="needs openvino: pip install '.[parity]'")


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-9,
                                                                                 atol=1e-9)


def _plain(model):
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


def mmdeploy_node_model(case, domain="mmdeploy", op="MMCVMultiLevelRoiAlign"):
    """The node as mmdeploy's symbolic writes it from a MultiLevelRoiAlign_L{L} case (or,
    ``op`` MMCVMultiLevelRotatedRoiAlign, a MultiLevelRotatedRoiAlign_L{L} one): rois first,
    then the maps; the strides as one list, featmap_strides (floats)."""
    a = dict(case["attrs"])
    L = len(case["inputs"]) - 1
    strides = [a.pop(f"stride_{i}") for i in range(L)]
    names = list(case["inputs"])
    node = helper.make_node(op, names, ["output"], domain=domain, name="roi_extractor",
                            featmap_strides=strides, **a)
    elem = helper.np_dtype_to_tensor_dtype(case["inputs"]["rois"].dtype)
    g = helper.make_graph([node], "mmdeploy", [
        helper.make_tensor_value_info(n, elem, [None] * v.ndim)
        for n, v in case["inputs"].items()], [helper.make_tensor_value_info("output", elem, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(domain, 1)], ir_version=9)


def _literal_mmdeploy(case):
    a = dict(case["attrs"])
    args = list(case["inputs"].values())
    strides = [a.pop(f"stride_{i}") for i in range(len(args) - 1)]
    return literal.mmdeploy_multi_level_roi_align(*args, featmap_strides=strides, **a)


# --- OpenVINO's ExperimentalDetectronROIFeatureExtractor ----------------------------------------

GOLDEN = load_golden("roi_feature_extractor")


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_extractor_matches_openvino_goldens_through_convert_and_front_door(case):
    m = O.extractor_node_model(case)
    feed = case["inputs"]
    converted = ort_roi.convert(m)
    node = converted.graph.node[0]
    L = len(feed) - 1
    assert (node.domain, node.op_type) == ("ort_roi", f"ROIFeatureExtractor_L{L}")
    for outs in (_plain(converted).run(None, feed), ort_roi.InferenceSession(m).run(None, feed)):
        np.testing.assert_allclose(outs[0], case["expected"], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(outs[1], feed["rois"])  # the second output: the rois
    assert case["expected"].size == 0 or np.abs(case["expected"]).sum() > 0


@pytest.mark.parity
@needs_openvino
@pytest.mark.parametrize("seed", [501, 502])
def test_extractor_matches_openvino_live(seed):
    for case in C.extractor_cases(seed, float64=False):
        got = ops.kernel(ops.spec(case["op"]))(*case["inputs"].values(), **case["attrs"])
        np.testing.assert_allclose(got[0], O.openvino_extractor(case), rtol=1e-4, atol=1e-4)


def test_extractor_levels_follow_openvinos_rule():
    """Every level gets boxes; a box of area <= 0 is on no level and its output stays 0;
    float64 runs the same rule (OpenVINO computes it in float32)."""
    rng = np.random.default_rng(7)
    boxes, feats = C.fpn_inputs(rng, 4, 1, np.float64, R=200)
    level = openvino_levels(boxes, 4)
    assert set(level[3:].tolist()) == {0, 1, 2, 3}
    assert level[0] == 4  # zero size: no level (an inverted box has a positive area)
    a = dict(output_size=3, sampling_ratio=2, aligned=1, pyramid_scales=C.STRIDES[:4])
    y, r = ops.roi_feature_extractor(boxes, *feats, **a)
    assert not y[0].any() and np.abs(y[1:]).sum() > 0
    y32, _ = ops.roi_feature_extractor(boxes.astype(np.float32),
                                           *[f.astype(np.float32) for f in feats], **a)
    np.testing.assert_allclose(y, y32, rtol=1e-4, atol=1e-4)


# --- mmdeploy's MMCVMultiLevelRoiAlign ------------------------------------------------------------

MMDEPLOY = C.multilevel_cases(11)


@pytest.mark.parametrize("case", MMDEPLOY, ids=[c["name"] for c in MMDEPLOY])
def test_mmdeploy_matches_its_plugin_loop_through_convert_and_front_door(case):
    m = mmdeploy_node_model(case)
    want = _literal_mmdeploy(case)
    dtype = case["inputs"]["rois"].dtype
    conv = ort_roi.convert(m)
    L = len(case["inputs"]) - 1
    assert conv.graph.node[0].op_type == f"MultiLevelRoiAlign_L{L}"
    for got in (_plain(conv).run(None, case["inputs"])[0],
                ort_roi.InferenceSession(m).run(None, case["inputs"])[0]):
        np.testing.assert_allclose(got, want, **_tol(dtype))
    assert want.size == 0 or (want != 0).any()


@pytest.mark.parametrize("aligned", [0, 1])
@pytest.mark.parametrize("pool_mode", [0, 1])
def test_mmdeploy_is_its_level_rule_composed_with_mmcv_roi_align(aligned, pool_mode):
    """Each box: MMCVRoiAlign (Paddle-exact in avg) on its level at scale 1/stride, two
    images, boxes on every level (not inverted: there mmdeploy clamps the size at 0)."""
    rng = np.random.default_rng(aligned * 2 + pool_mode)
    boxes, feats = C.fpn_inputs(rng, 4, 2, np.float64, R=60)
    boxes = np.concatenate([boxes[3:], [[10, 20, 700, 650]]])  # and one for level 3
    rois = np.concatenate([rng.integers(0, 2, (len(boxes), 1)), boxes], 1)
    a = dict(output_height=3, output_width=2, sampling_ratio=2, pool_mode=pool_mode,
             aligned=aligned)
    got = ops.multi_level_roi_align(rois, *feats, featmap_strides=C.STRIDES[:4], **a)
    level = mmdeploy_levels(boxes, 56, 4)
    assert set(level.tolist()) == {0, 1, 2, 3}
    for r in range(len(rois)):
        one = ops.mmcv_roi_align(
            feats[level[r]], rois[r:r + 1], output_height=3, output_width=2,
            spatial_scale=1 / C.STRIDES[level[r]], sampling_ratio=2, aligned=aligned,
            mode="max" if pool_mode == 0 else "avg")
        np.testing.assert_allclose(got[r:r + 1], one, rtol=1e-12, atol=1e-12)


# --- a plain session on the graph as exported, convert, bad input -----------------------------

@pytest.mark.parametrize("levels", [4, 3])
def test_plain_session_refuses_the_exported_nodes_at_creation(levels):
    """Never numbers computed with strides or levels the bridge could not read: the session
    is refused at creation; for the usual 4 levels the message names the fix."""
    ext = [c for c in C.extractor_cases(21) if len(c["inputs"]) == levels + 1][0]
    mm = [c for c in C.multilevel_cases(22) if len(c["inputs"]) == levels + 1][0]
    for m in (O.extractor_node_model(ext), mmdeploy_node_model(mm)):
        with pytest.raises(Exception) as e:
            _plain(m)
        if levels == 4:
            assert GUARD_ATTR in str(e.value)
        # the front door runs it
        assert ort_roi.InferenceSession(m).run(None, (ext if m.graph.node[0].domain ==
                                                      "org.openvinotoolkit" else mm)["inputs"])


def test_convert_cli_writes_fixed_arity_nodes_with_scalar_strides(tmp_path, capsys):
    case = [c for c in C.multilevel_cases(23) if len(c["inputs"]) == 5][0]
    src, dst = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(mmdeploy_node_model(case), src)
    assert cli.main(["convert", str(src), str(dst)]) == 0
    node = onnx.load(dst).graph.node[0]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert node.op_type == "MultiLevelRoiAlign_L4"
    assert [attrs[f"stride_{i}"] for i in range(4)] == [4.0, 8.0, 16.0, 32.0]
    if SHAPE_INFERENCE:  # onnx >= 1.19
        out = onnx.shape_inference.infer_shapes(onnx.load(dst), strict_mode=True).graph.output[0]
        assert [d.dim_value for d in out.type.tensor_type.shape.dim][2:] == [
            case["attrs"]["output_height"], case["attrs"]["output_width"]]
    ext = O.extractor_node_model(C.extractor_cases(24)[0])
    conv = ort_roi.convert(ext)
    assert [a.name for a in conv.graph.node[0].attribute] == [
        "aligned", "output_size", "sampling_ratio", "scale_0"]  # image_id & co. dropped


def test_bad_inputs_are_named():
    case = [c for c in C.multilevel_cases(25) if len(c["inputs"]) == 5][0]
    m = mmdeploy_node_model(case)
    feed = dict(case["inputs"])
    bad_c = dict(feed, feat_2=feed["feat_2"][:, :2])
    with pytest.raises(ort_roi.RoiOpError, match=r"MultiLevelRoiAlign_L4.*'feat_2'.*N and C"):
        ort_roi.InferenceSession(m).run(None, bad_c)
    rois = feed["rois"].copy()
    rois[3, 0] = 2
    with pytest.raises(ort_roi.RoiOpError, match=r"'rois'.*row 3.*batch index 2.*\[0, 2\)"):
        ort_roi.InferenceSession(m).run(None, dict(feed, rois=rois))
    neg = mmdeploy_node_model(dict(case, attrs=dict(case["attrs"], stride_1=-8.0)))
    with pytest.raises(ort_roi.RoiOpError, match=r"stride_1.*> 0.*-8"):
        ort_roi.InferenceSession(neg)
    short = mmdeploy_node_model(case)
    short.graph.node[0].attribute[[a.name for a in short.graph.node[0].attribute].index(
        "featmap_strides")].CopyFrom(helper.make_attribute("featmap_strides", [4.0, 8.0]))
    with pytest.raises(ort_roi.RoiOpError, match=r"featmap_strides.*4 values.*feature map"):
        ort_roi.convert(short)
    ext = [c for c in C.extractor_cases(26) if len(c["inputs"]) == 3][0]
    two = dict(ext["inputs"], feat_0=np.concatenate([ext["inputs"]["feat_0"]] * 2))
    with pytest.raises(ort_roi.RoiOpError, match=r"'feat_0'.*one image"):
        ort_roi.InferenceSession(O.extractor_node_model(ext)).run(None, two)
    seven = dict(ext, inputs=dict(ext["inputs"], **{f"feat_{i}": ext["inputs"]["feat_0"]
                                                    for i in range(7)}),
                 attrs=dict(ext["attrs"], **{f"scale_{i}": 4 for i in range(7)}))
    with pytest.raises(ort_roi.RoiOpError, match=r"7 feature maps: ort_roi runs 1 to 6"):
        ort_roi.convert(O.extractor_node_model(seven))


def test_validate_says_a_plain_session_cannot_run_the_exported_node_and_checks_convert(
        tmp_path, capsys):
    """A plain session refuses the node as exported: validate fails naming it and the fix,
    then checks what convert makes of it: the generated pyramid runs in a plain session and
    computes its definition on the inputs the run fed it."""
    for i, m in enumerate((O.extractor_node_model(C.extractor_cases(27)[6]),
                           mmdeploy_node_model(C.multilevel_cases(28)[6]))):
        path = tmp_path / f"m{i}.onnx"
        onnx.save(m, path)
        assert cli.main(["validate", str(path)]) == 1
        out = capsys.readouterr().out
        assert "cannot run it as it is" in out and "`ort-roi convert IN OUT`" in out
        assert "after `ort-roi convert`: OK, a plain session runs it" in out
        assert "rows equal its definition" in out


# --- --to onnx: every form convert writes goes back to the node it came from -------------------

def _node_attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


@pytest.mark.parametrize("case", GOLDEN, ids=[c["name"] for c in GOLDEN])
def test_extractor_goes_back_to_openvinos_node_at_every_arity(case, tmp_path, capsys):
    """ROIFeatureExtractor_L{n} back to ExperimentalDetectronROIFeatureExtractor with its
    pyramid_scales list (once a KeyError 's': the pattern "scale_{}" walked letter by letter;
    other arities were left as they were), through the API and the CLI."""
    m = O.extractor_node_model(case)
    L = len(case["inputs"]) - 1
    back = ort_roi.convert(ort_roi.convert(m), "onnx")
    node = back.graph.node[0]
    assert (node.domain, node.op_type) == ("org.openvinotoolkit",
                                           "ExperimentalDetectronROIFeatureExtractor")
    a = _node_attrs(node)
    assert a["pyramid_scales"] == [case["attrs"][f"scale_{i}"] for i in range(L)]
    assert {k: a[k] for k in ("output_size", "sampling_ratio", "aligned")} == {
        k: case["attrs"].get(k, d) for k, d in (("output_size", 7), ("sampling_ratio", 2),
                                                 ("aligned", 0))}
    assert list(node.output) == ["output", "rois_out"]
    assert {o.domain for o in back.opset_import} == {"", "org.openvinotoolkit"}
    # what comes back runs as the original: through convert again, and in OpenVINO
    np.testing.assert_allclose(ort_roi.InferenceSession(back).run(None, case["inputs"])[0],
                               case["expected"], rtol=1e-4, atol=1e-4)
    src, conv, dst = (tmp_path / f"{n}.onnx" for n in "abc")
    onnx.save(ort_roi.convert(m), conv)
    assert cli.main(["convert", str(conv), str(dst), "--to", "onnx"]) == 0
    out = capsys.readouterr().out
    assert "1 node(s) rewritten (exporter: " in out
    assert (f"1 x ort_roi::ROIFeatureExtractor_L{L} -> "
            f"org.openvinotoolkit::ExperimentalDetectronROIFeatureExtractor)") in out
    assert onnx.load(dst).graph.node[0] == node


@pytest.mark.parity
@needs_openvino
def test_extractor_sent_back_is_read_by_openvino():
    case = next(c for c in GOLDEN if len(c["inputs"]) == 5 and len(c["inputs"]["rois"]))
    back = ort_roi.convert(ort_roi.convert(O.extractor_node_model(case)), "onnx")
    got = O.openvino_onnx(back, case["inputs"])[0]
    np.testing.assert_allclose(got, case["expected"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("L", [1, 2, 4, 6])
def test_mmdeploy_multi_level_goes_back_to_its_node(L):
    case = next(c for c in C.multilevel_cases(41) if len(c["inputs"]) == L + 1)
    m = mmdeploy_node_model(case)
    conv = ort_roi.convert(m)
    assert conv.graph.node[0].op_type == f"MultiLevelRoiAlign_L{L}"
    back = ort_roi.convert(conv, "onnx")
    node = back.graph.node[0]
    assert (node.domain, node.op_type) == ("mmdeploy", "MMCVMultiLevelRoiAlign")
    want = {**_node_attrs(m.graph.node[0])}
    got = _node_attrs(node)
    assert got["featmap_strides"] == pytest.approx(want.pop("featmap_strides"))
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k
    feed = case["inputs"]
    np.testing.assert_array_equal(ort_roi.InferenceSession(back).run(None, feed)[0],
                                  ort_roi.InferenceSession(m).run(None, feed)[0])


def test_convert_cli_never_prints_a_traceback(tmp_path, capsys):
    """A node convert cannot read (a 7-level extractor; strides that do not match the maps)
    gives exit 1 and a message naming the node, both ways."""
    case = next(c for c in GOLDEN if len(c["inputs"]) == 3)
    m = O.extractor_node_model(case)
    bad = [a for a in m.graph.node[0].attribute if a.name == "pyramid_scales"][0]
    bad.ints.append(64)  # 3 strides for 2 maps
    src, dst = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(m, src)
    assert cli.main(["convert", str(src), str(dst)]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert ("ExperimentalDetectronROIFeatureExtractor (node 'extractor'): attribute "
            "'pyramid_scales': must hold 2 values (one per feature map)") in err


@pytest.mark.parametrize("case", C.extractor_cases(43) + C.multilevel_cases(44),
                         ids=lambda c: c["name"])
def test_kernels_equal_the_definitions(case):
    from ort_roi import definitions

    args = list(case["inputs"].values())
    key = ort_roi.ops.spec(case["op"]).key
    got = ops.kernel(key)(*args, **case["attrs"])
    want = ops.define(key, *args, **case["attrs"])
    got, want = (got[0], want[0]) if isinstance(got, tuple) else (got, want)
    np.testing.assert_allclose(got, want, **_tol(args[0].dtype))
