"""``ort-roi bench``: the standard workloads through onnxruntime, side by side with the peers.

Ours runs as a plain onnxruntime session with ``session_options()``. Peers, in the
same process: onnxruntime's native RoiAlign (opset 16) and MaxRoiPool always; OpenVINO
(ROIAlign, ROIPooling max/bilinear, PSROIPooling), Paddle (roi_align, roi_pool,
psroi_pool) and torchvision (roi_align, roi_pool, on the CPU) when installed. The
CropAndResize rows (W9, W10; bench_crop.py) run onnxruntime on tf2onnx's two graphs of
tf.image.crop_and_resize, and TensorFlow's own op when installed. The
"RoiAlign" rows run ONNX RoiAlign as ``ort-roi convert`` writes it (ort_roi::RoiAlign)
against onnxruntime's own kernel of the same node. Each time is the median of ``--repeat`` runs after a warm-up,
ours and the peers timed in turn within each run; each peer's output is compared with ours.
A ratio is peer time / our time (> 1: we are faster): of the medians, and per round (peer and
ours timed back to back; the JSON holds their min, median and max), which shows how far a
noisy machine moves it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from importlib import resources
from typing import Callable

import numpy as np
import onnxruntime as ort
import onnx
from onnx import TensorProto, helper

from .. import __version__
from . import bench_crop
from ..graph import builders
from ..graph.rewrite import convert
from ..runtime import bridge
from ..runtime.session import session_options
from ..spec import DOMAIN

Runner = Callable[[], np.ndarray]


def workloads() -> dict:
    with resources.files("ort_roi").joinpath("data/workloads.json").open() as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def make_fpn_inputs(w: dict, seed: int = 0):
    """The FPN workload: levels [N, C, ceil(H/s), ceil(W/s)] and boxes [R, 4] in image
    pixels (sides uniform in [16, 600], so that every level gets boxes), float32."""
    rng = np.random.default_rng(seed)
    (H, W), r = w["image"], w["R"]
    feats = [rng.standard_normal((w["N"], w["C"], -(-H // s), -(-W // s)), dtype=np.float32)
             for s in w["strides"]]
    ctr = rng.uniform(0, 1, (r, 2)) * [W, H]
    side = rng.uniform(16, 600, (r, 2))
    boxes = np.concatenate([ctr - side / 2, ctr + side / 2], 1).astype(np.float32)
    return feats, boxes


#: sqrt(area) of the boxes made for each FPN level (image pixels), inside torchvision's
#: LevelMapper ranges (P2 < 112, P3 112-224, P4 224-448, P5 >= 448) with a margin.
LEVEL_SIDES = {2: (8.0, 104.0), 3: (118.0, 212.0), 4: (236.0, 424.0), 5: (470.0, 900.0)}


def make_level_inputs(w: dict, seed: int = 0):
    """A per-level workload (W8): the FPN maps {level: [N, C, ceil(H/s), ceil(W/s)]} and per
    row (pooler, level) its R boxes [R, 4] (image pixels, float32), each of the level's size
    (sqrt(area) in LEVEL_SIDES, aspect ratio 1/2 to 2) and, as a model's clipped proposals
    are, inside the image where its size allows (a box larger than the image is clipped to
    it only if it would still have its level's size)."""
    rng = np.random.default_rng(seed)
    (H, W), N, C = w["image"], w["N"], w["C"]
    maps = {r["level"]: None for r in w["rows"]}
    for r in w["rows"]:
        if maps[r["level"]] is None:
            s = r["stride"]
            maps[r["level"]] = rng.standard_normal((N, C, -(-H // s), -(-W // s)),
                                                   dtype=np.float32)
    boxes = {}
    for r in w["rows"]:
        lo, hi = LEVEL_SIDES[r["level"]]
        side = rng.uniform(lo, hi, r["R"])
        ratio = np.exp(rng.uniform(np.log(0.5), np.log(2.0), r["R"]))
        bw, bh = side * np.sqrt(ratio), side / np.sqrt(ratio)
        x0 = rng.uniform(0, 1, r["R"]) * np.maximum(W - bw, 0) + np.minimum(W - bw, 0) / 2
        y0 = rng.uniform(0, 1, r["R"]) * np.maximum(H - bh, 0) + np.minimum(H - bh, 0) / 2
        boxes[(r["pooler"], r["level"])] = np.stack([x0, y0, x0 + bw, y0 + bh], 1).astype(
            np.float32)
    return maps, boxes


def _level_cases(w: dict, op: str):
    """W8: one RoiAlign call of one level's boxes (ort_roi::RoiAlign as convert writes it,
    against onnxruntime's and torchvision's), or a pooler's whole stage: torchvision's
    exported MultiScaleRoIAlign (ort_roi/data/torchvision_stage_*.onnx, tools/export_torchvision.py)
    fused by convert into one PyramidRoIAlign, against the same graph run natively (the sum
    of its nodes) and converted without fusion."""
    maps, boxes = make_level_inputs(w)
    sr = w["sampling_ratio"]
    peers: dict[str, Runner | None] = {}
    if op == "RoiAlign":
        row = w["row"]
        X, b, P = maps[row["level"]], boxes[(row["pooler"], row["level"])], row["pooled"]
        attrs = dict(output_height=P, output_width=P, sampling_ratio=sr,
                     spatial_scale=1.0 / row["stride"], mode="avg",
                     coordinate_transformation_mode="half_pixel" if w["aligned"]
                     else "output_half_pixel")
        batch = np.zeros(len(b), np.int64)
        ours = _Ours("RoiAlign", dict(X=X, rois=b, batch_indices=batch.astype(np.int32)),
                     **attrs)
        node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], **attrs)
        peers["ORT RoiAlign"] = _ort_native(node, dict(X=X, rois=b, batch_indices=batch))
        rois = np.concatenate([batch[:, None].astype(np.float32), b], 1)
        peers["torchvision roi_align"] = _torchvision("roi_align", X, rois, P,
                                                      1.0 / row["stride"], sr,
                                                      aligned=bool(w["aligned"]))
        return ours, peers
    pooler = w["pooler"]
    rows = [r for r in w["rows"] if r["pooler"] == pooler]
    P = rows[0]["pooled"]
    b = np.concatenate([boxes[(r["pooler"], r["level"])] for r in rows])
    b = b[np.random.default_rng(1).permutation(len(b))]  # the levels interleaved
    with resources.files("ort_roi").joinpath(f"data/torchvision_stage_{P}.onnx").open("rb") as f:
        native = onnx.load(f)
    feed = {f"p{lvl}": maps[lvl] for lvl in (2, 3, 4, 5)}
    feed["boxes"] = b
    fused = _session(convert(native), session_options())
    unfused = _session(convert(native, fuse=False), session_options())
    plain = _session(native)
    peers["ORT, torchvision's stage"] = lambda: plain.run(None, feed)[0]
    peers["ort_roi, unfused"] = lambda: unfused.run(None, feed)[0]
    return (lambda: fused.run(None, feed)[0]), peers


def _fpn_cases(w: dict, op: str):
    """The exported multi-level node through ort_roi (converted, in a plain session), against
    OpenVINO reading the same node, and our RoIAlign on one level with the same boxes."""
    feats, boxes = make_fpn_inputs(w)
    L, P, sr = len(feats), w["pooled"], w["sampling_ratio"]
    names = [f"feat_{i}" for i in range(L)]
    if op == "ExperimentalDetectronROIFeatureExtractor":
        node = helper.make_node(op, ["rois"] + names, ["output", "rois_out"],
                                domain="org.openvinotoolkit", output_size=P, sampling_ratio=sr,
                                aligned=w["aligned"], pyramid_scales=list(w["strides"]))
        rois, outs = boxes, ["output", "rois_out"]
    else:
        node = helper.make_node("MMCVMultiLevelRoiAlign", ["rois"] + names, ["output"],
                                domain="mmdeploy", output_height=P, output_width=P,
                                sampling_ratio=sr, pool_mode=1, aligned=w["aligned"],
                                roi_scale_factor=-1.0, finest_scale=56,
                                featmap_strides=[float(s) for s in w["strides"]])
        rois, outs = np.concatenate([np.zeros((len(boxes), 1), np.float32), boxes], 1), ["output"]
    feed = {"rois": rois, **dict(zip(names, feats))}
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
           for k, v in feed.items()]
    g = helper.make_graph([node], "fpn", ins,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(node.domain, 1)], ir_version=9)
    sess = _session(convert(m), session_options())
    ours = lambda: sess.run(None, feed)[0]  # noqa: E731
    peers: dict[str, Runner | None] = {}
    if op == "ExperimentalDetectronROIFeatureExtractor":
        peers["OpenVINO extractor"] = _openvino_onnx(m, feed)
    one = _Ours("RoIAlign", dict(X=feats[0], boxes=boxes,
                                 boxes_num=np.array([len(boxes)], np.int32)),
                pooled_height=P, pooled_width=P, spatial_scale=1 / w["strides"][0],
                sampling_ratio=sr, aligned=1)
    peers["ort_roi RoIAlign, level 0 only"] = one
    return ours, peers


#: OpenVINO's CPU plugin computes in bfloat16 on CPUs that support it unless told otherwise.
OPENVINO_F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def _openvino_onnx(model, feed: dict) -> Runner | None:
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                  OPENVINO_F32)
    req = compiled.create_infer_request()
    return lambda: np.asarray(req.infer(feed)[0])


def make_inputs(w: dict, seed: int = 0, normalized: bool = False):
    """X and boxes as the workloads file describes them (float32)."""
    rng = np.random.default_rng(seed)
    n, c, h, wd, r, s = w["N"], w["C"], w["H"], w["W"], w["R"], w["spatial_scale"]
    if "output_channels" in w:
        c = w["output_channels"] * w["pooled"] ** 2
    X = rng.standard_normal((n, c, h, wd), dtype=np.float32)
    hi, wi = h / s, wd / s
    ctr = rng.uniform(0, 1, (r, 2)) * [wi, hi]
    side = rng.uniform(16, 300, (r, 2))
    boxes = np.concatenate([ctr - side / 2, ctr + side / 2], 1)
    if normalized:
        boxes = boxes / [wi, hi, wi, hi]
    counts = np.full(n, r // n, np.int32)
    counts[: r % n] += 1
    return X, boxes.astype(np.float32), counts


def _session(model, so: ort.SessionOptions | None = None) -> ort.InferenceSession:
    """A CPU session of ``model``: with ``so`` (ours: session_options()), else
    onnxruntime's defaults (its native ops, every core)."""
    if so is None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 0
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


class _Ours:
    """Our op in a plain onnxruntime session; ``floor(y)`` is the same session shape with a
    kernel that only hands back y."""

    def __init__(self, op: str, feed: dict, **attrs):
        self.op, self.feed, self.attrs = op, feed, attrs
        self.sess = _session(builders.single_op_model(op, **attrs), session_options())

    def __call__(self) -> np.ndarray:
        return self.sess.run(None, self.feed)[0]

    def floor(self, y: np.ndarray) -> Runner:
        return bridge_floor(self.op, self.feed, y, **self.attrs)


FLOOR_DOMAIN = "ort_roi_bench_floor"
_floor_outputs: dict[str, np.ndarray] = {}  # op name -> what its stand-in hands back


def bridge_floor(op: str, feed: dict, y: np.ndarray, **attrs) -> Runner:
    """Our session with the kernel replaced by one that hands back ``y`` at once: what
    onnxruntime-extensions' Python-op bridge costs by itself (X copied in, the output
    copied out, our hook), the least any kernel of ours can take."""
    bridge.register_stand_ins(
        FLOOR_DOMAIN, lambda spec: lambda *args, **kw: _floor_outputs[spec.name])
    _floor_outputs[op] = y
    m = builders.single_op_model(op, **attrs)
    m.graph.node[0].domain = FLOOR_DOMAIN
    for o in m.opset_import:
        if o.domain == DOMAIN:
            o.domain = FLOOR_DOMAIN
    sess = _session(m, session_options())
    return lambda: sess.run(None, feed)[0]


def _ort_native(node, feed: dict) -> Runner:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None)
           for k, v in feed.items()]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    sess = _session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=9))
    return lambda: sess.run(None, feed)[0]


def _openvino(build, feed: list) -> Runner | None:
    try:
        import openvino as ov
        import openvino.opset9 as ops
    except ImportError:
        return None
    params = [ops.parameter(list(a.shape), a.dtype) for a in feed]
    compiled = ov.Core().compile_model(ov.Model([build(ops, *params)], params), "CPU",
                                       OPENVINO_F32)
    req = compiled.create_infer_request()
    return lambda: np.asarray(req.infer(feed)[0])


def _paddle(fn_name: str, X, boxes, counts, *args) -> Runner | None:
    try:
        import paddle
        from paddle.vision import ops
    except ImportError:
        return None
    fn = getattr(ops, fn_name)
    x, b, n = paddle.to_tensor(X), paddle.to_tensor(boxes), paddle.to_tensor(counts)
    return lambda: fn(x, b, n, *args).numpy()


def _torchvision(fn_name: str, X, rois, *args, **kw) -> Runner | None:
    """torchvision.ops on the CPU (installed with the 'torchvision' extra)."""
    try:
        import torch
        from torchvision import ops
    except ImportError:
        return None
    fn = getattr(ops, fn_name)
    x, r = torch.from_numpy(X), torch.from_numpy(rois)

    def run() -> np.ndarray:
        with torch.no_grad():
            return fn(x, r, *args, **kw).numpy()
    return run


def cases(w: dict, op: str, seed: int = 0) -> tuple[_Ours, dict[str, Runner | None]]:
    """Our runner and the peers' for one workload and op."""
    if "strides" in w:
        return _fpn_cases(w, op)
    if "rows" in w:
        return _level_cases(w, op)
    if op == bench_crop.OP:
        return bench_crop.cases(w, _Ours, _session)
    P, s = w["pooled"], w["spatial_scale"]
    X, boxes, counts = make_inputs(w, seed, normalized=(op == "ROIPooling.bilinear"))
    batch = np.repeat(np.arange(len(counts)), counts)
    rois = np.concatenate([batch[:, None].astype(np.float32), boxes], 1)
    peers: dict[str, Runner | None] = {}
    if op == "RoIAlign":
        sr = w.get("sampling_ratio", 0)
        ours = _Ours("RoIAlign", dict(X=X, boxes=boxes, boxes_num=counts), pooled_height=P,
                     pooled_width=P, spatial_scale=s, sampling_ratio=sr, aligned=1)
        node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"],
                                output_height=P, output_width=P, sampling_ratio=max(sr, 0),
                                spatial_scale=s, coordinate_transformation_mode="half_pixel")
        peers["ORT RoiAlign"] = _ort_native(node, dict(X=X, rois=boxes,
                                                       batch_indices=batch.astype(np.int64)))
        peers["OpenVINO ROIAlign"] = _openvino(
            lambda o, x, b, i: o.roi_align(x, b, i, P, P, max(sr, 0), s, "avg", "half_pixel"),
            [X, boxes, batch.astype(np.int32)])
        peers["Paddle roi_align"] = _paddle("roi_align", X, boxes, counts, P, s, sr, True)
        peers["torchvision roi_align"] = _torchvision("roi_align", X, rois, P, s, sr,
                                                      aligned=True)
    elif op == "RoiAlign":  # ONNX RoiAlign as ort-roi convert writes it, against the native op
        sr = max(w.get("sampling_ratio", 0), 0)
        attrs = dict(output_height=P, output_width=P, sampling_ratio=sr, spatial_scale=s,
                     coordinate_transformation_mode="half_pixel", mode="avg")
        ours = _Ours("RoiAlign", dict(X=X, rois=boxes, batch_indices=batch.astype(np.int32)),
                     **attrs)
        node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], **attrs)
        peers["ORT RoiAlign"] = _ort_native(node, dict(X=X, rois=boxes,
                                                       batch_indices=batch.astype(np.int64)))
    elif op == "ROIPooling.max":
        ours = _Ours("ROIPooling", dict(X=X, rois=rois), pooled_h=P, pooled_w=P,
                     spatial_scale=s, method="max")
        node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], pooled_shape=[P, P],
                                spatial_scale=s)
        peers["ORT MaxRoiPool"] = _ort_native(node, dict(X=X, rois=rois))
        peers["OpenVINO ROIPooling"] = _openvino(
            lambda o, x, r: o.roi_pooling(x, r, output_roi=[P, P], spatial_scale=s,
                                          method="max"), [X, rois])
        peers["Paddle roi_pool"] = _paddle("roi_pool", X, boxes, counts, P, s)
        peers["torchvision roi_pool"] = _torchvision("roi_pool", X, rois, P, s)
    elif op == "ROIPooling.bilinear":
        ours = _Ours("ROIPooling", dict(X=X, rois=rois), pooled_h=P, pooled_w=P,
                     spatial_scale=s, method="bilinear")
        peers["OpenVINO ROIPooling"] = _openvino(
            lambda o, x, r: o.roi_pooling(x, r, output_roi=[P, P], spatial_scale=s,
                                          method="bilinear"), [X, rois])
    elif op == "PSROIPool":
        oc = w["output_channels"]
        ours = _Ours("PSROIPool", dict(X=X, rois=boxes, rois_num=counts), output_channels=oc,
                     spatial_scale=s, pooled_height=P, pooled_width=P)
        peers["OpenVINO PSROIPooling"] = _openvino(
            lambda o, x, r: o.psroi_pooling(x, r, oc, P, s, 1, 1, "average"), [X, rois])
        peers["Paddle psroi_pool"] = _paddle("psroi_pool", X, boxes, counts, P, s)
    else:
        raise ValueError(op)
    return ours, peers


def time_together(fns: dict[str, Runner], repeat: int, min_sample_s: float = 0.02, *,
                  shuffle: int | None = None,
                  warmup: bool = True) -> dict[str, tuple[float, np.ndarray, list[float]]]:
    """Per runner: median seconds per call over ``repeat`` rounds after a warm-up, its last
    output and the seconds of each round. Every round times each runner once, in turn, so a
    slow spell of the machine falls on all of them alike; a fast call is timed in loops of
    several calls per sample (at least ``min_sample_s`` each; 0: one call). The one timing
    harness of ``ort-roi bench`` and of ``tools/`` (the benches, the end-to-end runs).

    Args:
        fns: name -> a call of no arguments (its output kept).
        repeat: the rounds.
        min_sample_s: the least seconds of one sample (calls looped to reach it).
        shuffle: a seed: each round runs the runners in a fresh random order (a whole model,
            where the order within a round matters); None: in ``fns``' order.
        warmup: one untimed call of each first (False: the caller has warmed them up).

    Returns:
        name -> (median seconds per call, its last output, the seconds of each round).
    """
    import random

    loops, ys, ts = {}, {}, {name: [] for name in fns}
    for name, fn in fns.items():
        t = time.perf_counter()
        ys[name] = fn() if warmup else None
        took = time.perf_counter() - t if warmup else min_sample_s
        loops[name] = max(1, min(10000, int(min_sample_s / max(took, 1e-7))))
    rng = random.Random(shuffle) if shuffle is not None else None
    for _ in range(repeat):
        order = list(fns)
        if rng is not None:
            rng.shuffle(order)
        for name in order:
            fn = fns[name]
            t = time.perf_counter()
            for _ in range(loops[name]):
                ys[name] = fn()
            ts[name].append((time.perf_counter() - t) / loops[name])
    return {name: (statistics.median(ts[name]), ys[name], ts[name]) for name in fns}


def round_ratios(peer: list[float], ours: list[float]) -> list[float]:
    """min, median and max over the rounds of peer time / our time in the same round."""
    r = [p / o for p, o in zip(peer, ours)]
    return [min(r), statistics.median(r), max(r)]


RATIO = ("ratio = peer time / ort_roi time (> 1: ort_roi is faster); each time the median of "
         "{repeat} rounds after a warm-up, ort_roi and its peers timed back to back in every "
         "round, in this one process (OpenMP threads of the peers passive: OMP_WAIT_POLICY="
         "PASSIVE unless set); 'a-b' the least and largest ratio of one round")


def machine() -> dict:
    """What the numbers were measured on: CPU, cores, Python and library versions."""
    import os

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(ln.split(":", 1)[1].strip() for ln in f if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "machine": platform.machine(),
            "python": platform.python_version(), "numpy": np.__version__,
            "onnxruntime": ort.__version__, "ort_roi": __version__}


def describe(info: dict) -> str:
    return (f"{info['cpu']}, {info['cores']} cores; Python {info['python']}, numpy "
            f"{info['numpy']}, onnxruntime {info['onnxruntime']}, ort_roi {info['ort_roi']}")


def plan(names: list[str] | None = None, scaling: bool = False) -> list[tuple[str, dict, str]]:
    """The bench's rows: every (workload, op) pair of workloads.json, expanded as timed.

    Args:
        names: workloads by W number or full name, any case (None or empty: all).
        scaling: also W2 with R = 100, 1000, 4000.

    Returns:
        ``(row name, workload, op)`` per row, what ``cases(workload, op)`` takes: the
        CropAndResize workloads a row per (R, crop side), the per-level ones (W8) a row per
        level (op "RoiAlign", the workload's ``row`` the level's) and a stage per pooler (the
        workload's ``pooler``).

    Raises:
        ValueError: an unknown workload name.
    """
    ws = workloads()

    def named(k: str, name: str) -> bool:  # W1 or W1_faster_rcnn_c4, any case
        return name.lower() in (k.lower(), k.split("_")[0].lower())
    unknown = [n for n in names or [] if not any(named(k, n) for k in ws)]
    if unknown:
        raise ValueError(f"unknown workload {unknown[0]!r} (known: "
                         f"{', '.join(k.split('_')[0] for k in ws)})")
    todo = []
    for k, v in ws.items():
        if names and not any(named(k, n) for n in names):
            continue
        for op in v["ops"]:
            if op == bench_crop.OP:  # a row per (R, crop side)
                todo += bench_crop.rows(k, v)
            elif "rows" not in v:
                todo.append((k, dict(v), op))
            elif op == "RoIAlign":  # per-level workloads: a row per level (the ONNX RoiAlign
                # node torchvision writes, converted), a stage per pooler
                todo += [(f"{k} {r['pooler']} P{r['level']} ({r['R']})", dict(v, row=r),
                          "RoiAlign") for r in v["rows"]]
            else:
                todo += [(f"{k} {p}", dict(v, pooler=p), op)
                         for p in dict.fromkeys(r["pooler"] for r in v["rows"])]
    if scaling:
        for r in (100, 1000, 4000):
            todo.append((f"W2_R{r}", dict(ws["W2_mask_rcnn_p2"], R=r), "RoIAlign"))
            todo.append((f"W2_R{r}", dict(ws["W2_mask_rcnn_p2"], R=r), "ROIPooling.max"))
    return todo


def run(names: list[str] | None = None, repeat: int = 5, scaling: bool = False,
        log=print) -> dict:
    """Run the benchmark; returns the JSON-able results."""
    todo = plan(names, scaling)
    info = machine()
    results = {**info, "repeat": repeat, "rows": []}
    log(f"ort-roi bench on {describe(info)}")
    log(RATIO.format(repeat=repeat) + "\n")
    skipped = set()  # peers said to be skipped (once)
    for wname, w, op in todo:
        ours, peers = cases(w, op)
        for k in [k for k, fn in peers.items() if fn is None and k in bench_crop.NEEDS]:
            if k not in skipped:
                log(f"{k}: skipped ({bench_crop.NEEDS[k]})")
            skipped.add(k)
        peers = {k: fn for k, fn in peers.items() if fn is not None}
        y = ours()
        floor = {FLOOR: ours.floor(y)} if isinstance(ours, _Ours) else {}  # FPN: no stand-in
        times = time_together({OURS: ours, **floor, **peers}, repeat)
        (t_ours, y, rounds), t_floor = times.pop(OURS), times.pop(FLOOR, (None,))[0]
        row = {"workload": wname, "op": op, "ort_roi_s": t_ours, "bridge_floor_s": t_floor,
               "peers": {}}
        line = (f"{wname:<32} {op:<24} ort_roi {_ms(t_ours):>9}"
                + (f" (bridge {_ms(t_floor)})" if t_floor is not None else ""))
        for pname, (t, yp, peer_rounds) in times.items():
            comparable = yp.shape == y.shape and not pname.endswith("only")
            diff = (float(np.abs(np.nan_to_num(yp) - y).max()) if y.size else 0.0) if comparable \
                else float("nan")
            row["peers"][pname] = {"s": t, "ratio": t / t_ours,
                                   "round_ratios": round_ratios(peer_rounds, rounds),
                                   "max_abs_diff": diff}
            lo, _, hi = row["peers"][pname]["round_ratios"]
            line += f" | {pname} {_ms(t)} x{t / t_ours:.2f} ({lo:.2f}-{hi:.2f}, diff {diff:.1e})"
        log(line)
        results["rows"].append(row)
    return results


OURS, FLOOR = "ort_roi", "bridge alone"  # runner names beside the peers'


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def markdown(results: dict) -> str:
    """A table of the results: our time and, per peer, its time and peer/ours."""
    lines = ["| workload | op | ort_roi | bridge alone | peer | peer time | peer / ort_roi "
             "| per round | max abs diff |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        for i, (p, v) in enumerate(r["peers"].items() or [("-", None)]):
            floor = r.get("bridge_floor_s")
            head = (f"| {r['workload']} | {r['op']} | {_ms(r['ort_roi_s'])} | "
                    f"{_ms(floor) if floor is not None else '-'}" if i == 0 else "| | | |")
            if v is None:
                lines.append(head + " | - | - | - | - | - |")
            else:
                lo, _, hi = v["round_ratios"]
                lines.append(f"{head} | {p} | {_ms(v['s'])} | {v['ratio']:.2f}x | "
                             f"{lo:.2f}-{hi:.2f}x | {_diff(v['max_abs_diff'])} |")
    return "\n".join(lines)


def _short(workload: str) -> str:
    """W1_faster_rcnn_c4 -> W1; the scaling rows keep their R (W2_R100), the per-level rows
    their row (W8 box P2 (912))."""
    name, _, row = workload.partition(" ")
    head, _, rest = name.partition("_")
    short = name if rest[:1] == "R" and rest[1:].isdigit() else head
    return f"{short} {row}" if row else short


def _diff(d: float) -> str:
    """A max abs difference for the table; '-' where the outputs are not comparable (the
    'level 0 only' rows pool other maps)."""
    return "-" if np.isnan(d) else f"{d:.1e}"


#: How the plot and tables name the ops: labels that differ by more than case.
OP_LABELS = {"RoIAlign": "RoIAlign (Paddle's)", "RoiAlign": "ONNX RoiAlign, converted",
             "ROIPooling.max": "ROIPooling max", "ROIPooling.bilinear": "ROIPooling bilinear"}


def speedups(results: dict) -> list[tuple[str, str, float]]:
    """(row label, peer, peer time / ort_roi time) for every peer of every row."""
    out = []
    for r in results["rows"]:
        label = f"{_short(r['workload'])} {OP_LABELS.get(r['op'], r['op'])}"
        for p, v in sorted(r["peers"].items()):
            out.append((label, p, v["ratio"]))
    return out


def plot(results: dict, path: str) -> None:
    """A PNG bar chart of the speed-ups: peer time / ort_roi time per row and peer (log
    scale, 1 = level; above the line ort_roi is faster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = speedups(results)
    rows = list(dict.fromkeys(label for label, _, _ in data))
    peers = sorted({p for _, p, _ in data})
    cmap = plt.get_cmap("tab20")  # a colour per peer (the full bench has more than 10)
    colors = {p: cmap(i % cmap.N) for i, p in enumerate(peers)}
    per_row = {row: [(p, x) for label, p, x in data if label == row] for row in rows}
    width = 0.8 / max(len(v) for v in per_row.values())
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 6.5))
    for i, row in enumerate(rows):
        bars = per_row[row]
        x0 = i - width * (len(bars) - 1) / 2
        for j, (p, x) in enumerate(bars):
            ax.bar(x0 + j * width, x, width, color=colors[p])
            ax.text(x0 + j * width, x, f"{x:.1f}", ha="center", va="bottom", fontsize=6)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log", base=2)
    ax.set_xticks(np.arange(len(rows)), rows, fontsize=7, rotation=40, ha="right")
    ax.set_ylabel("speed-up: peer time / ort_roi time")
    ax.legend([plt.Rectangle((0, 0), 1, 1, color=colors[p]) for p in peers], peers,
              fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.set_title(f"ort_roi against its peers (above 1: ort_roi faster)\n"
                 f"{describe(results) if 'cpu' in results else ''}", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(args: argparse.Namespace) -> int:
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before the timing
        print("ort-roi bench: --plot needs matplotlib: pip install '.[plot]'",
              file=sys.stderr)
        return 2
    # torch's (and Paddle's) OpenMP threads spin after each of their ops, by default for up
    # to ~200 ms, and take the second core from whatever the round times next (measured:
    # ours on W8f's 6-box P4 row 2.7 ms after torchvision's roi_align, 1.3 ms with this):
    # passive, each runner starts with the cores free. Set before the peers load OpenMP.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        results = run(args.workloads, args.repeat, args.scaling)
    except ValueError as e:  # an unknown workload name
        print(f"ort-roi bench: {e}", file=sys.stderr)
        return 2
    print()
    print(markdown(results))
    print("\n" + RATIO.format(repeat=args.repeat))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)
    return 0


def _workload_line(name: str, w: dict) -> str:
    """One line of ``bench --help`` for a workload of workloads.json: its shape and ops."""
    short = name.split("_")[0]
    if "rows" in w:  # per-level loads: a row per (pooler, level), a stage per pooler
        loads = ", ".join(f"{r['pooler']} P{r['level']} {r['R']}" for r in w["rows"])
        shape = (f"C={w['C']}, {w['image'][0]}x{w['image'][1]} image, boxes per level: "
                 f"{loads}")
    elif bench_crop.OP in w["ops"]:
        shape = bench_crop.shape_line(w)
    elif "strides" in w:
        shape = (f"C={w['C']}, {w['image'][0]}x{w['image'][1]} image, FPN strides "
                 f"{'/'.join(map(str, w['strides']))}, R={w['R']}, {w['pooled']}x{w['pooled']}")
    else:
        shape = (f"N={w['N']} C={w['C']} {w['H']}x{w['W']} map, R={w['R']}, "
                 f"{w['pooled']}x{w['pooled']}")
    return f"  {short:<4} {name}: {shape}; {', '.join(w['ops'])}"


def _epilog() -> str:
    """``bench --help``'s epilog: the workloads (read from workloads.json) and the rows."""
    lines = ["workloads (ort_roi/data/workloads.json; name one by its W number):"]
    lines += [_workload_line(k, v) for k, v in workloads().items()]
    lines += [
        "",
        "ops: RoIAlign is Paddle's roi_align (ort_roi::RoIAlign); RoiAlign the ONNX node as",
        "`ort-roi convert` writes it (ort_roi::RoiAlign) against onnxruntime's own RoiAlign;",
        "ROIPooling.max / .bilinear, PSROIPool: ours against the peers' same op; W7: the",
        "exporters' multi-level nodes, converted. W8 and W8f: one RoiAlign call per",
        "'POOLER Pn (R)' row (a level of torchvision's Mask / Faster R-CNN with R boxes), and",
        "per pooler the 'fused multi-level stage': torchvision's exported MultiScaleRoIAlign",
        "as convert fuses it, against the same graph run natively and converted unfused.",
        "W9 and W10: TensorFlow's crop_and_resize (TF OD API's Faster R-CNN), a row per",
        "'R<boxes> <crop>' pair: ort_roi::CropAndResize as convert writes it against",
        "onnxruntime running tf2onnx's Loop and com.microsoft::CropAndResize graphs, and TF's",
        "own op (pip install '.[tensorflow]'); the tf2onnx graphs differ from TF (and",
        "ort_roi) on boxes ending at 1.0 (the diff column).",
        "",
        "each row: WORKLOAD OP, ort_roi's time (and, in brackets, 'bridge': the same session",
        "with a kernel that hands back a ready output: what onnxruntime-extensions' bridge",
        "costs alone), then per peer: its time, xRATIO = peer time / ort_roi time (> 1:",
        "ort_roi is faster), (LO-HI) the least and largest ratio of a single round, and",
        "diff: the largest absolute difference of its output from ours. Times are medians",
        "of --repeat rounds after a warm-up, every runner timed once per round, in turn.",
        "Peers: onnxruntime always; OpenVINO, Paddle (pip install '.[parity]') and",
        "torchvision (pip install '.[torchvision]') when installed. A table of the",
        "same follows the rows. Measured results: docs/benchmarks.md.",
    ]
    return "\n".join(lines)


def add_command(sub) -> None:
    p = sub.add_parser("bench", help="time the standard workloads against the peers",
                       description="Time the standard workloads: ort_roi's ops in a plain "
                       "onnxruntime session, side by side\nwith onnxruntime's native ops and "
                       "the installed peers, in one process.",
                       epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*",
                   help="W1 W2 ... (default: all; listed below)")
    p.add_argument("--repeat", type=int, default=5,
                   help="timed rounds per row (default 5); each time is their median")
    p.add_argument("--scaling", action="store_true", help="also W2 with R = 100, 1000, 4000")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a PNG bar chart here")
    p.set_defaults(fn=main)
