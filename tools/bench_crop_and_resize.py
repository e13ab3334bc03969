"""ort_roi's CropAndResize kernel against TensorFlow's tf.image.crop_and_resize, in one
process, interleaved (TF run, ort_roi run, ...; the median of each), on TF Object Detection
API-shaped workloads: NHWC maps, normalized boxes (a quarter ending at 1.0, as clipped
detections do), bilinear. Prints one row per workload and checks the outputs are equal.

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

    import ort_roi
    from ort_roi.ops.crop_and_resize import crop_and_resize

    if args.threads:
        ort_roi.set_num_threads(args.threads)
    print(f"tensorflow {tf.__version__}, {args.method}, median of {args.repeat} interleaved runs")
    print(f"{'image':>18} {'R':>4} {'crop':>5} {'TF ms':>8} {'ort_roi ms':>10} {'ratio':>6}")
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

        want, got = run_tf(), run_ours()
        assert np.array_equal(want, got), f"outputs differ on {shape} {R} {crop}"
        times = {run_tf: [], run_ours: []}
        for _ in range(args.repeat):
            for f in times:
                t0 = time.perf_counter()
                f()
                times[f].append(time.perf_counter() - t0)
        t_tf, t_us = (statistics.median(times[f]) * 1e3 for f in (run_tf, run_ours))
        print(f"{str(list(shape)):>18} {R:>4} {crop:>2}x{crop:<2} {t_tf:8.2f} {t_us:10.2f} "
              f"{t_tf / t_us:6.2f}")


if __name__ == "__main__":
    main()
