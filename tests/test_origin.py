"""Which exporter wrote a graph (``ort_roi.graph.exporters``): convert tells it once, from what
each exporter writes into every model (torch.onnx: producer_name 'pytorch', graph 'main_graph';
tf2onnx: producer_name 'tf2onnx'; mx.onnx.export_model: no producer_name, graph
'mxnet_converted_model'; paddle2onnx: graph 'PaddlePaddle Graph ...'; ort_roi.builders:
producer_name 'ort_roi'), says which in its report, and applies an exporter's repairs (what
changes ONNX's meaning to the exporter's: mx2onnx's RoiAlign and Splits, tf2onnx's
crop_and_resize) only to that exporter's graphs, or where ``exporter=`` says so. A graph
whose origin cannot be told keeps ONNX's meaning, with a note naming the option.

The hand-made graph below is mx2onnx's contrib.ROIAlign pattern exactly (the batch column
sliced, squeezed, Relu'd and cast; the rows with a negative index zeroed by a Where), stamped
opset 16, where a RoiAlign without coordinate_transformation_mode is half_pixel. Before the
table, convert gave it MXNet's output_half_pixel (up to 4.5 from onnxruntime's reading of the
same file) with only a warning.
"""

import os
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import ort_roi
from ort_roi.cli import main as cli
from ort_roi.graph import exporters, toolkit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MXNET = os.path.join(HERE, "goldens", "mxnet", "mx2onnx.npz")
TF = os.path.join(HERE, "goldens", "tf2onnx_crop_and_resize.npz")
DATA = os.path.join(ROOT, "ort_roi", "data")
CPU = ["CPUExecutionProvider"]


@pytest.fixture(scope="module")
def mx():
    with np.load(MXNET) as d:
        return {k: d[k] for k in d.files}


def handmade(opset: int = 16, producer: str = "handmade") -> onnx.ModelProto:
    """mx2onnx's contrib.ROIAlign pattern, written by hand: 7 x 7, sample_ratio 2, scale 0.5 on
    a [2, 3, 10, 12] map (as the align7 golden, so MXNet's outputs are its oracle)."""
    def const(name, v):
        return numpy_helper.from_array(np.asarray(v), name)

    nodes = [
        helper.make_node("Slice", ["rois", "one", "five", "one"], ["boxes"]),
        helper.make_node("Slice", ["rois", "zero", "one", "one"], ["column"]),
        helper.make_node("Squeeze", ["column", "one"], ["batch_f"]),
        helper.make_node("Relu", ["batch_f"], ["batch_r"]),
        helper.make_node("Cast", ["batch_r"], ["batch"], to=TensorProto.INT64),
        helper.make_node("RoiAlign", ["x", "boxes", "batch"], ["pooled"], name="pool",
                         mode="avg", output_height=7, output_width=7, sampling_ratio=2,
                         spatial_scale=0.5),
        helper.make_node("Unsqueeze", ["column", "axes"], ["column4"]),
        helper.make_node("Less", ["column4", "zero_f"], ["negative"]),
        helper.make_node("Where", ["negative", "zero_f", "pooled"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "roi_head",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 10, 12]),
         helper.make_tensor_value_info("rois", TensorProto.FLOAT, [None, 5])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [const("zero", np.array([0], np.int64)), const("one", np.array([1], np.int64)),
         const("five", np.array([5], np.int64)), const("axes", np.array([2, 3], np.int64)),
         const("zero_f", np.array([0.0], np.float32))])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                             ir_version=8, producer_name=producer)


def feed(mx) -> dict:
    return {"x": mx["align7:x"], "rois": mx["align7:rois"]}


def native(model: onnx.ModelProto, inputs: dict) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    return ort.InferenceSession(model.SerializeToString(), so, providers=CPU).run(None, inputs)[0]


def ours(model: onnx.ModelProto, inputs: dict) -> np.ndarray:
    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(so),
                                providers=CPU)
    return sess.run(None, inputs)[0]


def convert(model: onnx.ModelProto, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_roi.convert(model, report=True, **kw)


def front_door(model: onnx.ModelProto, inputs: dict, **kw) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_roi.InferenceSession(model, providers=CPU, **kw).run(None, inputs)[0]


def test_a_handmade_graph_in_mx2onnx_form_keeps_onnx_meaning(mx):
    m = handmade()
    inputs = feed(mx)
    want = native(m, inputs)
    c, done = convert(m)
    np.testing.assert_allclose(ours(c, inputs), want, rtol=0, atol=1e-5)
    np.testing.assert_allclose(front_door(m, inputs), want, rtol=0, atol=1e-5)
    assert done.exporter is None
    assert done.summary().startswith("exporter: unknown (producer_name 'handmade', graph "
                                     "name 'roi_head'")
    (note,) = done.notes
    assert "'pool'" in note and "mx2onnx" in note and "left as ONNX reads it" in note
    assert "exporter='mx2onnx' (--exporter mx2onnx)" in note
    # what the repair would have given differs: the test sees the difference it guards
    assert np.abs(want - mx["align7:expected"]).max() > 1


def test_said_to_be_mx2onnx_it_gets_mxnets_arithmetic(mx):
    m = handmade()
    inputs = feed(mx)
    c, done = convert(m, exporter="mx2onnx")
    assert done.exporter == "mx2onnx" and "exporter='mx2onnx' given" in done.evidence
    assert [b for _, _, b in done.moved] == ["ort_roi::RoiAlign"]
    assert not any("--exporter" in n for n in done.notes)
    np.testing.assert_allclose(ours(c, inputs), mx["align7:expected"], rtol=0, atol=1e-5)
    np.testing.assert_allclose(front_door(m, inputs, exporter="mx2onnx"),
                               mx["align7:expected"], rtol=0, atol=1e-5)
    # and what mx.onnx.export_model writes (its graph name) is told without being said
    m.graph.name = "mxnet_converted_model"
    m.producer_name = ""
    c, done = convert(m)
    assert done.exporter == "mx2onnx" and "'mxnet_converted_model'" in done.evidence
    np.testing.assert_allclose(ours(c, inputs), mx["align7:expected"], rtol=0, atol=1e-5)


def test_cli_convert_says_the_exporter_and_takes_exporter(mx, tmp_path, capsys):
    src, dst = tmp_path / "handmade.onnx", tmp_path / "out.onnx"
    onnx.save(handmade(), src)
    assert cli.main(["convert", str(src), str(dst)]) == 0
    out = capsys.readouterr().out
    assert "exporter: unknown (producer_name 'handmade'" in out
    assert "note: node(s) 'pool' look like MXNet's contrib.ROIAlign as mx2onnx writes it" in out
    np.testing.assert_allclose(ours(onnx.load(dst), feed(mx)), native(handmade(), feed(mx)),
                               rtol=0, atol=1e-5)
    assert cli.main(["convert", str(src), str(dst), "--exporter", "mx2onnx"]) == 0
    assert "exporter: mx2onnx (exporter='mx2onnx' given" in capsys.readouterr().out
    np.testing.assert_allclose(ours(onnx.load(dst), feed(mx)), mx["align7:expected"], rtol=0,
                               atol=1e-5)
    with pytest.raises(SystemExit):
        cli.main(["convert", str(src), str(dst), "--exporter", "mxnet"])


def test_an_unknown_exporter_name_is_refused():
    with pytest.raises(ValueError, match="'exporter' must be one of mx2onnx, torch.onnx, "
                                         "tf2onnx, paddle2onnx, ort_roi, none"):
        ort_roi.convert(handmade(), exporter="mxnet")


def test_exporter_none_applies_no_repair(mx):
    """An mx2onnx graph said to be no exporter's: ONNX's meaning (half_pixel at stamp 16),
    and no note offering the repair."""
    m = onnx.load_from_string(mx["align7:opset16"].tobytes())
    inputs = feed(mx)
    c, done = convert(m, exporter="none")
    assert done.exporter is None and "exporter='none' given" in done.evidence
    assert not any("--exporter" in n for n in done.notes)
    np.testing.assert_allclose(ours(c, inputs), native(m, inputs), rtol=0, atol=1e-5)


def _committed() -> list[tuple[str, str, str | None]]:
    """(where, the graph's bytes key or path, the exporter it is told to be)."""
    out = [("mxnet", k, "mx2onnx") for k in np.load(MXNET).files if ":opset" in k]
    out += [("tf", k, "tf2onnx") for k in np.load(TF).files if k.endswith((":loop", ":contrib"))]
    for name in sorted(os.listdir(DATA)):
        if name.endswith(".onnx"):
            out.append(("file", os.path.join(DATA, name),
                        "tf2onnx" if name.startswith("tf2onnx") else "torch.onnx"))
    models = os.path.join(ROOT, "models")
    for name in sorted(os.listdir(models)):
        if name.endswith(".onnx"):  # ort_roi.builders', and tools/export_torchvision.py's
            out.append(("file", os.path.join(models, name),
                        "torch.onnx" if name.startswith("torchvision") else "ort_roi"))
    return out


def test_every_committed_graph_is_told():
    npz = {"mxnet": np.load(MXNET), "tf": np.load(TF)}
    told = {}
    for where, key, want in _committed():
        m = (onnx.load(key, load_external_data=False) if where == "file"
             else onnx.load_from_string(npz[where][key].tobytes()))
        origin = exporters.identify(m)
        assert origin.exporter == want, (key, str(origin))
        told[want] = told.get(want, 0) + 1
    assert told["mx2onnx"] == 40 and told["tf2onnx"] >= 50 and told["torch.onnx"] >= 3
    assert told["ort_roi"] >= 4


def test_torch_onnx_is_told_live(tmp_path):
    """What torch.onnx (both exporters) writes now."""
    torch = pytest.importorskip(
        "torch", reason="torch.onnx's graphs: pip install '.[torchvision]'")
    torchvision = pytest.importorskip(
        "torchvision", reason="torch.onnx's graphs: pip install '.[torchvision]'")

    class Head(torch.nn.Module):
        def forward(self, x, boxes):
            return torchvision.ops.roi_align(x, boxes, 7, 0.25, 2, True)

    args = (torch.randn(1, 3, 16, 16), torch.tensor([[0, 1, 1, 8, 8.0]]))
    for dynamo in (False, True):
        path = tmp_path / f"torch_{dynamo}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                torch.onnx.export(Head(), args, str(path), opset_version=18, dynamo=dynamo)
            except Exception:  # noqa: BLE001 - the dynamo exporter needs onnxscript
                if dynamo:
                    continue
                raise
        origin = exporters.identify(onnx.load(path))
        assert origin.exporter == "torch.onnx" and "producer_name 'pytorch'" in origin.evidence


def test_paddle2onnx_is_told_live(tmp_path):
    """What ort-roi export-paddle (paddle2onnx) writes now."""
    pytest.importorskip("paddle2onnx",  # (the extra brings paddle too)
                        reason="paddle2onnx's graphs: pip install '.[paddle]'")
    import paddle
    from paddle.vision import ops

    class PaddleHead(paddle.nn.Layer):
        def forward(self, x, boxes, boxes_num):
            return ops.roi_align(x, boxes, boxes_num, 7, 0.25, sampling_ratio=-1, aligned=True)

    spec = [paddle.static.InputSpec([None, 8, 32, 32], "float32", "x"),
            paddle.static.InputSpec([None, 4], "float32", "boxes"),
            paddle.static.InputSpec([None], "int32", "boxes_num")]
    paddle.jit.save(PaddleHead(), str(tmp_path / "head" / "inference"), input_spec=spec)
    m = ort_roi.paddle_export(str(tmp_path / "head" / "inference"))
    origin = exporters.identify(m)
    assert origin.exporter == "paddle2onnx", str(origin)
    assert "'PaddlePaddle Graph" in origin.evidence and "export-paddle" in origin.evidence


def test_a_tf2onnx_form_elsewhere_is_left_with_a_note():
    """tf2onnx's crop_and_resize Loop in a graph that does not say tf2onnx wrote it: as
    onnxruntime reads it; said to be tf2onnx's, one ort_roi::CropAndResize."""
    with np.load(TF) as d:
        key = next(k for k in d.files if k.endswith(":loop"))
        m = onnx.load_from_string(d[key].tobytes())
        case = key.rsplit(":", 1)[0]
        inputs = {k: d[f"{case}:{k}"] for k in ("image", "boxes", "box_indices")}
    m.producer_name = "handmade"
    c, done = convert(m)
    assert done.exporter is None
    assert not [n for n in c.graph.node if n.op_type == "CropAndResize"]
    (note,) = [n for n in done.notes if "--exporter tf2onnx" in n]
    assert "tf.image.crop_and_resize" in note
    np.testing.assert_array_equal(ours(c, inputs), native(m, inputs))
    c, done = convert(m, exporter="tf2onnx")
    assert [n.op_type for n in c.graph.node if n.domain == "ort_roi"] == ["CropAndResize"]


def test_exact_passes_run_whoever_wrote_the_graph():
    """torchvision's stage fused into one node computes what the stage computes: it is fused
    in a graph that does not say who wrote it too."""
    m = onnx.load(os.path.join(DATA, "torchvision_stage_7.onnx"))
    m.producer_name, m.graph.name = "handmade", "g"
    c, done = convert(m)
    assert done.exporter is None
    assert [b for _, _, b in done.moved] == ["ort_roi::PyramidRoIAlign"]


@pytest.mark.parametrize("which", ["handmade", "pool", "tf_none"])
def test_a_graph_convert_leaves_alone_is_indexed_once(mx, which, monkeypatch):
    """One GraphIndex for identification and every exporter's recogniser (they re-index only
    after changing the graph)."""
    if which == "handmade":
        m = handmade()
        kw = {}
    elif which == "pool":  # mx2onnx's MaxRoiPool: moved by the generic ONNX rule only
        m, kw = onnx.load_from_string(mx["pool:opset16"].tobytes()), {}
    else:
        with np.load(TF) as d:
            m = onnx.load_from_string(d[next(k for k in d.files
                                             if k.endswith(":contrib"))].tobytes())
        kw = {"exporter": "none"}
    made = []
    init = toolkit.GraphIndex.__init__

    def counting(self, *a, **k):
        made.append(1)
        init(self, *a, **k)

    monkeypatch.setattr(toolkit.GraphIndex, "__init__", counting)
    convert(m, **kw)
    assert len(made) == 1
