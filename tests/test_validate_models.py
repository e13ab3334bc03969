"""``ort-roi validate`` on real detection models: each RoI node's output, captured in one
onnxruntime run, against its definition on the inputs the model fed it; a wrong node reported
FAILED by name; declared sizes kept. The torchvision models (small Mask R-CNN, native and
converted) skip without torch (pip install '.[torchvision]')."""

import os
import subprocess
import sys
import textwrap
import time

import onnx
import pytest
from onnx import TensorProto, helper

from ort_roi import builders
from ort_roi.cli import main as cli
from ort_roi.graph.inputs import generate_inputs

MODELS = os.path.join(os.path.dirname(__file__), "..", "models")
TORCH = "needs torchvision: pip install '.[torchvision]'"


def _save(tmp_path, m, name="m.onnx"):
    path = str(tmp_path / name)
    onnx.save(m, path)
    return path


def _stage_with_fixed_boxes(rows=300):
    """boxes: [rows, 4] reaching an ONNX RoiAlign through other nodes (as a torchvision
    stage's), with a batch index per box made from its row count."""
    nodes = [helper.make_node("Identity", ["boxes"], ["b"], name="id"),
             helper.make_node("Shape", ["b"], ["s"], name="shape", start=0, end=1),
             helper.make_node("ConstantOfShape", ["s"], ["idx"], name="zeros",
                              value=helper.make_tensor("v", TensorProto.INT64, [1], [0])),
             helper.make_node("RoiAlign", ["X", "b", "idx"], ["Y"], name="align",
                              output_height=2, output_width=2, sampling_ratio=2,
                              spatial_scale=0.0625)]
    g = helper.make_graph(nodes, "stage",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, 4, 24, 32]),
                           helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [rows, 4])],
                          [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [rows, 4, 2, 2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_generated_inputs_keep_a_declared_number_of_boxes():
    """A stage with input boxes: [300, 4] (read by the RoI node through other nodes) got 6."""
    feed = generate_inputs(_stage_with_fixed_boxes(300))
    assert feed["boxes"].shape == (300, 4)
    assert feed["X"].shape == (1, 4, 24, 32)
    b = feed["boxes"]
    assert (b[:, 2] >= b[:, 0]).all() and (b[:, 3] >= b[:, 1]).all()


def test_validate_runs_a_stage_with_fixed_boxes_and_bounds_the_rows(tmp_path, capsys):
    path = _save(tmp_path, _stage_with_fixed_boxes(300))
    assert cli.main(["validate", path]) == 0
    out = capsys.readouterr()
    assert "boxes [300, 4]" in out.out, out.out
    assert ("node 'align' (onnx::RoiAlign on onnxruntime's kernel): OK: 64 of 300 rows "
            "(evenly spaced; at most --rows 64) equal its definition (ort_roi::RoiAlign)"
            ) in out.out, out.out
    assert out.err == ""  # quiet by default: the progress only with --verbose
    assert cli.main(["validate", "--verbose", path]) == 0
    err = capsys.readouterr().err
    assert "node 1/1 'align': comparing with its definition" in err, err


def test_a_wrong_roi_node_is_reported_failed_naming_it(tmp_path):
    """A process whose RoIAlign kernel is defective (the last box's output shifted by 0.5,
    registered with onnxruntime as the real one is): validate names the node and the row."""
    path = os.path.join(MODELS, "mask_rcnn_head.onnx")
    script = textwrap.dedent(f"""
        import sys
        from ort_roi import ops
        entry = ops.entry(("ort_roi", "RoIAlign"))
        right = entry.kernel

        def wrong(*inputs, **attrs):
            y = right(*inputs, **attrs).copy()
            y[-1] += 0.5
            return y

        object.__setattr__(entry, "kernel", wrong)  # before the first session registers the ops
        from ort_roi.cli import main
        sys.exit(main.main(["validate", {path!r}]))
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 1, r
    assert f"{path}: FAILED" in r.stdout, r.stdout
    assert ("definition: node 'roi_align' (ort_roi::RoIAlign): output 'align' differs from "
            "its definition at row 5 (index (0, 0, 0)): ") in r.stdout, r.stdout
    assert "|diff| 0.5 > 0.0001 + 0.0001 x |definition| (6 of 6 rows compared)" in r.stdout
    assert "Traceback" not in r.stderr, r.stderr


# --- torchvision's Mask R-CNN, exported natively and converted --------------------------------

def test_validate_answers_ok_on_mask_rcnn_native_and_converted(tmp_path, capsys):
    """It ran 30 minutes on a whole detector (onnx.reference's NMS) or answered FAILED on
    Mask R-CNN for 21 detections against 20 (a score threshold's float noise): now each RoI
    node against its definition, in bounded time: the process's CPU time, which the machine's
    load does not lengthen (validate keeps no count of its work: --node-seconds bounds each
    node's comparison by the clock)."""
    pytest.importorskip("torch", reason="needs torch: pip install '.[torchvision]'")
    pytest.importorskip("torchvision", reason="needs torchvision: pip install '.[torchvision]'")
    from tests import test_torchvision_models as tvm

    graphs = tvm._graphs("mask_resnet18")
    paths = [_save(tmp_path, graphs[k], f"mask_{k}.onnx") for k in ("native", "converted")]
    start = time.process_time()
    assert cli.main(["validate", *paths]) == 0
    took = time.process_time() - start
    out = capsys.readouterr().out
    native, converted = out.split(paths[1])
    assert f"{paths[0]}: OK" in native, out
    # the detector's own proposals on a random image: the coarse levels may get none, and
    # those nodes are said not exercised and counted in the verdict line, not called OK
    ok = native.count("(onnx::RoiAlign on onnxruntime's kernel): OK: ")
    idle = native.count("(onnx::RoiAlign on onnxruntime's kernel): not exercised: ")
    assert ok + idle == 8 and ok >= 2, out
    assert f"({ok} of 8 RoI node(s) exercised)" in native.splitlines()[0], out
    assert ": OK" in converted, out
    ours = sum(n.domain == "ort_roi" for n in graphs["converted"].graph.node)
    assert converted.count("(ort_roi::PyramidRoIAlign_L4): OK: ") == 2, out
    assert converted.count("(ort_roi::") == ours, out  # every one of its RoI nodes
    assert took < 240, took  # CPU seconds: 17 here (43 s on the clock under a load of 12)


def test_validate_keeps_its_answer_on_the_rows_it_compares(tmp_path, capsys):
    """--rows and --node-seconds bound each node's work and say what was compared."""
    node = builders.roi_align("X", "boxes", "boxes_num", "Y", name="align", pooled_height=3,
                              pooled_width=3, spatial_scale=0.25, sampling_ratio=2)
    m = builders.make_model([node], [builders.tensor("X", "float32", [1, 4, 20, 24]),
                                     builders.tensor("boxes", "float32", ["R", 4]),
                                     builders.tensor("boxes_num", "int64", [1])],
                            [builders.tensor("Y", "float32", ["R", 4, 3, 3])])
    path = _save(tmp_path, m)
    assert cli.main(["validate", path, "--rois", "20", "--rows", "5"]) == 0
    assert ("node 'align' (ort_roi::RoIAlign): OK: 5 of 20 rows (evenly spaced; at most "
            "--rows 5) equal its definition") in capsys.readouterr().out
    assert cli.main(["validate", path, "--rois", "20", "--node-seconds", "0"]) == 0
    assert ("OK: 7 of 20 rows (evenly spaced; at most --rows 64, stopped after 0 s by "
            "--node-seconds) equal its definition") in capsys.readouterr().out
