"""DistributeRoIAlign_L{L}: PaddleDetection's FPN RoI stage (distribute_fpn_proposals, roi_align
per level, concat, gather by restore_index) as one op, and the fusion of the stage as
export-paddle writes it (ort_roi/graph/paddle.py): the op against its definition, bit for bit
the unfused graph in a real onnxruntime session, the fusion exact (one node, the same bits),
near misses left with a note, bad inputs, shapes, and with paddledet installed the real R18
model fused against Paddle Inference."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import ort_roi
from tests import paddle_models as models
from tests import paddle_stage_cases as S
from tests.versions import needs_shape_inference
from ort_roi import RoiOpError, ops
from ort_roi.graph import paddle as P
from ort_roi.graph.builders import make_model, make_node, single_op_model, tensor

CASES = S.cases()


def _tol(dtype) -> dict:
    return dict(rtol=1e-5, atol=1e-5) if np.dtype(dtype) == np.float32 else dict(rtol=1e-12,
                                                                                 atol=1e-12)


def _levels(case) -> int:
    return len(case["inputs"]) - 2


# -- the unfused stage as export-paddle writes it ---------------------------------------------

def unfused_model(case: dict, *, opset: int = 17, concat_axis: int = 0, other_pooled: bool = False,
                  other_restore: bool = False, add: float = 0.0, extra_output: bool = False,
                  tail: bool = True) -> onnx.ModelProto:
    """The stage export-paddle writes for ``case``: DistributeFpnProposals_L{L}, each output
    through paddle2onnx's assign chain (Unsqueeze(axes [0]) -> Add(zero) -> Squeeze(axes [0]);
    the counts through two, as the exported R50 holds them), ort_roi::RoIAlign per level,
    Identity x 2, Concat(axis 0), Identity, Gather(axis 0, restore_index) -> "pooled"
    [R, 1, C, PH, PW], and (``tail``) the head's flatten Reshape(x, Concat(Shape(x)[0:1],
    [-1])) -> "flat" (which onnxruntime refuses for no rois: [0, -1]). The keywords make near
    misses."""
    a = case["attrs"]
    L = _levels(case)
    T = case["inputs"]["fpn_rois"].dtype
    I = case["inputs"]["rois_num"].dtype
    nodes: list[onnx.NodeProto] = []
    k = [0]

    def const(value, dtype) -> str:
        k[0] += 1
        name = f"helper.constant.{k[0]}"
        nodes.append(helper.make_node("Constant", [], [name], name=name,
                                      value=numpy_helper.from_array(np.asarray(value, dtype))))
        return name

    def op(op_type, inputs, **attrs) -> str:
        k[0] += 1
        name = f"{op_type}.{k[0]}"
        nodes.append(helper.make_node(op_type, inputs, [name], name=name, **attrs))
        return name

    def axes_op(op_type, x) -> str:
        if opset >= 13:
            return op(op_type, [x, const([0], np.int64)])
        return op(op_type, [x], axes=[0])

    def assign(x, dtype, zero=0.0) -> str:
        return axes_op("Squeeze", op("Add", [axes_op("Unsqueeze", x), const([zero], dtype)]))

    dist = dict(min_level=a["min_level"], max_level=a["max_level"],
                refer_level=a["refer_level"], refer_scale=a["refer_scale"],
                pixel_offset=a["pixel_offset"])

    def distribute(prefix):
        outs = [f"{prefix}_{i}" for i in range(2 * L + 1)]
        nodes.append(make_node(f"DistributeFpnProposals_L{L}", ["fpn_rois", "rois_num"], outs,
                               name=prefix, **dist))
        return outs

    d = distribute("paddle_distribute_fpn_proposals_0")
    rois = [assign(d[i], T) for i in range(L)]
    nums = [assign(assign(d[L + i], np.int32), np.int32) for i in range(L)]
    restore = assign((distribute("other_distribute") if other_restore else d)[2 * L], np.int32,
                     add)
    pooled = []
    for i in range(L):
        ph = a["pooled_height"] + (1 if other_pooled and i == 1 else 0)
        y = f"p2o.pd_op.roi_align.{i}.0"
        nodes.append(make_node("RoIAlign", [f"feat_{i}", rois[i], nums[i]], [y],
                               name=f"paddle_roi_align_{i}", pooled_height=ph,
                               pooled_width=a["pooled_width"],
                               spatial_scale=a[f"spatial_scale_{i}"],
                               sampling_ratio=a["sampling_ratio"], aligned=a["aligned"]))
        pooled.append(op("Identity", [op("Identity", [y])]))
    cat = op("Identity", [op("Concat", pooled, axis=concat_axis)])
    nodes.append(helper.make_node("Gather", [cat, restore], ["pooled"], name="Gather.1", axis=0))
    outputs = [tensor("pooled", T, None)]
    if tail and len(case["inputs"]["fpn_rois"]):  # the head's flatten (of no rois: refused)
        first = op("Slice", [op("Shape", ["pooled"]), const([0], np.int64),
                             const([1], np.int64), const([0], np.int64)])
        nodes.append(helper.make_node("Reshape", ["pooled", op("Concat", [first, const(
            [-1], np.int64)], axis=0)], ["flat"], name="Reshape.flat"))
        outputs.append(tensor("flat", T, None))
    if extra_output:
        outputs.append(tensor("p2o.pd_op.roi_align.0.0", T, None))
    inputs = [tensor("fpn_rois", T, ["R", 4]), tensor("rois_num", I, ["N"])]
    inputs += [tensor(f"feat_{i}", T, ["N", "C", None, None]) for i in range(L)]
    m = make_model(nodes, inputs, outputs, name="paddle_fpn_stage")
    m.opset_import[0].version = opset
    return m


def _session(model: onnx.ModelProto) -> ort.InferenceSession:
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options())


def _op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


# -- the op --------------------------------------------------------------------------------------

@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_op_equals_its_definition(case):
    spec = ops.spec(case["op"])
    args = list(case["inputs"].values())
    got = ops.kernel(spec)(*args, **case["attrs"])
    want = ops.define(spec, *args, **case["attrs"])
    assert got.shape == want.shape == (len(args[0]), args[2].shape[1],
                                       case["attrs"]["pooled_height"],
                                       case["attrs"]["pooled_width"])
    assert got.dtype == args[0].dtype
    np.testing.assert_allclose(got, want, **_tol(got.dtype))


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_op_is_the_unfused_stage_bit_for_bit_in_a_session(case):
    """The unfused graph (DistributeFpnProposals, assign chains, RoIAlign per level, Concat,
    Gather) run by onnxruntime; the op called directly and a one-node session of it: the same
    bits (the rows in the rois' order, Gather's [R, 1, ...] without its 1)."""
    want = _session(unfused_model(case)).run(["pooled"], case["inputs"])[0]
    args = list(case["inputs"].values())
    got = ops.kernel(ops.spec(case["op"]))(*args, **case["attrs"])
    assert want.shape == (got.shape[0], 1) + got.shape[1:]
    np.testing.assert_array_equal(got, want[:, 0])
    one = single_op_model(case["op"], args[0].dtype, args[1].dtype, **case["attrs"])
    np.testing.assert_array_equal(_session(one).run(None, case["inputs"])[0], got)


def test_the_op_follows_roi_align_and_the_level_rule_where_they_are_exact():
    """Rois at the level boundaries (sqrt(area) = 224 * 2**k, and one float32 ulp either
    side) and huge and inverted ones: the fused op equals DistributeFpnProposals then RoIAlign
    per level called as kernels."""
    rng = np.random.default_rng(7)
    sides = []
    for k in range(-3, 3):
        s = np.float32(224 * 2.0 ** k)
        sides += [np.nextafter(s, np.float32(0)), s, np.nextafter(s, np.float32(1e9))]
    sides = np.array(sides, np.float32)
    x = rng.uniform(0, 40, len(sides)).astype(np.float32)
    rois = np.stack([x, x, x + sides, x + sides], 1)
    rois = np.concatenate([rois, [[30, 30, 10, 10], [0, 0, 3e4, 3e4], [5, 5, 5, 5]]]).astype(
        np.float32)
    feats = [rng.standard_normal((1, 2, 30 >> i, 34 >> i)).astype(np.float32) for i in range(4)]
    num = np.array([len(rois)], np.int32)
    attrs = dict(min_level=2, max_level=5, pooled_height=7, pooled_width=7, sampling_ratio=0,
                 aligned=1)
    scales = [0.25, 0.125, 0.0625, 0.03125]
    got = ops.distribute_roi_align(rois, num, *feats, spatial_scales=scales, **attrs)
    d = ops.distribute_fpn_proposals(rois, num, min_level=2, max_level=5)
    per = [ops.roi_align(feats[i], d[i], d[4 + i], pooled_height=7, pooled_width=7,
                         spatial_scale=scales[i], sampling_ratio=0, aligned=1)
           for i in range(4)]
    assert all(len(d[i]) for i in range(4))  # every level used
    np.testing.assert_array_equal(got, np.concatenate(per)[d[8][:, 0]])


# -- the fusion ----------------------------------------------------------------------------------

@pytest.mark.parametrize("opset", [17, 11])
@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[3], CASES[4]],
                         ids=lambda c: c["name"])
def test_fusion_makes_the_stage_one_node_with_the_same_bits(case, opset):
    m = unfused_model(case, opset=opset)
    fused, done = ort_roi.convert(m, report=True)
    L = _levels(case)
    assert [x[2] for x in done.moved if "FPN" in x[1]] == [f"{ort_roi.DOMAIN}::DistributeRoIAlign"]
    assert not [n for n in done.notes if "FPN" in n]
    kinds = _op_types(fused)
    assert kinds.count(f"DistributeRoIAlign_L{L}") == 1
    for gone in ("RoIAlign", f"DistributeFpnProposals_L{L}", "Gather", "Add", "Squeeze",
                 "Identity"):
        assert gone not in kinds, kinds
    # what stays: the fused node, its Unsqueeze, the head's flatten
    tail = ["Shape", "Slice", "Concat", "Reshape"] + ["Constant"] * 4 if len(
        case["inputs"]["fpn_rois"]) else []
    assert sorted(kinds) == sorted([f"DistributeRoIAlign_L{L}", "Unsqueeze"] + tail)
    node = next(n for n in fused.graph.node if n.op_type.startswith("DistributeRoIAlign"))
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    for key in ("min_level", "max_level", "pooled_height", "sampling_ratio", "aligned"):
        assert attrs[key] == case["attrs"][key], key
    assert list(node.input) == ["fpn_rois", "rois_num"] + [f"feat_{i}" for i in range(L)]
    assert {o.domain for o in fused.opset_import} == {"", ort_roi.DOMAIN}
    want = _session(m).run(None, case["inputs"])
    got = _session(fused).run(None, case["inputs"])
    for w, g in zip(want, got):
        assert w.shape == g.shape and w.dtype == g.dtype
        np.testing.assert_array_equal(g, w)


def test_fuse_fpn_stages_in_place_and_again_changes_nothing():
    m = unfused_model(CASES[0])
    moved, notes = P.fuse_fpn_stages(m)
    assert len(moved) == 1 and notes == []
    assert "nodes" in moved[0][1] and moved[0][0].endswith("/DistributeRoIAlign_L4")
    before = m.SerializeToString()
    assert P.fuse_fpn_stages(m) == ([], [])
    assert m.SerializeToString() == before


def _add_second_stage(m: onnx.ModelProto, made: set, skip=None) -> None:
    """Copies of m's nodes (but ``skip``) appended under "second/" names, each reading the
    copy of every tensor of ``made`` it reads: a second stage in the same graph."""
    second = []
    for n in m.graph.node:
        if n is skip:
            continue
        c = onnx.NodeProto()
        c.CopyFrom(n)
        c.name = "second/" + n.name
        c.input[:] = ["second/" + i if i in made else i for i in n.input]
        c.output[:] = ["second/" + o for o in n.output]
        second.append(c)
    m.graph.node.extend(second)


def test_two_stages_in_one_graph_fuse_each():
    """Mask R-CNN (box and mask heads) and Cascade R-CNN run the extractor more than once:
    each stage becomes its own node, outputs unchanged."""
    m = unfused_model(CASES[0])
    _add_second_stage(m, {o for n in m.graph.node for o in n.output})
    m.graph.output.extend([tensor("second/pooled", np.float32, None),
                           tensor("second/flat", np.float32, None)])
    fused, done = ort_roi.convert(m, report=True)
    assert len([x for x in done.moved if "FPN" in x[1]]) == 2
    assert _op_types(fused).count("DistributeRoIAlign_L4") == 2
    assert "RoIAlign" not in _op_types(fused)
    want = _session(m).run(None, CASES[0]["inputs"])
    got = _session(fused).run(None, CASES[0]["inputs"])
    assert len(got) == 4
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_two_stages_after_one_distribute_fuse_each():
    """Two heads pooling the same Distribute's levels (its restore_index read by two
    Gathers): each stage becomes its own node with its own names, outputs unchanged."""
    m = unfused_model(CASES[0], tail=False)
    dist = next(n for n in m.graph.node if n.op_type.startswith("DistributeFpnProposals"))
    _add_second_stage(m, {o for n in m.graph.node for o in n.output} - set(dist.output),
                      skip=dist)
    m.graph.output.extend([tensor("second/pooled", np.float32, None)])
    fused, done = ort_roi.convert(m, report=True)
    assert len([x for x in done.moved if "FPN" in x[1]]) == 2, done
    assert _op_types(fused).count("DistributeRoIAlign_L4") == 2
    assert "DistributeFpnProposals_L4" not in _op_types(fused)
    made = [o for n in fused.graph.node for o in n.output]
    assert len(made) == len(set(made))  # SSA: the two stages' tensors are named apart
    want = _session(m).run(None, CASES[0]["inputs"])
    got = _session(fused).run(None, CASES[0]["inputs"])
    assert len(got) == 2
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


def test_other_readers_of_distribute_keep_it():
    """A graph output reading Distribute's restore_index keeps the Distribute node (its value
    is the graph's), the stage still fuses."""
    m = unfused_model(CASES[0])
    m.graph.output.append(tensor("paddle_distribute_fpn_proposals_0_8", np.int32, None))
    fused, done = ort_roi.convert(m, report=True)
    kinds = _op_types(fused)
    assert "DistributeRoIAlign_L4" in kinds and "DistributeFpnProposals_L4" in kinds
    assert "RoIAlign" not in kinds
    want = _session(m).run(None, CASES[0]["inputs"])
    got = _session(fused).run(None, CASES[0]["inputs"])
    for w, g in zip(want, got):
        np.testing.assert_array_equal(g, w)


NEAR_MISSES = {
    "concat_axis": (dict(concat_axis=1), "Concat 'Concat."),
    "other_pooled": (dict(other_pooled=True), "RoIAlign 'paddle_roi_align_1' (level 1) pools "
                                              "with {'pooled_height': 8"),
    "other_restore": (dict(other_restore=True), "reads 'Squeeze."),
    "add_one": (dict(add=1.0), "adds [1]"),
    "extra_output": (dict(extra_output=True), "is read by a graph output too"),
}


@pytest.mark.parametrize("name", NEAR_MISSES)
def test_near_misses_stay_with_a_note(name):
    kw, why = NEAR_MISSES[name]
    m = unfused_model(CASES[0], **kw)
    before = _op_types(m)
    moved, notes = P.fuse_fpn_stages(m)
    assert moved == []
    assert len(notes) == 1, notes
    assert notes[0].startswith("node 'Gather.1' (Gather) reads restore_index of ")
    assert why in notes[0], notes[0]
    assert "left unfused" in notes[0]
    assert _op_types(m) == before
    if name == "other_restore":  # a restore_index from the other Distribute: named
        assert "'other_distribute'" in notes[0] and "not rois_0 of" in notes[0]


def test_a_lone_distribute_gets_no_note():
    """No Gather of restore_index: not the stage, nothing to say (DistributeFpnProposals graphs
    convert without warnings)."""
    case = CASES[0]
    L = _levels(case)
    a = {k: case["attrs"][k] for k in ("min_level", "max_level")}
    node = make_node(f"DistributeFpnProposals_L{L}", ["fpn_rois", "rois_num"],
                     [f"o{i}" for i in range(2 * L + 1)], **a)
    m = make_model([node], [tensor("fpn_rois", np.float32, None),
                            tensor("rois_num", np.int32, None)],
                   [tensor(f"o{i}", np.float32 if i < L else np.int32, None)
                    for i in range(2 * L + 1)])
    assert P.fuse_fpn_stages(m) == ([], [])


# -- bad inputs, shapes, info ------------------------------------------------------------------

def _bad_call(**change):
    case = CASES[0]
    x = dict(case["inputs"])
    a = dict(case["attrs"])
    for k, v in change.items():
        (x if k in x else a)[k] = v(x[k] if k in x else a.get(k)) if callable(v) else v
    return lambda: ops.distribute_roi_align_levels(*x.values(), **a) if False else \
        ops.kernel(ops.spec(case["op"]))(*x.values(), **a)


BAD = [
    (dict(fpn_rois=lambda r: r.astype(np.float64)), "input 'fpn_rois'", "float64"),
    (dict(fpn_rois=lambda r: np.where(np.arange(len(r))[:, None] == 3, np.nan, r)),
     "input 'fpn_rois'", "row 3"),
    (dict(fpn_rois=lambda r: r[:, :3]), "input 'fpn_rois'", "[40, 3]"),
    (dict(fpn_rois=lambda r: np.where(np.arange(len(r))[:, None] == 5,
                                      np.array([-3e38, 0, 3e38, 10], np.float32), r),
          spatial_scale_0=1.0), "input 'fpn_rois'", "row 5: the scaled box size overflows"),
    (dict(rois_num=lambda n: n + 1), "input 'rois_num'", "must sum to R = 40"),
    (dict(rois_num=lambda n: np.array([23, 18, -1], np.int32)), "input 'rois_num'", "[3]"),
    (dict(rois_num=lambda n: n.astype(np.float32)), "input 'rois_num'", "float32"),
    (dict(feat_2=lambda f: f[:, :2]), "input 'feat_2'", "N and C"),
    (dict(feat_1=lambda f: f.astype(np.float64)), "input 'feat_1'", "float64"),
    (dict(max_level=6), "attribute 'max_level'", "6 - 2 + 1 = 5"),
    (dict(spatial_scale_3=-1.0), "attribute 'spatial_scale_3'", "-1.0"),
    (dict(pooled_height=0), "attribute 'pooled_height'", "0"),
    (dict(aligned=2), "attribute 'aligned'", "2"),
]


@pytest.mark.parametrize("change, where, what", BAD, ids=[b[1] + ":" + b[2] for b in BAD])
def test_bad_inputs_name_op_input_and_value(change, where, what):
    with pytest.raises(RoiOpError) as e:
        _bad_call(**change)()
    msg = str(e.value)
    assert "DistributeRoIAlign_L4" in msg and where in msg and what in msg, msg


def test_bad_input_in_a_session(caplog):
    """A plain session survives (NaN output, the error logged); the front door raises."""
    case = CASES[0]
    m = single_op_model(case["op"], **case["attrs"])
    feed = dict(case["inputs"], rois_num=np.array([1, 2], np.int32))
    with caplog.at_level(logging.ERROR, logger="ort_roi"):
        y = _session(m).run(None, feed)[0]
    assert np.isnan(y).all()
    assert "DistributeRoIAlign_L4" in caplog.text and "must sum to R = 40" in caplog.text
    with pytest.raises(RoiOpError, match="DistributeRoIAlign_L4.*rois_num.*must sum to R = 40"):
        ort_roi.InferenceSession(m).run(None, feed)


def test_the_number_of_maps_picks_the_op():
    case = CASES[0]
    args = list(case["inputs"].values())
    with pytest.raises(RoiOpError, match="takes 1 to 6 feature maps, got 7"):
        ops.distribute_roi_align(args[0], args[1], *[args[2]] * 7, min_level=1, max_level=7,
                                 spatial_scales=[0.25] * 7)
    with pytest.raises(RoiOpError, match="spatial_scales.*one value per feature map \\(4\\)"):
        ops.distribute_roi_align(*args, min_level=2, max_level=5, spatial_scales=[0.25])


@needs_shape_inference
@pytest.mark.parametrize("L", [1, 4, 6])
def test_schema_and_shape_inference(L):
    case = next(c for c in CASES if _levels(c) == L)
    m = single_op_model(case["op"], **case["attrs"])
    assert onnx.defs.has(case["op"], ort_roi.DOMAIN)
    m.graph.input[0].CopyFrom(tensor("fpn_rois", np.float32, ["R", 4]))
    m.graph.input[2].CopyFrom(tensor("feat_0", np.float32, [2, 3, 40, 48]))
    m.graph.output[0].type.tensor_type.ClearField("shape")
    out = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    dims = out.graph.output[0].type.tensor_type.shape.dim
    ph, pw = case["attrs"]["pooled_height"], case["attrs"]["pooled_width"]
    assert [d.dim_param or d.dim_value for d in dims] == ["R", 3, ph, pw]
    spec = ops.spec(case["op"])
    assert spec.output_shapes([["R", 4], ["N"]] + [[2, 3, None, None]] * L,
                              spec.resolve(case["attrs"])) == [["R", 3, ph, pw]]
    with pytest.raises(RoiOpError, match="attribute 'max_level'"):
        spec.output_shapes([None] * (L + 2), dict(spec.resolve(case["attrs"]),
                                                   max_level=case["attrs"]["max_level"] + 1))
    with pytest.raises(RoiOpError, match="input 'fpn_rois'"):
        spec.output_shapes([["R", 5]], spec.resolve(case["attrs"]))


def test_info_lists_it():
    out = subprocess.run([sys.executable, "-m", "ort_roi", "info"], capture_output=True,
                         text=True, check=True).stdout
    for L in range(1, 7):
        assert f"ort_roi::DistributeRoIAlign_L{L}" in out


# -- the real model ------------------------------------------------------------------------------

@pytest.mark.skipif(bool(models.NEEDS), reason="needs " + ", ".join(models.NEEDS) + ": "
                    + models.INSTALL)
def test_paddledet_r18_fused_equals_unfused_and_paddle_inference(tmp_path):
    prefix = models.build(str(tmp_path / "faster_rcnn_r18_fpn"), depth=18, pre_nms_top_n=300,
                       post_nms_top_n=300)
    model = ort_roi.paddle_export(prefix)
    unfused = ort_roi.paddle_export(prefix, fuse=False)
    assert "DistributeFpnProposals_L4" in _op_types(unfused)
    kinds = sorted(n.op_type for n in model.graph.node if n.domain == ort_roi.DOMAIN)
    assert kinds == ["DistributeRoIAlign_L4"] + ["GenerateProposals"] * 5
    pooled = next(n.output[0] for n in model.graph.node if n.op_type == "Unsqueeze"
                  and n.input[0].endswith("DistributeRoIAlign_L4_output"))
    for m in (model, unfused):  # the stage's output too
        m.graph.output.append(onnx.ValueInfoProto(name=pooled))
    fused_s, unfused_s = _session(model), _session(unfused)
    run, why = models.paddle_predictor(prefix, mkldnn=False, threads=1)
    assert run is not None, why
    for size, seed in (((256, 320), 0), ((224, 288), 1)):
        f = models.feeds(size, seed)
        got, base, want = fused_s.run(None, f), unfused_s.run(None, f), run(f)
        assert got[-1].shape[0] > 50  # rois pooled
        for g, b in zip(got, base):  # the fusion changes no bit
            np.testing.assert_array_equal(g, b)
        assert got[0].shape == want[0].shape and got[0].shape[0] > 50
        models.assert_detections_equal(got, want)


# -- the CUDA backend (its source built for the host) --------------------------------------------

from tests.test_cupy import host_cupy, host_lib  # noqa: E402,F401 - the fixtures


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[4]], ids=lambda c: c["name"])
def test_cuda_source_on_host(host_cupy, case):
    """The maps on the "device": the fused op runs the CUDA align_levels step; it equals the
    unfused stage computed there (RoIAlign per level on the device, concat, gather) bit for
    bit, and NumPy within the float tolerance."""
    args = list(case["inputs"].values())
    a = case["attrs"]
    L = _levels(case)
    dev = [host_cupy.asarray(x) for x in args[2:]]
    got = ops.kernel(ops.spec(case["op"]))(args[0], args[1], *dev, **a)
    assert isinstance(got, host_cupy.ndarray)
    got = np.asarray(got)
    d = ops.distribute_fpn_proposals(args[0], args[1], min_level=a["min_level"],
                                     max_level=a["max_level"], refer_level=a["refer_level"],
                                     refer_scale=a["refer_scale"], pixel_offset=a["pixel_offset"])
    per = [np.asarray(ops.roi_align(dev[i], d[i], d[L + i], pooled_height=a["pooled_height"],
                                    pooled_width=a["pooled_width"],
                                    spatial_scale=a[f"spatial_scale_{i}"],
                                    sampling_ratio=a["sampling_ratio"], aligned=a["aligned"]))
           for i in range(L)]
    np.testing.assert_array_equal(got, np.concatenate(per)[d[2 * L][:, 0]])
    want = ops.kernel(ops.spec(case["op"]))(*args, **a)
    np.testing.assert_allclose(got, want, **_tol(want.dtype))


# -- export-paddle's zero-row Reshape repair (empty_safe_reshapes) ----------------------------

def _reshape_model(form: str, onnx_opset: int) -> onnx.ModelProto:
    """One Reshape of x (rank 3 or 4) as paddle2onnx writes it: ``const`` Paddle's
    reshape(x, [0, 2, -1]) (a constant shape), ``flatten`` Paddle's flatten(x, 1, 2)
    (Concat(Shape(x)[:1], [-1], Shape(x)[3:]))."""
    if form == "const":
        nodes = [helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
        inits = [numpy_helper.from_array(np.array([0, 2, -1], np.int64), "shape")]
        rank = 3
    else:
        nodes = [helper.make_node("Shape", ["x"], ["s"], name="s"),
                 helper.make_node("Slice", ["s", "z", "one"], ["head"], name="head"),
                 helper.make_node("Slice", ["s", "three", "big"], ["tail"], name="tail"),
                 helper.make_node("Concat", ["head", "m1", "tail"], ["shape"], name="cat", axis=0),
                 helper.make_node("Reshape", ["x", "shape"], ["y"], name="r")]
        inits = [numpy_helper.from_array(np.array([v], np.int64), n)
                 for n, v in (("z", 0), ("one", 1), ("three", 3), ("big", 1 << 62), ("m1", -1))]
        rank = 4
    m = make_model(nodes, [tensor("x", "float32", [f"d{i}" for i in range(rank)])],
                   [tensor("y", "float32", [None] * 3)], initializers=inits)
    m.opset_import[0].version = onnx_opset
    return m


def _run(model, x):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("onnx_opset", [11, 13, 14, 17])
@pytest.mark.parametrize("form, shape, want", [
    ("const", (3, 0, 5), (3, 2, 0)),  # issue 51: the -1 is 0 beside nonzero copied dims
    ("const", (0, 4, 5), (0, 2, 10)),  # no rows: onnxruntime cannot infer the -1
    ("const", (3, 4, 5), (3, 2, 10)),
    ("flatten", (2, 3, 0, 4), (2, 0, 4)),  # the -1 is 0, x's dim 1 is not
    ("flatten", (0, 3, 2, 4), (0, 6, 4)),
    ("flatten", (2, 3, 2, 4), (2, 6, 4))])
def test_empty_safe_reshapes_keep_a_computed_zero(onnx_opset, form, shape, want):
    """The repaired Reshape gives Paddle's shape in a real session at every opset, and the
    values of paddle2onnx's Reshape wherever that one runs. Below opset 14 (no allowzero) a
    0 in a Reshape's shape copies the input's dim: the repair wrote the -1 it computed as a
    literal 0 there, which copied x's dim (issue 51: [0, 2, -1] on (3, 0, 5) at opset 13
    ran before, as (3, 2, 0), and failed after)."""
    before = _reshape_model(form, onnx_opset)
    model = _reshape_model(form, onnx_opset)
    assert P.empty_safe_reshapes(model) == 1
    onnx.checker.check_model(model, full_check=True)
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
    got = _run(model, x)
    assert got.shape == want and np.array_equal(got.ravel(), x.ravel())
    if 0 not in shape[:1]:  # paddle2onnx's graph runs: the same shape and values
        plain = _run(before, x)
        assert plain.shape == want and np.array_equal(got, plain)
    else:
        with pytest.raises(Exception, match="requested shape"):
            _run(before, x)
