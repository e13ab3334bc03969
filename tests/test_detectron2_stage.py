"""detectron2's RoI stage (``ROIPooler``, ROIAlignV2, P2..P5) as torch.onnx writes it, at
opsets 11 and 16 (ort_roi/data/detectron2_stage_{box,mask}_{11,16}.onnx, cut by
tools/detectron2_graphs.py from detectron2's own module): convert fuses each into one
PyramidRoIAlign_L4 (the ScatterND family, graph/scatter_nd.py), aligned as the graph says, and
the fused graph computes what the native one does in onnxruntime (the same bits as the unfused
converted graph; onnxruntime's own RoiAlign within float32 rounding), with boxes on the level
borders, an empty level, and rows no level selects (zero). A graph differing in one part is
not fused and a note (convert's, info's) names the stage and the part; torch.onnx's opset-11
graphs get the note that aligned=True was lost."""

from importlib import resources

import numpy as np
import onnx
import pytest
from onnx import helper

from tests.graph_helpers import (assert_fused_rows_of_no_level_stay_zero, convert_quietly,
                                 nodes, op_types, run, set_attr, set_constant)

CASES = [(kind, opset) for kind in ("box", "mask") for opset in (11, 16)]
POOLED = {"box": 7, "mask": 14}
#: the nodes of each native graph and of its converted form (the rois and the levels' nodes
#: stay, a Cast of the rois and the fused node come)
NODES = {11: (174, 67), 16: (193, 69)}
#: at opset 11 shape inference cannot tell the rois' width (their batch column comes from a
#: OneHot / Tile): the fused node reads columns 0..4 through a Slice (3 Constants + Slice),
#: as the native RoiAligns Gather them
SLICED = {11: 4, 16: 0}
IMAGE = (160, 224)
#: box sides on either side of detectron2's level borders: floor(4 + log2(side / 224 + 1e-8))
#: 3 (level 1 of P2..P5) from 112, 4 from 224, 5 from 448, 2 below 112 (and clipped to 2)
BORDERS = [55.99, 56.0, 111.99, 112.0, 112.01, 223.99, 224.0, 224.01, 447.99, 448.0]


def _stage(kind, opset) -> onnx.ModelProto:
    return onnx.load_from_string(resources.files("ort_roi").joinpath(
        f"data/detectron2_stage_{kind}_{opset}.onnx").read_bytes())


def _feed(seed=0, n=40, sides=(1.6, 400.0), borders=True):
    rng = np.random.default_rng(seed)
    feed = {f"p{k}": rng.standard_normal((1, 256, IMAGE[0] // s, IMAGE[1] // s)
                                         ).astype(np.float32)
            for k, s in zip(range(2, 6), (4, 8, 16, 32))}
    xy = rng.uniform(0, 150, (n, 2))
    side = np.exp(rng.uniform(*np.log(sides), (n, 1)))
    boxes = [np.concatenate([xy, xy + side * rng.uniform(0.7, 1.4, (n, 2))], 1)]
    if borders:
        boxes.append(np.array([[4.0, 6.0, 4.0 + s, 6.0 + s] for s in BORDERS]))
    feed["boxes"] = np.concatenate(boxes).astype(np.float32)
    return feed


def _levels(boxes):
    """detectron2's assign_boxes_to_levels in float32, as the graph computes it."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    x = np.sqrt(w * h) / np.float32(224) + np.float32(1e-8)
    return np.clip(np.floor(np.log(x) / np.float32(np.log(2)) + 4), 2, 5).astype(int) - 2







@pytest.mark.parametrize("kind,opset", CASES)
def test_the_stage_is_one_node_aligned_as_the_graph_says(kind, opset):
    native = _stage(kind, opset)
    assert op_types(native).count(("", "RoiAlign")) == 4 and op_types(native).count(("", "ScatterND")) == 4
    conv, done = convert_quietly(native)
    fused = [n for n in conv.graph.node if n.domain == "ort_roi"]
    assert [n.op_type for n in fused] == ["PyramidRoIAlign_L4"]
    left = {op for _, op in op_types(conv)}
    assert not left & {"RoiAlign", "ScatterND", "NonZero", "Equal", "ConstantOfShape"}, left
    assert (len(native.graph.node), len(conv.graph.node) - SLICED[opset]) == NODES[opset]
    assert done.moved[0][1] == f"ScatterND-merged RoI stage ({NODES[opset][0] - NODES[opset][1] + 2} nodes)"
    a = {x.name: helper.get_attribute_value(x) for x in fused[0].attribute}
    assert a == dict(output_height=POOLED[kind], output_width=POOLED[kind], sampling_ratio=0,
                     aligned=int(opset >= 16), spatial_scale_0=0.25, spatial_scale_1=0.125,
                     spatial_scale_2=0.0625, spatial_scale_3=0.03125)
    assert list(fused[0].input[2:]) == ["p2", "p3", "p4", "p5"]
    aligned_notes = [n for n in done.notes if "aligned=True" in n]
    assert len(aligned_notes) == (opset < 16) and len(done.notes) == len(aligned_notes)


@pytest.mark.parametrize("kind,opset", CASES)
@pytest.mark.parametrize("feed", ["every level and the borders", "levels 2 and 3 empty"])
def test_the_fused_stage_computes_what_the_native_one_does(kind, opset, feed):
    native = _stage(kind, opset)
    f = _feed() if feed.startswith("every") else _feed(1, 30, (2.0, 100.0), borders=False)
    levels = _levels(f["boxes"])
    if feed.startswith("every"):
        assert set(levels) == {0, 1, 2, 3}
        assert list(levels[-len(BORDERS):]) == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3]
    else:
        assert set(levels) == {0, 1}
    conv, _ = convert_quietly(native)
    plain, _ = convert_quietly(native, fuse=False)
    want, got = run(native, f, ours=False)[0], run(conv, f)[0]
    assert got.shape == want.shape == (len(f["boxes"]), 256, POOLED[kind], POOLED[kind])
    assert np.abs(want).reshape(len(want), -1).sum(1).min() > 0  # every row pooled
    np.testing.assert_array_equal(got, run(plain, f)[0])  # the fusion changes no bit
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


@pytest.mark.parametrize("opset", [11, 16])
def test_rows_no_level_selects_stay_zero(opset):
    """The Clip's upper bound raised from 5 to 7: boxes of levels 6 and 7 are selected by no
    branch (the native merge leaves their rows zero); the graph still fuses (the level rule
    is the graph's, not part of the pattern) and the fused node writes those rows zero."""
    native = _stage("box", opset)
    set_constant(native, nodes(native, "Clip")[0].input[2], np.array(7.0, np.float32))
    assert_fused_rows_of_no_level_stay_zero(native, _feed(2, 20, (300.0, 1500.0), borders=False))


# --- what convert leaves, said -----------------------------------------------------------

def _sampling(m):
    set_attr(nodes(m, "RoiAlign")[2], "sampling_ratio", 2)
    return "RoiAlign", "sampling_ratio"


def _reduction(m):
    set_attr(nodes(m, "ScatterND")[1], "reduction", "add")
    return "/pooler/ScatterND_1", "reduction='add'"


def _level_twice(m):
    set_constant(m, nodes(m, "Equal")[3].input[1], np.array(2, np.int64))
    return "level 2 is merged twice", ""


def _zeros_elsewhere(m):
    """the zeros through an Identity: a chain that starts on something else"""
    first = nodes(m, "ScatterND")[0]
    zeros = first.input[0]
    for n in m.graph.node:  # the ScatterND, and the Shape the next level's Reshape reads
        n.input[:] = ["zeros_elsewhere" if i == zeros else i for i in n.input]
    at = next(i for i, n in enumerate(m.graph.node) if n.output[0] == zeros)
    m.graph.node.insert(at + 1, helper.make_node("Identity", [zeros], ["zeros_elsewhere"],
                                                 name="elsewhere"))
    return "'zeros_elsewhere' comes from Identity 'elsewhere'", "not a ConstantOfShape"


@pytest.mark.parametrize("mutate", [_sampling, _reduction, _level_twice, _zeros_elsewhere],
                         ids=lambda f: f.__name__.strip("_"))
def test_a_stage_differing_in_one_part_is_left_with_a_note_naming_it(mutate):
    native = _stage("box", 16)
    where, what = mutate(native)
    conv, done = convert_quietly(native)
    assert ("ort_roi", "PyramidRoIAlign_L4") not in op_types(conv)
    assert op_types(conv).count(("", "ScatterND")) == 4 and op_types(conv).count(("ort_roi",
                                                                          "RoiAlign")) == 4
    note = next(n for n in done.notes if "ScatterND family" in n)
    assert note.startswith("node '/pooler/ScatterND' (ScatterND)"), note
    assert "does not match it exactly" in note and where in note and what in note, note
    f = _feed()
    np.testing.assert_allclose(run(conv, f)[0], run(native, f, ours=False)[0], rtol=1e-5,
                               atol=2e-6)


def test_info_names_the_stage_left_and_why(tmp_path, capsys):
    from ort_roi.cli.main import main as cli

    native = _stage("box", 16)
    _sampling(native)
    path = tmp_path / "stage.onnx"
    onnx.save(native, str(path))
    assert cli(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "note: node '/pooler/ScatterND' (ScatterND) merges RoiAlign results" in out, out
    assert "sampling_ratio" in out


def test_the_aligned_note_is_torch_onnx_below_opset_16_only():
    _, done = convert_quietly(_stage("mask", 11))
    note = next(n for n in done.notes if "aligned=True" in n)
    assert "opset 11" in note and "opset_version >= 16" in note
    assert note.startswith("4 RoiAlign node(s) ("), note
    assert all(f"level_poolers.{k}/RoiAlign" in note for k in range(4)), note
    other = _stage("mask", 11)
    other.producer_name = "someone else"
    assert not [n for n in convert_quietly(other)[1].notes if "aligned=True" in n]
    assert not [n for n in convert_quietly(_stage("mask", 16))[1].notes if "aligned=True" in n]


@pytest.mark.parametrize("opset", [11, 16])
def test_no_boxes_give_an_empty_output_as_natively(opset):
    native = _stage("mask", opset)
    f = _feed()
    f["boxes"] = f["boxes"][:0]
    want, got = run(native, f, ours=False)[0], run(convert_quietly(native)[0], f)[0]
    assert want.shape == got.shape == (0, 256, 14, 14)
