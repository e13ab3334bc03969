"""ort_roi's CropAndResize against TensorFlow's tf.image.crop_and_resize and against
onnxruntime running tf2onnx's translations of it, in one process, interleaved (each runner
once per round; the median of each), on TF Object Detection API-shaped workloads: NHWC maps,
normalized boxes (clipped to [0, 1], as detections are). Checks the outputs first: ort_roi's
equal TensorFlow's bit for bit; the tf2onnx forms' largest difference is printed.

    python -m tools.bench_crop_and_resize [--repeat 15] [--threads N] [--method nearest]

Columns (ms): "TF" tf.image.crop_and_resize (eager, its CPU kernel, a fresh output each
call); "kernel" ort_roi's public kernel called directly (a fresh output each call);
"session" the ort_roi::CropAndResize node in an onnxruntime session
(ort_roi.session_options(); the bridge reuses the kernel's output buffer, onnxruntime copies it
out); "Loop" and "contrib" onnxruntime (default options) running tf2onnx 1.17's graph at
opset 17, as a Loop over boxes and with extra_opset com.microsoft (Transpose,
com.microsoft::CropAndResize, Transpose). Ratios are TF / kernel and Loop / session,
contrib / session (> 1: ort_roi faster).

Needs tensorflow and tf2onnx (``pip install '.[tensorflow]'``) next to ort_roi. TF uses
its own thread pool, ort_roi its kernel threads (ort_roi.set_num_threads).
"""

from __future__ import annotations

import argparse

import numpy as np

# the model of one node, as the tests build it
from tests.crop_cases import crop_model

#: (image shape [N, H, W, C], boxes, crop side)
WORKLOADS = [((1, 64, 64, 256), 300, 14), ((2, 38, 50, 1024), 100, 7),
             ((2, 38, 50, 1024), 100, 14), ((2, 38, 50, 1024), 300, 7),
             ((2, 38, 50, 1024), 300, 14)]
NAMES = ("image", "boxes", "box_indices")


def boxes_for(R: int, N: int, seed: int = 0):
    """Detection-like boxes: sides 0.05 to 0.6, clipped to [0, 1] (so some end at 1.0)."""
    rng = np.random.default_rng(seed)
    c = rng.uniform(0, 1, (R, 2))
    s = rng.uniform(0.05, 0.6, (R, 2))
    b = np.clip(np.concatenate([c - s / 2, c + s / 2], 1), 0, 1).astype(np.float32)
    return b, (np.arange(R) % N).astype(np.int32)


def tf2onnx_model(crop: int, method: str, contrib: bool):
    """tf2onnx's graph of tf.image.crop_and_resize at opset 17 (contrib: com.microsoft)."""
    import tensorflow as tf
    import tf2onnx

    sig = (tf.TensorSpec([None, None, None, None], tf.float32, name="image"),
           tf.TensorSpec([None, 4], tf.float32, name="boxes"),
           tf.TensorSpec([None], tf.int32, name="box_indices"))

    @tf.function(input_signature=sig)
    def f(image, boxes, box_indices):
        return tf.image.crop_and_resize(image, boxes, box_indices, [crop, crop], method=method)

    extra = [tf2onnx.utils.make_opsetid("com.microsoft", 1)] if contrib else None
    model, _ = tf2onnx.convert.from_function(f, input_signature=sig, opset=17,
                                             extra_opset=extra)
    return model


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="ort_roi kernel threads")
    ap.add_argument("--method", default="bilinear", choices=("bilinear", "nearest"))
    args = ap.parse_args()
    import onnxruntime as ort
    import tensorflow as tf

    import ort_roi
    from ort_roi.cli.bench_timing import time_together
    from ort_roi.ops.crop_and_resize import crop_and_resize

    if args.threads:
        ort_roi.set_num_threads(args.threads)
    print(f"tensorflow {tf.__version__}, onnxruntime {ort.__version__}, {args.method}, "
          f"median of {args.repeat} interleaved runs (ms)")
    print(f"{'image':>18} {'R':>4} {'crop':>5} {'TF':>7} {'kernel':>7} {'TF/k':>5} "
          f"{'session':>7} {'Loop':>7} {'L/s':>5} {'contrib':>7} {'c/s':>5}  max |tf2onnx - TF|")
    cpu = ["CPUExecutionProvider"]
    for shape, R, crop in WORKLOADS:
        img = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
        boxes, idx = boxes_for(R, shape[0])
        feed = dict(zip(NAMES, (img, boxes, idx)))
        t_img, t_boxes, t_idx = tf.constant(img), tf.constant(boxes), tf.constant(idx)
        ours = ort.InferenceSession(crop_model(np.float32, np.float32, np.int32,
                                               crop_height=crop, crop_width=crop,
                                               method=args.method).SerializeToString(),
                                    ort_roi.session_options(), providers=cpu)
        quiet = ort.SessionOptions()
        quiet.log_severity_level = 3  # tf2onnx's contrib graph declares a wrong output shape
        loop, contrib = (ort.InferenceSession(tf2onnx_model(crop, args.method, c)
                                              .SerializeToString(), quiet, providers=cpu)
                         for c in (False, True))
        runners = {
            "TF": lambda: tf.image.crop_and_resize(t_img, t_boxes, t_idx, [crop, crop],
                                                   method=args.method).numpy(),
            "kernel": lambda: crop_and_resize(img, boxes, idx, crop_height=crop,
                                              crop_width=crop, method=args.method),
            "session": lambda: ours.run(None, feed)[0],
            "Loop": lambda: loop.run(None, feed)[0],
            "contrib": lambda: contrib.run(None, feed)[0],
        }
        want = runners["TF"]()
        for k in ("kernel", "session"):
            assert np.array_equal(want, runners[k]()), f"{k} differs from TF on {shape} {R}"
        diff = {k: float(np.abs(runners[k]() - want).max()) for k in ("Loop", "contrib")}
        t = {k: v[0] * 1e3 for k, v in time_together(runners, args.repeat).items()}
        print(f"{str(list(shape)):>18} {R:>4} {crop:>2}x{crop:<2} {t['TF']:7.1f} "
              f"{t['kernel']:7.1f} {t['TF'] / t['kernel']:5.2f} {t['session']:7.1f} "
              f"{t['Loop']:7.1f} {t['Loop'] / t['session']:5.2f} {t['contrib']:7.1f} "
              f"{t['contrib'] / t['session']:5.2f}  Loop {diff['Loop']:.3g}, "
              f"contrib {diff['contrib']:.3g}")


if __name__ == "__main__":
    main()
