"""A defect found is never OK (issue 61, item 1): where what ``ort-roi convert`` makes of a
graph fails or computes otherwise, ``ort-roi validate`` answers DEFECT (exit status 5), and
every rewritten node is judged on the inputs the original graph fed it, so a node downstream
of another difference is judged too, never cleared unjudged. The faults are injected into
ort_roi's kernels in this process (the plain session's Python ops call them here)."""

import numpy as np
import onnx
import pytest
from onnx import helper

import ort_roi
from ort_roi.cli import main as cli
from ort_roi.cli.validate import EXIT, validate
from ort_roi.runtime import bridge
from tests.test_verdicts import _pooling


def _chained() -> onnx.ModelProto:
    """Two chained RoiAligns and no selection: A pools 7x7 of a 1x8x32x32 map, B 3x3 of A's
    output (A's rows its images)."""
    g = helper.make_graph(
        [helper.make_node("RoiAlign", ["X", "rois", "batch"], ["Y1"], name="A", output_height=7,
                          output_width=7, sampling_ratio=2, spatial_scale=1.0),
         helper.make_node("RoiAlign", ["Y1", "rois2", "batch2"], ["Y2"], name="B",
                          output_height=3, output_width=3, sampling_ratio=2, spatial_scale=1.0)],
        "chained", [helper.make_tensor_value_info("X", onnx.TensorProto.FLOAT, [1, 8, 32, 32]),
                    helper.make_tensor_value_info("rois", onnx.TensorProto.FLOAT, [2, 4]),
                    helper.make_tensor_value_info("batch", onnx.TensorProto.INT64, [2]),
                    helper.make_tensor_value_info("rois2", onnx.TensorProto.FLOAT, [2, 4]),
                    helper.make_tensor_value_info("batch2", onnx.TensorProto.INT64, [2])],
        [helper.make_tensor_value_info("Y1", onnx.TensorProto.FLOAT, [2, 8, 7, 7]),
         helper.make_tensor_value_info("Y2", onnx.TensorProto.FLOAT, [2, 8, 3, 3])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=8)


def _feed() -> dict:
    rng = np.random.default_rng(3)
    return {"X": rng.standard_normal((1, 8, 32, 32)).astype(np.float32),
            "rois": np.array([[2, 3, 20, 25], [5, 1, 30, 18]], np.float32),
            "batch": np.zeros(2, np.int64),
            "rois2": np.array([[0.5, 0.5, 6, 6], [1, 0, 5, 6.5]], np.float32),
            "batch2": np.array([0, 1], np.int64)}


@pytest.fixture
def faulty(monkeypatch):
    """A function: make ort_roi's RoiAlign kernel wrong (``how`` "add": +0.5 where it pools
    3x3) or raise (``how`` "raise") in this process."""
    ort_roi.session_options()  # the kernels registered

    def inject(how: str) -> None:
        for key, (spec, dtype, kernel, _small) in list(bridge._KERNELS.items()):
            if spec.name != "RoiAlign":
                continue

            def wrong(*args, _k=kernel, **attrs):
                ys = _k(*args, **attrs)
                if attrs.get("output_height") != 3:
                    return ys
                if how == "raise":
                    raise RuntimeError("injected fault")
                return ys + np.float32(0.5)

            monkeypatch.setitem(bridge._KERNELS, key, (spec, dtype, wrong, None))  # no small path

    return inject


def test_a_wrong_kernel_is_a_defect_not_ok(faulty, tmp_path, capsys):
    """Before: 'Y2: 144 of 144 values differ, by up to 0.5 ... (1 of 2 checked, 1 fed other
    inputs) ... no defect of ort_roi's in this run', verdict OK, exit 0."""
    faulty("add")
    m = _chained()
    v = validate(m, inputs=_feed())
    assert v.verdict == "DEFECT", v
    e = v.effect
    assert e.differs == ["Y2: 144 of 144 values differ, by up to 0.5"], e.differs
    assert e.rounding is None and not e.untraced, e
    assert len(e.at_rewrite) == 1 and e.at_rewrite[0].startswith(
        "node 'B' (RoiAlign), fed what the original graph fed it, output 'Y2' differs by up to "
        "0.5"), e.at_rewrite
    path = str(tmp_path / "chained.onnx")
    onnx.save(m, path)
    npz = str(tmp_path / "in.npz")
    np.savez(npz, **_feed())
    assert cli.main(["validate", path, "--inputs", npz]) == EXIT["DEFECT"] == 5
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: DEFECT: ") and "keep the graph as it is" in out, out
    assert "no defect" not in out and ": OK" not in out.splitlines()[0], out


def test_a_kernel_that_raises_is_a_defect_not_ok(faulty, tmp_path, capsys):
    """The converted graph's ort_roi node fails (its kernel raises, the bridge logs it and
    writes NaN): before, 'could not be compared ... a defect of ort_roi's' under an OK."""
    faulty("raise")
    v = validate(_chained(), inputs=_feed())
    assert v.verdict == "DEFECT" and v.effect.error is not None, v
    assert "injected fault" in v.effect.error, v.effect.error


def test_without_a_fault_the_chain_is_ok(capsys):
    """The same graph with ort_roi's kernels as they are: the same outputs, OK."""
    v = validate(_chained(), inputs=_feed())
    assert v.verdict == "OK" and not v.effect.differs, v


def test_a_defect_found_when_every_node_is_judged_elsewhere(faulty):
    """One RoiAlign pooling 3x3 (no selection anywhere), wrong: named, DEFECT."""
    faulty("add")
    m = _pooling()
    for a in m.graph.node[0].attribute:
        if a.name in ("output_height", "output_width"):
            a.i = 3
    v = validate(m)
    assert v.verdict == "DEFECT" and v.effect.at_rewrite, v
    assert v.effect.at_rewrite[0].startswith("node 'pool' (RoiAlign), fed what the original "
                                             "graph fed it"), v.effect.at_rewrite
