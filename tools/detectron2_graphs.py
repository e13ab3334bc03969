#!/usr/bin/env python3
"""detectron2's RoI stage as its ONNX export writes it, and its whole detectors end to end.

    pip install fvcore iopath omegaconf   # detectron2's Python dependencies (its C++
    git clone https://github.com/facebookresearch/detectron2   # extension is not needed)
    PYTHONPATH=detectron2 python -m tools.detectron2_graphs stages
    python -m tools.detectron2_graphs bench [--repeat 7]
    PYTHONPATH=detectron2 python -m tools.detectron2_graphs models --out DIR [--opsets 11 16]
    PYTHONPATH=detectron2 python -m tools.detectron2_graphs e2e --out DIR [--repeat 7]
    PYTHONPATH=detectron2 python -m tools.detectron2_graphs profile --out DIR
    (models, e2e, profile: [--kinds faster mask keypoint cascade], all four by default)

1. ``stages``: ort_roi/data/detectron2_stage_{box,mask}_{11,16}.onnx, detectron2's
   ``ROIPooler`` alone (``detectron2.modeling.poolers``) as its R50-FPN Faster / Mask R-CNN
   configure it: ROIAlignV2 (aligned=True), sampling_ratio 0, output 7 x 7 (the box head's)
   or 14 x 14 (the mask head's), P2..P5 at scales 1/4 .. 1/32, one image; exported by
   ``torch.onnx.export(..., dynamo=False)`` at opsets 11 and 16 with the box count and the
   maps' sizes dynamic (the maps are graph inputs: the graphs are the stage only). They hold
   what detectron2's exported detectors hold under ``/roi_heads/box_pooler`` and
   ``/roi_heads/mask_pooler`` (``models`` checks it: the same op sequence): the rois as a
   Concat of a repeat_interleave'd batch column and the boxes; the level of each box
   floor(4 + log2(sqrt(area) / 224 + 1e-8)) clipped to 2..5, minus 2; per level Equal ->
   NonZero -> Gather of the rois -> Cast -> RoiAlign; the levels merged into zeros by a chain
   of ScatterND. At opset 11 torch.onnx writes RoiAlign without coordinate_transformation_mode
   (output_half_pixel: aligned=True is lost); at 16 it writes half_pixel.
2. ``bench`` (no detectron2 needed): each stage graph native against converted (the stage
   fused) in a plain onnxruntime session, on P2..P5 of a 480 x 640 image and 1000 boxes (the
   box head's proposals) or 100 (the mask head's detections), timed together in interleaved
   rounds (``ort_roi.cli.bench_timing.time_together``), back to back and settled
   (``stage_rounds``); ``--reuse-freed-memory``: with ``ort_roi.reuse_freed_memory()``.
3. ``models``: the whole R50-FPN Faster, Mask, Keypoint and Cascade (Mask) R-CNN
   (detectron2's own configs, ``CONFIGS``; random weights seeded and made to carry a trained
   model's load (``build``: 1000 proposals over P2..P5, 100 detections reaching the mask /
   keypoint head), 480 x 640) through ``detectron2.export.TracingAdapter`` and
   ``torch.onnx.export(..., dynamo=False)`` (detectron2's tools/deploy/export_model.py does
   this, but on torch 2.14 it calls the default dynamo=True exporter, which fails on
   proposal_utils.py's ``if not valid_mask.all()``). Keypoint R-CNN's keypoint decoding
   (heatmaps_to_keypoints) does not export (``export_model``): its graph ends at the
   heatmaps. Cascade R-CNN runs its one box pooler three times (once per cascade stage).
   Not committed (160-290 MB each).
4. ``e2e``: each whole model native (a plain onnxruntime session) against ``ort_roi.convert``'s
   (a plain session with ``ort_roi.session_options()``): the RoI stages fused, the same
   detections, the seconds per image in interleaved rounds (``time_together``, settled:
   ``SETTLE_S`` after each run).
5. ``profile``: onnxruntime's profiler on each whole model, native and converted: the time of
   the RoI stages' nodes (named under /roi_heads/{box,mask,keypoint}_pooler) per run, against
   all nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ort_roi", "data")
IMAGE = (480, 640)
STRIDES = (4, 8, 16, 32)
CONFIGS = {"faster": "COCO-Detection/faster_rcnn_R_50_FPN_1x.yaml",
           "mask": "COCO-InstanceSegmentation/mask_rcnn_R_50_FPN_1x.yaml",
           "keypoint": "COCO-Keypoints/keypoint_rcnn_R_50_FPN_1x.yaml",
           "cascade": "Misc/cascade_mask_rcnn_R_50_FPN_1x.yaml"}
POOLED = {"box": 7, "mask": 14}
# each detector's poolers: {pooler: (the committed stage graph it holds, the times it runs)};
# the keypoint head's pooler is the mask head's (14 x 14); Cascade R-CNN's one box pooler
# runs once per cascade stage (three)
HEADS = {"faster": {"box": ("box", 1)},
         "mask": {"box": ("box", 1), "mask": ("mask", 1)},
         "keypoint": {"box": ("box", 1), "keypoint": ("mask", 1)},
         "cascade": {"box": ("box", 3), "mask": ("mask", 1)}}


def _quiet_export(module, args, f, **kw) -> None:
    import torch

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            torch.onnx.export(module, args, f, dynamo=False, **kw)


def stage(kind: str, opset: int) -> bytes:
    """detectron2's ROIPooler (``kind``: "box" 7 x 7 or "mask" 14 x 14) exported alone."""
    import torch
    from detectron2.modeling.poolers import ROIPooler
    from detectron2.structures import Boxes

    class Stage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pooler = ROIPooler(POOLED[kind], tuple(1.0 / s for s in STRIDES), 0,
                                    "ROIAlignV2")

        def forward(self, p2, p3, p4, p5, boxes):
            return self.pooler([p2, p3, p4, p5], [Boxes(boxes)])

    g = torch.Generator().manual_seed(0)
    maps = [torch.randn(1, 256, IMAGE[0] // s, IMAGE[1] // s, generator=g) for s in STRIDES]
    xy = torch.rand(40, 2, generator=g) * 400
    boxes = torch.cat([xy, xy + torch.rand(40, 2, generator=g) * 300 + 4], 1)
    names = ["p2", "p3", "p4", "p5"]
    buf = io.BytesIO()
    _quiet_export(Stage().eval(), (*maps, boxes), buf, opset_version=opset,
                  input_names=names + ["boxes"], output_names=["pooled"],
                  dynamic_axes={"boxes": {0: "R"}, "pooled": {0: "R"},
                                **{n: {2: f"{n}_h", 3: f"{n}_w"} for n in names}})
    return buf.getvalue()


def write_stages() -> list[str]:
    import onnx

    paths = []
    for kind in POOLED:
        for opset in (11, 16):
            model = onnx.load_from_string(stage(kind, opset))
            model.producer_version += (" (tools/detectron2_graphs.py: detectron2 ROIPooler, "
                                       "torch.onnx TorchScript)")
            path = os.path.join(OUT, f"detectron2_stage_{kind}_{opset}.onnx")
            onnx.save(model, path)
            paths.append(path)
            print(f"{path}: {len(model.graph.node)} nodes, {os.path.getsize(path)} bytes")
    return paths


def build(kind: str):
    """detectron2's R50-FPN ``kind`` (of ``CONFIGS``) from its own config, random weights
    (seed 0), in eval mode on the CPU."""
    import detectron2
    import torch
    from detectron2.config import get_cfg
    from detectron2.modeling import build_model

    root = os.path.dirname(os.path.dirname(os.path.abspath(detectron2.__file__)))
    cfg = get_cfg()
    cfg.merge_from_file(os.path.join(root, "configs", CONFIGS[kind]))
    cfg.MODEL.DEVICE, cfg.MODEL.WEIGHTS = "cpu", ""
    torch.manual_seed(0)
    model = build_model(cfg).eval()
    # random weights through an untrained ResNet give logits of 1e3 and more: one class takes
    # every box, the rest score 0 and almost nothing is detected. A trained model's load
    # instead: the RPN's box regression zeroed (the 1000 proposals are anchors of every size,
    # on every level); the box head's features (~1e3 in size) scaled down in the predictors:
    # class scores of logits +4 for class 0 and -4 for the others, each moved by the pooled
    # features (std ~1), so that class 0 wins every box (NMS sees the 1000 boxes of one class,
    # not 80,000 candidates, and keeps 100 detections for the mask head) with scores that
    # differ; box deltas of std ~0.1, so that the boxes depend on the pooled features too
    # (Cascade R-CNN: each of its three stages' predictors alike)
    predictors = model.roi_heads.box_predictor
    g = torch.Generator().manual_seed(2)
    with torch.no_grad():
        model.proposal_generator.rpn_head.anchor_deltas.weight.zero_()
        model.proposal_generator.rpn_head.anchor_deltas.bias.zero_()
        for predictor in predictors if isinstance(predictors, torch.nn.ModuleList) else [
                predictors]:
            for layer, std in ((predictor.cls_score, 3e-5), (predictor.bbox_pred, 3e-6)):
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=g) * std)
                layer.bias.zero_()
            predictor.cls_score.bias.fill_(-4.0)
            predictor.cls_score.bias[0] = 4.0
        # Keypoint R-CNN: the heatmap logits (~1e3, from the same features) scaled to std ~1:
        # at ~1e3, heatmaps_to_keypoints' own check (the argmax's score is the highest score)
        # fails in float32 and the trace stops there
        if hasattr(model.roi_heads, "keypoint_head"):
            last = model.roi_heads.keypoint_head.score_lowres
            last.weight.copy_(torch.randn(last.weight.shape, generator=g) * 2e-5)
            last.bias.zero_()
    return model


def image():
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randint(0, 255, (3, *IMAGE), dtype=torch.uint8, generator=g)


def export_model(kind: str, opset: int, path: str) -> None:
    """The whole detector through TracingAdapter and torch.onnx.export(dynamo=False): input the
    [3, H, W] uint8 image, outputs the instances' fields flattened (boxes, classes, [masks,
    keypoint heatmaps,] scores) before postprocessing, as export_model.py's ``tracing``
    method writes them."""
    from detectron2.export import TracingAdapter

    model = build(kind)

    def inference(m, inputs):
        return [{"instances": m.inference(inputs, do_postprocess=False)[0]}]

    adapter = TracingAdapter(model, [{"image": image()}], inference)
    from unittest import mock

    # Keypoint R-CNN: torch.onnx cannot export detectron2's keypoint decoding
    # (structures/keypoints.py heatmaps_to_keypoints, a torch.jit.script_if_tracing loop:
    # "Unsupported: ONNX export of operator aten::index, operator of advanced indexing on
    # tensor of unknown rank", at roi_map[keypoints_idx, y_int, x_int] after
    # roi_map.reshape(roi_map.shape[1:])); the heatmaps are exported instead (the
    # instances' pred_keypoint_heatmaps), decoding left to the caller
    with mock.patch("detectron2.modeling.roi_heads.keypoint_head.keypoint_rcnn_inference",
                    _heatmaps_only) if kind == "keypoint" else contextlib.nullcontext():
        _quiet_export(adapter, adapter.flattened_inputs, path, opset_version=opset,
                      input_names=["image"])
    print(f"{path}: exported ({os.path.getsize(path) >> 20} MB)")


def _heatmaps_only(logits, instances) -> None:
    """keypoint_rcnn_inference without heatmaps_to_keypoints: the heatmap logits only."""
    for part, inst in zip(logits.split([len(i) for i in instances]), instances):
        inst.pred_keypoint_heatmaps = part


def _stage_ops(model, prefix: str) -> list[str]:
    return [n.op_type for n in model.graph.node if n.name.startswith(prefix)]


def models(out: str, opsets: list[int], kinds=tuple(CONFIGS)) -> list[str]:
    """Export the detectors ``kinds`` (of ``CONFIGS``) at each opset into ``out``; check that
    their RoI stages hold the committed stage graphs' RoI nodes (the same RoiAligns and
    ScatterNDs, attributes alike, once per run of the pooler: ``HEADS``)."""
    import onnx

    os.makedirs(out, exist_ok=True)
    paths = []
    for kind in kinds:
        for opset in opsets:
            path = os.path.join(out, f"detectron2_{kind}_{opset}.onnx")
            if not os.path.exists(path):
                export_model(kind, opset, path)
            whole = onnx.load(path)
            for head, (graph, runs) in HEADS[kind].items():
                cut = onnx.load(os.path.join(OUT, f"detectron2_stage_{graph}_{opset}.onnx"))
                pooled = [(n.op_type, sorted(str(a) for a in n.attribute))
                          for n in cut.graph.node if n.op_type in ("RoiAlign", "ScatterND")]
                inside = [(n.op_type, sorted(str(a) for a in n.attribute))
                          for n in whole.graph.node
                          if n.name.startswith(f"/roi_heads/{head}_pooler")
                          and n.op_type in ("RoiAlign", "ScatterND")]
                assert pooled * runs == inside, (path, head, len(pooled), len(inside))
            paths.append(path)
    return paths


def e2e(out: str, opsets: list[int], repeat: int, kinds=tuple(CONFIGS)) -> None:
    """Each whole model native against converted: the stages fused, the detections equal,
    the seconds per image (interleaved rounds, random order)."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    import ort_roi
    from ort_roi.cli.bench_timing import round_ratios, time_together

    feed = {"image": image().numpy()}
    for path in models(out, opsets, kinds):
        native = onnx.load(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conv, done = ort_roi.convert(native, report=True)
        fused = [m for m in done.moved if "PyramidRoIAlign" in m[2]]
        left = sum(n.op_type == "ScatterND" for n in conv.graph.node
                   if n.name.startswith("/roi_heads/"))
        aligns = sum(n.op_type == "RoiAlign" for n in conv.graph.node)
        so = ort.SessionOptions()
        a = ort.InferenceSession(native.SerializeToString(), so,
                                 providers=["CPUExecutionProvider"])
        b = ort.InferenceSession(conv.SerializeToString(), ort_roi.session_options(),
                                 providers=["CPUExecutionProvider"])
        t = time_together({"native": lambda a=a: a.run(None, feed),
                           "converted": lambda b=b: b.run(None, feed)}, repeat, 0, shuffle=0,
                          settle_s=SETTLE_S)
        assert [x.shape for x in t["native"][1]] == [y.shape for y in t["converted"][1]], path
        diff = max(float(np.max(np.abs(x.astype(np.float64) - y), initial=0))
                   for x, y in zip(t["native"][1], t["converted"][1]))
        ratios = round_ratios(t["native"][2], t["converted"][2])
        print(f"{os.path.basename(path)}: {len(fused)} stage(s) fused, {left} ScatterND left "
              f"in the RoI heads, {aligns} RoiAlign; {len(done.notes)} note(s); detections {t['native'][1][0].shape[0]}, max |diff| {diff:.3g}; "
              f"native {t['native'][0] * 1e3:.0f} ms, converted {t['converted'][0] * 1e3:.0f} ms,"
              f" native / converted {ratios[len(ratios) // 2]:.2f}x ({ratios[0]:.2f}-"
              f"{ratios[-1]:.2f}; median of {repeat} rounds)")


def stage_feed(kind: str, seed: int = 0) -> dict:
    """The stage's inputs at the detectors' load: P2..P5 of a 480 x 640 image, 1000 boxes
    (the box head: the proposals) or 100 (the mask head: the detections), sides 8 to 480 px
    log-uniform (every level)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = 1000 if kind == "box" else 100
    feed = {f"p{k}": rng.standard_normal((1, 256, IMAGE[0] // s, IMAGE[1] // s)
                                         ).astype(np.float32)
            for k, s in zip(range(2, 6), STRIDES)}
    xy = rng.uniform(0, 600, (n, 2))
    side = np.exp(rng.uniform(np.log(8), np.log(480), (n, 2)))
    feed["boxes"] = np.concatenate([xy, xy + side], 1).astype(np.float32)
    return feed


def bench(repeat: int) -> None:
    """Each committed stage graph native (a plain session) against converted (fused), timed
    together in interleaved rounds, twice: back to back (each run meets the other session's
    spinning intra-op threads) and settled (``SETTLE_S`` between runs: each run on quiet
    cores, as one session alone); prints the medians and the median of the per-round ratios,
    and, settled, the fused graph with a kernel that returns at once
    (``bench_peers.graph_floor``)."""
    import onnx
    import onnxruntime as ort

    import ort_roi
    from ort_roi.cli.bench_peers import graph_floor

    for kind in POOLED:
        for opset in (11, 16):
            native = onnx.load(os.path.join(OUT, f"detectron2_stage_{kind}_{opset}.onnx"))
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                conv = ort_roi.convert(native)
            assert [n.op_type for n in conv.graph.node if n.domain] == ["PyramidRoIAlign_L4"]
            feed = stage_feed(kind)
            a = ort.InferenceSession(native.SerializeToString(),
                                     providers=["CPUExecutionProvider"])
            b = ort.InferenceSession(conv.SerializeToString(), ort_roi.session_options(),
                                     providers=["CPUExecutionProvider"])
            floor = graph_floor(conv, feed, b.run(None, feed)[0])
            print(f"{kind} {POOLED[kind]}x{POOLED[kind]} opset {opset}, "
                  f"{len(feed['boxes'])} boxes: "
                  + stage_rounds(lambda a=a, f=feed: a.run(None, f)[0],
                                 lambda b=b, f=feed: b.run(None, f)[0], repeat, floor))


#: The pause between runs of the settled rounds (onnxruntime's intra-op threads spin ~40 ms
#: after a run: docs/benchmarks.md).
SETTLE_S = 0.1


class ReuseFreedMemory(argparse.Action):
    """``--reuse-freed-memory`` of detectron2's and MMDeploy's tools: calls
    ``ort_roi.reuse_freed_memory()`` as the option is read, before any command runs."""

    def __init__(self, option_strings, dest, **kw):
        super().__init__(option_strings, dest, nargs=0, default=False, **kw)

    def __call__(self, parser, namespace, values, option_string=None):
        import ort_roi

        assert ort_roi.reuse_freed_memory(), "glibc's mallopt refused"
        setattr(namespace, self.dest, True)


def stage_rounds(native, fused, repeat: int, floor=None) -> str:
    """A stage's native and fused runs timed together in ``repeat`` interleaved rounds, back
    to back and settled (``SETTLE_S``): the medians, the median of the per-round ratios and
    the largest difference of the outputs, as a line (detectron2's and MMDeploy's benches).
    ``floor`` (``bench_peers.graph_floor`` of the fused graph) is timed in the settled rounds
    too: the fused graph with a kernel that returns at once (the bridge's copies and the
    graph's other nodes, e.g. the levels)."""
    import numpy as np

    from ort_roi.cli.bench_timing import round_ratios, time_together

    parts = []
    for how, settle in (("back to back", 0.0), ("settled", SETTLE_S)):
        runners = {"native": native, "fused": fused}
        if floor is not None and settle:
            runners["floor"] = floor
        t = time_together(runners, repeat, 0, settle_s=settle)
        diff = float(np.abs(t["native"][1] - t["fused"][1]).max())
        ratios = round_ratios(t["native"][2], t["fused"][2])
        parts.append(f"{how}: native {t['native'][0] * 1e3:.1f} ms, fused "
                     f"{t['fused'][0] * 1e3:.1f} ms"
                     + (f" (with a kernel that returns at once {t['floor'][0] * 1e3:.1f} ms)"
                        if "floor" in t else "")
                     + f", native / fused {ratios[len(ratios) // 2]:.2f}x "
                       f"({ratios[0]:.2f}-{ratios[-1]:.2f})")
    return "; ".join(parts) + f" (median of {repeat} rounds; max |diff| {diff:.2g})"


def profiled_nodes(model, so, feed: dict, runs: int, prefix: str) -> list[dict]:
    """onnxruntime's profiler on ``model`` (session options ``so``): ``runs`` + 1 runs on
    ``feed``, each followed by ``SETTLE_S``; the node kernel events of the last ``runs`` (the
    first warms up), their profile written under ``prefix``."""
    import json
    import time

    import onnxruntime as ort

    so.enable_profiling = True
    so.profile_file_prefix = prefix
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    for _ in range(runs + 1):
        sess.run(None, feed)
        time.sleep(SETTLE_S)
    with open(sess.end_profiling()) as f:
        events = [e for e in json.load(f) if e.get("cat") == "Node"
                  and e["name"].endswith("_kernel_time")]
    return events[len(events) // (runs + 1):]


def profile(out: str, opsets: list[int], runs: int = 3, kinds=tuple(CONFIGS)) -> None:
    """onnxruntime's profiler on each whole model, native and converted: the milliseconds per
    run of each RoI stage's nodes (those named under /roi_heads/{box,mask,keypoint}_pooler:
    the native stage, or the fused node and what stays of the stage) against all nodes. A
    pause after each run (``SETTLE_S``) keeps one session's spinning threads out of the
    other's runs."""
    import onnx
    import onnxruntime as ort

    import ort_roi

    feed = {"image": image().numpy()}
    poolers = ("box", "mask", "keypoint")
    for path in models(out, opsets, kinds):
        native = onnx.load(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conv = ort_roi.convert(native)
        row = {}
        for name, model, so in (("native", native, ort.SessionOptions()),
                                ("converted", conv, ort_roi.session_options())):
            events = profiled_nodes(model, so, feed, runs, os.path.join(out, f"profile_{name}"))
            row[name] = {"all": sum(e["dur"] for e in events) / runs / 1e3}
            for h in poolers:
                row[name][h] = sum(e["dur"] for e in events if e["name"].startswith(
                    f"/roi_heads/{h}_pooler")) / runs / 1e3
        n, c = row["native"], row["converted"]
        stages = ", ".join(f"{h} native {n[h]:.1f} ms, converted {c[h]:.1f} ms "
                           f"({n[h] / c[h]:.2f}x)" for h in poolers if c[h])
        print(f"{os.path.basename(path)}: all nodes native {n['all']:.0f} ms, converted "
              f"{c['all']:.0f} ms; RoI stages: {stages} ({runs} runs each)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("stages", "bench", "models", "e2e", "profile"))
    p.add_argument("--out", default="/tmp/detectron2_onnx",
                   help="where the whole models go (models, e2e)")
    p.add_argument("--opsets", type=int, nargs="+", default=[11, 16])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--kinds", nargs="+", choices=tuple(CONFIGS), default=list(CONFIGS),
                   help="which detectors (models, e2e, profile)")
    p.add_argument("--reuse-freed-memory", action=ReuseFreedMemory,
                   help="ort_roi.reuse_freed_memory() first (bench, e2e, profile)")
    a = p.parse_args(argv)
    if a.what == "stages":
        write_stages()
    elif a.what == "bench":
        bench(a.repeat)
    elif a.what == "models":
        models(a.out, a.opsets, a.kinds)
    elif a.what == "e2e":
        e2e(a.out, a.opsets, a.repeat, a.kinds)
    else:
        profile(a.out, a.opsets, a.repeat, kinds=a.kinds)


if __name__ == "__main__":
    main()
