#!/usr/bin/env python3
"""A small TensorFlow two-stage detector, exported by tf2onnx and converted by ort-roi convert:
its outputs against TensorFlow's, and timed.

    python -m tools.tf_e2e [--repeat 20] [--images 2] [--size 256] [--opset 15] [--out DIR]

The model (Keras, random weights from a seed, no training): a conv backbone (stride 8, 64
channels), an RPN head (objectness and box deltas for 9 fixed anchors per cell), proposals:
the anchors clipped to [0, 1] (so many end at 1.0, as a detector's do; ``--decode`` moves
them by the deltas first), the top 300 per image by objectness,
``tf.image.crop_and_resize`` to 14 x 14, a 2 x 2 max pool and a box head (class scores,
per-class box deltas): what TF Object Detection API's Faster R-CNN does around its
crop_and_resize, small.

It is exported by tf2onnx (opset 15, its default, and ``--opset``) as a Loop over boxes and
with ``extra_opset com.microsoft`` (Transpose, com.microsoft::CropAndResize, Transpose), each
converted by ``ort-roi convert``; prints the largest difference from TensorFlow's outputs of
onnxruntime running each graph, absolute and relative to the output's largest value (the
converted ones must be within 1e-5 relative), then the median
time of each runner over ``--repeat`` interleaved rounds (TF eager and tf.function, the two
tf2onnx graphs, the two converted graphs), and an onnxruntime profile summary (time per op
type) of the Loop graph and of its conversion. Needs tensorflow and tf2onnx
(``pip install '.[tensorflow]'``). ``--out DIR`` keeps the .onnx files.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

ANCHORS_PER_CELL = 9
CLASSES = 5


def anchors(side: int, seed: int = 0) -> np.ndarray:
    """[side * side * 9, 4] fixed anchors [y1, x1, y2, x2] (normalized, cell-major: 3
    scales x 3 aspect ratios about each cell of a side x side map, centres jittered by a
    seeded fixed offset within the cell so that their float32 ends are not all of a few
    values)."""
    c = (np.arange(side, dtype=np.float64) + 0.5) / side
    cy, cx = np.meshgrid(c, c, indexing="ij")
    jitter = np.random.default_rng(seed).uniform(-0.5, 0.5, (2, 9, side, side)) / side
    out = []
    for k, (s, r) in enumerate((s, r) for s in (0.1, 0.25, 0.5) for r in (0.5, 1.0, 2.0)):
        h, w = s * np.sqrt(r), s / np.sqrt(r)
        y, x = cy + jitter[0, k], cx + jitter[1, k]
        out.append(np.stack([y - h / 2, x - w / 2, y + h / 2, x + w / 2], -1))
    return np.stack(out, 2).reshape(-1, 4).astype(np.float32)


def build(size: int = 256, channels: int = 64, crop: int = 14, top: int = 300,
          hidden: int = 256, seed: int = 0, method: str = "bilinear", decode: bool = False):
    """(the Keras model, the tf.function over it with a [None, size, size, 3] float32
    signature). Outputs: proposals [N * top, 4], class scores [N * top, CLASSES], box deltas
    [N * top, 4 * CLASSES]. The proposals are the fixed anchors (clipped), or with ``decode``
    the anchors moved by the RPN's deltas: then onnxruntime's Exp and convolutions, a few
    ulps off TensorFlow's, move box coordinates by an ulp, and a box ending at 1.0 whose
    other side moved can gain or lose TensorFlow's off-the-map last column (a difference of
    a whole column in the crops, whichever engine computes crop_and_resize exactly)."""
    import tensorflow as tf

    keras = tf.keras
    keras.utils.set_random_seed(seed)
    side = size // 8
    anchor_values = anchors(side)
    image = keras.Input([size, size, 3], name="image")
    x = image
    for k, c in enumerate((channels // 4, channels // 2, channels)):
        x = keras.layers.Conv2D(c, 3, strides=2, padding="same", activation="relu",
                                name=f"backbone{k}")(x)
    feat = x
    rpn = keras.layers.Conv2D(channels, 3, padding="same", activation="relu", name="rpn")(feat)
    logits = keras.layers.Conv2D(ANCHORS_PER_CELL, 1, name="objectness")(rpn)
    deltas = keras.layers.Conv2D(4 * ANCHORS_PER_CELL, 1, name="rpn_deltas")(rpn)

    class Proposals(keras.layers.Layer):
        """The fixed anchors clipped to [0, 1] (moved by the deltas when ``decode``), the
        top ``top`` per image by objectness, flattened with their image index."""

        def call(self, logits, deltas):
            n = tf.shape(logits)[0]
            anchor = tf.constant(anchor_values)  # (a constant of the graph, not a capture)
            score = tf.reshape(logits, [n, -1])
            boxes = tf.broadcast_to(anchor, [n, anchor_values.shape[0], 4])
            if decode:
                d = tf.reshape(deltas, [n, -1, 4]) * 0.1
                h = anchor[:, 2] - anchor[:, 0]
                w = anchor[:, 3] - anchor[:, 1]
                cy = anchor[:, 0] + 0.5 * h + d[..., 0] * h
                cx = anchor[:, 1] + 0.5 * w + d[..., 1] * w
                h = h * tf.exp(d[..., 2])
                w = w * tf.exp(d[..., 3])
                boxes = tf.stack([cy - 0.5 * h, cx - 0.5 * w, cy + 0.5 * h, cx + 0.5 * w], -1)
            boxes = tf.clip_by_value(boxes, 0.0, 1.0)
            _, idx = tf.math.top_k(score, top)
            boxes = tf.gather(boxes, idx, batch_dims=1)
            index = tf.repeat(tf.range(n, dtype=tf.int32), top)
            return tf.reshape(boxes, [-1, 4]), index

    class Crop(keras.layers.Layer):
        def call(self, feat, boxes, index):
            return tf.image.crop_and_resize(feat, boxes, index, [crop, crop], method=method)

    boxes, index = Proposals(name="proposals")(logits, deltas)
    crops = Crop(name="crop_and_resize")(feat, boxes, index)
    y = keras.layers.MaxPool2D(2, name="pool")(crops)
    y = keras.layers.Flatten(name="flatten")(y)
    y = keras.layers.Dense(hidden, activation="relu", name="fc")(y)
    scores = keras.layers.Dense(CLASSES, activation="softmax", name="cls")(y)
    box = keras.layers.Dense(4 * CLASSES, name="box")(y)
    model = keras.Model(image, [boxes, scores, box])
    sig = (tf.TensorSpec([None, size, size, 3], tf.float32, name="image"),)
    fn = tf.function(lambda image: model(image, training=False), input_signature=sig)
    return model, fn


def export(fn, opset: int | None, contrib: bool):
    """tf2onnx's graph of ``fn`` (contrib: extra_opset com.microsoft)."""
    import tf2onnx

    extra = [tf2onnx.utils.make_opsetid("com.microsoft", 1)] if contrib else None
    model, _ = tf2onnx.convert.from_function(fn, input_signature=fn.input_signature,
                                             opset=opset, extra_opset=extra)
    return model


def cli_convert(model, out_dir: str, name: str):
    """``ort-roi convert`` of ``model`` (the command line, as a user runs it); (the converted
    model, its report)."""
    import onnx

    src = os.path.join(out_dir, f"{name}.onnx")
    dst = os.path.join(out_dir, f"{name}.ort_roi.onnx")
    onnx.save(model, src)
    run = subprocess.run([sys.executable, "-m", "ort_roi", "convert", src, dst],
                         capture_output=True, text=True, check=True)
    return onnx.load(dst), (run.stdout + run.stderr).strip()


def profile_summary(path: str, runs: int, top: int = 8) -> str:
    """onnxruntime's profile (JSON) of ``runs`` runs summed per op type: 'op ms per run
    (share of all nodes' time)', largest first. A Loop's time includes its body's nodes',
    which are listed too (its share is not given)."""
    with open(path) as f:
        events = json.load(f)
    per: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e.get("name", "").endswith("_kernel_time"):
            op = e.get("args", {}).get("op_name", "?")
            per[op] = per.get(op, 0.0) + e["dur"] / 1e3 / runs
    total = sum(v for k, v in per.items() if k != "Loop") or 1.0
    rows = sorted(per.items(), key=lambda kv: -kv[1])[:top]
    return ", ".join(f"{op} {ms:.1f} " + ("(with its body's nodes)" if op == "Loop" else
                                          f"({ms / total:.0%})") for op, ms in rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--images", type=int, default=2)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--opset", type=int, default=15, help="tf2onnx's opset (its default: 15)")
    ap.add_argument("--method", default="bilinear", choices=("bilinear", "nearest"))
    ap.add_argument("--decode", action="store_true",
                    help="proposals decoded from the RPN's deltas (see build)")
    ap.add_argument("--out", default=None, help="keep the .onnx files here")
    args = ap.parse_args()
    import onnxruntime as ort
    import tensorflow as tf
    import tf2onnx

    import ort_roi
    from ort_roi.cli.bench_timing import time_together

    out_dir = args.out or tempfile.mkdtemp(prefix="tf_e2e_")
    os.makedirs(out_dir, exist_ok=True)
    model, fn = build(args.size, method=args.method, decode=args.decode)
    x = np.random.default_rng(1).uniform(0, 1, (args.images, args.size, args.size, 3)) \
        .astype(np.float32)
    tx = tf.constant(x)
    want = [t.numpy() for t in fn(tx)]
    at_one = float(np.mean((want[0][:, 2:] == 1.0).any(1)))
    print(f"tensorflow {tf.__version__}, tf2onnx {tf2onnx.__version__}, onnxruntime "
          f"{ort.__version__}, ort_roi {ort_roi.__version__}; {args.images} images "
          f"{args.size}x{args.size}, {want[0].shape[0]} proposals ({at_one:.0%} end at 1.0), "
          f"crop_and_resize 14x14 {args.method}, tf2onnx opset {args.opset}")
    cpu = ["CPUExecutionProvider"]
    quiet = ort.SessionOptions()
    quiet.log_severity_level = 3  # tf2onnx's contrib graph declares a wrong output shape
    graphs, sessions = {}, {}
    for form, contrib in (("Loop", False), ("contrib", True)):
        g = export(fn, args.opset, contrib)
        graphs[form] = g
        conv, said = cli_convert(g, out_dir, f"tf_e2e_{form}")
        print(f"ort-roi convert ({form}): {said.splitlines()[0] if said else ''}")
        graphs[f"{form} converted"] = conv
    for name, g in graphs.items():
        so = ort_roi.session_options() if "converted" in name else quiet
        sessions[name] = ort.InferenceSession(g.SerializeToString(), so, providers=cpu)
    feed = {sessions["Loop"].get_inputs()[0].name: x}
    top = [float(np.abs(w).max()) for w in want]
    print(f"{'runner':>18}  max |out - TF| / max |TF| (proposals, scores, deltas; max |TF|: "
          + ", ".join(f"{v:.3g}" for v in top) + ")")
    for name, s in sessions.items():
        got = s.run(None, feed)
        err = [float(np.abs(a - b).max()) if a.shape == b.shape else float("nan")
               for a, b in zip(got, want)]
        print(f"{name:>18}  " + ", ".join(f"{e:.3g} / {e / v:.2g}" for e, v in zip(err, top)))
        if "converted" in name and not args.decode:
            rel = max(e / v for e, v in zip(err, top))
            assert rel <= 1e-5, f"{name}: differs from TensorFlow by {rel:.3g} (relative)"
    runners = {"TF eager": lambda: model(tx, training=False),
               "TF function": lambda: fn(tx)}
    runners.update({name: (lambda s=s: s.run(None, feed)) for name, s in sessions.items()})
    t = {k: v[0] * 1e3 for k, v in time_together(runners, args.repeat).items()}
    base = t["Loop converted"]
    print(f"median of {args.repeat} interleaved runs (ms; x: / Loop converted)")
    for k, v in t.items():
        print(f"{k:>18} {v:8.1f}  {v / base:5.2f}x")
    for name in ("Loop", "Loop converted"):
        so = ort_roi.session_options() if "converted" in name else ort.SessionOptions()
        so.log_severity_level = 3
        so.enable_profiling = True
        so.profile_file_prefix = os.path.join(out_dir, name.replace(" ", "_"))
        s = ort.InferenceSession(graphs[name].SerializeToString(), so, providers=cpu)
        for _ in range(5):
            s.run(None, feed)
        print(f"profile {name} (ms per run, share of the nodes' time): "
              f"{profile_summary(s.end_profiling(), 5)}")


if __name__ == "__main__":
    main()
