"""MXNet's exported RoI graphs (``mx.onnx.export_model``, MXNet 1.9.1), converted: ``ort-roi
convert`` (and the front door, the same rewrite) gives them MXNet's semantics whatever opset
mx2onnx stamped (it stamps the installed onnx's newest: onnx 1.10.2 -> 15, 1.11 -> 16, 1.14 ->
19), and the graphs then equal MXNet.

The committed graphs (tools/mxnet_graphs.py ops -> tests/goldens/mxnet/mx2onnx.npz: each case
exported at stamps 12-19 with MXNet's outputs):

- contrib.ROIAlign (7x7 sample_ratio 2, 14x14 sample_ratio -1, 2x3 sample_ratio 0; rows whose
  batch index is -1, boxes off the map, tiny, inverted): converted, its RoiAlign becomes
  ort_roi::RoiAlign with MXNet's arithmetic (output_half_pixel, adaptive sampling), within
  1e-5 of MXNet at every stamp (measured 2.4e-7). Native onnxruntime: exact at stamps 12-15;
  from 16 the RoiAlign without coordinate_transformation_mode is half_pixel, off by 2.78 (7x7)
  and 1.65 (2x3); sample_ratio -1 refused at every stamp ("Sampling ratio should be >=0").
- ROIPooling -> MaxRoiPool: exact natively and converted (ort_roi::ROIPooling).
- GluonCV's FPN RoI stage (``FasterRCNN._pyramid_roi_feats``, 4 levels): 93 nodes fused into
  one ort_roi::PyramidRoIAlign_L4 (and 13 small nodes computing its levels and rois), within
  1e-5 of MXNet at every stamp (1.8e-7). Native: exact at 12-15, off by 1.9 at 16-17, and at
  18-19 it does not load ("Node () Op (Split) [ShapeInferenceError] Neither 'split' input nor
  'numOutputs' attribute has been given"): convert repairs the Split, with a note.
- What reads like these forms but differs in one attribute or constant stays, with a note.
- Back with ``to="onnx"``: standard ONNX that plain onnxruntime runs, equal to MXNet.

MXNet itself is the oracle (its CPU ROIAlign leaves rows with a negative batch index as the
output memory was and zeroes element n of the whole output instead, so the goldens take its
run with those indices at 0 and the rows zero, as the exporter's graph and MXNet's GPU kernel
make them). Live (an MXNet venv named by MXNET_PYTHON): the graphs exported now convert and
equal MXNet's outputs now.
"""

import os
import subprocess
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, numpy_helper

import ort_roi
from ort_roi.graph.mxnet import repair_splits

HERE = os.path.dirname(os.path.abspath(__file__))
GOLDEN = os.path.join(HERE, "goldens", "mxnet", "mx2onnx.npz")
TOOL = ["-m", "tools.mxnet_graphs"]  # run from the repository root, in the MXNet venv
ROOT = os.path.dirname(HERE)
CPU = ["CPUExecutionProvider"]
STAMPS = tuple(range(12, 20))
ALIGN = ("align7", "align14", "align23")
CASES = (*ALIGN, "pool", "fpn")
TOL = 1e-5


@pytest.fixture(scope="module")
def golden():
    with np.load(GOLDEN) as d:
        return {k: d[k] for k in d.files}


def graph(golden, case: str, stamp: int) -> onnx.ModelProto:
    return onnx.load_from_string(golden[f"{case}:opset{stamp}"].tobytes())


def feed(golden, case: str, model: onnx.ModelProto) -> dict:
    """The case's inputs (mx2onnx also lists its constants as graph inputs: not fed)."""
    return {i.name: golden[f"{case}:{i.name}"] for i in model.graph.input
            if f"{case}:{i.name}" in golden}


def quiet() -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.log_severity_level = 3  # mx2onnx lists its initializers as graph inputs
    return so


def ours(model: onnx.ModelProto, inputs: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(quiet()),
                                providers=CPU)
    return sess.run(None, inputs)[0]


def native(model: onnx.ModelProto, inputs: dict) -> np.ndarray:
    sess = ort.InferenceSession(model.SerializeToString(), quiet(), providers=CPU)
    return sess.run(None, inputs)[0]


def convert(model: onnx.ModelProto, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_roi.convert(model, report=True, **kw)


def ops(model: onnx.ModelProto) -> list[str]:
    return [f"{n.domain or 'onnx'}::{n.op_type}" for n in model.graph.node]


@pytest.mark.parametrize("stamp", STAMPS)
@pytest.mark.parametrize("case", CASES)
def test_converted_equals_mxnet(golden, case, stamp):
    m = graph(golden, case, stamp)
    c, done = convert(m)
    got = ours(c, feed(golden, case, m))
    expected = golden[f"{case}:expected"]
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=0, atol=TOL)
    if case in ALIGN:  # rows with a negative batch index: zero, as the exporter means them
        assert not got[golden[f"{case}:rois"][:, 0] < 0].any()


@pytest.mark.parametrize("stamp", STAMPS)
@pytest.mark.parametrize("case", ALIGN)
def test_roi_align_becomes_ours_with_mxnet_arithmetic(golden, case, stamp):
    c, done = convert(graph(golden, case, stamp))
    (node,) = [n for n in c.graph.node if n.op_type == "RoiAlign"]
    assert node.domain == "ort_roi"
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["coordinate_transformation_mode"] == b"output_half_pixel"
    assert attrs["sampling_ratio"] == {"align7": 2, "align14": 0, "align23": 0}[case]
    assert [(a, b) for _, a, b in done.moved] == [
        ("onnx::RoiAlign (MXNet contrib.ROIAlign)", "ort_roi::RoiAlign")]
    (note,) = [n for n in done.notes if "contrib.ROIAlign" in n]
    assert ("half_pixel at the stamped opset" in note) == (stamp >= 16)
    assert ("sample_ratio -1" in note) == (case == "align14")
    # the exporter's batch plumbing and row masking stay (exact by construction)
    assert ops(c).count("onnx::Where") == 1 and ops(c).count("onnx::Relu") == 1


@pytest.mark.parametrize("stamp", STAMPS)
def test_fpn_stage_is_one_node(golden, stamp):
    m = graph(golden, "fpn", stamp)
    c, done = convert(m)
    assert ops(c).count("ort_roi::PyramidRoIAlign_L4") == 1
    assert not [o for o in ops(c) if o.endswith("RoiAlign") or o == "onnx::Sum"]
    (node,) = [n for n in c.graph.node if n.op_type == "PyramidRoIAlign_L4"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["aligned"] == 0 and attrs["sampling_ratio"] == 2
    assert [attrs[f"spatial_scale_{i}"] for i in range(4)] == [1 / 4, 1 / 8, 1 / 16, 1 / 32]
    assert [(a, b) for _, a, b in done.moved][0] == (
        "GluonCV FPN RoI stage (93 nodes)", "ort_roi::PyramidRoIAlign")
    assert any("GluonCV's FPN RoI stage (4 levels, roi_level 2, 3, 4, 5)" in n
               for n in done.notes)
    assert len(c.graph.node) < len(m.graph.node) - 60


@pytest.mark.parametrize("stamp", (18, 19))
def test_split_repaired(golden, stamp):
    m = graph(golden, "fpn", stamp)
    with pytest.raises(Exception, match="Split"):
        native(m, feed(golden, "fpn", m))
    c, done = convert(m)
    (split,) = [n for n in c.graph.node if n.op_type == "Split"]
    assert {a.name: helper.get_attribute_value(a) for a in split.attribute}["num_outputs"] == 5
    assert any("Split node(s)" in n and "num_outputs" in n for n in done.notes)
    # also with --to onnx, and without fusion: the model loads in plain onnxruntime
    back, done = convert(m, to="onnx")
    np.testing.assert_array_equal(native(back, feed(golden, "fpn", m))[:0],
                                  golden["fpn:expected"][:0])
    assert any("Split node(s)" in n for n in done.notes)


@pytest.mark.parametrize("stamp", (17, 18, 19))
def test_split_repair_is_the_equal_split(stamp):
    x = helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2, 6])
    outs = [helper.make_tensor_value_info(f"y{i}", onnx.TensorProto.FLOAT, None) for i in range(3)]
    node = helper.make_node("Split", ["x"], [o.name for o in outs], axis=1, name="split0")
    m = helper.make_model(helper.make_graph([node], "g", [x], outs),
                          opset_imports=[helper.make_opsetid("", stamp)])
    m.ir_version = 8  # (onnxruntime 1.17, the floor, reads IR <= 9)
    notes = repair_splits(m)[1]
    given = {a.name: helper.get_attribute_value(a) for a in m.graph.node[0].attribute}
    assert ("num_outputs" in given) == (stamp >= 18) and bool(notes) == (stamp >= 18)
    a = np.arange(12, dtype=np.float32).reshape(2, 6)
    got = ort.InferenceSession(m.SerializeToString(), providers=CPU).run(None, {"x": a})
    for k, part in enumerate(np.split(a, 3, axis=1)):
        np.testing.assert_array_equal(got[k], part)


@pytest.mark.parametrize("stamp", (15, 19))
@pytest.mark.parametrize("case", ("align7", "align14", "fpn"))
def test_back_to_onnx_runs_plain(golden, case, stamp):
    """Converted, then --to onnx: standard ONNX (output_half_pixel written out) that plain
    onnxruntime runs and that still equals MXNet."""
    m = graph(golden, case, stamp)
    back, _ = convert(convert(m)[0], to="onnx")
    assert not [n for n in back.graph.node if n.domain == "ort_roi"]
    np.testing.assert_allclose(native(back, feed(golden, case, m)), golden[f"{case}:expected"],
                               rtol=0, atol=TOL)


def test_front_door(golden):
    m = graph(golden, "fpn", 19)
    so = quiet()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort_roi.InferenceSession(m, so, providers=CPU)
    got = sess.run(None, feed(golden, "fpn", m))[0]
    np.testing.assert_allclose(got, golden["fpn:expected"], rtol=0, atol=TOL)


def _set_const(model: onnx.ModelProto, name: str, value) -> None:
    for t in model.graph.initializer:
        if t.name == name:
            t.CopyFrom(numpy_helper.from_array(np.asarray(value, numpy_helper.to_array(t).dtype),
                                               name))
            return
    raise KeyError(name)


def test_near_miss_roi_align_stays_with_note(golden):
    """The batch column sliced from column 1 (not MXNet's): not the exporter's form; the
    RoiAlign goes the ONNX RoiAlign way (half_pixel at 19), with a note naming it."""
    m = graph(golden, "align7", 19)
    _set_const(m, "roialign0_5", [4])  # the boxes' Slice ends at column 4
    c, done = convert(m)
    (note,) = [n for n in done.notes if "starts like MXNet's" in n]
    assert "'roialign0_roi'" in note and "Slice" in note and "[5]" in note
    (node,) = [n for n in c.graph.node if n.op_type == "RoiAlign"]
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["coordinate_transformation_mode"] == b"half_pixel"


def test_near_miss_fpn_left_level_by_level(golden):
    """One level's RoiAlign samples differently: the stage is not fused (a note says why)
    and each level's ROIAlign pattern still gets MXNet's arithmetic."""
    m = graph(golden, "fpn", 19)
    ras = [n for n in m.graph.node if n.op_type == "RoiAlign"]
    for a in ras[2].attribute:
        if a.name == "sampling_ratio":
            a.i = 3
    c, done = convert(m)
    assert "ort_roi::PyramidRoIAlign_L4" not in ops(c)
    assert ops(c).count("ort_roi::RoiAlign") == 4
    (note,) = [n for n in done.notes if "starts like GluonCV's FPN" in n]
    assert "sampling_ratio" in note and "left level by level" in note


def _mxnet_python() -> str:
    py = os.environ.get("MXNET_PYTHON", "/tmp/mxvenv/bin/python")
    ok = os.path.exists(py) and subprocess.run(
        [py, "-c", "import mxnet, gluoncv, onnx"], capture_output=True).returncode == 0
    if not ok:
        pytest.skip("live MXNet check: needs an MXNet venv named by MXNET_PYTHON (default "
                    "/tmp/mxvenv/bin/python): python3 -m venv /tmp/mxvenv && /tmp/mxvenv/bin/"
                    "pip install mxnet==1.9.1 numpy==1.23.5 onnx==1.14.1 && /tmp/mxvenv/bin/"
                    "pip install gluoncv==0.10.5.post0 -c <(echo numpy==1.23.5)")
    return py


def test_live_mxnet(tmp_path):
    """MXNet's export and outputs now (the tool's ops part, run by the MXNet venv): every
    graph converts and equals MXNet."""
    py = _mxnet_python()
    subprocess.run([py, *TOOL, "ops", "--out", str(tmp_path)], check=True, capture_output=True,
                   cwd=ROOT)
    with np.load(tmp_path / "mx2onnx.npz") as d:
        fresh = {k: d[k] for k in d.files}
    for case in CASES:
        for stamp in STAMPS:
            m = graph(fresh, case, stamp)
            got = ours(convert(m)[0], feed(fresh, case, m))
            np.testing.assert_allclose(got, fresh[f"{case}:expected"], rtol=0, atol=TOL,
                                       err_msg=f"{case} stamped {stamp}")


@pytest.mark.parametrize("case", ("align7", "fpn"))
def test_batch_index_as_the_exporter_reads_it(golden, case):
    """Fractional batch indices (the exporter's Cast truncates 0.5 and 1.9; -0.5 and -3 are
    negative: zero rows): converted equals the exporter's own graph run natively at stamp 15
    (where onnxruntime computes it as MXNet does)."""
    m = graph(golden, case, 15)
    inputs = feed(golden, case, m)
    rois = inputs["rois"].copy()
    rows = np.flatnonzero(golden[f"{case}:expected"].reshape(len(rois), -1).any(1))[:6]
    rois[rows, 0] = [0.5, 1.9, -0.5, -3.0, 0.0, 1.0]
    inputs["rois"] = rois
    got = ours(convert(m)[0], inputs)
    np.testing.assert_allclose(got, native(m, inputs), rtol=0, atol=TOL)
    assert not got[rows[2:4]].any() and got[rows[:2]].all(axis=(1, 2, 3)).all()


@pytest.mark.parametrize("case", ("align7", "fpn"))
def test_batch_index_off_the_images_is_an_error(golden, case):
    m = graph(golden, case, 19)
    inputs = feed(golden, case, m)
    inputs["rois"] = inputs["rois"].copy()
    inputs["rois"][0, 0] = 2.0  # N = 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sess = ort_roi.InferenceSession(m, quiet(), providers=CPU)  # the front door raises
    with pytest.raises(ort_roi.RoiOpError, match="batch index 2"):
        sess.run(None, inputs)
