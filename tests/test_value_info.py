"""convert writes the inferred types of its nodes' outputs (value_info): element type, rank,
the dims it knows. onnxruntime's OpenVINO execution provider refuses a subgraph fed by a custom
op's output of unknown rank ("Parameter operation with dynamic rank"); with them it runs.

Each converted graph: every output of a node the bridge runs has a type, which agrees with
what a plain onnxruntime session (``ort_roi.session_options()``) computes (its dtype, its rank,
every static dim); the model passes onnx.checker and still runs. onnx < 1.19 has no shape
inference for custom domains: there convert writes nothing and the graph runs as before.
"""

from __future__ import annotations

import os
import warnings
from importlib import resources

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_roi
from ort_roi.cli.main import main as cli
from ort_roi.graph import schemas, shapes
from ort_roi.graph.inputs import generate_inputs
from ort_roi.graph.nodes import iter_nodes, spec_of

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _data(name: str) -> onnx.ModelProto:
    with resources.files("ort_roi").joinpath(f"data/{name}").open("rb") as f:
        return onnx.load(f)


def _fpn_extractor() -> onnx.ModelProto:
    """OpenVINO's ExperimentalDetectronROIFeatureExtractor (two outputs, the second a graph
    output declared without a shape) over 4 levels of unknown size, then a Relu: what convert
    makes fixed-arity."""
    names = [f"p{i}" for i in range(4)]
    node = helper.make_node("ExperimentalDetectronROIFeatureExtractor", ["rois"] + names,
                            ["feat", "rois_out"], domain="org.openvinotoolkit", output_size=7,
                            sampling_ratio=2, aligned=1, pyramid_scales=[4, 8, 16, 32])
    ins = [helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 4])]
    ins += [helper.make_tensor_value_info(n, TensorProto.FLOAT, [1, 8, f"h{i}", f"w{i}"])
            for i, n in enumerate(names)]
    g = helper.make_graph([node, helper.make_node("Relu", ["feat"], ["y"])], "fpn", ins,
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["R", 8, 7, 7]),
                           # no shape (the checker refuses that): convert fills it in
                           helper.make_tensor_value_info("rois_out", TensorProto.FLOAT, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid("org.openvinotoolkit", 1)],
                             ir_version=9)


def _fpn_inputs(m: onnx.ModelProto) -> dict:
    rng = np.random.default_rng(0)
    feed = {f"p{i}": rng.standard_normal((1, 8, 64 // s, 64 // s), dtype=np.float32)
            for i, s in enumerate((4, 8, 16, 32))}
    xy = rng.uniform(0, 40, (6, 2))
    feed["rois"] = np.concatenate([xy, xy + rng.uniform(4, 24, (6, 2))], 1).astype(np.float32)
    return feed


#: name -> (the model, its inputs or None: generated ones)
GRAPHS = {
    "torchvision_stage_7": (lambda: _data("torchvision_stage_7.onnx"), None),
    "torchvision_stage_14": (lambda: _data("torchvision_stage_14.onnx"), None),
    "tf2onnx_loop_7": (lambda: _data("tf2onnx_crop_and_resize_loop_7.onnx"), None),
    # tf2onnx's own annotation of this output is wrong: convert writes the inferred one
    "tf2onnx_contrib_14": (lambda: _data("tf2onnx_crop_and_resize_contrib_14.onnx"), None),
    "fast_rcnn_head": (lambda: onnx.load(os.path.join(ROOT, "models/fast_rcnn_head.onnx")), None),
    "mask_rcnn_head": (lambda: onnx.load(os.path.join(ROOT, "models/mask_rcnn_head.onnx")), None),
    "rfcn_head": (lambda: onnx.load(os.path.join(ROOT, "models/rfcn_head.onnx")), None),
    "torchvision_rfcn_head": (
        lambda: onnx.load(os.path.join(ROOT, "models/torchvision_rfcn_head.onnx")), None),
    "bilinear_roi_head": (
        lambda: onnx.load(os.path.join(ROOT, "models/bilinear_roi_head.onnx")), None),
    "openvino_fpn_extractor": (_fpn_extractor, _fpn_inputs),
}


def _convert(m: onnx.ModelProto) -> onnx.ModelProto:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # convert's notes (tf2onnx's forms): not the point here
        return ort_roi.convert(m)


def _our_outputs(m: onnx.ModelProto) -> list[str]:
    return [o for n in iter_nodes(m.graph) if spec_of(n) is not None for o in n.output if o]


def _types(m: onnx.ModelProto) -> dict[str, onnx.TypeProto]:
    found = {}

    def walk(g):
        found.update({v.name: v.type for v in list(g.value_info) + list(g.output)})
        for n in g.node:
            for a in n.attribute:
                for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else []) + list(a.graphs):
                    walk(sub)
    walk(m.graph)
    return found


def _run_exposing(m: onnx.ModelProto, names: list[str], feed: dict) -> dict[str, np.ndarray]:
    """Run ``m`` in a plain session with ``names`` (tensors of the main graph) as outputs too."""
    x = onnx.ModelProto()
    x.CopyFrom(m)
    have = {o.name for o in x.graph.output}
    x.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
    sess = ort.InferenceSession(x.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    outs = sess.run(None, feed)
    return {o.name: y for o, y in zip(sess.get_outputs(), outs)}


@pytest.mark.parametrize("name", GRAPHS)
def test_convert_writes_the_types_of_its_nodes_outputs(name):
    make, inputs = GRAPHS[name]
    native = make()
    m = _convert(native)
    ours = _our_outputs(m)
    assert ours, "the converted graph has a node of ours"
    feed = inputs(m) if inputs else generate_inputs(m)
    top = {o for n in m.graph.node for o in n.output}
    got = _run_exposing(m, [o for o in ours if o in top], feed)
    if not schemas.SHAPE_INFERENCE:  # onnx < 1.19: nothing written, the graph runs as before
        assert shapes.annotate(m) == 0
        return
    onnx.checker.check_model(m)
    types = _types(m)
    for o in ours:
        assert o in types, f"{name}: no value_info for {o!r}"
        t = types[o].tensor_type
        assert t.elem_type != 0 and t.HasField("shape"), (name, o, types[o])
        if o not in got:  # inside a Loop body: typed, not run here
            continue
        y = got[o]
        assert t.elem_type == helper.np_dtype_to_tensor_dtype(y.dtype), (name, o)
        assert len(t.shape.dim) == y.ndim, (name, o, t.shape, y.shape)
        for d, n in zip(t.shape.dim, y.shape):
            assert d.HasField("dim_value") or d.dim_param, (name, o, t.shape)  # symbolic
            if d.HasField("dim_value"):
                assert d.dim_value == n, (name, o, t.shape, y.shape)


def test_the_model_still_runs_and_passes_the_full_check():
    """The converted stage: the full checker (with shape inference) accepts it, and a plain
    session gives what the unannotated conversion gave."""
    native = _data("torchvision_stage_7.onnx")
    m = _convert(native)
    if schemas.SHAPE_INFERENCE:
        onnx.checker.check_model(m, full_check=True)
    feed = generate_inputs(m)
    bare = onnx.ModelProto()
    bare.CopyFrom(m)
    ours = set(_our_outputs(bare))
    keep = [v for v in bare.graph.value_info if v.name not in ours]
    del bare.graph.value_info[:]
    bare.graph.value_info.extend(keep)
    run = [ort.InferenceSession(x.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
           for x in (m, bare)]
    np.testing.assert_array_equal(run[0], run[1])


@pytest.mark.skipif(not schemas.SHAPE_INFERENCE, reason="onnx >= 1.19: custom-domain inference")
def test_known_dims_and_symbols():
    """The torchvision stage (P = 7, C = 256): [R, 256, 7, 7] with R symbolic; the extractor's
    second output [R, 4] beside it."""
    m = _convert(_data("torchvision_stage_7.onnx"))
    (o,) = _our_outputs(m)
    dims = _types(m)[o].tensor_type.shape.dim
    assert [d.dim_value for d in dims[1:]] == [256, 7, 7]
    assert dims[0].dim_param and not dims[0].HasField("dim_value")
    m = _convert(_fpn_extractor())
    feat, rois = _our_outputs(m)
    t = _types(m)
    assert [d.dim_value for d in t[feat].tensor_type.shape.dim][1:] == [8, 7, 7]
    assert [d.dim_param or d.dim_value for d in t[rois].tensor_type.shape.dim] == ["R", 4]
    assert t[feat].tensor_type.elem_type == TensorProto.FLOAT


@pytest.mark.skipif(not schemas.SHAPE_INFERENCE, reason="onnx >= 1.19: custom-domain inference")
def test_cli_convert_writes_them_too(tmp_path, capsys):
    src, dst = tmp_path / "in.onnx", tmp_path / "out.onnx"
    onnx.save(_data("torchvision_stage_14.onnx"), src)
    assert cli(["convert", str(src), str(dst)]) == 0
    m = onnx.load(dst)
    (o,) = _our_outputs(m)
    assert [d.dim_value for d in _types(m)[o].tensor_type.shape.dim][1:] == [256, 14, 14]


def test_annotate_leaves_a_graph_without_our_nodes_alone():
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    before = m.SerializeToString()
    assert shapes.annotate(m) == 0
    assert m.SerializeToString() == before
