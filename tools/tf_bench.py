#!/usr/bin/env python3
"""tf.image.crop_and_resize as a TF user runs it after export: onnxruntime on tf2onnx 1.17's
graph (the Loop over boxes, and the com.microsoft::CropAndResize form), onnxruntime on that
graph converted by ``ort-roi convert`` (one ort_roi::CropAndResize node), and TensorFlow's
own op, in one process, interleaved (each runner once per round; the median of each), on
workloads shaped like TF Object Detection API's Faster R-CNN second stage.

    python -m tools.tf_bench [--repeat 15] [--opset 15] [--method bilinear] [--threads N]

Columns (ms): "TF" tf.image.crop_and_resize (eager, its CPU kernel); "Loop" and "contrib"
onnxruntime (default session options) running tf2onnx's graph at ``--opset`` (its default,
15); "conv" onnxruntime running the Loop graph converted (ort_roi.session_options()); the
contrib graph converted is the same single node (checked equal, not timed). Ratios: Loop /
conv, contrib / conv, TF / conv (> 1: the converted graph is faster). The last column is
the largest difference from TF of the tf2onnx graphs run natively (the converted graph
equals TF bit for bit: asserted). Boxes are detection-like (sides 0.05 to 0.6, clipped to
[0, 1]: a quarter end at 1.0). Needs tensorflow and tf2onnx (``pip install -e
'.[tensorflow]'``).
"""

from __future__ import annotations

import argparse
import os

import numpy as np

#: (image [N, H, W, C], boxes, crop side): TF OD API Faster R-CNN's maps (a 64 x 64 x 256
#: one, ResNet-101's 38 x 50 x 1024 for 2 images), 100 and 300 proposals, 7 x 7 and 14 x 14.
WORKLOADS = [(shape, r, crop) for shape in ((1, 64, 64, 256), (2, 38, 50, 1024))
             for r in (100, 300) for crop in (7, 14)]
NAMES = ("image", "boxes", "box_indices")


def boxes_for(R: int, N: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Detection-like boxes [R, 4] float32 (sides 0.05 to 0.6, clipped to [0, 1]) and their
    image indices [R] int32 (round robin)."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(0, 1, (R, 2))
    s = rng.uniform(0.05, 0.6, (R, 2))
    b = np.clip(np.concatenate([c - s / 2, c + s / 2], 1), 0, 1).astype(np.float32)
    return b, (np.arange(R) % N).astype(np.int32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--opset", type=int, default=15, help="tf2onnx's opset (its default: 15)")
    ap.add_argument("--method", default="bilinear", choices=("bilinear", "nearest"))
    ap.add_argument("--threads", type=int, default=None, help="ort_roi kernel threads")
    args = ap.parse_args()
    import onnxruntime as ort
    import tensorflow as tf

    import ort_roi
    from ort_roi.cli.bench_timing import time_together
    from tools.make_tf_graphs import tf2onnx_graph

    if args.threads:
        ort_roi.set_num_threads(args.threads)
    print(f"tensorflow {tf.__version__}, onnxruntime {ort.__version__}, ort_roi "
          f"{ort_roi.__version__}, {os.cpu_count()} cores; {args.method}, tf2onnx opset "
          f"{args.opset}; median of {args.repeat} interleaved runs (ms)")
    print(f"{'image':>18} {'R':>4} {'crop':>5} {'TF':>7} {'Loop':>7} {'contrib':>7} "
          f"{'conv':>7} {'L/c':>5} {'ct/c':>5} {'TF/c':>5}  max |tf2onnx - TF| (Loop, contrib)")
    cpu = ["CPUExecutionProvider"]
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3  # tf2onnx's contrib graph declares a wrong output shape
    for shape, R, crop in WORKLOADS:
        img = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        boxes, idx = boxes_for(R, shape[0])
        feed = dict(zip(NAMES, (img, boxes, idx)))
        t_img, t_boxes, t_idx = tf.constant(img), tf.constant(boxes), tf.constant(idx)
        graphs = {form: tf2onnx_graph(crop, crop, args.method, 0.0, args.opset, form == "contrib")
                  for form in ("Loop", "contrib")}
        converted = {form: ort_roi.convert(g) for form, g in graphs.items()}
        sessions = {form: ort.InferenceSession(g.SerializeToString(), quiet, providers=cpu)
                    for form, g in graphs.items()}
        ours = {form: ort.InferenceSession(g.SerializeToString(), ort_roi.session_options(),
                                           providers=cpu) for form, g in converted.items()}
        runners = {
            "TF": lambda: tf.image.crop_and_resize(t_img, t_boxes, t_idx, [crop, crop],
                                                   method=args.method).numpy(),
            "Loop": lambda: sessions["Loop"].run(None, feed)[0],
            "contrib": lambda: sessions["contrib"].run(None, feed)[0],
            "conv": lambda: ours["Loop"].run(None, feed)[0],
        }
        want = runners["TF"]()
        assert np.array_equal(runners["conv"](), want), f"converted differs from TF: {shape}"
        assert np.array_equal(ours["contrib"].run(None, feed)[0], want)
        diff = {k: float(np.abs(runners[k]() - want).max()) for k in ("Loop", "contrib")}
        t = {k: v[0] * 1e3 for k, v in time_together(runners, args.repeat).items()}
        c = t["conv"]
        print(f"{str(list(shape)):>18} {R:>4} {crop:>2}x{crop:<2} {t['TF']:7.1f} "
              f"{t['Loop']:7.1f} {t['contrib']:7.1f} {c:7.1f} {t['Loop'] / c:5.2f} "
              f"{t['contrib'] / c:5.2f} {t['TF'] / c:5.2f}  {diff['Loop']:.3g}, "
              f"{diff['contrib']:.3g}", flush=True)


if __name__ == "__main__":
    main()
