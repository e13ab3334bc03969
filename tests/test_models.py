"""Schemas, builders and the example graphs of models/."""

import os

import numpy as np
import onnx
import pytest
from onnx import helper

import ort_roi
from ort_roi import builders
from ort_roi.graph import examples, inputs
from ort_roi.cli.compare import compare_with_reference
from tests.versions import needs_shape_inference

MODELS = os.path.join(os.path.dirname(__file__), "..", "models")


@pytest.mark.parametrize("ex", examples.EXAMPLES, ids=lambda e: e.name)
def test_committed_model_is_what_the_builder_writes(ex):
    committed = onnx.load(os.path.join(MODELS, ex.file))
    assert committed.SerializeToString() == ex.build().SerializeToString()


@pytest.mark.parametrize("ex", examples.EXAMPLES, ids=lambda e: e.name)
def test_model_checks_and_runs_like_the_reference(ex):
    model = onnx.load(os.path.join(MODELS, ex.file))
    onnx.checker.check_model(model, full_check=True)
    report = compare_with_reference(model, inputs.generate_inputs(model, r=5, seed=3))
    assert report.ok, report.summary()
    assert all(np.isfinite(v).all() and v.shape[0] == 5 for v in report.outputs.values())


def _hand_written(**attrs):
    node = helper.make_node("RoIAlign", ["X", "boxes", "boxes_num"], ["Y"], domain="ort_roi",
                            **attrs)
    return builders.make_model([node], [builders.tensor("X", "float32", [2, 64, 50, 68]),
                                        builders.tensor("boxes", "float32", ["R", 4]),
                                        builders.tensor("boxes_num", "int32", [2])],
                               [builders.tensor("Y", "float32", ["R", "C", "PH", "PW"])])


@needs_shape_inference
def test_hand_written_graph_checks_and_infers_shapes():
    m = _hand_written(pooled_height=7, pooled_width=5, spatial_scale=0.25, sampling_ratio=2,
                      aligned=1)
    onnx.checker.check_model(m, full_check=True)
    inferred = onnx.shape_inference.infer_shapes(m, strict_mode=True)
    y = inferred.graph.output[0].type.tensor_type
    dims = [d.dim_param or d.dim_value for d in y.shape.dim]
    assert dims == ["R", 64, 7, 5] and y.elem_type == onnx.TensorProto.FLOAT


@needs_shape_inference
def test_shape_inference_psroi_channels_come_from_the_attribute():
    node = builders.psroi_pool("X", "rois", "n", "Y", output_channels=21, pooled_height=7,
                               pooled_width=7, spatial_scale=0.0625)
    m = builders.make_model([node], [builders.tensor("X", "float64", [1, 1029, 38, 50]),
                                     builders.tensor("rois", "float64", [300, 4]),
                                     builders.tensor("n", "int64", [1])],
                            [builders.tensor("Y", "float64", None)])
    y = onnx.shape_inference.infer_shapes(m, strict_mode=True).graph.output[0].type.tensor_type
    assert [d.dim_value for d in y.shape.dim] == [300, 21, 7, 7]
    assert y.elem_type == onnx.TensorProto.DOUBLE


def test_checker_rejects_missing_required_attribute():
    node = helper.make_node("ROIPooling", ["X", "rois"], ["Y"], domain="ort_roi", pooled_h=2,
                            pooled_w=2)  # no spatial_scale
    m = builders.make_model([node], [builders.tensor("X", "float32", [1, 3, 8, 8]),
                                     builders.tensor("rois", "float32", [4, 5])],
                            [builders.tensor("Y", "float32", [4, 3, 2, 2])])
    with pytest.raises(onnx.checker.ValidationError, match="spatial_scale"):
        onnx.checker.check_model(m, full_check=True)


@needs_shape_inference
def test_shape_inference_rejects_bad_attribute_value():
    m = _hand_written(pooled_height=0, pooled_width=5, spatial_scale=0.25, sampling_ratio=2,
                      aligned=1)
    with pytest.raises(Exception, match="pooled_height"):
        onnx.shape_inference.infer_shapes(m, strict_mode=True)


def test_builders_write_every_attribute_and_check_them():
    node = builders.roi_align("X", "b", "n", "Y")
    assert {a.name for a in node.attribute} == {"pooled_height", "pooled_width", "spatial_scale",
                                                "sampling_ratio", "aligned"}
    with pytest.raises(ort_roi.RoiOpError, match="method"):
        builders.roi_pooling("X", "r", "Y", pooled_h=1, pooled_w=1, spatial_scale=1.0,
                             method="avg")
    m = builders.single_op_model("PSROIPool", output_channels=2)
    assert m.ir_version == builders.IR_VERSION
    assert {o.domain: o.version for o in m.opset_import}["ort_roi"] == 1


def test_reference_evaluator_runs_the_definitions():
    from onnx.reference import ReferenceEvaluator

    from ort_roi.graph import reference

    m = builders.single_op_model("RoIPool", count_dtype=np.int64)
    X = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    y = ReferenceEvaluator(m, new_ops=reference.OPS).run(
        None, {"X": X, "boxes": np.array([[1, 1, 2, 2], [1.5, 1.5, 3, 3]], np.float32),
               "boxes_num": np.array([2])})[0]
    np.testing.assert_array_equal(y.ravel(), [11, 16])


RFCN = os.path.join(MODELS, "torchvision_rfcn_head.onnx")


def test_exported_rfcn_head_runs_in_a_plain_session_like_the_definitions():
    """models/torchvision_rfcn_head.onnx (ort_roi.torch_export of torchvision's ps_roi_align /
    ps_roi_pool, tools/export_torchvision.py) as users run it: a plain session."""
    model = onnx.load(RFCN)
    assert sorted(n.op_type for n in model.graph.node if n.domain == "ort_roi") == [
        "TorchvisionPSRoIAlign", "TorchvisionPSRoIPool"]
    onnx.checker.check_model(model, full_check=True)
    report = compare_with_reference(model, inputs.generate_inputs(model, r=9, seed=4),
                                    plain=True)
    assert report.ok, report.summary()
    cls_prob, bbox_pred = report.outputs.values()
    assert cls_prob.shape == (9, 4) and bbox_pred.shape == (9, 4)
    np.testing.assert_allclose(cls_prob.sum(1), 1, rtol=1e-6)


def test_exported_rfcn_head_equals_eager_torchvision():
    """The same head in eager torch, from the file's own weights (the head is
    tools/export_torchvision.py's rfcn_head)."""
    torch = pytest.importorskip("torch",
                                reason="needs torchvision: pip install '.[torchvision]'")
    tv = pytest.importorskip("torchvision.ops",
                             reason="needs torchvision: pip install '.[torchvision]'")
    from onnx import numpy_helper

    model = onnx.load(RFCN)
    w = {i.name: torch.tensor(numpy_helper.to_array(i)) for i in model.graph.initializer}
    feed = inputs.generate_inputs(model, r=11, seed=5)
    feed["rois"][3, 1:] = [200.0, 100.0, 150.0, 60.0]  # inverted
    feed["rois"][4, 1:] = [-90.0, -40.0, 30.0, 20.0]  # partly off the map
    x, rois = (torch.from_numpy(feed[k]) for k in ("features", "rois"))
    with torch.no_grad():
        scores = tv.ps_roi_align(torch.nn.functional.conv2d(x, w["cls.weight"], w["cls.bias"]),
                                 rois, 3, 1 / 16, 2)
        deltas = tv.ps_roi_pool(torch.nn.functional.conv2d(x, w["box.weight"], w["box.bias"]),
                                rois, 3, 1 / 16)
        want = [torch.softmax(scores.mean((2, 3)), 1).numpy(), deltas.mean((2, 3)).numpy()]
    import onnxruntime as ort

    sess = ort.InferenceSession(RFCN, ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    for got, exp in zip(sess.run(None, feed), want):
        np.testing.assert_allclose(got, exp, rtol=1e-5, atol=1e-6)


def test_the_readme_first_snippet_runs_as_written(monkeypatch, capsys):
    """README's first Python block (plain onnxruntime), run from the repository's root."""
    root = os.path.join(os.path.dirname(__file__), "..")
    with open(os.path.join(root, "README.md")) as f:
        text = f.read()
    code = text.split("```python\n", 1)[1].split("```", 1)[0]
    monkeypatch.chdir(root)
    exec(compile(code, "README.md", "exec"), {})
    assert capsys.readouterr().out.strip() == "(2, 3, 28, 28)"
