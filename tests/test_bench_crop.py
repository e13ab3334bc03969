"""``ort-roi bench``'s CropAndResize workloads (W9, W10): TF OD API-shaped rows, ours against
onnxruntime running the shipped tf2onnx graphs (Loop and com.microsoft forms), and
TensorFlow's own op when it is installed. Real sessions; TensorFlow is not needed."""

from __future__ import annotations

import importlib.util
import json

import numpy as np
import pytest

from ort_roi.cli import main as cli
from ort_roi.cli import bench_crop, bench_report, bench_workloads
from ort_roi.graph.rewrite import convert

HAVE_TF = importlib.util.find_spec("tensorflow") is not None
LOOP, CONTRIB = "ORT tf2onnx Loop", "ORT tf2onnx com.microsoft"


def test_workloads_are_the_issues_faster_rcnn_shapes():
    ws = bench_workloads.workloads()
    w9, w10 = ws["W9_tf_crop_64"], ws["W10_tf_crop_c4"]
    assert (w9["N"], w9["H"], w9["W"], w9["C"]) == (1, 64, 64, 256)
    assert (w10["N"], w10["H"], w10["W"], w10["C"]) == (2, 38, 50, 1024)
    for w in (w9, w10):
        assert w["R"] == [100, 300] and w["pooled"] == [7, 14] and w["ops"] == ["CropAndResize"]
    assert [name for name, _, _ in bench_crop.rows("W10_tf_crop_c4", w10)] == [
        f"W10_tf_crop_c4 R{r} {p}x{p}" for r in (100, 300) for p in (7, 14)]


def test_inputs_are_detection_like():
    """Boxes clipped to [0, 1] with a quarter or so ending at 1.0, indices round robin."""
    w = dict(bench_workloads.workloads()["W10_tf_crop_c4"], R=300, pooled=7)
    image, boxes, idx = bench_crop.make_inputs(w)
    assert image.shape == (2, 38, 50, 1024) and image.dtype == np.float32
    assert boxes.shape == (300, 4) and boxes.dtype == np.float32
    assert boxes.min() >= 0 and boxes.max() <= 1 and (boxes[:, 2:] > boxes[:, :2]).all()
    at_one = ((boxes[:, 2] == 1) | (boxes[:, 3] == 1)).mean()
    assert 0.15 < at_one < 0.4
    assert idx.dtype == np.int32 and idx.tolist() == [0, 1] * 150


@pytest.mark.parametrize("crop", [7, 14])
def test_shipped_graphs_are_tf2onnx_forms_that_convert_to_one_node(crop):
    """The package's graphs are tf2onnx's (a Loop over boxes; com.microsoft::CropAndResize
    between Transposes), dynamic in image and box count, with the crop size as a constant;
    ort-roi convert turns each into one ort_roi::CropAndResize of that size."""
    loop = bench_crop.tf2onnx_graph("loop", crop)
    contrib = bench_crop.tf2onnx_graph("contrib", crop)
    assert loop.producer_name == contrib.producer_name == "tf2onnx"
    assert "Loop" in [n.op_type for n in loop.graph.node]
    assert [(n.domain, n.op_type) for n in contrib.graph.node] == [
        ("", "Transpose"), ("com.microsoft", "CropAndResize"), ("", "Transpose")]
    for g in (loop, contrib):
        image, boxes, idx = (i.type.tensor_type.shape.dim for i in g.graph.input)
        assert all(d.dim_param for d in image) and boxes[0].dim_param and idx[0].dim_param
        out = convert(g)
        assert [(n.domain, n.op_type) for n in out.graph.node] == [("ort_roi", "CropAndResize")]
        attrs = {a.name: a for a in out.graph.node[0].attribute}
        assert attrs["crop_height"].i == attrs["crop_width"].i == crop
        assert attrs["method"].s == b"bilinear"


def test_bench_w9_rows_ratios_and_differences(tmp_path, capsys):
    """ort-roi bench W9 --repeat 1: a row per (R, crop) with both tf2onnx peers (and TF when
    installed), ratios of the medians, the peers' differences from ours: the tf2onnx graphs
    differ on boxes ending at 1.0 (reported, not failed), TF equals ours bit for bit."""
    out = tmp_path / "bench.json"
    assert cli.main(["bench", "W9", "--repeat", "1", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    rows = {r["workload"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == [f"W9_tf_crop_64 R{r} {p}x{p}" for r in (100, 300) for p in (7, 14)]
    for name, r in rows.items():
        assert r["op"] == "CropAndResize" and r["ort_roi_s"] > 0 and r["bridge_floor_s"] > 0
        assert set(r["peers"]) == {LOOP, CONTRIB} | ({bench_crop.TF} if HAVE_TF else set())
        for v in r["peers"].values():
            assert v["ratio"] == pytest.approx(v["s"] / r["ort_roi_s"])
            lo, mid, hi = v["round_ratios"]
            assert lo == mid == hi > 0
        # the Loop's last row / column of boxes ending at 1.0 is not TF's extrapolation
        assert 0.5 < r["peers"][LOOP]["max_abs_diff"] < 10
        assert r["peers"][CONTRIB]["max_abs_diff"] < 10
        if HAVE_TF:
            assert r["peers"][bench_crop.TF]["max_abs_diff"] == 0
        assert f"| {name} | CropAndResize |" in bench_report.markdown(json.loads(out.read_text()))
    assert ("TF crop_and_resize: skipped (tensorflow is not installed" in text) != HAVE_TF


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_kernel_threads_split_whole_steps_same_values(method):
    """The NumPy kernel shares whole steps (512 pixels at C = 256) among its threads: a call
    of several steps and a short last one, on 2 threads, equals the boxes cropped one call
    each (one thread, one step), bit for bit."""
    from ort_roi import set_num_threads
    from ort_roi.ops.crop_and_resize import crop_and_resize

    w = dict(N=2, H=38, W=50, C=256, R=23)  # 23 * 7 * 7 = 1127 pixels: 2 steps + 103
    image, boxes, idx = bench_crop.make_inputs(w)
    kw = dict(crop_height=7, crop_width=7, method=method)
    previous = set_num_threads(2)
    try:
        whole = crop_and_resize(image, boxes, idx, **kw)
        set_num_threads(1)
        one = np.concatenate([crop_and_resize(image, boxes[i:i + 1], idx[i:i + 1], **kw)
                              for i in range(len(boxes))])
    finally:
        set_num_threads(previous)
    assert whole.shape == (23, 7, 7, 256)
    np.testing.assert_array_equal(whole.view(np.uint32), one.view(np.uint32))
