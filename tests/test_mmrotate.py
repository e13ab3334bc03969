"""MMRotate's oriented detectors through MMDeploy (tools/mmrotate_zoo.py): the RoI stages cut
from Oriented R-CNN's exports (no weights, ort_roi/data/mmrotate_stage_*), run without
MMRotate or MMDeploy installed.

- onnxruntime config, every level traced: RotatedSingleRoIExtractor as MMRotate wrote it (per
  level: NonZero, Gather of whole rows [k, 6], mmdeploy::MMCVRoIAlignRotated, ScatterND into
  zeros), fused by convert into one PyramidRotatedRoIAlign_L4 and held to the unfused graph
  (its MMCVRoIAlignRotated nodes on ort_roi's kernel, exact to mmcv's) bit for bit, and to
  OpenVINO running the exported graph as it is;
- onnxruntime config as MMDeploy traces it (level 0 only: the export's example rois were all
  small): left as it is, with a note naming the rows that come out 0;
- TensorRT config: one mmdeploy::MMCVMultiLevelRotatedRoiAlign node, rewritten by convert into
  MultiLevelRotatedRoiAlign_L4 (tests/test_multilevel_rotated.py holds the op to the plugin).
"""

from importlib import resources

import numpy as np
import onnx
import pytest

import ort_roi
from ort_roi import RoiOpError, ops
from tests import oracles as O
from tests.graph_helpers import convert_quietly, op_types, run
from tests.test_mmdet_zoo import _whole_model_rois
from tests.mutation import judge
from tests.test_exporters import needs_openvino
from tests.versions import needs_bounded_roi_align

SCALES = (0.25, 0.125, 0.0625, 0.03125)
IMAGE = (160, 224)
#: box sides (w = h) whose sqrt(w*h)/56 reaches each level of the graph's rule
#: floor(log2(side / 56 + 1e-6)), clipped to 0..3: 0, 0, 1, 2, 3, 3
SIDES = (20, 60, 150, 300, 500, 900)


def _graph(kind: str) -> onnx.ModelProto:
    return onnx.load_from_string(resources.files("ort_roi").joinpath(
        f"data/mmrotate_stage_oriented_rcnn_{kind}_11.onnx").read_bytes())


def _maps(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {f"feat{k}": rng.standard_normal((1, 256, IMAGE[0] >> (2 + k), IMAGE[1] >> (2 + k))
                                            ).astype(np.float32) for k in range(4)}


def _rois(sides, seed: int = 1) -> np.ndarray:
    """Rows [0, cx, cy, w, h, theta]: centres over the image, w = side, h about it, angles in
    [-pi, pi]."""
    rng = np.random.default_rng(seed)
    s = np.asarray(sides, np.float32)
    R = len(s)
    return np.stack([np.zeros(R), rng.uniform(0, IMAGE[1], R), rng.uniform(0, IMAGE[0], R), s,
                     s * rng.uniform(0.8, 1.25, R), rng.uniform(-np.pi, np.pi, R)],
                    1).astype(np.float32)


def _edge() -> np.ndarray:
    """Rows the graph's level rule treats apart beside good ones: a NaN side (no level: never
    read, 0), a zero side (level 0, pooled), a side of 1e30 (its area overflows: level 3)."""
    rois = _rois((40, 200, 40, 40, 40))
    rois[2, 3] = np.nan
    rois[3, 3] = 0.0
    rois[4, 3:5] = 1e30
    return rois


def _feeds() -> list[dict]:
    return [dict(_maps(), rois=_rois(SIDES)), dict(_maps(), rois=_edge())]


def _fused(model: onnx.ModelProto) -> int:
    return sum(op.startswith("PyramidRotatedRoIAlign") for _, op in op_types(model))


def test_every_level_stage_fuses_into_one_node_with_the_unfused_bits():
    m = _graph("onnxruntime")
    conv, done = convert_quietly(m)
    assert op_types(conv).count(("ort_roi", "PyramidRotatedRoIAlign_L4")) == 1
    assert not any(op == "MMCVRoIAlignRotated" for _, op in op_types(conv))
    assert done.notes == []
    node = next(n for n in conv.graph.node if n.op_type == "PyramidRotatedRoIAlign_L4")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["aligned"] == 1 and attrs["clockwise"] == 1 and attrs["sampling_ratio"] == 2
    assert [attrs[f"spatial_scale_{k}"] for k in range(4)] == pytest.approx(SCALES)
    for feed in _feeds():
        want, got = run(m, feed)[0], run(conv, feed)[0]
        np.testing.assert_array_equal(got, want)
    rows = run(conv, _feeds()[1])[0].any(axis=(1, 2, 3))
    assert list(rows[:4]) == [True, True, False, True]  # the NaN row: no level, 0


def test_every_level_stage_pools_each_row_at_its_level():
    """The fused stage row by row: MMCVRoIAlignRotated (ort_roi's kernel, exact to mmcv's) on
    the map of the row's level, at its scale."""
    m = _graph("onnxruntime")
    conv, _ = convert_quietly(m)
    feed = _feeds()[0]
    got = run(conv, feed)[0]
    for r, (w, h) in enumerate(feed["rois"][:, 3:5].astype(np.float64)):
        lv = min(3, max(0, int(np.floor(np.log2(np.sqrt(w * h) / 56 + 1e-6)))))
        want = ops.mmcv_roi_align_rotated(feed[f"feat{lv}"], feed["rois"][r:r + 1],
                                          output_height=7, output_width=7,
                                          spatial_scale=SCALES[lv], sampling_ratio=2,
                                          aligned=1, clockwise=1)
        np.testing.assert_array_equal(got[r:r + 1], want)


@needs_openvino
def test_the_exported_stage_in_openvino_equals_the_fused_one():
    """OpenVINO reads the exported graph as it is (mmdeploy::MMCVRoIAlignRotated, aligned=1,
    among the standard ops): an oracle of the whole stage that is not ort_roi."""
    m = _graph("onnxruntime")
    conv, _ = convert_quietly(m)
    compiled = O.openvino_compile(m.SerializeToString())
    feed = _feeds()[0]
    want = compiled(feed)[compiled.outputs[0]]
    np.testing.assert_allclose(run(conv, feed)[0], want, rtol=1e-4, atol=1e-4)


def test_rows_of_a_negative_size_are_refused_as_the_unfused_nodes_refuse_them():
    """w and h both negative: a positive area, a level, and mmcv's refusal (aligned=1 needs
    sizes >= 0): the fused node refuses the row too, naming it."""
    m = _graph("onnxruntime")
    feed = _feeds()[0]
    feed["rois"][2, 3:5] = -feed["rois"][2, 3:5]
    for fuse, node in ((False, "MMCVRoIAlignRotated"), (True, "PyramidRotatedRoIAlign_L4")):
        s = ort_roi.InferenceSession(m.SerializeToString(), fuse=fuse)
        with pytest.raises(RoiOpError, match=f"{node} .*input 'rois'.*row [02]: the scaled "
                                             f"size .* is negative"):
            s.run(None, feed)


def test_rois_of_a_rank_inference_cannot_tell_are_read_as_the_rotated_nodes_read_them():
    """RoI Transformer's rotated stage reads rois computed upstream (its first stage's boxes
    through Reshapes to computed shapes): shape inference cannot tell their rank, nor the
    levels'. Each level's MMCVRoIAlignRotated reads Gather(rois, rows) and refuses anything
    but [k, 6], so wherever the graph runs the rois are a matrix and the levels a vector
    (``GraphIndex.read_as``): the stage fuses, with the unfused bits."""
    m = _whole_model_rois(_graph("onnxruntime"))
    conv, done = convert_quietly(m)
    assert _fused(conv) == 1 and done.notes == [], done.notes
    for feed in _feeds():
        feed["rois_shape"] = np.array(feed["rois"].shape, np.int64)
        np.testing.assert_array_equal(run(conv, feed)[0], run(m, feed)[0])


def test_a_row_of_no_level_is_not_checked_at_another_levels_scale():
    """The fused op does not read a row no level selects, nor check it: the unfused stage
    never pools it (a size that overflows at level 0's scale 4 but not at level 1's 0.5)."""
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((1, 2, 8, 8)).astype(np.float32) for _ in range(2)]
    rois = np.array([[0, 3, 3, 1e38, 2, 0.3], [0, 3, 3, 2, 2, 0.1]], np.float32)
    kw = dict(output_height=2, output_width=2, sampling_ratio=2, aligned=1, clockwise=1)
    got = ops.pyramid_rotated_roi_align(rois, np.array([1, -1]), *feats,
                                        spatial_scales=[4.0, 0.5], **kw)
    want = ops.mmcv_roi_align_rotated(feats[1], rois[:1], spatial_scale=0.5, **kw)
    np.testing.assert_array_equal(got[:1], want)
    assert not got[1].any()


def test_a_box_past_the_sample_limit_is_named_by_the_fused_op_and_its_row():
    rng = np.random.default_rng(0)
    feats = [rng.standard_normal((1, 2, 8, 8)).astype(np.float32) for _ in range(2)]
    rois = np.array([[0, 3, 3, 2, 2, 0.3], [0, 3, 3, 2, 2, 0.1], [0, 3, 3, 4, 4, 0.1]],
                    np.float32)
    with pytest.raises(RoiOpError, match=r"^PyramidRotatedRoIAlign_L2: input 'rois': box 2 "
                                         r"needs .* samples on the map"):
        ops.pyramid_rotated_roi_align(rois, np.array([1, 1, 0]), *feats, output_height=2,
                                      output_width=2, sampling_ratio=65536,
                                      spatial_scales=[1.0, 0.5])


def test_a_stage_whose_rank_inference_cannot_tell_still_gets_the_levels_note():
    m = _whole_model_rois(_graph("onnxruntime_asis"))
    _, done = convert_quietly(m)
    assert any("rows of level(s) [1, 2, 3] come out 0" in n for n in done.notes), done.notes


def test_the_stage_as_mmdeploy_traces_it_is_left_with_a_note_naming_the_rows_left_out():
    m = _graph("onnxruntime_asis")
    conv, done = convert_quietly(m)
    assert _fused(conv) == 0
    assert any("merges the pooled rows of level(s) [0] only" in n
               and "rows of level(s) [1, 2, 3] come out 0" in n for n in done.notes), done.notes
    feed = _feeds()[0]
    want, got = run(m, feed)[0], run(conv, feed)[0]
    np.testing.assert_array_equal(got, want)
    assert list(want.any(axis=(1, 2, 3))) == [True, True, False, False, False, False]


def test_the_tensorrt_stage_is_one_node_rewritten_into_the_fixed_arity_op():
    m = _graph("tensorrt")
    conv, _ = convert_quietly(m)
    assert op_types(conv) == [("ort_roi", "MultiLevelRotatedRoiAlign_L4")]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in m.graph.node[0].attribute}
    assert attrs["featmap_strides"] == [4.0, 8.0, 16.0, 32.0] and attrs["finest_scale"] == 56
    feed = _feeds()[0]
    want = ops.multi_level_rotated_roi_align(
        feed["rois"], *(feed[f"feat{k}"] for k in range(4)), output_height=7, output_width=7,
        sampling_ratio=2, aligned=1, clockwise=1, roi_scale_factor=1.0, finest_scale=56,
        featmap_strides=(4.0, 8.0, 16.0, 32.0))
    np.testing.assert_array_equal(run(conv, feed)[0], want)
    assert want.any(axis=(1, 2, 3)).all()


@needs_bounded_roi_align
@pytest.mark.parametrize("rois", ["declared", "of a rank inference cannot tell"])
def test_every_mutant_of_the_rotated_stage_is_left_or_computes_as_unfused(rois, capsys):
    """Also with the rois out of a Reshape (``GraphIndex.read_as`` reads their rank): a
    mutant whose rows are not what the rotated nodes read must not be fused on it."""
    m, feeds = _graph("onnxruntime"), _feeds()
    if rois != "declared":
        m = _whole_model_rois(m)
        for f in feeds:
            f["rois_shape"] = np.array(f["rois"].shape, np.int64)
    out = judge(m, feeds, _fused, native_ours=True)
    with capsys.disabled():
        print(f"\nmmrotate oriented_rcnn stage, rois {rois}: {sum(out.counts.values())} "
              f"mutants: {out}")
    assert not out.defects, "\n".join(out.defects[:20])
    assert sum(out.counts.values()) > 300
    assert out.counts["fused, equal"] > 30 and out.counts["left with a note"] > 50
