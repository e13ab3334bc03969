"""mmdeploy::MMCVRoiAlign and mmcv::MMCVRoiAlign (mmcv 1.x, mmdeploy's TensorRT backend):
exported graphs run in a plain onnxruntime session.

Mode avg is checked against Paddle roi_align (the committed RoIAlign goldens, the boxes
turned into 5-column rois); mode max against a literal loop reading of mmcv's CPU kernel.

MMDeploy's onnxruntime export (ONNX RoiAlign in its SingleRoIExtractor stage, the stages
ort_roi/data/mmdeploy_stage_*.onnx cut by tools/mmdeploy_graphs.py): the graph is mmdet's level
rule and per-level RoIAlign (at opset 11 on boxes shifted by -0.5 / scale), convert fuses each
stage into one PyramidRoIAlign_L4 with the same bits as the unfused converted graph, and a
stage differing in one part is left with a note naming it.
"""

import numpy as np
import onnxruntime as ort
import pytest
from hypothesis import given, settings, strategies as st
from onnx import TensorProto, checker, helper, shape_inference

from tests import literal
import ort_roi
from tests.graph_helpers import (assert_fused_rows_of_no_level_stay_zero, convert_quietly, nodes,
                                 op_types, run, set_constant)
from tests.conftest import load_golden, tolerance
from ort_roi import ops
from ort_roi.graph.schemas import SHAPE_INFERENCE

ROI_ALIGN_CASES = load_golden("roi_align")


DOMAINS = ("mmdeploy", "mmcv")


def mmdeploy_graph(dtype=TensorProto.FLOAT, domain="mmdeploy", **attrs):
    """A graph as mmdeploy (or mmcv 1.x: domain mmcv) writes it: every attribute explicit."""
    attrs = {"output_height": 7, "output_width": 7, "spatial_scale": 0.25,
             "sampling_ratio": 0, "mode": "avg", "aligned": 1, **attrs}
    node = helper.make_node("MMCVRoiAlign", ["input", "rois"], ["output"],
                            domain=domain, name="roi_extractor", **attrs)
    g = helper.make_graph([node], "mmdeploy_roi", [
        helper.make_tensor_value_info("input", dtype, [1, "C", "H", "W"]),
        helper.make_tensor_value_info("rois", dtype, ["R", 5])],
        [helper.make_tensor_value_info("output", dtype, ["R", "C", None, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(domain, 1)],
                             ir_version=9)


def _plain(model):
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("case", ROI_ALIGN_CASES, ids=[c["name"] for c in ROI_ALIGN_CASES])
def test_avg_matches_paddle_roi_align_on_five_column_rois(case, domain):
    X, boxes, counts = (case["inputs"][k] for k in ("X", "boxes", "boxes_num"))
    batch = np.repeat(np.arange(X.shape[0]), counts).astype(X.dtype)
    rois = np.concatenate([batch[:, None], boxes], 1)
    a = case["attrs"]
    m = mmdeploy_graph(helper.np_dtype_to_tensor_dtype(X.dtype), domain,
                       output_height=a.get("pooled_height", 1),
                       output_width=a.get("pooled_width", 1),
                       spatial_scale=a.get("spatial_scale", 1.0),
                       sampling_ratio=a.get("sampling_ratio", -1), mode="avg",
                       aligned=a.get("aligned", 1))
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = X.shape[0]
    got = _plain(m).run(None, {"input": X, "rois": rois})[0]
    expected = case["expected"]
    if case["nan_to_zero"]:  # Paddle's 0/0, our (and mmcv's) 0
        expected = np.nan_to_num(expected, nan=0.0)
    np.testing.assert_allclose(got, expected, **tolerance("RoIAlign", a, X.dtype))


@pytest.mark.parametrize("domain", DOMAINS)
def test_exported_graph_checks_infers_and_runs(domain):
    m = mmdeploy_graph(domain=domain)
    checker.check_model(m, full_check=True)
    if SHAPE_INFERENCE:  # onnx >= 1.19
        out = shape_inference.infer_shapes(m, strict_mode=True).graph.output[0]
        dims = [d.dim_param or d.dim_value for d in out.type.tensor_type.shape.dim]
        assert dims == ["R", "C", 7, 7]
    X = np.random.default_rng(0).standard_normal((1, 4, 20, 24)).astype(np.float32)
    rois = np.array([[0, 4, 4, 60, 44], [0, 10, 0, 95, 79]], np.float32)
    got = _plain(m).run(None, {"input": X, "rois": rois})[0]
    want = ops.roi_align(X, rois[:, 1:], np.array([2]), pooled_height=7, pooled_width=7,
                             spatial_scale=0.25, sampling_ratio=0, aligned=1)
    np.testing.assert_array_equal(got, want)
    assert np.abs(got).sum() > 0


@settings(max_examples=120, deadline=None)
@given(st.integers(0, 2**16), st.sampled_from([np.float32, np.float64]), st.integers(1, 3),
       st.integers(1, 3), st.sampled_from([0, 1, 2, 3]), st.sampled_from([0, 1]),
       st.sampled_from([1.0, 0.5, 0.25]))
def test_max_mode_matches_mmcv_loop(seed, dtype, ph, pw, sr, aligned, scale):
    rng = np.random.default_rng(seed)
    N, C, H, W = 2, 2, int(rng.integers(1, 8)), int(rng.integers(1, 8))
    X = rng.standard_normal((N, C, H, W)).astype(dtype)
    R = int(rng.integers(0, 4))
    xy = rng.uniform(-4, 16, (R, 2))
    wh = rng.uniform(-1, 12, (R, 2))  # some inverted boxes too
    rois = np.concatenate([rng.integers(0, N, (R, 1)), xy, xy + wh], 1).astype(dtype)
    a = dict(output_height=ph, output_width=pw, spatial_scale=scale, sampling_ratio=sr,
             mode="max", aligned=aligned)
    got = ops.mmcv_roi_align(X, rois, **a)
    want = literal.mmcv_roi_align(X, rois, **a)
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


@pytest.mark.parametrize("domain", DOMAINS)
def test_max_mode_in_a_plain_session(domain):
    X = np.arange(2 * 3 * 6 * 6, dtype=np.float32).reshape(2, 3, 6, 6) % 7
    rois = np.array([[1, 0, 0, 5, 5], [0, 2, 1, 4, 3]], np.float32)
    m = mmdeploy_graph(domain=domain, output_height=2, output_width=2, spatial_scale=1.0,
                       sampling_ratio=2, mode="max")
    m.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 2
    got = _plain(m).run(None, {"input": X, "rois": rois})[0]
    want = literal.mmcv_roi_align(X, rois, output_height=2, output_width=2, sampling_ratio=2,
                                  mode="max")
    np.testing.assert_allclose(got, want, rtol=1e-6)


def test_bad_rois_through_the_front_door():
    sess = ort_roi.InferenceSession(mmdeploy_graph())
    X = np.zeros((1, 2, 8, 8), np.float32)
    with pytest.raises(ort_roi.RoiOpError, match="MMCVRoiAlign.*'rois'.*batch index 3"):
        sess.run(None, {"input": X, "rois": np.array([[3, 0, 0, 4, 4]], np.float32)})


# --- MMDeploy's onnxruntime export of MMDetection's Faster / Mask R-CNN -----------------------
# ort_roi/data/mmdeploy_stage_{bbox,mask}_{11,16}.onnx: the SingleRoIExtractor stages cut by
# tools/mmdeploy_graphs.py from mmdeploy 1.3.1's whole-model exports (mmdet 3.3.0 R50-FPN,
# the bbox stage from Faster R-CNN, the mask stage from Mask R-CNN; opset 11 is MMDeploy's
# configs', 16 the first where RoiAlign keeps aligned itself).

STAGE_CASES = [(kind, opset) for kind in ("bbox", "mask") for opset in (11, 16)]
STAGE_POOLED = {"bbox": 7, "mask": 14}
STAGE_IMAGE = (160, 224)
STAGE_SCALES = (0.25, 0.125, 0.0625, 0.03125)
#: box sides either side of mmdet's level borders, floor(log2(side / 56 + 1e-6)) clipped to
#: 0..3: 1 from 112, 2 from 224, 3 from 448
STAGE_BORDERS = [111.99, 112.0, 112.01, 223.99, 224.0, 447.99, 448.0, 600.0]


def _stage(kind, opset):
    from importlib import resources

    import onnx
    return onnx.load_from_string(resources.files("ort_roi").joinpath(
        f"data/mmdeploy_stage_{kind}_{opset}.onnx").read_bytes())


def _stage_feed(seed=0, n=40, sides=(1.0, 400.0), borders=True):
    """Four FPN maps of a 160 x 224 image and rois [R, 5] over every level, boxes below one
    map pixel among them (sides from 1 px), and boxes on the level borders."""
    rng = np.random.default_rng(seed)
    feed = {f"feat{k}": rng.standard_normal((1, 256, int(STAGE_IMAGE[0] * s),
                                             int(STAGE_IMAGE[1] * s))).astype(np.float32)
            for k, s in enumerate(STAGE_SCALES)}
    xy = rng.uniform(0, 150, (n, 2))
    side = np.exp(rng.uniform(*np.log(sides), (n, 1)))
    boxes = [np.concatenate([xy, xy + side * rng.uniform(0.7, 1.4, (n, 2))], 1)]
    if borders:
        boxes.append(np.array([[4.0, 6.0, 4.0 + s, 6.0 + s] for s in STAGE_BORDERS]))
    boxes = np.concatenate(boxes)
    feed["rois"] = np.concatenate([np.zeros((len(boxes), 1)), boxes], 1).astype(np.float32)
    return feed


def _mmdet_levels(boxes):
    """mmdet's SingleRoIExtractor.map_roi_levels in float32, as the graph computes it."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    x = np.sqrt(w * h) / np.float32(56) + np.float32(1e-6)
    return np.clip(np.floor(np.log(x) / np.float32(np.log(2))), 0, 3).astype(int)





@pytest.mark.parametrize("kind,opset", STAGE_CASES)
def test_mmdeploy_stage_is_the_form_mmdeploy_writes(kind, opset):
    """What MMDeploy's single_roi_extractor__forward and roi_align symbolic write: per level
    NonZero(Equal(levels, l)) selecting rows of rois padded with 2 x 4 zero rois, RoiAligns
    on them (at opset 11 the boxes shifted by -0.5 / scale, aligned=True written out; at 16
    half_pixel), ScatterND merges into zeros padded the same way, and a Slice dropping the
    8 padding rows."""
    from onnx import numpy_helper
    m = _stage(kind, opset)
    ops = [op for _, op in op_types(m)]
    assert [ops.count(op) for op in ("RoiAlign", "ScatterND", "NonZero", "Slice")] == [4, 4, 4, 5]
    consts = {n.output[0]: numpy_helper.to_array(n.attribute[0].t) for n in m.graph.node
              if n.op_type == "Constant"}
    made = {o: n for n in m.graph.node for o in n.output}
    for l, ra in enumerate(n for n in m.graph.node if n.op_type == "RoiAlign"):
        a = {x.name: helper.get_attribute_value(x) for x in ra.attribute}
        assert a["spatial_scale"] == STAGE_SCALES[l] and a["output_height"] == STAGE_POOLED[kind]
        shift = made[ra.input[1]]
        if opset == 11:
            assert "coordinate_transformation_mode" not in a  # output_half_pixel
            assert shift.op_type == "Add"
            assert consts[shift.input[1]].tolist() == [-0.5 / STAGE_SCALES[l]]
        else:
            assert a["coordinate_transformation_mode"] == b"half_pixel"
            assert shift.op_type == "Gather"
    last = made["roi_feats"]
    assert last.op_type == "Slice" and consts[last.input[1]].tolist() == [8]


@pytest.mark.parametrize("kind,opset", STAGE_CASES)
def test_mmdeploy_stage_computes_mmdets_levels_and_the_shifted_roi_align(kind, opset):
    """The native graph, in onnxruntime, is mmdet's level rule and per level RoIAlign: at
    opset 11 aligned=0 on boxes shifted by -0.5 / scale (so boxes under one map pixel are
    stretched to one, unlike mmcv's aligned=True); at 16 aligned=1."""
    f = _stage_feed()
    boxes = f["rois"][:, 1:]
    levels = _mmdet_levels(boxes)
    assert set(levels) == {0, 1, 2, 3}
    assert list(levels[-len(STAGE_BORDERS):]) == [0, 1, 1, 1, 2, 2, 3, 3]
    got = run(_stage(kind, opset), f, ours=False)[0]
    p = STAGE_POOLED[kind]
    want = np.zeros_like(got)
    for l, s in enumerate(STAGE_SCALES):
        rows = levels == l
        b = boxes[rows] - np.float32(0.5 / s) if opset == 11 else boxes[rows]
        want[rows] = ops.roi_align(f[f"feat{l}"], b, np.array([rows.sum()]), pooled_height=p,
                                   pooled_width=p, spatial_scale=s, sampling_ratio=0,
                                   aligned=int(opset == 16))
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
    if opset == 11:  # not mmcv's aligned=True where a box is under one map pixel
        tiny = np.flatnonzero((levels == 0) & ((boxes[:, 2] - boxes[:, 0]) * 0.25 < 1))
        assert len(tiny) > 0
        r = tiny[:1]
        v1 = ops.roi_align(f["feat0"], boxes[r], np.array([1]), pooled_height=p, pooled_width=p,
                           spatial_scale=0.25, sampling_ratio=0, aligned=1)
        assert np.abs(v1 - got[r]).max() > 1e-3


#: the nodes of each native stage graph and of its fused form (the level rule's nodes stay; at
#: opset 11 the rows' shift by their level's offset comes)
STAGE_NODES = {11: (158, 37), 16: (166, 25)}


@pytest.mark.parametrize("kind,opset", STAGE_CASES)
def test_mmdeploy_stage_fuses_into_one_node(kind, opset):
    native = _stage(kind, opset)
    conv, done = convert_quietly(native)
    fused = [n for n in conv.graph.node if n.domain == "ort_roi"]
    assert [n.op_type for n in fused] == ["PyramidRoIAlign_L4"]
    left = {op for _, op in op_types(conv)}
    assert not left & {"RoiAlign", "ScatterND", "NonZero", "Equal", "ConstantOfShape"}, left
    assert (len(native.graph.node), len(conv.graph.node)) == STAGE_NODES[opset]
    n, m = STAGE_NODES[opset]
    shift = 12 if opset == 11 else 0  # the Constants, Cast, Mod, Gather, Slices, Add, Concat
    assert done.moved[0][1] == f"ScatterND-merged RoI stage ({n - m + 1 + shift} nodes)"
    assert done.notes == []  # MMDeploy wrote aligned=True out: no "aligned lost" note
    a = {x.name: helper.get_attribute_value(x) for x in fused[0].attribute}
    p = STAGE_POOLED[kind]
    assert a == dict(output_height=p, output_width=p, sampling_ratio=0, aligned=int(opset >= 16),
                     **{f"spatial_scale_{i}": s for i, s in enumerate(STAGE_SCALES)})
    assert list(fused[0].input[2:]) == ["feat0", "feat1", "feat2", "feat3"]
    assert fused[0].output[0] == "roi_feats"
    rois = fused[0].input[0]
    assert (rois == "rois") == (opset == 16)  # at 11: the rois shifted by -0.5 / scale


@pytest.mark.parametrize("kind,opset", STAGE_CASES)
def test_mmdeploy_stage_fused_computes_what_the_native_graph_does(kind, opset):
    native = _stage(kind, opset)
    conv, _ = convert_quietly(native)
    plain, _ = convert_quietly(native, fuse=False)
    assert op_types(plain).count(("ort_roi", "RoiAlign")) == 4
    for f in (_stage_feed(), _stage_feed(1, 30, (2.0, 100.0), borders=False)):
        want, got = run(native, f, ours=False)[0], run(conv, f)[0]
        assert got.shape == (len(f["rois"]), 256, STAGE_POOLED[kind], STAGE_POOLED[kind])
        assert np.abs(want).reshape(len(want), -1).sum(1).min() > 0  # every row pooled
        np.testing.assert_array_equal(got, run(plain, f)[0])  # the fusion changes no bit
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def _offset(m, level):
    """The Add shifting the boxes of the level's RoiAlign."""
    return next(n for n in m.graph.node if n.output[0] == nodes(m, "RoiAlign")[level].input[1])


def test_mmdeploy_rows_no_level_selects_stay_zero():
    """The Clip's upper bound raised from 3 to 5: boxes of levels 4 and 5 are selected by no
    branch (the native merge leaves their rows zero); the stage still fuses, the fused node
    writes those rows zero (their offset, taken mod 4, pools nothing)."""
    native = _stage("bbox", 11)
    set_constant(native, nodes(native, "Clip")[0].input[2], np.array(5.0, np.float32))
    assert_fused_rows_of_no_level_stay_zero(native,
                                            _stage_feed(2, 20, (300.0, 2000.0), borders=False))


def test_mmdeploy_any_constant_offset_fuses_exactly():
    """The offset is recognised as what it computes (each level's constant added to its
    boxes), not as -0.5 / scale: level 2's changed to +3 still fuses, the same bits."""
    native = _stage("mask", 11)
    set_constant(native, _offset(native, 2).input[1], np.array([3.0], np.float32))
    conv, _ = convert_quietly(native)
    plain, _ = convert_quietly(native, fuse=False)
    assert op_types(conv).count(("ort_roi", "PyramidRoIAlign_L4")) == 1
    f = _stage_feed(3)
    np.testing.assert_array_equal(run(conv, f)[0], run(plain, f)[0])


def _slice_start(m):
    set_constant(m, m.graph.node[-1].input[1], np.array([7], np.int64))
    return "reads [7] as input 1 where torch.onnx writes [8]"


def _padding_rows(m):
    pad = next(n for n in m.graph.node if n.op_type == "Concat"
               and n.input[-1] == "rois")
    set_constant(m, pad.input[0], np.zeros((6, 5), np.float32))
    return "6 padding rows of rois, 8 padding levels"


def _two_offsets(m):
    set_constant(m, _offset(m, 1).input[1], np.array([-4.0, -4.0, -4.0, -4.0], np.float32))
    return "not the boxes plus one float constant"


@pytest.mark.parametrize("mutate", [_slice_start, _padding_rows, _two_offsets],
                         ids=lambda f: f.__name__.strip("_"))
def test_mmdeploy_stage_differing_in_one_part_is_left_with_a_note_naming_it(mutate):
    native = _stage("bbox", 11)
    what = mutate(native)
    conv, done = convert_quietly(native)
    assert ("ort_roi", "PyramidRoIAlign_L4") not in op_types(conv)
    assert op_types(conv).count(("ort_roi", "RoiAlign")) == 4
    note = next(n for n in done.notes if "ScatterND family" in n)
    assert note.startswith("node '/bbox_roi_extractor/ScatterND' (ScatterND)"), note
    assert "does not match it exactly" in note and what in note, note
    if mutate is not _padding_rows:  # (6 zero rows padded, 8 levels: the native graph fails)
        f = _stage_feed()
        np.testing.assert_allclose(run(conv, f)[0], run(native, f, ours=False)[0],
                                   rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("opset", [11, 16])
def test_mmdeploy_fused_stage_goes_back_to_onnx_and_fuses_again(opset):
    native = _stage("bbox", opset)
    back, done = convert_quietly(convert_quietly(native)[0], to="onnx")
    assert ("ort_roi", "PyramidRoIAlign_L4") not in op_types(back)
    f = _stage_feed(4)
    np.testing.assert_allclose(run(back, f, ours=False)[0],
                               run(native, f, ours=False)[0], rtol=1e-5, atol=2e-6)
    assert op_types(convert_quietly(back)[0]).count(("ort_roi", "PyramidRoIAlign_L4")) == 1


def test_mmdeploy_info_names_the_stage_left_and_why(tmp_path, capsys):
    import onnx
    from ort_roi.cli.main import main as cli

    native = _stage("bbox", 11)
    what = _slice_start(native)
    path = tmp_path / "stage.onnx"
    onnx.save(native, str(path))
    assert cli(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note: node '/bbox_roi_extractor/ScatterND' (ScatterND) merges RoiAlign results" in out
    assert what in out and "aligned=True" not in out, out


def test_a_scatter_nd_merge_of_mmcv_roi_align_is_named_not_fused(tmp_path, capsys):
    """MMDeploy's PPLNN export merges mmcv::MMCVRoiAlign results with ScatterND as its
    onnxruntime export merges RoiAligns: convert leaves that stage node by node and says so,
    naming the merge and the node."""
    from ort_roi.cli import main as cli

    pool = helper.make_node("MMCVRoiAlign", ["feat", "rois"], ["pooled"], domain="mmcv",
                            name="roi_layers.0/MMCVRoiAlign", output_height=7, output_width=7,
                            spatial_scale=0.25, sampling_ratio=0, mode="avg", aligned=1)
    nodes = [
        pool,
        helper.make_node("Shape", ["pooled"], ["shape"], name="shape"),
        helper.make_node("Reshape", ["pooled", "shape"], ["updates"], name="reshape"),
        helper.make_node("Shape", ["rois"], ["rshape"], name="rshape"),
        helper.make_node("ConstantOfShape", ["dims"], ["zeros"], name="zeros"),
        helper.make_node("ScatterND", ["zeros", "index", "updates"], ["merged"],
                         name="extractor/ScatterND"),
    ]
    g = helper.make_graph(
        nodes, "main_graph",
        [helper.make_tensor_value_info("feat", TensorProto.FLOAT, [1, 8, 16, 16]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["K", 5]),
         helper.make_tensor_value_info("index", TensorProto.INT64, ["K", 1]),
         helper.make_tensor_value_info("dims", TensorProto.INT64, [4])],
        [helper.make_tensor_value_info("merged", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 11),
                                            helper.make_opsetid("mmcv", 1)], ir_version=7)
    m.producer_name = "pytorch"
    conv, done = convert_quietly(m)
    assert [n.op_type for n in conv.graph.node].count("ScatterND") == 1
    want = ("node 'extractor/ScatterND' (ScatterND) merges the results of mmcv::MMCVRoiAlign "
            "('roi_layers.0/MMCVRoiAlign')")
    assert any(n.startswith(want) for n in done.notes), done.notes
    path = str(tmp_path / "pplnn.onnx")
    import onnx

    onnx.save(m, path)
    assert cli.main(["info", path]) == 0
    assert want in capsys.readouterr().out


def test_the_stage_floor_is_the_fused_graph_with_a_kernel_that_hands_back_its_output():
    """The stage benches' "bridge alone" (bench_peers.graph_floor): the fused stage in a real
    session whose one ort_roi node's kernel returns the given output at once; the graph's
    own nodes still run, and the op's real kernel is left as it was."""
    from ort_roi.cli.bench_peers import graph_floor

    conv, _ = convert_quietly(_stage("mask", 16))
    f = _stage_feed()
    y = run(conv, f)[0]
    marker = np.full_like(y, 7.5)
    np.testing.assert_array_equal(graph_floor(conv, f, marker)(), marker)
    np.testing.assert_array_equal(run(conv, f)[0], y)
    with pytest.raises(ValueError, match="one node of domain 'ort_roi', it holds 0"):
        graph_floor(_stage("mask", 16), f, marker)
