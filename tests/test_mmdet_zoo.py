"""MMDetection's two-stage zoo through MMDeploy's onnxruntime export (issue 66): the RoI stages
of the forms the zoo adds to Faster / Mask R-CNN's, cut by tools/mmdet_zoo.py from the whole
exported models (opset 11, MMDeploy's config) into ort_roi/data/mmdeploy_zoo_*.onnx, run in
real onnxruntime sessions, native and converted, without MMDeploy.

- cascade_bbox: a cascade's stage (Cascade R-CNN's stage 1 of 3; Cascade Mask R-CNN, HTC: the
  same), each stage its own SingleRoIExtractor. As cut (rois declared [R, 5]) it fuses; in the
  whole model the rois come out of a Reshape to a computed shape, shape inference cannot tell
  the levels' rank and convert leaves the stage with a note naming it.
- double_head: Double-Head R-CNN's two calls of one extractor, the second on the rois scaled
  by 1.3 about their centres (``roi_rescale``) but pooled at the levels of the unscaled rois:
  it reads the first call's selections. The first call fuses (in the whole model too); the
  second is left with a note (its zeros take their rows from the unscaled rois).
- htc_semantic: HTC's semantic RoI extractor, one level (stride 8): a plain RoiAlign, moved.
- groie: GRoIE's GenericRoIExtractor: every roi pooled on every level (then convolved and
  summed, which is not cut): four RoiAligns on the same rois, each moved.
"""

from importlib import resources

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from ort_roi import ops
from tests.graph_helpers import convert_quietly, nodes, op_types, run

SCALES = (0.25, 0.125, 0.0625, 0.03125)
IMAGE = (160, 224)
#: box sides either side of mmdet's level borders (112, 224, 448 px)
BORDERS = [111.99, 112.0, 112.01, 223.99, 224.0, 447.99, 448.0, 600.0]


def _graph(kind):
    return onnx.load_from_string(resources.files("ort_roi").joinpath(
        f"data/mmdeploy_zoo_{kind}_11.onnx").read_bytes())


def _feed(m, seed=0, n=40, sides=(1.0, 400.0)):
    """The graph's maps (of a 160 x 224 image: level l at SCALES[l], or the one map at its
    RoiAlign's scale) and rois [R, 5] on every level, boxes under one map pixel and on the
    level borders among them."""
    rng = np.random.default_rng(seed)
    maps = [i.name for i in m.graph.input if i.name.startswith("feat")]
    scales = SCALES if len(maps) == 4 else [_attrs(nodes(m, "RoiAlign")[0])["spatial_scale"]]
    feed = {f: rng.standard_normal((1, 256, int(IMAGE[0] * s), int(IMAGE[1] * s))
                                   ).astype(np.float32) for f, s in zip(maps, scales)}
    xy = rng.uniform(0, 150, (n, 2))
    side = np.exp(rng.uniform(*np.log(sides), (n, 1)))
    boxes = np.concatenate([np.concatenate([xy, xy + side * rng.uniform(0.7, 1.4, (n, 2))], 1),
                            [[4.0, 6.0, 4.0 + s, 6.0 + s] for s in BORDERS]])
    feed["rois"] = np.concatenate([np.zeros((len(boxes), 1)), boxes], 1).astype(np.float32)
    return feed


def _attrs(node):
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _levels(boxes):
    """mmdet's map_roi_levels in float32, as the graph computes it."""
    w, h = boxes[:, 2] - boxes[:, 0], boxes[:, 3] - boxes[:, 1]
    x = np.sqrt(w * h) / np.float32(56) + np.float32(1e-6)
    return np.clip(np.floor(np.log(x) / np.float32(np.log(2))), 0, 3).astype(int)


def _pooled(feed, boxes, levels, p, sampling_ratio=0):
    """Each row pooled at its level as the opset-11 graph does: aligned=0 on boxes shifted by
    -0.5 / scale."""
    out = np.zeros((len(boxes), 256, p, p), np.float32)
    for lv, s in enumerate(SCALES):
        rows = levels == lv
        out[rows] = ops.roi_align(feed[f"feat{lv}"], boxes[rows] - np.float32(0.5 / s),
                                  np.array([rows.sum()]), pooled_height=p, pooled_width=p,
                                  spatial_scale=s, sampling_ratio=sampling_ratio, aligned=0)
    return out


def _rescaled(boxes, factor=1.3):
    """mmdet's roi_rescale in float32."""
    cx, cy = (boxes[:, 0] + boxes[:, 2]) * 0.5, (boxes[:, 1] + boxes[:, 3]) * 0.5
    w, h = (boxes[:, 2] - boxes[:, 0]) * factor, (boxes[:, 3] - boxes[:, 1]) * factor
    return np.stack([cx - w * 0.5, cy - h * 0.5, cx + w * 0.5, cy + h * 0.5], 1
                    ).astype(np.float32)


def _whole_model_rois(m):
    """The stage as the whole model has it: the rois out of a Reshape to a shape computed
    upstream (here the input ``rois_shape``), so that shape inference cannot tell their
    rank."""
    m2 = onnx.ModelProto()
    m2.CopyFrom(m)
    g = m2.graph
    for n in g.node:
        n.input[:] = ["rois_reshaped" if t == "rois" else t for t in n.input]
    g.node.insert(0, helper.make_node("Reshape", ["rois", "rois_shape"], ["rois_reshaped"],
                                      name="/Reshape_83"))
    g.input.append(helper.make_tensor_value_info("rois_shape", TensorProto.INT64, [2]))
    return m2


KINDS = ("cascade_bbox", "double_head", "htc_semantic", "groie")


@pytest.mark.parametrize("kind", KINDS)
def test_zoo_stage_converted_computes_what_the_native_graph_does(kind):
    """Every committed stage, converted (fused where it fuses, each RoiAlign moved elsewhere),
    gives onnxruntime's native outputs; every row pooled; no RoiAlign of onnxruntime left."""
    m = _graph(kind)
    conv, _ = convert_quietly(m)
    assert ("", "RoiAlign") not in op_types(conv)
    for f in (_feed(m), _feed(m, 1, 30, (2.0, 100.0))):
        want, got = run(m, f, ours=False), run(conv, f)
        assert len(want) == len(got) == len(m.graph.output)
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.shape[0] == len(f["rois"])
            assert np.abs(w).reshape(len(w), -1).sum(1).min() > 0
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=2e-6)


def test_cascade_stage_is_mmdeploys_and_fuses_into_one_node():
    m = _graph("cascade_bbox")
    ops_ = [op for _, op in op_types(m)]
    assert [ops_.count(op) for op in ("RoiAlign", "ScatterND", "NonZero")] == [4, 4, 4]
    conv, done = convert_quietly(m)
    plain, _ = convert_quietly(m, fuse=False)
    assert [n.op_type for n in conv.graph.node if n.domain] == ["PyramidRoIAlign_L4"]
    assert done.notes == []
    f = _feed(m)
    boxes = f["rois"][:, 1:]
    levels = _levels(boxes)
    assert set(levels) == {0, 1, 2, 3}
    got = run(conv, f)[0]
    np.testing.assert_array_equal(got, run(plain, f)[0])
    np.testing.assert_allclose(got, _pooled(f, boxes, levels, 7), rtol=1e-5, atol=2e-6)


def test_cascade_stage_of_the_whole_model_fuses_and_computes_as_native():
    """In the whole exported cascade shape inference cannot tell the rois' rank (they come out
    of a Reshape to a computed shape); the levels are still a vector, Concat(axis 0) of
    constant vectors and the levels (GraphIndex.rank): the stage fuses, and the fused node
    reads the rois' columns 0..4 through a Slice; the outputs equal native."""
    m = _whole_model_rois(_graph("cascade_bbox"))
    conv, done = convert_quietly(m)
    assert [n.op_type for n in conv.graph.node if n.domain] == ["PyramidRoIAlign_L4"]
    assert done.notes == [], done.notes
    f = _feed(m)
    f["rois_shape"] = np.array(f["rois"].shape, np.int64)
    np.testing.assert_allclose(run(conv, f)[0], run(m, f, ours=False)[0], rtol=1e-5, atol=2e-6)


def test_double_head_second_call_pools_scaled_rois_at_the_unscaled_levels():
    """The native graph: output 0 each roi at its level; output 1 each roi scaled by 1.3 about
    its centre, pooled at the level of the unscaled roi (the first call's selections)."""
    m = _graph("double_head")
    eq = nodes(m, "Equal")
    assert len(eq) == 4 and all(n.name.startswith("/bbox_roi_extractor/") for n in eq)
    assert len(nodes(m, "RoiAlign")) == len(nodes(m, "ScatterND")) == 8
    f = _feed(m)
    boxes = f["rois"][:, 1:]
    levels = _levels(boxes)
    assert (levels != _levels(_rescaled(boxes))).any()  # the two rules differ on some rows
    cls, reg = run(m, f, ours=False)
    np.testing.assert_allclose(cls, _pooled(f, boxes, levels, 7), rtol=1e-5, atol=2e-6)
    np.testing.assert_allclose(reg, _pooled(f, _rescaled(boxes), levels, 7), rtol=1e-5,
                               atol=2e-6)


def test_double_head_both_calls_fuse_and_compute_as_native():
    """The second call sizes its zeros by the unscaled rois, from which its levels are
    computed row by row (GraphIndex.same_rows): both calls fuse, the second reading the
    scaled rois at the unscaled rois' levels; the outputs equal native's."""
    m = _graph("double_head")
    conv, done = convert_quietly(m)
    fused = [n for n in conv.graph.node if n.domain == "ort_roi"]
    assert [n.op_type for n in fused] == ["PyramidRoIAlign_L4"] * 2
    assert done.notes == [], done.notes
    f = _feed(m)
    for got, want in zip(run(conv, f), run(m, f, ours=False)):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_htc_semantic_extractor_is_one_roi_align_moved():
    m = _graph("htc_semantic")
    (ra,) = nodes(m, "RoiAlign")
    a = _attrs(ra)
    assert (a["spatial_scale"], a["output_height"], a["sampling_ratio"]) == (0.125, 14, 0)
    conv, done = convert_quietly(m)
    assert [(d, op) for d, op in op_types(conv) if d] == [("ort_roi", "RoiAlign")]
    assert done.notes == []  # the boxes carry MMDeploy's -0.5 / scale: aligned=True kept
    f = _feed(m)
    b = f["rois"][:, 1:]
    want = ops.roi_align(f["feat0"], b - np.float32(4.0), np.array([len(b)]), pooled_height=14,
                         pooled_width=14, spatial_scale=0.125, sampling_ratio=0, aligned=0)
    np.testing.assert_allclose(run(conv, f)[0], want, rtol=1e-5, atol=2e-6)


def test_groie_pools_every_roi_on_every_level_each_roi_align_moved():
    m = _graph("groie")
    conv, done = convert_quietly(m)
    assert op_types(conv).count(("ort_roi", "RoiAlign")) == 4
    assert not any(n.op_type.startswith("PyramidRoIAlign") for n in conv.graph.node)
    assert len(done.notes) == 1 and "every roi on every level" in done.notes[0]
    assert all(f"'feat{lv}' at {s:g}" in done.notes[0] for lv, s in enumerate(SCALES))
    f = _feed(m)
    b = f["rois"][:, 1:]
    for lv, (s, got) in enumerate(zip(SCALES, run(conv, f))):
        want = ops.roi_align(f[f"feat{lv}"], b - np.float32(0.5 / s), np.array([len(b)]),
                             pooled_height=7, pooled_width=7, spatial_scale=s, sampling_ratio=2,
                             aligned=0)
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)


def test_groie_note_only_where_every_level_pools_the_same_rows():
    """The note's claims, each broken once: a level pooling a subset of the rows (a Gather on
    axis 0) or with another output size, two levels on one map, two at one scale, every
    level's rois masked by a level rule (a product with another tensor): that level leaves
    the group (the others, still every roi on their levels, keep it), or the note goes."""
    def mutant(change):
        m = _graph("groie")
        change(m)
        return convert_quietly(m)[1].notes

    def subset(m):  # level 3's boxes: rows 0..1 of the rois only
        idx = helper.make_tensor("two", TensorProto.INT64, [2], [0, 1])
        m.graph.initializer.append(idx)
        m.graph.node.insert(0, helper.make_node("Gather", ["rois", "two"], ["rois_2"], axis=0))
        for n in m.graph.node:
            if n.name.startswith("/bbox_roi_extractor/roi_layers.3/Gather"):
                n.input[0] = "rois_2"

    def one_map(m):
        ra = [n for n in m.graph.node if n.op_type == "RoiAlign"]
        ra[1].input[0] = ra[0].input[0]

    def one_scale(m):
        ra = [n for n in m.graph.node if n.op_type == "RoiAlign"]
        for r in ra:
            for a in r.attribute:
                if a.name == "spatial_scale":
                    a.f = 0.25

    def masked(m):  # each level's rois times (levels == l): mmdet 2.x's level rule
        m.graph.input.append(helper.make_tensor_value_info("lv", TensorProto.INT64, ["R"]))
        for k in range(4):
            p = f"mask{k}"
            m.graph.initializer.append(helper.make_tensor(f"{p}/l", TensorProto.INT64, [], [k]))
            m.graph.node.insert(0, helper.make_node("Mul", ["rois", f"{p}/u"], [f"{p}/rois"]))
            m.graph.node.insert(0, helper.make_node("Unsqueeze", [f"{p}/f"], [f"{p}/u"],
                                                    axes=[1]))
            m.graph.node.insert(0, helper.make_node("Cast", [f"{p}/eq"], [f"{p}/f"],
                                                    to=TensorProto.FLOAT))
            m.graph.node.insert(0, helper.make_node("Equal", ["lv", f"{p}/l"], [f"{p}/eq"]))
            for n in m.graph.node:
                if n.name.startswith(f"/bbox_roi_extractor/roi_layers.{k}/Gather"):
                    n.input[0] = f"{p}/rois"

    def other_size(m):
        ra = [n for n in m.graph.node if n.op_type == "RoiAlign"]
        next(a for a in ra[0].attribute if a.name == "output_height").i = 5

    notes = mutant(subset)
    assert len(notes) == 1 and "3 RoiAlign nodes" in notes[0] and "roi_layers.3" not in notes[0]
    assert not any("every roi on every level" in n for n in mutant(masked))
    notes = mutant(other_size)
    assert len(notes) == 1 and "3 RoiAlign nodes" in notes[0] and "roi_layers.0" not in notes[0]
    assert not any("every roi on every level" in n for n in mutant(one_map))
    assert not any("every roi on every level" in n for n in mutant(one_scale))
