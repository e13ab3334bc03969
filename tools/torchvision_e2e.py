#!/usr/bin/env python3
"""torchvision's detection models end to end: native onnxruntime against ort_roi.

    pip install '.[torchvision]'
    python -m tools.torchvision_e2e [faster mask keypoint] [--repeat 9] [--thresh0]
                                    [--out DIR] [--json FILE] [--profile]

For each model (Faster / Mask / Keypoint R-CNN, ResNet-50 FPN, random weights seeded and made to
carry a trained model's load: the RPN's box regression zeroed so that the proposals are anchors
of every size, on every FPN level, ``rpn cls_logits`` x 0.1; the box classifier's weights x 0.01
and biases -8 but class 1 at +8, so that one class wins each box and NMS sees about a thousand
boxes rather than 90,000), at the image size given (the transform keeps it: min_size / max_size
are the image's sides):

1. ``torch.onnx.export(..., opset_version=17, dynamo=False)``: the native graph, run by a plain
   ``onnxruntime.InferenceSession``;
2. that graph through ``ort_roi.convert`` (each MultiScaleRoIAlign stage fused into one
   PyramidRoIAlign node, Keypoint R-CNN's decoding Loop into HeatmapsToKeypoints, Mask
   R-CNN's pasting Loop into PasteMasks), run by a plain session with
   ``ort_roi.session_options()``;
3. ``ort_roi.torch_export`` of the same model (the same nodes written by the exporter), run
   the same way;
4. with ``--openvino`` (OpenVINO installed, the 'parity' extra), OpenVINO reading the native
   graph (1.) itself: the whole-model peer, with its own kernels for every node.

It checks that no ScatterElements merge is left in the RoI heads and that the detections equal
the native graph's (max abs difference of every output), then times the three sessions in one
process, interleaved (each round runs them in a fresh random order; a ratio is native time /
ours within a round, and the median of the rounds is reported), and with ``--profile`` runs
onnxruntime's profiler on each and reports where the time went (OpenVINO's per-node counters
with ``--openvino``). ``--thresh0`` builds the
models with box_score_thresh=0 instead (NMS-bound; reported, not held to the targets).
"""

from __future__ import annotations

import argparse
import functools
import io
import json
import os
import statistics
import sys
import tempfile
import time
import warnings

import numpy as np

SIZES = {"faster": (384, 472), "mask": (320, 280), "keypoint": (384, 472)}
TARGETS = {"faster": 1.25, "mask": 1.25, "keypoint": 1.10}


def build(kind: str, size: tuple[int, int], thresh0: bool = False):
    """The model, seeded, with a trained model's load (see the module's doc)."""
    import torch
    from torchvision.models import detection as D

    ctor = {"faster": D.fasterrcnn_resnet50_fpn, "mask": D.maskrcnn_resnet50_fpn,
            "keypoint": D.keypointrcnn_resnet50_fpn}[kind]
    torch.manual_seed(0)
    kw = dict(box_score_thresh=0.0) if thresh0 else {}
    m = ctor(weights=None, weights_backbone=None, min_size=min(size), max_size=max(size),
             **kw).eval()
    with torch.no_grad():
        m.rpn.head.bbox_pred.weight.zero_()
        m.rpn.head.bbox_pred.bias.zero_()
        m.rpn.head.cls_logits.weight.mul_(0.1)
        cls = m.roi_heads.box_predictor.cls_score
        cls.weight.mul_(0.01)
        cls.bias.fill_(-8.0)
        cls.bias[1] = 8.0
    return m


def export(model, img, how: str) -> bytes:
    import torch

    import ort_roi

    buf = io.BytesIO()
    fn = torch.onnx.export if how == "native" else ort_roi.torch_export
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn(model, ([img],), buf, opset_version=17, dynamo=False, input_names=["image"])
    return buf.getvalue()


def roi_stage_ops(model) -> dict[str, int]:
    """Op types of the nodes in the RoI heads' pooling stages, counted."""
    out: dict[str, int] = {}
    for n in model.graph.node:
        if "roi_pool" in n.name or n.domain == "ort_roi":
            key = f"{n.domain + '::' if n.domain else ''}{n.op_type}"
            out[key] = out.get(key, 0) + 1
    return out


def graphs(native: bytes, exported: bytes) -> dict:
    """The three graphs: native, native converted by ort_roi, exported by ort_roi."""
    import onnx

    import ort_roi

    return {"native": onnx.load_from_string(native),
            "converted": ort_roi.convert(onnx.load_from_string(native)),
            "torch_export": onnx.load_from_string(exported)}


def make_session(model, ours: bool, profile: str | None = None):
    import onnxruntime as ort

    import ort_roi

    so = ort_roi.session_options() if ours else ort.SessionOptions()
    so.log_severity_level = 3  # the mask paster's Loop warns about its outputs' shapes
    if profile:
        so.enable_profiling = True
        so.profile_file_prefix = profile
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def profile_summary(path: str, runs: int) -> dict:
    """onnxruntime's profile: per run, the total of node times, by op type, and the RoI
    stages' nodes (name under roi_pool, or ort_roi's ops)."""
    with open(path) as f:
        events = json.load(f)
    by_op: dict[str, float] = {}
    stage, total = 0.0, 0.0
    for e in events:
        if e.get("cat") != "Node" or not e["name"].endswith("_kernel_time"):
            continue
        us = e["dur"] / runs
        op = e["args"].get("op_name", "?")
        by_op[op] = by_op.get(op, 0.0) + us
        total += us
        if "roi_pool" in e["name"] or op.startswith("PyramidRoIAlign"):
            stage += us
    return {"nodes_ms": total / 1e3, "roi_stages_ms": stage / 1e3, "top_ops_ms": _top_ms(by_op)}


def _top_ms(us_by_op: dict[str, float]) -> dict[str, float]:
    """The 8 costliest op types, in ms (from microseconds)."""
    top = sorted(us_by_op.items(), key=lambda kv: -kv[1])[:8]
    return {k: round(v / 1e3, 2) for k, v in top}


def openvino_runner(native: bytes, feed: dict, profile: bool = False):
    """OpenVINO's CPU plugin compiling the native graph (f32, its default threads): a runner
    returning the outputs in the graph's order, and the compiled model's infer request."""
    import openvino as ov

    from ort_roi.cli.bench_peers import OPENVINO_F32

    core = ov.Core()
    config = dict(OPENVINO_F32)
    if profile:
        config["PERF_COUNT"] = True
    compiled = core.compile_model(core.read_model(native, b""), "CPU", config)
    req = compiled.create_infer_request()

    def run() -> list:
        res = req.infer(feed)
        return [np.asarray(res[o]) for o in compiled.outputs]
    return run, req


def openvino_profile(req, feed: dict, runs: int) -> dict:
    """OpenVINO's per-node counters over ``runs`` runs of ``feed``, summed by node type (ms
    per run): where its time goes, beside onnxruntime's profile of ours."""
    by_type: dict[str, float] = {}
    for _ in range(runs):
        req.infer(feed)
        for p in req.profiling_info:
            us = p.real_time.total_seconds() * 1e6
            by_type[p.node_type] = by_type.get(p.node_type, 0.0) + us / runs
    return {"nodes_ms": sum(by_type.values()) / 1e3, "top_ops_ms": _top_ms(by_type)}


def max_diff(a: list, b: list) -> float:
    """The largest difference over every output; inf when the shapes differ (another
    number of detections)."""
    if len(a) != len(b) or any(x.shape != y.shape for x, y in zip(a, b)):
        return float("inf")
    return max((float(np.abs(x.astype(np.float64) - y).max()) if x.size else 0.0)
               for x, y in zip(a, b))


def run_model(kind: str, repeat: int, thresh0: bool, out_dir: str | None,
              profile: bool, log=print, openvino: bool = False) -> dict:
    import torch

    size = SIZES[kind]
    model = build(kind, size, thresh0)
    g = torch.Generator().manual_seed(1)
    img = torch.rand(3, *size, generator=g)
    t = time.perf_counter()
    native = export(model, img, "native")
    exported = export(model, img, "torch_export")
    log(f"{kind}: exported twice in {time.perf_counter() - t:.0f} s")
    models = graphs(native, exported)
    if out_dir:
        import onnx
        os.makedirs(out_dir, exist_ok=True)
        for name, m in models.items():
            onnx.save(m, os.path.join(out_dir, f"{kind}_{name}.onnx"))
    stage_ops = {k: roi_stage_ops(m) for k, m in models.items()}
    sess = {k: make_session(m, k != "native") for k, m in models.items()}
    feed = {"image": torch.rand(3, *size, generator=g).numpy()}  # not the export's image
    runners = {k: functools.partial(s.run, None, feed) for k, s in sess.items()}
    if openvino:
        runners["openvino"] = openvino_runner(native, feed)[0]
    outs = {k: run() for k, run in runners.items()}
    with torch.no_grad():
        eager = [t.numpy() for t in model([torch.from_numpy(feed["image"])])[0].values()]
    diffs = {k: max_diff(outs[k], outs["native"]) for k in ("converted", "torch_export")}
    diffs["native vs eager torch"] = max_diff(outs["native"], eager)
    if openvino:
        diffs["openvino vs native"] = max_diff(outs["openvino"], outs["native"])
    detections = int(outs["native"][0].shape[0])
    from ort_roi.cli.bench_timing import round_ratios, time_together

    timed = time_together(runners, repeat, min_sample_s=0, shuffle=0)
    times = {k: v[2] for k, v in timed.items()}
    res = {"model": kind, "size": list(size), "box_score_thresh": 0.0 if thresh0 else 0.05,
           "detections": detections, "eager_torch_detections": int(eager[0].shape[0]),
           "max_abs_diff": diffs, "roi_stage_ops": stage_ops,
           "median_s": {k: statistics.median(v) for k, v in times.items()}, "speedup": {}}
    def spread(peer: str, ours: str) -> dict:  # peer time / ours, per round
        lo, median, hi = round_ratios(times[peer], times[ours])
        return {"median": median, "min": lo, "max": hi}

    for k in ("converted", "torch_export"):
        res["speedup"][k] = spread("native", k)
    if openvino:
        res["openvino_vs_converted"] = spread("openvino", "converted")
    if profile:
        res["profile"] = {}
        for k, m in models.items():
            prefix = os.path.join(out_dir or tempfile.gettempdir(), f"profile_{kind}_{k}")
            s = make_session(m, k != "native", prefix)
            runs = 3
            for _ in range(runs + 1):
                s.run(None, feed)
            path = s.end_profiling()
            res["profile"][k] = profile_summary(path, runs + 1)
            if not out_dir:  # kept only with --out
                os.remove(path)
        if openvino:
            _, req = openvino_runner(native, feed, profile=True)
            res["profile"]["openvino"] = openvino_profile(req, feed, 4)
    log(json.dumps(res, indent=1))
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="*", help=f"of {', '.join(SIZES)} (default: all three)")
    ap.add_argument("--repeat", type=int, default=9)
    ap.add_argument("--thresh0", action="store_true", help="box_score_thresh=0 (NMS-bound)")
    ap.add_argument("--profile", action="store_true", help="onnxruntime's profile of each")
    ap.add_argument("--out", help="keep the three graphs (and the profiles) here")
    ap.add_argument("--json", help="write the results here")
    ap.add_argument("--openvino", action="store_true",
                    help="also OpenVINO running the native graph (the whole-model peer)")
    args = ap.parse_args()
    unknown = sorted(set(args.models) - set(SIZES))
    if unknown:
        ap.error(f"unknown model(s) {unknown}: choose from {list(SIZES)}")
    results = [run_model(k, args.repeat, args.thresh0, args.out, args.profile,
                         openvino=args.openvino)
               for k in args.models or list(SIZES)]
    print("\n| model | detections | native | converted | torch_export | max abs diff |")
    print("|---|---|---|---|---|---|")
    for r in results:
        m, sp = r["median_s"], r["speedup"]
        print(f"| {r['model']} {r['size'][0]}x{r['size'][1]} | {r['detections']} | "
              f"{m['native']:.3f} s | {m['converted']:.3f} s ({sp['converted']['median']:.2f}x) | "
              f"{m['torch_export']:.3f} s ({sp['torch_export']['median']:.2f}x) | "
              f"{max(r['max_abs_diff']['converted'], r['max_abs_diff']['torch_export']):.1e} |")
    for r in results:
        if "openvino_vs_converted" in r:
            o = r["openvino_vs_converted"]
            print(f"{r['model']}: OpenVINO on the native graph {r['median_s']['openvino']:.3f} s, "
                  f"OpenVINO / converted {o['median']:.2f}x ({o['min']:.2f}-{o['max']:.2f}); "
                  f"its outputs vs native {r['max_abs_diff']['openvino vs native']:.1e}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    failed = [r["model"] for r in results
              if max(r["max_abs_diff"]["converted"], r["max_abs_diff"]["torch_export"]) > 1e-3]
    if failed:
        print(f"detections differ from native by more than 1e-3: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
