#!/usr/bin/env python3
"""A real exported model end to end: torchvision's Mask R-CNN through ``ort-roi convert``.

    python -m venv tvenv && tvenv/bin/pip install torch==2.14.1 torchvision==0.29.1 -e .
    tvenv/bin/python tools/maskrcnn_e2e.py [--size 480 640] [--repeat 5] [--out DIR]

Exports ``maskrcnn_resnet50_fpn(weights=None, weights_backbone=None)`` (random weights,
seeded; box_score_thresh=0 so that it keeps its 100 best detections) with
``torch.onnx.export(..., opset_version=17, dynamo=False)``, converts the graph with
``ort_roi.convert`` (its ONNX RoiAlign nodes become ort_roi::RoiAlign), runs the native and
the converted graph in onnxruntime on the same image and reports: the RoiAlign nodes
moved, the detections' largest difference (boxes, scores, labels, masks) and the
whole-model times (median of --repeat runs after a warm-up, both sessions in this process,
timed in turn). Not part of CI (torch is a large install).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import numpy as np


def export(path: str, size: tuple[int, int]) -> None:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.detection.maskrcnn_resnet50_fpn(
        weights=None, weights_backbone=None, box_score_thresh=0.0).eval()
    img = torch.rand(3, *size)
    torch.onnx.export(model, ([img],), path, opset_version=17, dynamo=False,
                      input_names=["image"],
                      output_names=["boxes", "labels", "scores", "masks"])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--size", type=int, nargs=2, default=(480, 640), metavar=("H", "W"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--out", default="bench-out")
    args = ap.parse_args()

    import onnx
    import onnxruntime as ort

    import ort_roi

    os.makedirs(args.out, exist_ok=True)
    native_path = os.path.join(args.out, "maskrcnn.onnx")
    conv_path = os.path.join(args.out, "maskrcnn_ort_roi.onnx")
    t = time.perf_counter()
    export(native_path, tuple(args.size))
    print(f"exported {native_path} in {time.perf_counter() - t:.0f} s")
    model = onnx.load(native_path)
    nodes = [n for n in model.graph.node if n.op_type == "RoiAlign"]
    converted = ort_roi.convert(model)
    moved = [n for n in converted.graph.node if n.domain == ort_roi.DOMAIN]
    onnx.save(converted, conv_path)
    print(f"{len(model.graph.node)} nodes, {len(nodes)} RoiAlign "
          f"({sorted({helper_attr(n, 'coordinate_transformation_mode') for n in nodes})}, "
          f"sampling_ratio {sorted({helper_attr(n, 'sampling_ratio') for n in nodes})}); "
          f"{len(moved)} moved to ort_roi::RoiAlign")

    rng = np.random.default_rng(0)
    image = rng.random((3, *args.size), dtype=np.float32)
    native = ort.InferenceSession(native_path, providers=["CPUExecutionProvider"])
    ours = ort.InferenceSession(conv_path, ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    feed = {native.get_inputs()[0].name: image}
    a, b = native.run(None, feed), ours.run(None, feed)
    names = [o.name for o in native.get_outputs()]
    diffs = {n: float(np.abs(x.astype(np.float64) - y).max()) if x.size else 0.0
             for n, x, y in zip(names, a, b)}
    shapes = {n: list(x.shape) for n, x in zip(names, a)}
    times = {"native": [], "ort_roi": []}
    for _ in range(args.repeat):
        for key, sess in (("native", native), ("ort_roi", ours)):
            t = time.perf_counter()
            sess.run(None, feed)
            times[key].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    result = dict(size=list(args.size), nodes=len(model.graph.node), roi_align=len(nodes),
                  moved=len(moved), shapes=shapes, max_abs_diff=diffs,
                  median_s=med, runs_s=times, onnxruntime=ort.__version__,
                  ort_roi=ort_roi.__version__)
    print(json.dumps(result, indent=1))
    print(f"whole model: native {med['native'] * 1e3:.0f} ms, converted "
          f"{med['ort_roi'] * 1e3:.0f} ms (native / converted {med['native'] / med['ort_roi']:.2f}x); "
          f"largest difference {max(diffs.values()):.2g}")
    with open(os.path.join(args.out, "maskrcnn_e2e.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


def helper_attr(node, name):
    from onnx import helper

    for a in node.attribute:
        if a.name == name:
            v = helper.get_attribute_value(a)
            return v.decode() if isinstance(v, bytes) else v
    return None


if __name__ == "__main__":
    sys.exit(main())
