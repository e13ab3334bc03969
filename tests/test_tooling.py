"""``ort-roi validate`` and ``ort-roi convert``."""

import glob
import importlib.util
import json
import os
import pathlib
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import ort_roi
from ort_roi import builders
from ort_roi.cli import main as cli, validate as tooling

MODELS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "models", "*.onnx")))


@pytest.mark.parametrize("path", MODELS, ids=os.path.basename)
def test_validate_passes_every_committed_model(path, capsys):
    assert cli.main(["validate", "--verbose", path]) == 0
    out = capsys.readouterr()
    assert "OK" in out.out
    # each RoI node against its definition, one line each; progress on stderr (--verbose)
    nodes = [n for n in onnx.load(path).graph.node if n.domain == "ort_roi"]
    for n in nodes:
        assert (f"node {n.name!r} (ort_roi::{n.op_type}): OK: all 6 rows equal its "
                f"definition") in out.out, out.out
    assert f"node {len(nodes)}/{len(nodes)}: OK" in out.err, out.err


def _broken(path, node_name, change):
    m = onnx.load(path)
    node = next(n for n in m.graph.node if n.name == node_name)
    change(node)
    return m


def _attr(node, name):
    return next(a for a in node.attribute if a.name == name)


def _drop(name):
    def change(node):
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept)
    return change


BROKEN = [
    ("fast_rcnn_head", "roi_pooling", _drop("pooled_h"),
     ("attributes", "ROIPooling", "'pooled_h'", "missing", "'roi_pooling'")),
    ("fast_rcnn_head", "roi_pooling", lambda n: setattr(_attr(n, "spatial_scale"), "f", -1.0),
     ("attributes", "'spatial_scale'", "> 0", "-1", "'roi_pooling'")),
    ("bilinear_roi_head", "roi_pooling_bilinear", lambda n: setattr(_attr(n, "method"), "s", b"avg"),
     ("attributes", "'method'", "avg", "'roi_pooling_bilinear'")),
    ("rfcn_head", "psroi_pool", lambda n: setattr(_attr(n, "output_channels"), "i", 5),
     ("PSROIPool", "'X'", "5*3*3 = 45", "got 36")),
    ("mask_rcnn_head", "roi_align", lambda n: setattr(_attr(n, "aligned"), "i", 2),
     ("attributes", "'aligned'", "2", "'roi_align'")),
]


@pytest.mark.parametrize("name,node,change,expect", BROKEN, ids=lambda v: v if isinstance(v, str) else "")
def test_validate_fails_a_broken_graph_naming_node_and_attribute(tmp_path, capsys, name, node,
                                                                change, expect):
    path = os.path.join(os.path.dirname(MODELS[0]), f"{name}.onnx")
    bad = tmp_path / "bad.onnx"
    onnx.save(_broken(path, node, change), bad)
    assert cli.main(["validate", str(bad)]) == 1
    out = capsys.readouterr().out
    assert "FAILED" in out
    for fragment in expect:
        assert fragment in out, (fragment, out)


def test_validate_reports_a_run_that_fails(tmp_path):
    """A graph that checks but whose run rejects the generated input: batch index 3 of 1."""
    node = builders.roi_pooling("X", "rois", "Y", name="pool", pooled_h=2, pooled_w=2,
                                spatial_scale=1.0)
    bias = helper.make_tensor("three", TensorProto.FLOAT, [1, 5], [3, 0, 0, 0, 0])
    add = helper.make_node("Add", ["rois_in", "three"], ["rois"], name="shift_batch")
    m = builders.make_model([add, node], [builders.tensor("X", np.float32, [1, 4, 8, 8]),
                                          builders.tensor("rois_in", np.float32, ["R", 5])],
                            [builders.tensor("Y", np.float32, ["R", 4, 2, 2])],
                            initializers=[bias])
    problems = tooling.validate(m).problems
    assert problems and problems[0][0] == "run"
    assert "ROIPooling (node 'pool')" in problems[0][1] and "batch index 3.0" in problems[0][1]


def max_roi_pool_model(pooled=(3, 2), scale=0.5):
    node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], name="pool",
                            pooled_shape=list(pooled), spatial_scale=scale)
    relu = helper.make_node("Relu", ["Y"], ["Z"], name="relu")
    g = helper.make_graph([node, relu], "g",
                          [helper.make_tensor_value_info("X", TensorProto.FLOAT, [2, 3, 12, 10]),
                           helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 5])],
                          [helper.make_tensor_value_info("Z", TensorProto.FLOAT, ["R", 3, None, None])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _feed():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((2, 3, 12, 10)).astype(np.float32)
    xy = rng.uniform(-4, 18, (40, 2))
    rois = np.concatenate([rng.integers(0, 2, (40, 1)), xy, xy + rng.uniform(0, 14, (40, 2))],
                          1).astype(np.float32)
    rois[:4, 1:] = [[1, 1, 5, 5], [0.5, 1.5, 6.5, 7.5], [3, 3, 3, 3], [-9, -9, 40, 40]]  # ties, a point, off the map
    return {"X": X, "rois": rois}


def test_convert_max_roi_pool_gives_identical_outputs(tmp_path, capsys):
    src, dst, back = tmp_path / "a.onnx", tmp_path / "b.onnx", tmp_path / "c.onnx"
    onnx.save(max_roi_pool_model(), src)
    assert cli.main(["convert", str(src), str(dst)]) == 0
    assert "1 node(s) rewritten" in capsys.readouterr().out
    converted = onnx.load(dst)
    assert [(n.domain, n.op_type) for n in converted.graph.node] == [("ort_roi", "ROIPooling"),
                                                                        ("", "Relu")]
    assert converted.graph.node[0].name == "pool"
    onnx.checker.check_model(converted, full_check=True)
    feed = _feed()
    native = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    ours = ort.InferenceSession(str(dst), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(ours, native)
    assert np.abs(native).sum() > 0
    # and back: the reverse rewrite restores a standard graph with the same outputs
    assert cli.main(["convert", str(dst), str(back), "--to", "onnx"]) == 0
    restored = onnx.load(back)
    assert [n.op_type for n in restored.graph.node] == ["MaxRoiPool", "Relu"]
    assert all(o.domain != "ort_roi" for o in restored.opset_import)
    again = ort.InferenceSession(str(back), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    np.testing.assert_array_equal(again, native)


def test_convert_reports_unreadable_and_malformed_models(tmp_path, capsys):
    """No traceback: a missing file, a file that is not a model, or a MaxRoiPool without
    its pooled_shape each give exit 1 and a message naming the file or the node."""
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"not a model")
    for path in [tmp_path / "missing.onnx", junk]:
        assert cli.main(["convert", str(path), str(tmp_path / "out.onnx")]) == 1
        err = capsys.readouterr().err
        assert f"ort-roi convert: {path}: " in err, err
        assert ("no such file" if path == tmp_path / "missing.onnx" else "not an ONNX model") in err
    node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], name="pool", spatial_scale=1.0)
    g = helper.make_graph([node], "g", [], [])
    src = tmp_path / "bad.onnx"
    onnx.save(helper.make_model(g), src)
    assert cli.main(["convert", str(src), str(tmp_path / "out.onnx")]) == 1
    assert ("MaxRoiPool (node 'pool'): attribute 'pooled_shape': must hold 2 values (one per "
            "output axis), got None" in capsys.readouterr().err)
    node = helper.make_node("ROIPooling", ["X", "rois"], ["Y"], name="rp", domain="ort_roi",
                            pooled_w=2, spatial_scale=1.0, method="max")
    onnx.save(helper.make_model(helper.make_graph([node], "g", [], [])), src)
    assert cli.main(["convert", str(src), str(tmp_path / "out.onnx"), "--to", "onnx"]) == 1
    assert ("ROIPooling (node 'rp'): attribute 'pooled_h': is required but missing"
            in capsys.readouterr().err)
    assert not (tmp_path / "out.onnx").exists()


def test_bench_rejects_unknown_workloads(capsys):
    assert cli.main(["bench", "W99"]) == 2
    assert ("unknown workload 'W99' (known: W1, W2, W3, W4, W5, W6, W7, W8, W8f, W9, W10)"
            in capsys.readouterr().err)


def test_convert_leaves_bilinear_pooling_alone_and_says_why():
    from ort_roi.graph.rewrite import rewrite

    m = onnx.load(os.path.join(os.path.dirname(MODELS[0]), "bilinear_roi_head.onnx"))
    out = onnx.ModelProto()
    out.CopyFrom(m)
    done = rewrite(out, to="onnx")
    assert done.moved == [] and out == m
    assert done.notes == ["node 'roi_pooling_bilinear': ort_roi::ROIPooling stays: "
                          "onnx::MaxRoiPool computes only method='max' (this node has "
                          "method='bilinear')"]


def test_bench_runs_w6_and_writes_json(tmp_path):
    """ort-roi bench on the tiny workload: times, ratios and agreeing outputs, JSON written."""
    from ort_roi.cli import bench_report

    out = tmp_path / "bench.json"
    assert cli.main(["bench", "W6", "--repeat", "1", "--json", str(out)]) == 0
    results = json.loads(out.read_text())
    rows = {r["op"]: r for r in results["rows"]}
    assert set(rows) == {"RoIAlign", "ROIPooling.max"}
    for r in rows.values():
        assert r["ort_roi_s"] > 0 and r["bridge_floor_s"] > 0
        native = next(v for k, v in r["peers"].items() if k.startswith("ORT"))
        assert native["ratio"] == pytest.approx(native["s"] / r["ort_roi_s"])
        lo, mid, hi = native["round_ratios"]  # one round: its ratio three times
        assert lo == mid == hi > 0
        assert native["max_abs_diff"] < 1e-6
    assert "| W6_tiny | RoIAlign |" in bench_report.markdown(results)


def test_bench_per_level_workload_rows_and_stage(tmp_path):
    """W8f: one row per level (ort_roi::RoiAlign against onnxruntime's, same boxes) and the
    box pooler's whole stage: torchvision's exported MultiScaleRoIAlign, fused, against the
    same graph run natively and converted without fusion; the outputs agree."""
    from ort_roi.cli import bench_workloads

    out = tmp_path / "bench.json"
    assert cli.main(["bench", "w8f", "--repeat", "1", "--json", str(out)]) == 0
    rows = {r["workload"]: r for r in json.loads(out.read_text())["rows"]}
    assert list(rows) == [f"W8f_faster_levels box P{lv} ({r})"
                          for lv, r in ((2, 687), (3, 307), (4, 6), (5, 0))] + [
        "W8f_faster_levels box"]
    for name, r in rows.items():
        peers = r["peers"]
        if name.endswith("box"):
            assert r["op"] == "fused multi-level stage"
            expected = {"ORT, torchvision's stage", "ort_roi, unfused"}
            if importlib.util.find_spec("openvino") is not None:
                expected.add("OpenVINO, torchvision's stage")
            assert set(peers) == expected
        else:
            assert r["op"] == "RoiAlign" and "ORT RoiAlign" in peers
        for v in peers.values():
            assert v["max_abs_diff"] < 1e-5 and v["s"] > 0
    w = bench_workloads.workloads()["W8f_faster_levels"]
    maps, boxes = bench_workloads.make_level_inputs(w)
    assert [len(boxes[("box", lv)]) for lv in (2, 3, 4, 5)] == [687, 307, 6, 0]
    assert maps[2].shape == (1, 256, 96, 120) and maps[5].shape == (1, 256, 12, 15)


def test_per_level_boxes_fall_on_their_level():
    """The W8 boxes land on the level of their row by torchvision's own LevelMapper rule
    (floor(4 + log2(sqrt(area) / 224) + 1e-6), clamped to 2..5)."""
    from ort_roi.cli import bench_workloads

    for name in ("W8_rcnn_levels", "W8f_faster_levels"):
        _, boxes = bench_workloads.make_level_inputs(bench_workloads.workloads()[name])
        for (_, level), b in boxes.items():
            area = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
            k = np.clip(np.floor(4 + np.log2(np.sqrt(area) / 224) + 1e-6), 2, 5)
            assert (k == level).all(), (name, level)


def test_bench_plot_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib", reason="needs matplotlib: pip install '.[plot]'")
    png = tmp_path / "bench.png"
    assert cli.main(["bench", "W6", "--repeat", "1", "--plot", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 1000


def test_bench_plot_draws_every_peer_of_a_full_run(tmp_path):
    """A full run has more peers than a 10-colour map (it raised KeyError on the 11th)."""
    pytest.importorskip("matplotlib", reason="needs matplotlib: pip install '.[plot]'")
    from ort_roi.cli import bench_report

    peers = {f"peer {i}": {"ratio": 1.0 + i, "s": 0.01} for i in range(14)}
    results = {"rows": [{"workload": "W1_faster_rcnn_c4", "op": "RoIAlign", "peers": peers}]}
    png = tmp_path / "all.png"
    bench_report.plot(results, str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_bench_plot_labels_keep_the_scaling_rows_apart():
    from ort_roi.cli import bench_report

    names = ["W1_faster_rcnn_c4", "W2_R100", "W2_R4000", "W6_tiny"]
    assert [bench_report._short(w) for w in names] \
        == ["W1", "W2_R100", "W2_R4000", "W6"]


def test_bench_plot_without_matplotlib_says_so_before_timing(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    png = tmp_path / "bench.png"
    assert cli.main(["bench", "W6", "--plot", str(png)]) == 2
    out, err = capsys.readouterr()
    assert "pip install '.[plot]'" in err and out == "" and not png.exists()


def test_bench_bridge_floor_hands_back_the_given_output_through_a_session():
    """The floor runner is a real session whose stand-in kernel returns y unchanged, while
    the op itself still computes."""
    from ort_roi.cli import bench_cases, bench_workloads

    ours, _ = bench_cases.cases(bench_workloads.workloads()["W6_tiny"], "ROIPooling.max")
    y = ours()
    marker = np.full_like(y, 7.5)
    floor = ours.floor(marker)
    np.testing.assert_array_equal(floor(), marker)
    np.testing.assert_array_equal(ours(), y)


_FLOORS_ONE_AFTER_ANOTHER = """
import gc
import numpy as np
from ort_roi.cli import bench_cases, bench_workloads
w = bench_workloads.workloads()["W6_tiny"]
ys = []
for op in ["RoIAlign", "ROIPooling.max", "RoIAlign", "ROIPooling.max"]:
    ours, _ = bench_cases.cases(w, op)
    y = ours()
    floor = ours.floor(np.full_like(y, len(ys)))  # the previous floor session is dropped here
    ys.append(float(floor()[0, 0, 0, 0]))
del floor, ours
gc.collect()
print(ys)
"""


def test_bench_floors_of_several_ops_one_after_another_do_not_crash():
    """Stand-ins made one op at a time, each after the last one's session, once left those
    sessions with dangling pointers (onnxruntime-extensions moves a domain's ops when it
    grows): the process died. All stand-ins are now registered at once, before any session."""
    import subprocess

    r = subprocess.run([sys.executable, "-c", _FLOORS_ONE_AFTER_ANOTHER], capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "[0.0, 1.0, 2.0, 3.0]"


def test_bench_times_ours_and_the_peers_in_turn():
    """Each round times every runner once, in turn (a slow spell hits them all alike); the
    result is each runner's median and last output."""
    from ort_roi.cli import bench_timing

    calls = []

    def runner(name, out):
        def fn():
            calls.append(name)
            return out
        return fn

    times = bench_timing.time_together({"a": runner("a", 1), "b": runner("b", 2)}, repeat=3,
                                       min_sample_s=0)
    assert calls == ["a", "b"] * 4  # a warm-up, then three rounds
    assert {k: v[1] for k, v in times.items()} == {"a": 1, "b": 2}
    assert all(len(rounds) == 3 and t == sorted(rounds)[1] for t, _, rounds in times.values())


def test_time_together_shuffles_each_round_when_seeded_and_can_skip_the_warm_up():
    """The tools' whole-model runs (tools.paddledet_e2e, torchvision_e2e) take each round in a
    fresh random order (``shuffle``: a seed, the same orders for the same seed); a caller that
    has warmed its runners up says ``warmup=False`` (tools.gpu_bench, mxnet_graphs)."""
    from ort_roi.cli import bench_timing

    def orders(seed):
        calls = []
        fns = {k: (lambda k=k: calls.append(k)) for k in "abcd"}
        times = bench_timing.time_together(fns, repeat=6, min_sample_s=0, shuffle=seed,
                                           warmup=False)
        assert all(len(rounds) == 6 for _, _, rounds in times.values())
        return [tuple(calls[i:i + 4]) for i in range(0, len(calls), 4)]

    rounds = orders(3)
    assert len(rounds) == 6 and all(sorted(r) == list("abcd") for r in rounds)
    assert len(set(rounds)) > 1 and rounds == orders(3)  # shuffled, and reproducibly


def test_bench_round_ratios_pair_each_round():
    from ort_roi.cli import bench_timing

    # peer / ours per round: 2, 0.5, 3
    assert bench_timing.round_ratios([2.0, 1.0, 3.0], [1.0, 2.0, 1.0]) == [0.5, 2.0, 3.0]


# --- validate answers: does a plain session with ort_roi.session_options() run the file? -------

def _save(tmp_path, m, name="m.onnx"):
    path = tmp_path / name
    onnx.save(m, path)
    return str(path)


def test_validate_refuses_exported_multi_level_nodes_naming_each_and_the_fix(tmp_path, capsys):
    """It printed OK for graphs a plain session refuses (it checked the converted graph)."""
    from tests import cases as C
    from tests import oracles as O

    case = next(c for c in C.extractor_cases(10) if len(c["inputs"]) == 5)
    path = _save(tmp_path, O.extractor_node_model(case))
    with pytest.raises(Exception):  # what the user would meet
        ort.InferenceSession(path, ort_roi.session_options(), providers=["CPUExecutionProvider"])
    assert cli.main(["validate", path]) == 1
    out = capsys.readouterr().out
    for fragment in (f"{path}: FAILED: a plain onnxruntime session with "
                     f"ort_roi.session_options() cannot run it as it is",
                     "plain session: node 'extractor' (org.openvinotoolkit::Experimental"
                     "DetectronROIFeatureExtractor)", "ort-roi convert IN OUT",
                     "after `ort-roi convert`: OK, a plain session runs it"):
        assert fragment in out, (fragment, out)


def test_validate_names_omitted_attributes_a_plain_session_needs(tmp_path, capsys):
    node = helper.make_node("MMCVRoiAlign", ["X", "rois"], ["Y"], domain="mmcv", name="align",
                            output_height=2, output_width=2, spatial_scale=0.5, mode="avg")
    m = builders.make_model([node], [builders.tensor("X", "float32", [1, 3, 8, 8]),
                                     builders.tensor("rois", "float32", ["R", 5])],
                            [builders.tensor("Y", "float32", ["R", 3, 2, 2])])
    path = _save(tmp_path, m)
    with pytest.raises(Exception, match="aligned|sampling_ratio"):
        ort.InferenceSession(path, ort_roi.session_options(), providers=["CPUExecutionProvider"])
    assert cli.main(["validate", path]) == 1
    out = capsys.readouterr().out
    assert ("plain session: node 'align' (mmcv::MMCVRoiAlign) omits the attribute(s) "
            "sampling_ratio, aligned; onnxruntime requires every attribute of a Python op: "
            "run `ort-roi convert IN OUT`") in out, out
    assert "after `ort-roi convert`: OK" in out


def test_validate_a_graph_without_roi_nodes_says_so(tmp_path, capsys):
    relu = helper.make_node("Relu", ["x"], ["y"])
    m = builders.make_model([relu], [builders.tensor("x", "float32", [2, 3])],
                            [builders.tensor("y", "float32", [2, 3])])
    assert cli.main(["validate", _save(tmp_path, m)]) == 0
    assert "note: no RoI node" in capsys.readouterr().out


def _align_two_counts(images: int):
    """One RoIAlign node on X [images, 4, 20, 24] whose boxes_num is declared [2]."""
    node = builders.roi_align("X", "boxes", "boxes_num", "Y", name="align", pooled_height=3,
                              pooled_width=3, spatial_scale=0.25, sampling_ratio=2)
    return builders.make_model([node], [builders.tensor("X", "float32", [images, 4, 20, 24]),
                                        builders.tensor("boxes", "float32", ["R", 4]),
                                        builders.tensor("boxes_num", "int64", [2])],
                               [builders.tensor("Y", "float32", ["R", 4, 3, 3])])


def test_validate_follows_declared_shapes(tmp_path, capsys):
    """A valid two-image graph (boxes_num declared [2]) once died with onnxruntime's 'Got
    invalid dimensions for input: boxes_num' traceback: the generated counts had length 1."""
    m = _align_two_counts(2)
    assert cli.main(["validate", _save(tmp_path, m)]) == 0
    out = capsys.readouterr().out
    assert "OK" in out and "boxes_num [2]" in out and "X [2, 4, 20, 24]" in out, out


def test_generated_inputs_of_a_paddledetection_graph_are_an_image_and_its_size():
    """PaddleDetection's exported inputs (image [N, 3, ?, ?], im_shape and scale_factor [N, 2],
    read by no RoI node): an image of the size the boxes are in, its (height, width), 1 and 1
    (random values there made a 1 x 1 image of negative size: no proposals, and the graph's
    Reshape of 0 rows failed)."""
    from ort_roi.graph import inputs

    f = TensorProto.FLOAT
    x = [helper.make_tensor_value_info("im_shape", f, ["n", 2]),
         helper.make_tensor_value_info("image", f, ["n", 3, "h", "w"]),
         helper.make_tensor_value_info("scale_factor", f, ["n", 2])]
    g = helper.make_graph([helper.make_node("Identity", [i.name], [i.name + "_out"])
                           for i in x], "paddle_inputs", x,
                          [helper.make_tensor_value_info(i.name + "_out", f, None) for i in x])
    feed = inputs.generate_inputs(helper.make_model(g), r=4, seed=0)
    h, w = inputs.FEAT_H * inputs.STRIDE, inputs.FEAT_W * inputs.STRIDE
    assert feed["image"].shape == (1, 3, h, w) and feed["image"].dtype == np.float32
    np.testing.assert_array_equal(feed["im_shape"], np.array([[h, w]], np.float32))
    np.testing.assert_array_equal(feed["scale_factor"], np.ones((1, 2), np.float32))
    g.input[1].type.tensor_type.shape.dim[2].dim_value = 200  # a declared size is kept
    feed = inputs.generate_inputs(helper.make_model(g), r=4, seed=0)
    assert feed["image"].shape == (1, 3, 200, w)
    np.testing.assert_array_equal(feed["im_shape"], np.array([[200, w]], np.float32))


def test_validate_prints_onnxruntimes_whole_message(tmp_path, capsys):
    """Its message on a failed run was the first line of onnxruntime's: here the dimension
    that is wrong and the fix were cut off (boxes_num declared [2] for 3 images)."""
    m = _align_two_counts(3)
    assert cli.main(["validate", _save(tmp_path, m)]) == 1
    out = capsys.readouterr().out
    for fragment in ("run: InvalidArgument: [ONNXRuntimeError] : 2 : INVALID_ARGUMENT : Got "
                     "invalid dimensions for input: boxes_num", "index: 0 Got: 3 Expected: 2",
                     "Please fix either the inputs/outputs or the model."):
        assert fragment in out, (fragment, out)


def test_validate_holds_a_native_node_to_its_definition(tmp_path, capsys):
    """onnxruntime's own MaxRoiPool kernel against ort_roi's ROIPooling definition."""
    assert cli.main(["validate", _save(tmp_path, max_roi_pool_model())]) == 0
    assert ("node 'pool' (onnx::MaxRoiPool on onnxruntime's kernel): OK: all 6 rows equal its "
            "definition (ort_roi::ROIPooling) (within 0.0001 + 0.0001 x |value|), max |diff| 0"
            ) in capsys.readouterr().out


def test_validate_reports_any_run_failure_as_a_message(tmp_path, capsys):
    """A node that is not ours fails at run time (a Reshape to an impossible shape): a
    message, exit 1, no traceback."""
    node = builders.roi_align("X", "boxes", "n", "Y", name="align", pooled_height=2,
                              pooled_width=2)
    shape = helper.make_tensor("shape", TensorProto.INT64, [2], [7, 5])
    reshape = helper.make_node("Reshape", ["Y", "shape"], ["Z"], name="reshape")
    m = builders.make_model([node, reshape], [builders.tensor("X", "float32", [1, 3, 8, 8]),
                                              builders.tensor("boxes", "float32", ["R", 4]),
                                              builders.tensor("n", "int32", [1])],
                            [builders.tensor("Z", "float32", None)], initializers=[shape])
    assert cli.main(["validate", _save(tmp_path, m)]) == 1
    out = capsys.readouterr().out
    assert "run: " in out and "reshape" in out.lower() and "Traceback" not in out, out


# --- a command line a newcomer can follow ----------------------------------------------------

def test_version_and_python_dash_m():
    import subprocess

    for cmd in (["ort-roi", "--version"], [sys.executable, "-m", "ort_roi", "--version"]):
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0 and r.stdout.strip() == f"ort-roi {ort_roi.__version__}", r
    r = subprocess.run([sys.executable, "-m", "ort_roi", "info"], capture_output=True, text=True)
    assert r.returncode == 0 and "ort_roi::RoIAlign" in r.stdout


def test_bench_takes_workload_names_in_any_case_and_says_what_it_measured(capsys):
    assert cli.main(["bench", "w6", "--repeat", "1"]) == 0
    out = capsys.readouterr().out
    assert "| W6_tiny | RoIAlign |" in out
    assert "ort-roi bench on " in out and " cores; Python " in out
    assert "ratio = peer time / ort_roi time (> 1: ort_roi is faster)" in out


def test_bench_plot_shows_speedups_with_distinct_labels():
    """The plot shows peer time / ort_roi time per row (not absolute times on a log axis),
    and its row labels differ by more than case (RoIAlign and RoiAlign did not)."""
    from ort_roi.cli import bench_report

    rows = [{"workload": "W1_faster_rcnn_c4", "op": op, "ort_roi_s": 0.1,
             "peers": {"ORT RoiAlign": {"s": 0.25, "ratio": 2.5}}}
            for op in ("RoIAlign", "RoiAlign", "ROIPooling.max")]
    data = bench_report.speedups({"rows": rows})
    assert [x for _, _, x in data] == [2.5, 2.5, 2.5]
    labels = [label for label, _, _ in data]
    assert len({label.lower() for label in labels}) == 3, labels


def test_cupy_fallback_warning_is_printed_once():
    import subprocess

    code = ("import numpy as np, ort_roi\n"
            "from ort_roi import builders\n"
            "import onnxruntime as ort\n"
            "m = builders.single_op_model('RoIPool')\n"
            "s = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options())\n"
            "X = np.ones((1, 1, 4, 4), np.float32)\n"
            "for _ in range(3):\n"
            "    s.run(None, {'X': X, 'boxes': np.array([[0, 0, 1, 1]], np.float32),"
            " 'boxes_num': np.array([1], np.int32)})\n")
    import os

    env = dict(os.environ, ORT_ROI_BACKEND="cupy")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stderr
    try:
        import cupy  # noqa: F401
        pytest.skip("CuPy is installed here: no fallback to warn about")
    except ImportError:
        pass
    assert r.stderr.count("backend 'cupy' requested but unavailable") == 1, r.stderr


def test_bench_help_lists_every_workload_and_explains_the_rows(capsys):
    """``ort-roi bench --help`` names each workload of workloads.json with its shape and ops,
    and says what a row's columns are."""
    from ort_roi.cli import bench_workloads

    with pytest.raises(SystemExit) as e:
        cli.main(["bench", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    for name, w in bench_workloads.workloads().items():
        line = next(ln for ln in out.splitlines() if f" {name}: " in ln)
        assert line.split()[0] == name.split("_")[0]
        assert line.endswith("; " + ", ".join(w["ops"]))
    assert "W1_faster_rcnn_c4: N=1 C=1024 38x50 map, R=300, 14x14;" in out
    assert "box P2 912, box P3 78, box P4 10, box P5 0, mask P2 59" in out
    for words in ("peer time / ort_roi time", "the least and largest ratio of a single round",
                  "largest absolute difference", "bridge", "fused multi-level stage",
                  "pip install '.[parity]'"):
        assert words in out


ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_info_model_lists_its_roi_nodes_and_what_convert_would_do(capsys):
    """`ort-roi info MODEL` (a file or a folder of them): the model's RoI nodes, what runs
    each, what convert would do; `info` alone is the short catalogue; a file that is not a
    model is named."""
    stage = str(ROOT / "ort_roi" / "data" / "torchvision_stage_14.onnx")
    assert cli.main(["info", stage]) == 0
    out = capsys.readouterr().out
    assert out.count("onnx::RoiAlign") == 4 and "onnxruntime's own kernel" in out
    assert "convert would: exporter: torch.onnx" in out
    assert "MultiScaleRoIAlign stage" in out and "-> ort_roi::PyramidRoIAlign" in out
    assert cli.main(["info", str(ROOT / "models")]) == 0
    out = capsys.readouterr().out
    for m in (ROOT / "models").glob("*.onnx"):
        assert str(m) in out
    assert "runs it as it is" in out
    assert cli.main(["info", str(ROOT / "README.md")]) == 1
    assert "README.md: not an ONNX model" in capsys.readouterr().err
    assert cli.main(["info"]) == 0
    short = capsys.readouterr().out
    assert cli.main(["info", "--full"]) == 0
    full = capsys.readouterr().out
    assert len(short.splitlines()) < len(full.splitlines()) / 4
    assert "ort_roi::RoIAlign" in short and "--full" in short


def test_validate_takes_a_folder(tmp_path, capsys):
    """`ort-roi validate DIR` validates the .onnx files in it (it said "Is a directory");
    a folder without one is named."""
    for name in ("fast_rcnn_head.onnx", "mask_rcnn_head.onnx"):
        (tmp_path / name).write_bytes((ROOT / "models" / name).read_bytes())
    assert cli.main(["validate", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert out.count(": OK: a plain onnxruntime session") == 2
    assert "(within 0.0001 + 0.0001 x |value|), max |diff|" in out
    empty = tmp_path / "empty"
    empty.mkdir()
    assert cli.main(["validate", str(empty)]) == 1
    assert "no .onnx file in" in capsys.readouterr().err
