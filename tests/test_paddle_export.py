"""ort_roi.paddle_export / ``ort-roi export-paddle``: Paddle programs with roi_align, roi_pool
and psroi_pool, saved by paddle.jit.save, exported through paddle2onnx (in a child process)
and run in plain onnxruntime sessions against Paddle's own output."""

from __future__ import annotations

import copy
import importlib.util
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import ort_roi
from ort_roi.cli.main import main as cli
from ort_roi.export.paddle import rewrite_stand_ins, run_paddle2onnx

#: paddle2onnx and Paddle, the extra ``paddle`` (the extra ``parity`` has Paddle alone)
NO_EXPORTER = any(importlib.util.find_spec(m) is None for m in ("paddle2onnx", "paddle"))
pytestmark = pytest.mark.skipif(NO_EXPORTER,
                                reason="needs paddle2onnx: pip install '.[paddle]'")

OC, PH, PW = 2, 2, 3  # psroi_pool: output channels and bins; the map has OC*PH*PW channels
C = OC * PH * PW
# (op, its outputs' exactness): max pooling bit for bit, averages within 1e-5
EXACT, AVG = 0.0, 1e-5


def _layers():
    import paddle
    from paddle.vision import ops

    class AllRoiOps(paddle.nn.Layer):
        """Every RoI op of Paddle, with downstream ops on some outputs."""

        def forward(self, x, boxes, boxes_num):
            return (
                ops.roi_align(x, boxes, boxes_num, (3, 2), 0.5, sampling_ratio=-1,
                              aligned=True) * 2.0,
                ops.roi_align(x, boxes, boxes_num, 2, 0.25, sampling_ratio=2, aligned=False),
                ops.roi_pool(x, boxes, boxes_num, (2, 3), 0.5),
                paddle.nn.functional.relu(ops.psroi_pool(x, boxes, boxes_num, (PH, PW), 0.5)),
            )

    class StandardOps(paddle.nn.Layer):
        """The ops with a standard ONNX form."""

        def forward(self, x, boxes, boxes_num):
            return (
                ops.roi_align(x, boxes, boxes_num, (3, 2), 0.5, sampling_ratio=-1,
                              aligned=False),
                ops.roi_align(x, boxes, boxes_num, 2, 0.25, sampling_ratio=2, aligned=True),
                ops.roi_pool(x, boxes, boxes_num, (2, 3), 0.5),
            )

    class Unsupported(paddle.nn.Layer):
        def forward(self, x, boxes, boxes_num):
            pooled = ops.roi_pool(x, boxes, boxes_num, 2, 0.5)
            return pooled, paddle.linalg.det(x[:, 0, :4, :4])

    class Aborts(paddle.nn.Layer):  # paddle2onnx lists mean, then aborts on a full mean
        def forward(self, x, boxes, boxes_num):
            return ops.roi_pool(x, boxes, boxes_num, 2, 0.5), x.mean()

    return {"all": AllRoiOps, "standard": StandardOps, "unsupported": Unsupported,
            "aborts": Aborts}


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The layers saved with paddle.jit.save: name -> path prefix."""
    import paddle

    spec = [paddle.static.InputSpec([None, C, 10, 12], "float32", "x"),
            paddle.static.InputSpec([None, 4], "float32", "boxes"),
            paddle.static.InputSpec([None], "int32", "boxes_num")]
    out = {}
    for name, layer in _layers().items():
        prefix = str(tmp_path_factory.mktemp("paddle") / name)
        paddle.jit.save(layer(), prefix, input_spec=spec)
        out[name] = prefix
    return out


@pytest.fixture(scope="module")
def exported(saved, tmp_path_factory):
    """paddle_export's two halves, the child's (paddle2onnx, seconds) once per (layer, opset)
    for the module: (layer, opset, standard) -> the ONNX file."""
    raw: dict = {}

    def get(name: str, opset: int, standard: bool = False) -> str:
        if (name, opset) not in raw:
            raw[name, opset] = run_paddle2onnx(saved[name], opset)
        model, answer = raw[name, opset]
        model = rewrite_stand_ins(copy.deepcopy(model), answer["rois"], answer["outputs"],
                                  standard=standard)
        path = str(tmp_path_factory.mktemp("onnx") / f"{name}_{opset}_{standard}.onnx")
        onnx.save(model, path)
        return path

    return get


def _inputs(counts, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((len(counts), C, 10, 12)).astype(np.float32)
    r = int(sum(counts))
    xy = rng.uniform(-2, 22, (r, 2))
    wh = rng.uniform(0, 10, (r, 2))
    wh[:2] = [[0.0, 0.0], [0.4, 0.7]]  # an empty box and one under a pixel
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    return {"x": x, "boxes": boxes, "boxes_num": np.asarray(counts, np.int32)}


def _paddle(prefix, feeds):
    import paddle

    layer = paddle.jit.load(prefix)
    return [t.numpy() for t in layer(*(paddle.to_tensor(feeds[k])
                                         for k in ("x", "boxes", "boxes_num")))]


def _compare(got, want, tolerances):
    assert len(got) == len(want) == len(tolerances)
    for i, (g, w, tol) in enumerate(zip(got, want, tolerances)):
        assert g.shape == w.shape and g.dtype == w.dtype, i
        if tol == EXACT:
            np.testing.assert_array_equal(g, w, err_msg=f"output {i}")
        else:
            np.testing.assert_allclose(g, w, rtol=0, atol=tol, err_msg=f"output {i}")


COUNTS = [(2, 3), (3, 0, 4), (5,)]  # two images, three (one without boxes), one


@pytest.mark.parametrize("opset", [11, 16, 17])
def test_every_roi_op_equals_paddle(saved, exported, opset):
    path = exported("all", opset)
    model = onnx.load(path)
    assert sorted(n.op_type for n in model.graph.node if n.domain == "ort_roi") == [
        "PSROIPool", "RoIAlign", "RoIAlign", "RoIPool"]
    assert not any(n.op_type == "RoiAlign" for n in model.graph.node)  # no stand-in left
    sess = ort.InferenceSession(path, ort_roi.session_options())
    for counts in COUNTS:
        feeds = _inputs(counts)
        want = _paddle(saved["all"], feeds)
        # docs/semantics.md, deliberate divergences: on the empty box, aligned roi_align with
        # adaptive sampling is NaN in Paddle (0 / 0 samples), 0 in ort_roi
        assert np.isnan(want[0][0]).all() and not np.isnan(want[0][1:]).any()
        want[0][0] = 0
        _compare(sess.run(None, feeds), want, [AVG, AVG, EXACT, EXACT])


def test_standard_onnx_runs_without_ort_roi(saved, exported):
    path = exported("standard", 16, standard=True)
    model = onnx.load(path)
    assert {n.domain for n in model.graph.node} <= {"", "ai.onnx"}
    assert sorted(n.op_type for n in model.graph.node
                  if n.op_type in ("RoiAlign", "MaxRoiPool")) == ["MaxRoiPool", "RoiAlign",
                                                                    "RoiAlign"]
    sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])  # no ort_roi
    for counts in COUNTS:
        feeds = _inputs(counts, seed=1)
        _compare(sess.run(None, feeds), _paddle(saved["standard"], feeds), [AVG, AVG, EXACT])


def test_standard_refuses_what_onnx_cannot_say(exported):
    with pytest.raises(ort_roi.RoiOpError, match="psroi_pool.*no standard ONNX form"):
        exported("all", 17, standard=True)
    with pytest.raises(ort_roi.RoiOpError, match="aligned=True.*opset 11"):
        exported("standard", 11, standard=True)


def test_unsupported_op_is_an_exception_naming_it(saved):
    with pytest.raises(ort_roi.RoiOpError, match=r"does not support these ops: pd_op\.det "
                                                 r"\(it stopped with signal SIGABRT\)"):
        ort_roi.paddle_export(saved["unsupported"])
    # the exporter died in its child; this process goes on, and so does the next export
    with pytest.raises(ort_roi.RoiOpError, match=r"paddle2onnx failed \(signal SIGABRT\)"):
        ort_roi.paddle_export(saved["aborts"])


def test_cli_export_paddle(saved, tmp_path, capsys):
    out = tmp_path / "roi.onnx"
    assert cli(["export-paddle", saved["standard"], str(out), "--opset", "17",
                "--standard-onnx"]) == 0
    assert "RoI nodes: onnx::MaxRoiPool x1, onnx::RoiAlign x2" in capsys.readouterr().out
    sess = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])  # no ort_roi
    feeds = _inputs((1, 4), seed=2)
    _compare(sess.run(None, feeds), _paddle(saved["standard"], feeds), [AVG, AVG, EXACT])
    assert cli(["export-paddle", str(tmp_path / "nope"), str(tmp_path / "no.onnx")]) == 1
    assert "neither" in capsys.readouterr().err and not (tmp_path / "no.onnx").exists()


OLD_FORMAT = """
import sys, numpy as np, paddle
from paddle.vision import ops

class Old(paddle.nn.Layer):
    def forward(self, x, boxes, boxes_num):
        return (ops.roi_align(x, boxes, boxes_num, 2, 0.5, sampling_ratio=-1, aligned=True),
                ops.roi_pool(x, boxes, boxes_num, 2, 0.5))

prefix = sys.argv[1]
spec = [paddle.static.InputSpec([None, 4, 10, 12], "float32", "x"),
        paddle.static.InputSpec([None, 4], "float32", "boxes"),
        paddle.static.InputSpec([None], "int32", "boxes_num")]
paddle.jit.save(Old(), prefix, input_spec=spec)  # FLAGS_enable_pir_api=0: PREFIX.pdmodel
feeds = dict(np.load(prefix + "_in.npz"))
paddle.enable_static()
exe = paddle.static.Executor(paddle.CPUPlace())
program, _, fetches = paddle.static.load_inference_model(prefix, exe)
np.savez(prefix + "_out.npz", *exe.run(program, feed=feeds, fetch_list=fetches))
"""


def test_older_pdmodel_format(tmp_path):
    """A program saved with PIR off (PREFIX.pdmodel), run by Paddle's old executor."""
    prefix = str(tmp_path / "old")
    feeds = _inputs((2, 3), seed=3)
    feeds["x"] = feeds["x"][:, :4]
    feeds["boxes"][0] = [1, 1, 3, 3]  # Paddle: NaN on an empty box with these settings
    np.savez(prefix + "_in.npz", **feeds)
    script = tmp_path / "old_format.py"  # a file: paddle.jit.save reads the layer's source
    script.write_text(OLD_FORMAT)
    subprocess.run([sys.executable, str(script), prefix], check=True, capture_output=True,
                   env={**os.environ, "FLAGS_enable_pir_api": "0"})
    assert os.path.exists(prefix + ".pdmodel") and not os.path.exists(prefix + ".json")
    sess = ort.InferenceSession(ort_roi.paddle_export(prefix, None, 11).SerializeToString(),
                                ort_roi.session_options())
    want = np.load(prefix + "_out.npz")
    _compare(sess.run(None, feeds), [want["arr_0"], want["arr_1"]], [AVG, EXACT])


def test_missing_program_is_named(tmp_path):
    with pytest.raises(ort_roi.RoiOpError, match="nope.json nor .*nope.pdmodel"):
        ort_roi.paddle_export(tmp_path / "nope")


def test_a_python_without_paddle2onnx_says_what_to_install(saved, tmp_path):
    bare = tmp_path / "bare-python"  # the same Python without its site-packages
    bare.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "$@"\n')
    bare.chmod(0o755)
    with pytest.raises(ImportError, match=r"pip install '\.\[paddle\]'"):
        ort_roi.paddle_export(saved["standard"], python=str(bare))


def test_import_ort_roi_does_not_import_paddle():
    code = "import sys, ort_roi; print('paddle' in sys.modules, 'paddle2onnx' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.split() == ["False", "False"]


def _flatten_heads():
    import paddle
    from paddle.vision import ops

    class FlattenHead(paddle.nn.Layer):
        """RoI heads as Paddle writes them: pooled -> flatten -> linear, in the forms
        paddle2onnx writes as a Reshape with 0 / x's dims and -1 (flatten(1),
        flatten(start, stop), reshape([0, -1]), reshape([0, C, -1])) and one it does not
        (reshape([-1, C*h*w]))."""

        def __init__(self):
            super().__init__()
            self.fc = paddle.nn.Linear(C * 3 * 2, 5)

        def forward(self, x, boxes, boxes_num):
            a = ops.roi_align(x, boxes, boxes_num, (3, 2), 0.5, sampling_ratio=2, aligned=True)
            p = ops.roi_pool(x, boxes, boxes_num, (2, 3), 0.5)
            return (self.fc(paddle.flatten(a, 1)), paddle.flatten(p, start_axis=1, stop_axis=-1),
                    paddle.flatten(a, 2, 3), paddle.reshape(p, [0, -1]),
                    paddle.reshape(p, [0, C, -1]), paddle.reshape(p, [-1, C * 6]))

    return FlattenHead


@pytest.mark.parametrize("opset", [11, 17])
def test_flatten_after_roi_ops_on_zero_rows(tmp_path, capsys, opset):
    """paddle2onnx writes flatten / reshape([0, -1]) as Reshapes whose -1 onnxruntime cannot
    infer on 0 rows (``Input shape:{0,12,3,2}, requested shape:{0,-1}``); export-paddle
    computes it (or writes Flatten(axis=1)) and says so. Equal to Paddle with no boxes at all
    ([0, C*h*w]) and with boxes: bit for bit but the linear layer's matmul."""
    import paddle

    paddle.seed(0)
    prefix, out = str(tmp_path / "flatten"), tmp_path / "flatten.onnx"
    spec = [paddle.static.InputSpec([None, C, 10, 12], "float32", "x"),
            paddle.static.InputSpec([None, 4], "float32", "boxes"),
            paddle.static.InputSpec([None], "int32", "boxes_num")]
    paddle.jit.save(_flatten_heads()(), prefix, input_spec=spec)
    assert cli(["export-paddle", prefix, str(out), "--opset", str(opset)]) == 0
    summary = capsys.readouterr().out
    assert "repaired: paddle2onnx's Reshape to a shape with 0 / x's dims and -1" in summary
    assert summary.rstrip().endswith("x5"), summary  # reshape([-1, C*6]) needed nothing
    model = onnx.load(str(out))
    assert [n.op_type for n in model.graph.node if n.doc_string] == [
        "Flatten", "Flatten", "Reshape", "Flatten", "Reshape"]
    sess = ort.InferenceSession(str(out), ort_roi.session_options())
    rng = np.random.default_rng(4)
    empty = {"x": rng.standard_normal((2, C, 10, 12)).astype(np.float32),
             "boxes": np.zeros((0, 4), np.float32), "boxes_num": np.zeros(2, np.int32)}
    for feeds in (empty, _inputs((2, 3), seed=5)):
        got, want = sess.run(None, feeds), _paddle(prefix, feeds)
        r = len(feeds["boxes"])
        assert [g.shape for g in got] == [w.shape for w in want] == [
            (r, 5), (r, C * 6), (r, C, 6), (r, C * 6), (r, C, 6), (r, C * 6)]
        _compare(got, want, [AVG, EXACT, AVG, EXACT, EXACT, EXACT])
    # where paddle2onnx's graph runs (boxes), the repaired one is that graph bit for bit
    raw, answer = run_paddle2onnx(prefix, opset)
    raw = rewrite_stand_ins(raw, answer["rois"], answer["outputs"])
    plain = ort.InferenceSession(raw.SerializeToString(), ort_roi.session_options())
    feeds = _inputs((3, 1), seed=6)
    _compare(sess.run(None, feeds), plain.run(None, feeds), [EXACT] * 6)
    with pytest.raises(Exception, match=r"requested shape:\{0,"):
        plain.run(None, empty)
