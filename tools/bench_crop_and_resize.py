"""ort_roi's CropAndResize kernel against TensorFlow's tf.image.crop_and_resize, in one
process, interleaved (TF run, ort_roi run, ...; the median of each), on TF Object Detection
API-shaped workloads: NHWC maps, normalized boxes (clipped to [0, 1], as detections are),
bilinear. Prints one row per workload and checks the outputs are equal. "kernel": the
public kernel called directly (a fresh output array each call, as TF's); "session": the op
in an onnxruntime session (ort_roi.session_options(); the bridge reuses the kernel's output
buffer and onnxruntime copies it out).

    python tools/bench_crop_and_resize.py [--repeat 15] [--threads N]

Needs tensorflow (``pip install tensorflow-cpu``) next to ort_roi. TF uses its own thread
pool (all cores); ort_roi its kernel threads (ort_roi.set_num_threads).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

#: (image shape [N, H, W, C], boxes, crop side)
WORKLOADS = [((1, 64, 64, 256), 300, 14), ((2, 38, 50, 1024), 100, 7),
             ((2, 38, 50, 1024), 100, 14), ((2, 38, 50, 1024), 300, 7),
             ((2, 38, 50, 1024), 300, 14)]


def boxes_for(R: int, N: int, seed: int = 0):
    """Detection-like boxes: sides 0.05 to 0.6, clipped to [0, 1] (so some end at 1.0)."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(0, 1, (R, 2))
    s = rng.uniform(0.05, 0.6, (R, 2))
    b = np.clip(np.concatenate([c - s / 2, c + s / 2], 1), 0, 1).astype(np.float32)
    return b, (np.arange(R) % N).astype(np.int32)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="ort_roi kernel threads")
    ap.add_argument("--method", default="bilinear", choices=("bilinear", "nearest"))
    args = ap.parse_args()
    import tensorflow as tf

    import onnxruntime as ort

    import ort_roi
    from ort_roi.ops.crop_and_resize import SPEC, crop_and_resize

    if args.threads:
        ort_roi.set_num_threads(args.threads)
    print(f"tensorflow {tf.__version__}, {args.method}, median of {args.repeat} interleaved runs")
    print(f"{'image':>18} {'R':>4} {'crop':>5} {'TF ms':>8} {'kernel ms':>10} {'ratio':>6} "
          f"{'session ms':>10} {'ratio':>6}")
    for shape, R, crop in WORKLOADS:
        img = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        boxes, idx = boxes_for(R, shape[0])
        t_img, t_boxes, t_idx = tf.constant(img), tf.constant(boxes), tf.constant(idx)

        def run_tf():
            return tf.image.crop_and_resize(t_img, t_boxes, t_idx, [crop, crop],
                                            method=args.method).numpy()

        def run_ours():
            return crop_and_resize(img, boxes, idx, crop_height=crop, crop_width=crop,
                                   method=args.method)

        sess = ort.InferenceSession(_model(SPEC, crop, args.method).SerializeToString(),
                                    ort_roi.session_options(), providers=["CPUExecutionProvider"])

        def run_session():
            return sess.run(None, dict(image=img, boxes=boxes, box_indices=idx))[0]

        want = run_tf()
        for f in (run_ours, run_session):
            assert np.array_equal(want, f()), f"outputs differ on {shape} {R} {crop}"
        times = {run_tf: [], run_ours: [], run_session: []}
        for _ in range(args.repeat):
            for f in times:
                t0 = time.perf_counter()
                f()
                times[f].append(time.perf_counter() - t0)
        t_tf, t_k, t_s = (statistics.median(times[f]) * 1e3
                          for f in (run_tf, run_ours, run_session))
        print(f"{str(list(shape)):>18} {R:>4} {crop:>2}x{crop:<2} {t_tf:8.2f} {t_k:10.2f} "
              f"{t_tf / t_k:6.2f} {t_s:10.2f} {t_tf / t_s:6.2f}")


def _model(spec, crop: int, method: str):
    """One ort_roi::CropAndResize node over float32 image and boxes, int32 box indices."""
    from onnx import TensorProto, helper

    attrs = spec.resolve(dict(crop_height=crop, crop_width=crop, method=method))
    types = (TensorProto.FLOAT, TensorProto.FLOAT, TensorProto.INT32)
    inputs = [helper.make_tensor_value_info(n, t, None)
              for n, t in zip(("image", "boxes", "box_indices"), types)]
    node = helper.make_node("CropAndResize", [i.name for i in inputs], ["crops"],
                            domain="ort_roi", **attrs)
    graph = helper.make_graph([node], "crop", inputs,
                              [helper.make_tensor_value_info("crops", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("ort_roi", 1)],
                             ir_version=9)


if __name__ == "__main__":
    main()
