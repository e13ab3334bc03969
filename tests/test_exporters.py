"""The nodes other exporters write, run as they are (docs/semantics.md, "The nodes other exporters
write"): mmrotate's MMCVRoIAlignRotated, detectron2's Caffe2 RoIAlign, ONNX RoiAlign moved
into ort_roi by convert; the node-forms table that registration, convert, the front door,
schemas and `ort-roi info` share.

Oracles: OpenVINO reading mmdeploy::MMCVRoIAlignRotated from ONNX (committed goldens, and
live when installed), a literal loop of mmcv's rotated kernel (tests/literal.py), Paddle
roi_align (the committed RoIAlign goldens) and onnxruntime's own RoiAlign.
"""

import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

from tests import cases as C
from tests import literal
from tests import oracles as O
import ort_roi
from tests.conftest import load_golden, tolerance
from ort_roi import builders, ops
from ort_roi.cli import main as cli
from ort_roi.kernels.cpu.strategies import force
from ort_roi.graph.schemas import SHAPE_INFERENCE
from ort_roi.ops import FORMS
from tests.versions import ORT, needs_opset_22

needs_openvino = pytest.mark.skipif(not O.openvino_available(),
                                    reason="needs openvino: pip install '.[parity]'")


def _plain(model):
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


def _feed(sess, arrays):
    return dict(zip([i.name for i in sess.get_inputs()], arrays))


def _tol(dtype):
    return dict(rtol=1e-4, atol=1e-4) if np.dtype(dtype) == np.float32 else dict(rtol=1e-9,
                                                                                 atol=1e-9)


def _model(op, domain, dtype, count_dtype=np.int64, **attrs):
    return builders.single_op_model(op, dtype, count_dtype, domain=domain, **attrs)


# --- MMCVRoIAlignRotated --------------------------------------------------------------------

ROTATED = C.rotated_cases(8)
OV_GOLDEN = load_golden("mmcv_roi_align_rotated")


@pytest.mark.parametrize("domain", ["mmdeploy", "mmcv"])
@pytest.mark.parametrize("case", ROTATED, ids=[c["name"] for c in ROTATED])
def test_rotated_matches_mmcv_loop_in_a_plain_session(case, domain):
    X, rois = case["inputs"]["input"], case["inputs"]["rois"]
    sess = _plain(_model("MMCVRoIAlignRotated", domain, X.dtype, **case["attrs"]))
    got = sess.run(None, {"input": X, "rois": rois})[0]
    want = literal.mmcv_roi_align_rotated(X, rois, **case["attrs"])
    assert got.dtype == X.dtype and got.shape == want.shape
    np.testing.assert_allclose(got, want, **_tol(X.dtype))
    assert np.abs(want).sum() > 0


@pytest.mark.parametrize("case", OV_GOLDEN, ids=[c["name"] for c in OV_GOLDEN])
def test_rotated_matches_openvino_goldens(case):
    X, rois = case["inputs"]["input"], case["inputs"]["rois"]
    sess = _plain(_model("MMCVRoIAlignRotated", "mmdeploy", X.dtype, **case["attrs"]))
    got = sess.run(None, {"input": X, "rois": rois})[0]
    np.testing.assert_allclose(got, case["expected"], rtol=1e-4, atol=1e-4)
    assert np.abs(case["expected"]).sum() > 0


@pytest.mark.parity
@needs_openvino
@pytest.mark.parametrize("seed", [301, 302])
def test_rotated_matches_openvino_live(seed):
    for case in C.rotated_cases(seed, openvino=True):
        got = ops.mmcv_roi_align_rotated(*case["inputs"].values(), **case["attrs"])
        np.testing.assert_allclose(got, O.openvino_rotated(case), rtol=1e-4, atol=1e-4)


def test_rotated_huge_grids_take_the_clipped_path_with_the_same_result():
    """A box far larger than the map with an adaptive grid: only samples that can fall on
    the map are visited (the regular path would visit ~1e12); on a box small enough for
    both paths, the clipped path gives the regular path's values."""
    rng = np.random.default_rng(3)
    X = rng.standard_normal((1, 2, 9, 11)).astype(np.float64)
    rois = np.array([[0, 5, 4, 300, 220, 0.7], [0, 5, 4, 30, 22, -0.4]], np.float64)
    a = dict(output_height=2, output_width=3, spatial_scale=1.0, sampling_ratio=0)
    with force(rotated="regular"):
        regular = ops.mmcv_roi_align_rotated(X, rois[1:], **a)
    with force(rotated="clipped"):
        clipped = ops.mmcv_roi_align_rotated(X, rois[1:], **a)
    np.testing.assert_allclose(clipped, regular, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(regular, literal.mmcv_roi_align_rotated(X, rois[1:], **a),
                               rtol=1e-9, atol=1e-9)
    huge = np.array([[0, 5, 4, 3e6, 2e6, 0.3]], np.float64)
    y = ops.mmcv_roi_align_rotated(X, huge, **a)  # grid ~1e6 x 1e6 per bin
    assert np.isfinite(y).all() and np.abs(y).max() < 1e-6  # the map is a speck of the box
    big = np.array([[0, 5, 4, 3000, 2000, 0.3]], np.float64)
    y = ops.mmcv_roi_align_rotated(X, big, **a)  # 1000 x 1000 samples per bin
    assert np.isfinite(y).all()


def test_rotated_refuses_what_mmcv_asserts_and_absurd_sample_counts():
    X = np.zeros((1, 1, 4, 4), np.float32)
    with pytest.raises(ort_roi.RoiOpError, match=r"MMCVRoIAlignRotated.*'rois'.*row 1.*negative"):
        ops.mmcv_roi_align_rotated(X, np.array([[0, 1, 1, 2, 2, 0], [0, 1, 1, -2, 2, 0]],
                                                   np.float32))
    # aligned=0: sizes below 1 are 1, as mmcv
    y = ops.mmcv_roi_align_rotated(X + 1, np.array([[0, 1, 1, -2, 2, 0]], np.float32),
                                       aligned=0)
    assert y.ravel().tolist() == [1.0]
    with pytest.raises(ort_roi.RoiOpError, match=r"'rois'.*shape \[R, 6\]"):
        ops.mmcv_roi_align_rotated(X, np.zeros((2, 5), np.float32))
    with pytest.raises(ort_roi.RoiOpError, match=r"samples on the map.*lower sampling_ratio"):
        ops.mmcv_roi_align_rotated(X, np.array([[0, 1, 1, 0, 0, 0]], np.float32),
                                       sampling_ratio=100000)


# --- org.pytorch._caffe2::RoIAlign ------------------------------------------------------------

RA_GOLDEN = load_golden("roi_align")


@pytest.mark.parametrize("case", RA_GOLDEN, ids=[c["name"] for c in RA_GOLDEN])
def test_caffe2_roi_align_matches_paddle(case):
    X, boxes, counts = (case["inputs"][k] for k in ("X", "boxes", "boxes_num"))
    a = case["attrs"]
    attrs = dict(order="NCHW", spatial_scale=a["spatial_scale"], pooled_h=a["pooled_height"],
                 pooled_w=a["pooled_width"], sampling_ratio=a["sampling_ratio"],
                 aligned=a["aligned"])
    expected = np.nan_to_num(case["expected"], nan=0.0) if case["nan_to_zero"] else case["expected"]
    batch = np.repeat(np.arange(X.shape[0]), counts).astype(X.dtype)
    sess = _plain(_model("RoIAlign", "org.pytorch._caffe2", X.dtype, **attrs))
    got = sess.run(None, {"X": X, "rois": np.concatenate([batch[:, None], boxes], 1)})[0]
    np.testing.assert_allclose(got, expected, **tolerance("RoIAlign", a, X.dtype))
    # one image: [K, 4] rois, as Caffe2 accepts
    first = slice(0, int(counts[0]))
    got = sess.run(None, {"X": X[:1], "rois": boxes[first]})[0]
    np.testing.assert_allclose(got, expected[first], **tolerance("RoIAlign", a, X.dtype))


def test_caffe2_roi_align_as_detectron2_writes_it():
    """A node with only the attributes detectron2 set (aligned, sampling_ratio default):
    the front door and convert fill the rest; four-column rois with N > 1 are refused."""
    node = helper.make_node("RoIAlign", ["X", "rois"], ["Y"], domain="org.pytorch._caffe2",
                            name="roi_align", order="NCHW", spatial_scale=0.25, pooled_h=7,
                            pooled_w=7, aligned=1)
    g = helper.make_graph([node], "d2", [
        helper.make_tensor_value_info("X", TensorProto.FLOAT, [None, 4, None, None]),
        helper.make_tensor_value_info("rois", TensorProto.FLOAT, [None, None])],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("org.pytorch._caffe2", 1)],
                          ir_version=9)
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 4, 20, 24)).astype(np.float32)
    rois = np.array([[1, 4, 4, 60, 44], [0, 10, 0, 95, 79]], np.float32)
    want = ops.roi_align(X, rois[[1, 0], 1:], np.array([1, 1]), pooled_height=7,
                             pooled_width=7, spatial_scale=0.25, sampling_ratio=-1,
                             aligned=1)[[1, 0]]
    got = ort_roi.InferenceSession(m).run(None, {"X": X, "rois": rois})[0]
    np.testing.assert_array_equal(got, want)
    got = _plain(ort_roi.convert(m)).run(None, {"X": X, "rois": rois})[0]
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ort_roi.RoiOpError, match=r"RoIAlign.*'rois'.*4 columns.*N = 2"):
        ort_roi.InferenceSession(m).run(None, {"X": X, "rois": rois[:, 1:]})


# --- ONNX RoiAlign into ort_roi ----------------------------------------------------------------

def onnx_roi_align_model(opset, dtype=TensorProto.FLOAT, **attrs):
    node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], name="ra",
                            **attrs)
    g = helper.make_graph([node], "tv", [
        helper.make_tensor_value_info("X", dtype, [None, None, None, None]),
        helper.make_tensor_value_info("rois", dtype, [None, 4]),
        helper.make_tensor_value_info("batch_indices", TensorProto.INT64, [None])],
        [helper.make_tensor_value_info("Y", dtype, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=9)


def _onnx_attrs(case, opset):
    a = dict(case["attrs"])
    ctm = a.pop("coordinate_transformation_mode")
    if opset >= 16:
        a["coordinate_transformation_mode"] = ctm
    return a, ctm


ONNX_AVG = [c for c in C.onnx_roi_align_cases(7) if c["inputs"]["X"].dtype == np.float32
            and len(c["inputs"]["rois"])]


@pytest.mark.parametrize("opset", [10, 16, pytest.param(22, marks=needs_opset_22)])
@pytest.mark.parametrize("case", ONNX_AVG[::3], ids=[c["name"] for c in ONNX_AVG[::3]])
def test_converted_roi_align_avg_matches_onnxruntime(case, opset):
    a, ctm = _onnx_attrs(case, opset)
    if opset == 10 and ctm == "half_pixel":
        pytest.skip("opset 10 has only output_half_pixel")
    X, rois, idx = case["inputs"].values()
    keep = (rois[:, 2:] >= rois[:, :2]).all(1)  # onnxruntime: "Integer overflow" on inverted
    rois, idx = rois[keep], idx[keep]
    m = onnx_roi_align_model(opset, **a)
    # onnxruntime 1.32 has no CPU kernel for RoiAlign-22 (it adds only types to 16's)
    oracle = onnx_roi_align_model(min(opset, 16), **a)
    native = ort.InferenceSession(oracle.SerializeToString(),
                                  providers=["CPUExecutionProvider"]).run(None, {
        "X": X, "rois": rois, "batch_indices": idx})[0]
    conv = ort_roi.convert(m)
    node = conv.graph.node[0]
    assert (node.domain, node.op_type) == ("ort_roi", "RoiAlign")
    attrs = {x.name: helper.get_attribute_value(x) for x in node.attribute}
    assert attrs["coordinate_transformation_mode"] == ctm.encode()  # opset 10's, explicit
    got = _plain(conv).run(None, {"X": X, "rois": rois, "batch_indices": idx})[0]
    np.testing.assert_allclose(got, native, rtol=1e-5, atol=1e-5)
    assert np.abs(native).sum() > 0
    front = ort_roi.InferenceSession(m).run(None, {"X": X, "rois": rois, "batch_indices": idx})
    np.testing.assert_allclose(front[0], native, rtol=1e-5, atol=1e-5)


ONNX_MAX = C.onnx_roi_align_cases(11, mode="max")


@pytest.mark.parametrize("case", ONNX_MAX[::4], ids=[c["name"] for c in ONNX_MAX[::4]])
def test_converted_roi_align_max_is_mmcv_max(case):
    """max: the largest bilinear sample (mmcv's loop), not onnxruntime's max of corners."""
    X, rois, idx = case["inputs"].values()
    a = case["attrs"]
    with pytest.warns(UserWarning, match="node 'ra': RoiAlign mode=max"):
        conv = ort_roi.convert(onnx_roi_align_model(16, helper.np_dtype_to_tensor_dtype(
            X.dtype), **a))
    sess = _plain(conv)
    got = sess.run(None, {"X": X, "rois": rois, "batch_indices": idx})[0]
    rows = np.concatenate([idx[:, None].astype(X.dtype), rois], 1)
    want = literal.mmcv_roi_align(X, rows, output_height=a["output_height"],
                                  output_width=a["output_width"],
                                  spatial_scale=a["spatial_scale"],
                                  sampling_ratio=a["sampling_ratio"], mode="max",
                                  aligned=int(a["coordinate_transformation_mode"] == "half_pixel"))
    np.testing.assert_allclose(got, want, **_tol(X.dtype))


def test_convert_round_trip_and_cli(tmp_path, capsys):
    m = onnx_roi_align_model(16, output_height=3, output_width=2, sampling_ratio=2,
                             spatial_scale=0.5, coordinate_transformation_mode="half_pixel")
    src, dst, back = (tmp_path / f"{n}.onnx" for n in "abc")
    onnx.save(m, src)
    assert cli.main(["convert", str(src), str(dst)]) == 0
    assert "1 node(s) rewritten" in capsys.readouterr().out
    conv = onnx.load(dst)
    assert [(n.domain, n.op_type) for n in conv.graph.node] == [("ort_roi", "RoiAlign")]
    if SHAPE_INFERENCE:  # onnx >= 1.19
        out = onnx.shape_inference.infer_shapes(conv, strict_mode=True).graph.output[0]
        assert [d.dim_value for d in out.type.tensor_type.shape.dim][1:] == [0, 3, 2]
        onnx.checker.check_model(onnx.shape_inference.infer_shapes(conv), full_check=True)
    assert cli.main(["convert", str(dst), str(back), "--to", "onnx"]) == 0
    restored = onnx.load(back)
    assert [(n.domain, n.op_type) for n in restored.graph.node] == [("", "RoiAlign")]
    assert {o.domain for o in restored.opset_import} == {""}
    rng = np.random.default_rng(1)
    feed = {"X": rng.standard_normal((2, 3, 10, 12)).astype(np.float32),
            "rois": np.array([[1, 1, 9, 7], [0, 2, 12, 18]], np.float32),
            "batch_indices": np.array([1, 0], np.int64)}
    a = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    b = ort.InferenceSession(str(back), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(a, b)
    # an opset-10 graph goes back to opset 10's RoiAlign (no coordinate_transformation_mode)
    m10 = ort_roi.convert(ort_roi.convert(onnx_roi_align_model(10, output_height=2)), "onnx")
    assert [x.name for x in m10.graph.node[0].attribute if
            x.name == "coordinate_transformation_mode"] == []
    # half_pixel cannot go back to opset 10
    half = ort_roi.convert(onnx_roi_align_model(16, output_height=2))
    half.opset_import[0].version = 10
    with pytest.raises(ort_roi.RoiOpError, match="half_pixel.*needs ONNX opset >= 16"):
        ort_roi.convert(half, "onnx")


def test_convert_is_one_pass_for_every_form():
    """Registered forms keep their node and get every attribute; native forms move."""
    nodes = [helper.make_node("MaxRoiPool", ["X", "r5"], ["a"], pooled_shape=[2, 2]),
             helper.make_node("RoiAlign", ["X", "r4", "bi"], ["b"]),
             helper.make_node("MMCVRoiAlign", ["X", "r5"], ["c"], domain="mmcv",
                              output_height=2, output_width=2),
             helper.make_node("MMCVRoIAlignRotated", ["X", "r6"], ["d"], domain="mmdeploy")]
    g = helper.make_graph(nodes, "all", [], [])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=9)
    conv = ort_roi.convert(m)
    got = [(n.domain, n.op_type, len(n.attribute)) for n in conv.graph.node]
    assert got == [("ort_roi", "ROIPooling", 4), ("ort_roi", "RoiAlign", 6),
                   ("mmcv", "MMCVRoiAlign", 6), ("mmdeploy", "MMCVRoIAlignRotated", 6)]
    assert {o.domain for o in conv.opset_import} == {"", "ort_roi", "mmcv", "mmdeploy"}


# --- the table ---------------------------------------------------------------------------------

def test_every_registered_form_runs_in_a_plain_session_and_has_a_schema():
    for domain, case in C.form_cases():
        args = list(case["inputs"].values())
        m = _model(case["op"], domain, next(a.dtype for a in args if a.dtype.kind == "f"),
                   next((a.dtype for a in args if a.dtype.kind == "i"), np.int64),
                   **case["attrs"])
        assert onnx.defs.has(case["op"], domain)
        out = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
        dims = out.graph.output[0].type.tensor_type.shape.dim
        got = _plain(m).run(None, _feed(_plain(m), args))[0]
        want = ops.kernel(ort_roi.ops.spec(case["op"], domain))(*args, **case["attrs"])
        want = want[0] if isinstance(want, tuple) else want
        np.testing.assert_array_equal(got, want)
        if case["op"] != "PasteMasks":  # its size: an input's value
            known = [(d.dim_value, n) for d, n in zip(dims, got.shape) if d.HasField("dim_value")]
            assert known and all(d == n for d, n in known), (case["op"], known)
    assert {(d, c["op"]) for d, c in C.form_cases()} == {f.key for f in FORMS if f.registered}


def test_info_lists_every_form_and_survives_a_closed_pipe():
    out = subprocess.run([sys.executable, "-m", "ort_roi", "info"], capture_output=True,
                         text=True)
    assert out.returncode == 0
    for f in FORMS:
        assert f"{f.domain or 'onnx'}::{f.op_type}" in out.stdout
    p = subprocess.run(f"{sys.executable} -m ort_roi info | head -n 2", shell=True,
                       capture_output=True, text=True)
    assert p.returncode == 0 and len(p.stdout.splitlines()) == 2
    assert "Traceback" not in p.stderr and "BrokenPipe" not in p.stderr, p.stderr


def test_validate_accepts_a_graph_whose_outputs_carry_no_shape(tmp_path, capsys):
    """onnx's full check rejects an output without a shape; onnxruntime runs it."""
    m = onnx_roi_align_model(16, output_height=2, output_width=2)
    assert not m.graph.output[0].type.tensor_type.HasField("shape")
    path = tmp_path / "m.onnx"
    conv = ort_roi.convert(m)  # convert writes the output's inferred shape: drop it again
    conv.graph.output[0].type.tensor_type.ClearField("shape")
    onnx.save(conv, path)
    assert cli.main(["validate", str(path)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out
    assert ("checked with the inferred shapes" if SHAPE_INFERENCE  # onnx >= 1.19
            else "checked the graph without them") in out
    onnx.save(m, path)  # as torchvision writes it: a plain session runs it natively
    assert cli.main(["validate", str(path)]) == 0
    assert ("node 'ra' (onnx::RoiAlign) runs on onnxruntime's own kernel; `ort-roi convert` "
            "moves it into ort_roi" in capsys.readouterr().out)


# --- RoiAlign mode=max: sample max by default, onnxruntime's on request, never silent -----------

ONNX_ORT_MAX = [c for c in C.onnx_roi_align_cases(12, mode="max") + C.onnx_roi_align_cases(
    13, mode="max") if len(c["inputs"]["rois"])]


def _native_max(case):
    """onnxruntime's own RoiAlign (opset 16) on the case, or None where it refuses the boxes
    (inverted boxes with an adaptive grid: 'Integer overflow')."""
    X, rois, idx = case["inputs"].values()
    m = onnx_roi_align_model(16, helper.np_dtype_to_tensor_dtype(X.dtype), **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    try:
        return m, sess.run(None, {"X": X, "rois": rois, "batch_indices": idx})[0]
    except Exception:  # noqa: BLE001
        return m, None


@pytest.mark.parametrize("case", ONNX_ORT_MAX, ids=[c["name"] for c in ONNX_ORT_MAX])
def test_roialign_max_onnx_reproduces_onnxruntime_exactly(case):
    """roialign_max="onnx": the largest weighted corner of any sample, bit for bit with
    onnxruntime's RoiAlign (float32 and float64, fixed and adaptive grids, boxes off the map)."""
    m, want = _native_max(case)
    if want is None:
        pytest.skip("onnxruntime refuses these boxes")
    X, rois, idx = case["inputs"].values()
    feed = {"X": X, "rois": rois, "batch_indices": idx}
    conv = ort_roi.convert(m, roialign_max="onnx")
    assert {a.name: helper.get_attribute_value(a) for a in conv.graph.node[0].attribute}[
        "mode"] == b"onnx_max"
    np.testing.assert_array_equal(_plain(conv).run(None, feed)[0], want)
    front = ort_roi.InferenceSession(m, roialign_max="onnx")
    np.testing.assert_array_equal(front.run(None, feed)[0], want)
    # and back: onnxruntime's max again
    back = ort_roi.convert(conv, "onnx")
    assert [(n.domain, n.op_type) for n in back.graph.node] == [("", "RoiAlign")]
    assert ort.InferenceSession(back.SerializeToString(), providers=[
        "CPUExecutionProvider"]).run(None, feed)[0].tobytes() == want.tobytes()


def test_roialign_max_differs_by_default_and_says_so_naming_each_node(tmp_path, capsys):
    case = next(c for c in ONNX_ORT_MAX if c["inputs"]["X"].dtype == np.float32
                and c["attrs"]["sampling_ratio"] == 2)
    m, native = _native_max(case)
    m.graph.node[0].name = "mask_pool"
    X, rois, idx = case["inputs"].values()
    feed = {"X": X, "rois": rois, "batch_indices": idx}
    with pytest.warns(UserWarning, match=r"node 'mask_pool': RoiAlign mode=max is computed as "
                                         r"the largest bilinear sample"):
        conv = ort_roi.convert(m)
    got = _plain(conv).run(None, feed)[0]
    assert not np.array_equal(got, native)  # the two readings differ on these boxes
    rows = np.concatenate([idx[:, None].astype(X.dtype), rois], 1)
    a = case["attrs"]
    np.testing.assert_allclose(got, literal.mmcv_roi_align(
        X, rows, output_height=a["output_height"], output_width=a["output_width"],
        spatial_scale=a["spatial_scale"], sampling_ratio=a["sampling_ratio"], mode="max",
        aligned=int(a["coordinate_transformation_mode"] == "half_pixel")), rtol=1e-5, atol=1e-5)
    with pytest.warns(UserWarning, match="node 'mask_pool'"):
        ort_roi.InferenceSession(m)
    src, dst = tmp_path / "a.onnx", tmp_path / "b.onnx"
    onnx.save(m, src)
    assert cli.main(["convert", str(src), str(dst)]) == 0
    out = capsys.readouterr().out
    assert "note: node 'mask_pool': RoiAlign mode=max is computed as the largest" in out
    assert cli.main(["convert", str(src), str(dst), "--roialign-max", "onnx"]) == 0
    assert "note" not in capsys.readouterr().out
    np.testing.assert_array_equal(_plain(onnx.load(dst)).run(None, feed)[0], native)
    with pytest.warns(UserWarning, match="node 'mask_pool': back to ONNX RoiAlign mode=max.*"
                                         "numbers change"):
        ort_roi.convert(conv, "onnx")


def test_roialign_negative_sampling_ratio_is_refused_as_onnxruntime_does():
    m = onnx_roi_align_model(16, output_height=2, output_width=2, sampling_ratio=-1)
    with pytest.raises(Exception, match="(?i)sampling"):
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(ort_roi.RoiOpError, match=r"RoiAlign \(node 'ra'\): attribute "
                                                 r"'sampling_ratio': must be >= 0, got -1"):
        ort_roi.convert(m)
    with pytest.raises(ort_roi.RoiOpError, match="sampling_ratio"):
        ort_roi.InferenceSession(m)


def _info_lines():
    out = subprocess.run([sys.executable, "-m", "ort_roi", "info", "--full"], capture_output=True,
                         text=True)
    assert out.returncode == 0, out.stderr
    lines, name = {}, None
    for line in out.stdout.splitlines():
        if "::" in line and not line.startswith(" "):
            name = line.split()[0]
        elif line.startswith("  runs: ") and name:
            lines[name] = line[len("  runs: "):]
    return lines, out.stderr


def test_info_says_what_a_plain_session_does_with_each_form():
    """Once it said 'onnxruntime runs it natively' for OpenVINO's extractor and mmdeploy's
    multi-level node, which a plain session refuses. Checked here against sessions of the
    exporters' own nodes, built by hand."""
    from tests import oracles as O
    from tests.test_multilevel import mmdeploy_node_model

    runs, err = _info_lines()
    assert err == ""  # no onnxruntime log lines from the probing
    assert set(runs) == {f"{f.domain or 'onnx'}::{f.op_type}" for f in FORMS}
    ext = next(c for c in C.extractor_cases(10) if len(c["inputs"]) == 5)
    mm = next(c for c in C.multilevel_cases(11) if len(c["inputs"]) == 5)
    for name, model in (("org.openvinotoolkit::ExperimentalDetectronROIFeatureExtractor",
                         O.extractor_node_model(ext)),
                        ("mmdeploy::MMCVMultiLevelRoiAlign", mmdeploy_node_model(mm))):
        with pytest.raises(Exception, match="not_runnable_as_exported"):
            _plain(model)
        assert runs[name].startswith("a plain session refuses it as exported")
        assert "natively" not in runs[name] and "own kernel" not in runs[name]
    with pytest.raises(Exception, match="NOT_IMPLEMENTED" if ORT >= (1, 21) else "Opset 22"):
        ort.InferenceSession(onnx_roi_align_model(22).SerializeToString(),
                             providers=["CPUExecutionProvider"])
    assert runs["onnx::RoiAlign"].startswith(
        "a plain session runs it as it is (onnxruntime's own kernel; float32, float64 at opset "
        "10, 16); not float32, float64 at opset 22")
    assert "not float64" in runs["onnx::MaxRoiPool"]
    for f in FORMS:
        if f.registered:
            assert runs[f"{f.domain or 'onnx'}::{f.op_type}"] == (
                "a plain session runs it as it is (ort_roi's kernel; float32, float64)")
