"""convert computes what the graph computed, on every input the graph runs: each recogniser's
assumptions broken one at a time (tests/mutation.py) on the committed graphs it recognises,
and the edge rows (NaN, reversed, zero-area) of the multi-level stages.

For every constant, attribute and input wiring of the graph a mutant is made; convert either
leaves the stage (a note names it), refuses with an error naming the node, or fuses it, and
then the converted graph equals the native one in onnxruntime on feeds whose boxes reach every
level plus the edge rows. The counts of each ending are printed (``pytest -s``) and bounded
below, so a harness that stopped mutating would fail.

Covered: torchvision's MultiScaleRoIAlign (fusion.py), the ScatterND family (detectron2's
ROIPooler, MMDeploy's SingleRoIExtractor: scatter_nd.py, scatter_nd_pad.py), GluonCV's FPN
stage and MXNet's ROIAlign / ROIPooling (mxnet.py, at the stamps where convert repairs
nothing), export-paddle's FPN stage (paddle.py), the single-node moves (ONNX RoiAlign,
MaxRoiPool -> ort_roi), and tf2onnx's crop_and_resize (tensorflow/), a repair: it computes
TensorFlow's arithmetic on purpose (tests/test_tensorflow.py holds it to TensorFlow), so
there a mutant must not be fused blind to what it changes: where the native mutant computes
otherwise than the native graph, the converted mutant must too. The mutants reach into
Loop bodies (tf2onnx's loop form). Not here: torchvision's keypoint and mask Loops
(loops.py), whose graphs are exported by torch at test time (tests/test_fusion_exact.py
breaks their bodies one attribute at a time).
"""

from importlib import resources

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from tests import paddle_stage_cases
from tests.graph_helpers import convert_quietly, op_types, run, set_constant
from tests.mutation import judge
from tests.test_paddle_stage import unfused_model
from tests.versions import needs_bounded_roi_align, needs_shape_inference

IMAGE = {"torchvision": (128, 160), "detectron2": (160, 224), "mmdeploy": (160, 224)}
#: box sides reaching every level of the three rules (detectron2's and torchvision's
#: floor(4 + log2(side / 224)), mmdet's floor(log2(side / 56))): levels 0, 0, 1, 2, 3, 1
SIDES = (20, 60, 150, 300, 500, 150)
#: rows a level rule or onnxruntime's RoiAlign treats apart: a NaN coordinate (no level), a
#: reversed box, a zero-area box, beside two good ones
EDGE = np.array([[4, 4, 64, 64], [4, 4, 300, 300], [np.nan, 4, 50, 50], [50, 50, 10, 10],
                 [7, 7, 7, 7]], np.float32)


def _graph(name: str) -> onnx.ModelProto:
    return onnx.load_from_string(resources.files("ort_roi").joinpath(
        f"data/{name}.onnx").read_bytes())


def _stage_feeds(model: onnx.ModelProto, image: tuple[int, int], seed: int = 0) -> list[dict]:
    """Maps of strides 4..32 over ``image``, then the boxes two ways: every level reached,
    and the edge rows."""
    rng = np.random.default_rng(seed)
    maps = [i for i in model.graph.input if len(i.type.tensor_type.shape.dim) == 4]
    feed = {i.name: rng.standard_normal((1, 256, image[0] >> (2 + k), image[1] >> (2 + k))
                                        ).astype(np.float32) for k, i in enumerate(maps)}
    boxes = next(i for i in model.graph.input if len(i.type.tensor_type.shape.dim) == 2)
    cols = boxes.type.tensor_type.shape.dim[1].dim_value

    def rows(b):
        return b if cols == 4 else np.concatenate([np.zeros((len(b), 1), np.float32), b], 1)

    every = np.array([[4, 4, 4 + s, 4 + s] for s in SIDES], np.float32)
    return [dict(feed, **{boxes.name: rows(every)}), dict(feed, **{boxes.name: rows(EDGE)})]


def _pyramids(model: onnx.ModelProto) -> int:
    return sum(op.startswith("PyramidRoIAlign") for _, op in op_types(model))


STAGES = ["torchvision_stage_7", "torchvision_stage_14", "detectron2_stage_box_11",
          "detectron2_stage_box_16", "detectron2_stage_mask_16", "mmdeploy_stage_bbox_11",
          "mmdeploy_stage_bbox_16", "mmdeploy_stage_mask_16"]


@pytest.mark.parametrize("name", STAGES)
def test_edge_rows_the_native_stage_runs_convert_gives_the_same(name):
    """A row no level selects (a NaN coordinate) stays 0 as natively and changes no other
    row; reversed and zero-area rows as natively."""
    model = _graph(name)
    every, edge = _stage_feeds(model, IMAGE[name.split("_")[0]])
    conv, _ = convert_quietly(model)
    assert _pyramids(conv) == 1
    for feed in (every, edge):
        want, got = run(model, feed, ours=False)[0], run(conv, feed)[0]
        assert not np.isnan(want).any()
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
    assert not want[2].any() and want[[0, 1]].any(axis=(1, 2, 3)).all()


#: one graph of each form and exporter opset (the mask stages and torchvision_stage_7 are the
#: same graphs but for the pooled size: the same mutants end the same way)
MUTATED = ["torchvision_stage_14", "detectron2_stage_box_11", "detectron2_stage_box_16",
           "mmdeploy_stage_bbox_11", "mmdeploy_stage_bbox_16"]


@needs_bounded_roi_align
@pytest.mark.parametrize("name", MUTATED)
def test_every_mutant_of_a_stage_is_left_or_computes_as_native(name, capsys):
    model = _graph(name)
    out = judge(model, _stage_feeds(model, IMAGE[name.split("_")[0]]), _pyramids)
    with capsys.disabled():
        print(f"\n{name}: {sum(out.counts.values())} mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    # the harness did its work: many mutants, each ending seen
    assert sum(out.counts.values()) > 500
    assert out.counts["fused, equal"] > 50 and out.counts["left with a note"] > 100


def _slice_for_split(model: onnx.ModelProto, level: int) -> None:
    """Level ``level``'s "column 0 of NonZero's transpose" written as Slice(x, 0:1, axis 1)
    instead of Split(x, [1], axis 1), a form the recogniser also accepts."""
    name = f"Split_{level}" if level else "Split"
    split = next(n for n in model.graph.node if n.op_type == "Split" and n.name.endswith(name))
    names = [f"{split.name}/{k}" for k in ("starts", "ends", "axes")]
    consts = [helper.make_node("Constant", [], [n], value=helper.make_tensor(
        n, TensorProto.INT64, [1], [v])) for n, v in zip(names, (0, 1, 1))]
    sl = helper.make_node("Slice", [split.input[0], *names], [split.output[0]],
                          name=f"{split.name}/Slice")
    at = list(model.graph.node).index(split)
    model.graph.node.remove(split)
    for k, n in enumerate([*consts, sl]):
        model.graph.node.insert(at + k, n)


def test_a_level_compared_with_a_matrix_is_not_fused():
    """detectron2's level-1 constant as [[1]] with column 0 taken by Slice: Equal broadcasts
    to [1, K] and the native graph pools row 0 only for that level; convert leaves the stage,
    saying why, and the converted graph computes what the native one does."""
    model = _graph("detectron2_stage_box_16")
    eq = next(n for n in model.graph.node if n.name == "/pooler/Equal_1")
    set_constant(model, eq.input[1], np.array([[1]], np.int64))
    _slice_for_split(model, 1)
    feed = _stage_feeds(model, IMAGE["detectron2"])[0]
    every = np.array([[4, 4, 4 + s, 4 + s] for s in (60, 150, 300, 500, 150, 150)], np.float32)
    feed["boxes"] = every
    want = run(model, feed, ours=False)[0]
    assert list(want.any(axis=(1, 2, 3))) == [True, False, True, True, False, False]
    conv, report = convert_quietly(model)
    assert _pyramids(conv) == 0
    assert any("/pooler/" in n and "broadcasts the levels to a matrix" in n
               for n in report.notes), report.notes
    np.testing.assert_allclose(run(conv, feed)[0], want, rtol=1e-5, atol=2e-6)


# --- MXNet's forms at the stamps where convert repairs nothing --------------------------

MX = "tests/goldens/mxnet/mx2onnx.npz"


def _mx(case: str, stamp: int = 15) -> tuple[onnx.ModelProto, dict]:
    with np.load(MX) as d:
        model = onnx.load_from_string(d[f"{case}:opset{stamp}"].tobytes())
        feed = {i.name: d[f"{case}:{i.name}"] for i in model.graph.input
                if f"{case}:{i.name}" in d.files}
    return model, feed


def _ours_count(model: onnx.ModelProto) -> int:
    return sum(d == "ort_roi" for d, _ in op_types(model))


@needs_bounded_roi_align
@pytest.mark.parametrize("case", ["fpn", "align7", "pool"])
def test_every_mutant_of_an_mx2onnx_form_is_left_or_computes_as_native(case, capsys):
    model, feed = _mx(case)
    edge = dict(feed)
    rois = edge["rois"].copy()
    rois[1, 1:] = np.nan if case == "fpn" else rois[1, 1:]  # a row no level selects
    edge["rois"] = rois
    out = judge(model, [feed, edge], _ours_count, repairs_differ=False)
    with capsys.disabled():
        print(f"\nmx2onnx {case}: {sum(out.counts.values())} mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert sum(out.counts.values()) > 5 and out.counts["fused, equal"] > 2


# --- export-paddle's FPN stage (ort_roi nodes unfused) into DistributeRoIAlign ------------

@needs_shape_inference
@needs_bounded_roi_align
def test_every_mutant_of_the_paddle_stage_is_left_or_computes_as_unfused(capsys):
    case = paddle_stage_cases.cases()[0]
    model = unfused_model(case)
    edge = dict(case["inputs"])
    rois = edge["fpn_rois"].copy()
    rois[[0, 1]] = rois[[0, 1], ::-1]  # reversed rows: a negative area
    rois[2, 2:] = rois[2, :2]  # a zero-area row
    edge["fpn_rois"] = rois

    def fused(m):
        return sum(op.startswith("DistributeRoIAlign") for _, op in op_types(m))

    out = judge(model, [case["inputs"], edge], fused, native_ours=True)
    with capsys.disabled():
        print(f"\npaddle stage: {sum(out.counts.values())} mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert out.counts["fused, equal"] > 10 and out.counts["left with a note"] > 10


# --- single-node moves: ONNX RoiAlign and MaxRoiPool into ort_roi ------------------------

def _single(op: str, opset: int, **attrs) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 3, 12, 16])
    if op == "RoiAlign":
        ins = [x, helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 4]),
               helper.make_tensor_value_info("batch", TensorProto.INT64, ["R"])]
        node = helper.make_node("RoiAlign", ["X", "rois", "batch"], ["Y"], name="ra", **attrs)
    else:
        ins = [x, helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 5])]
        node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], name="mrp", **attrs)
    out = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    return helper.make_model(helper.make_graph([node], "g", ins, [out]),
                             opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _single_feeds(op: str) -> list[dict]:
    """Boxes inside, across and off the map, reversed, a point; for RoiAlign also a NaN and
    an inf row (onnxruntime refuses them: "must be finite"). Not for MaxRoiPool, which
    casts a non-finite coordinate to int (``test_max_roi_pool_non_finite_rows``)."""
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 3, 12, 16)).astype(np.float32)
    boxes = [np.array([[1, 1, 9, 7], [0, 0, 15, 11], [3, 2, 3, 2], [20, 20, 30, 30],
                       [9, 7, 1, 1]], np.float32)]
    if op == "RoiAlign":
        boxes += [np.array([[1, 1, 9, 7], [np.nan, 1, 5, 5]], np.float32),
                  np.array([[1, 1, 9, 7], [np.inf, 1, 5, 5]], np.float32)]
    feeds = []
    for b in boxes:
        if op == "RoiAlign":
            feeds.append({"X": x, "rois": b, "batch": np.zeros(len(b), np.int64)})
        else:
            feeds.append({"X": x, "rois": np.concatenate([np.zeros((len(b), 1), np.float32),
                                                          b], 1)})
    return feeds


@pytest.mark.parametrize("op,opset,attrs", [
    ("RoiAlign", 10, dict(output_height=3, output_width=2, sampling_ratio=2,
                          spatial_scale=0.5)),
    ("RoiAlign", 16, dict(output_height=3, output_width=2, sampling_ratio=0,
                          spatial_scale=0.5, coordinate_transformation_mode="half_pixel")),
    ("MaxRoiPool", 12, dict(pooled_shape=[3, 2], spatial_scale=0.5)),
])
@needs_bounded_roi_align
def test_every_mutant_of_a_single_node_move_is_refused_or_computes_as_native(op, opset, attrs,
                                                                             capsys):
    model = _single(op, opset, **attrs)
    out = judge(model, _single_feeds(op), _ours_count)
    with capsys.disabled():
        print(f"\n{op} opset {opset}: {sum(out.counts.values())} mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert out.counts["fused, equal"] > 2


def test_max_roi_pool_non_finite_rows_are_refused_by_name(caplog):
    """onnxruntime's MaxRoiPool casts round(x * scale) to int: for a NaN or infinite
    coordinate that cast is undefined in C++ (x86 gives INT_MIN: a NaN x1 makes the row 0, a
    NaN x2 other bins' maxima), so no output is "what the graph computes" there on every
    machine. The converted node refuses such rows as every ort_roi op does: the error names
    the node, the input and the row (a plain session gets NaN, never a partial result)."""
    model = _single("MaxRoiPool", 12, pooled_shape=[3, 2], spatial_scale=0.5)
    conv, _ = convert_quietly(model)
    feed = _single_feeds("MaxRoiPool")[0]
    feed["rois"] = np.array([[0, 1, 1, 9, 7], [0, np.nan, 1, 5, 5]], np.float32)
    with caplog.at_level("ERROR", logger="ort_roi"):
        got = run(conv, feed)[0]
    assert np.isnan(got).all()
    assert "ROIPooling (node 'mrp'): input 'rois'" in caplog.text and "row 1" in caplog.text
    assert not np.isnan(run(model, feed, ours=False)[0]).any()


# --- tf2onnx's crop_and_resize (a repair) ---------------------------------------------------

TF = "tests/goldens/tf2onnx_crop_and_resize.npz"


@needs_bounded_roi_align
@pytest.mark.parametrize("form", ["loop", "contrib"])
def test_every_mutant_of_a_tf2onnx_form_is_left_or_follows_the_change(form, capsys):
    with np.load(TF) as d:
        case = "outside_ext2.5"
        model = onnx.load_from_string(d[f"{case}:{form}"].tobytes())
        feeds = [{k: d[f"{c}:{k}"] for k in ("image", "boxes", "box_indices")}
                 for c in (case, "flipped")]

    def fused(m):
        return sum(op == "CropAndResize" for _, op in op_types(m))

    out = judge(model, feeds, fused)
    with capsys.disabled():
        print(f"\ntf2onnx {form}: {sum(out.counts.values())} mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert out.counts["repaired, follows the change"] > 3


# --- torchvision's keypoint and mask Loops (torch exports them here) ------------------------

@needs_bounded_roi_align
@pytest.mark.parametrize("which", ["keypoints", "masks"])
def test_every_mutant_of_a_torchvision_loop_is_left_or_computes_as_native(which, capsys):
    pytest.importorskip("torch", reason="needs torchvision: pip install '.[torchvision]'")
    from tests.test_fusion_exact import _keypoints, _masks

    model, feed = (_keypoints if which == "keypoints" else _masks)()
    edge = {k: v.copy() for k, v in feed.items()}
    boxes = edge["rois" if which == "keypoints" else "boxes"]
    boxes[0] = boxes[0][[2, 3, 0, 1]]  # reversed
    boxes[1, 2:] = boxes[1, :2]  # zero-area

    def fused(m):
        return sum(op in ("HeatmapsToKeypoints", "PasteMasks") for _, op in op_types(m))

    out = judge(model, [feed, edge], fused)
    with capsys.disabled():
        print(f"\ntorchvision {which} Loop: {sum(out.counts.values())} mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert out.counts["fused, equal"] > 5 and out.counts["left with a note"] > 20


# --- MMDeploy's cascade stage as the whole model holds it (the levels' rank by structure) ---

@needs_bounded_roi_align
def test_every_mutant_of_the_whole_model_cascade_stage_is_left_or_computes_as_native(capsys):
    """The rois out of a Reshape to a computed shape (shape inference cannot tell their
    rank): the recognisers read the levels' rank from the ops computing them
    (GraphIndex.rank), which the mutants change."""
    from tests.test_mmdet_zoo import _feed, _graph as zoo_graph, _whole_model_rois

    model = _whole_model_rois(zoo_graph("cascade_bbox"))
    feed = _feed(model, n=12)
    feed["rois_shape"] = np.array(feed["rois"].shape, np.int64)
    edge = dict(feed, rois=feed["rois"].copy())
    edge["rois"][3, 1] = np.nan  # a row no level selects
    out = judge(model, [feed, edge], _pyramids)
    with capsys.disabled():
        print(f"\nMMDeploy cascade stage, whole-model rois: {sum(out.counts.values())} "
              f"mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert out.counts["fused, equal"] > 50 and out.counts["left with a note"] > 100


@needs_bounded_roi_align
def test_every_mutant_of_double_heads_two_calls_is_left_or_computes_as_native(capsys):
    """Double-Head's second call: the scaled rois pooled at the levels of the unscaled ones,
    its zeros sized by the unscaled rois (GraphIndex.same_rows proves the rows agree)."""
    from tests.test_mmdet_zoo import _feed, _graph as zoo_graph

    model = zoo_graph("double_head")
    feed = _feed(model, n=12)
    edge = dict(feed, rois=feed["rois"].copy())
    edge["rois"][3, 1] = np.nan  # a row no level selects
    out = judge(model, [feed, edge], _pyramids)
    with capsys.disabled():
        print(f"\nDouble-Head's two calls: {sum(out.counts.values())} mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert out.counts["fused, equal"] > 50 and out.counts["left with a note"] > 100
