#!/usr/bin/env python3
"""Generate tests/goldens/tf2onnx_crop_and_resize.npz: tf2onnx's graphs of
tf.image.crop_and_resize and TensorFlow's outputs, so that tests/test_tensorflow.py checks
``ort-roi convert`` of them without TensorFlow.

    python tools/make_tf_graphs.py [--out tests/goldens]

Needs tensorflow and tf2onnx (pip install -e '.[tensorflow]': tensorflow-cpu 2.20, tf2onnx
1.17). For each case of tests/crop_cases.py: its inputs ("name:image", "name:boxes",
"name:box_indices"), TensorFlow's output ("name:expected"), and tf2onnx's graph of
crop_and_resize with the case's attributes and image dtype, as a Loop ("name:loop") and with
extra_opset com.microsoft ("name:contrib"), serialized, at the opset "name:opset" (the cases
take 11, 13, 15 (tf2onnx's default), 17 and 18 in turn). And a small two-stage model
(tools/tf_e2e.py's, 64 x 64 images, 32 proposals per image (seed 7: one box's last column
is off the map in TF's arithmetic), 14 x 14 crops; bilinear and nearest), exported in both
forms at tf2onnx's default opset: "model_<method>:loop", "model_<method>:contrib", its
input "model_<method>:image" and TensorFlow's outputs "model_<method>:expected<k>". "meta"
holds the versions (JSON).

    python tools/make_tf_graphs.py --bench [--data ort_roi/data]

writes instead the graphs that ``ort-roi bench``'s CropAndResize workloads (W9, W10) run as
peers, so that the bench needs neither TensorFlow nor tf2onnx: tf2onnx's graph of
tf.image.crop_and_resize (bilinear, extrapolation 0, float32; image, boxes and box_indices
of dynamic shape) at its default opset, as a Loop ("tf2onnx_crop_and_resize_loop_<crop>.onnx")
and with extra_opset com.microsoft ("..._contrib_<crop>.onnx"), one pair per crop side of
those workloads (tf2onnx writes the crop size as a constant).
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))
sys.path.insert(0, HERE)

import crop_cases  # noqa: E402
import tf_e2e  # noqa: E402

#: The opsets the cases take in turn (tf2onnx 1.17 writes crop_and_resize from 11 to 18).
OPSETS = (11, 13, 15, 17, 18)
NAME = "tf2onnx_crop_and_resize.npz"
#: The bench's graph files in ort_roi/data (ort_roi.cli.bench_crop reads them by this name).
BENCH_GRAPH = "tf2onnx_crop_and_resize_{form}_{crop}.onnx"


def tf2onnx_graph(crop_height: int, crop_width: int, method: str, extrapolation_value: float,
                  opset: int | None, contrib: bool, image_dtype=np.float32):
    """tf2onnx's graph of tf.image.crop_and_resize over inputs image [N, H, W, C] (of
    ``image_dtype``), boxes [R, 4] float32, box_indices [R] int32 (all dims dynamic)."""
    import tensorflow as tf
    import tf2onnx

    sig = (tf.TensorSpec([None, None, None, None], tf.as_dtype(image_dtype), name="image"),
           tf.TensorSpec([None, 4], tf.float32, name="boxes"),
           tf.TensorSpec([None], tf.int32, name="box_indices"))

    @tf.function(input_signature=sig)
    def f(image, boxes, box_indices):
        return tf.image.crop_and_resize(image, boxes, box_indices, [crop_height, crop_width],
                                        method=method, extrapolation_value=extrapolation_value)

    extra = [tf2onnx.utils.make_opsetid("com.microsoft", 1)] if contrib else None
    model, _ = tf2onnx.convert.from_function(f, input_signature=sig, opset=opset,
                                             extra_opset=extra)
    return model


def small_model(method: str):
    """(the tf.function of tools/tf_e2e.py's model, small), its input."""
    _, fn = tf_e2e.build(size=64, channels=8, crop=14, top=32, hidden=8, seed=7, method=method)
    x = (np.random.default_rng(2).integers(0, 16, (2, 64, 64, 3)) / 16).astype(np.float32)
    return fn, x


def as_bytes(model) -> np.ndarray:
    return np.frombuffer(model.SerializeToString(), np.uint8)


def write_bench_graphs(data: str) -> None:
    """tf2onnx's Loop and contrib graphs for each crop side of the bench's CropAndResize
    workloads, into ``data`` (ort_roi/data)."""
    with open(os.path.join(data, "workloads.json")) as f:
        crops = sorted({c for k, w in json.load(f).items()
                        if not k.startswith("_") and "CropAndResize" in w["ops"]
                        for c in w["pooled"]})
    for crop in crops:
        for form, contrib in (("loop", False), ("contrib", True)):
            model = tf2onnx_graph(crop, crop, "bilinear", 0.0, None, contrib)
            model.doc_string = ""
            path = os.path.join(data, BENCH_GRAPH.format(form=form, crop=crop))
            with open(path, "wb") as f:
                f.write(model.SerializeToString())
            print(f"{path}: opset {model.opset_import[0].version}, {model.producer_name} "
                  f"{model.producer_version}, {os.path.getsize(path)} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "goldens"))
    ap.add_argument("--bench", action="store_true",
                    help="write the bench's tf2onnx graphs into --data instead")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "ort_roi", "data"))
    args = ap.parse_args()
    if args.bench:
        write_bench_graphs(args.data)
        return
    import tensorflow as tf
    import tf2onnx

    arrays = {}
    for k, case in enumerate(crop_cases.cases()):
        n, a, inputs = case["name"], case["attrs"], case["inputs"]
        opset = OPSETS[k % len(OPSETS)]
        with tf.device("/CPU:0"):
            expected = tf.image.crop_and_resize(
                inputs["image"], inputs["boxes"], inputs["box_indices"],
                [a["crop_height"], a["crop_width"]], method=a["method"],
                extrapolation_value=a["extrapolation_value"]).numpy()
        for key, v in inputs.items():
            arrays[f"{n}:{key}"] = v
        arrays[f"{n}:expected"] = expected
        arrays[f"{n}:opset"] = np.array(opset)
        for form, contrib in (("loop", False), ("contrib", True)):
            arrays[f"{n}:{form}"] = as_bytes(tf2onnx_graph(
                a["crop_height"], a["crop_width"], a["method"], a["extrapolation_value"],
                opset, contrib, inputs["image"].dtype))
    for method in ("bilinear", "nearest"):
        fn, x = small_model(method)
        key = f"model_{method}"
        arrays[f"{key}:image"] = x
        for i, t in enumerate(fn(tf.constant(x))):
            arrays[f"{key}:expected{i}"] = t.numpy()
        for form, contrib in (("loop", False), ("contrib", True)):
            arrays[f"{key}:{form}"] = as_bytes(tf_e2e.export(fn, None, contrib))
    arrays["meta"] = np.array(json.dumps(dict(tensorflow=tf.__version__,
                                              tf2onnx=tf2onnx.__version__, opsets=OPSETS)))
    path = os.path.join(args.out, NAME)
    np.savez_compressed(path, **arrays)
    print(f"{path}: {len(crop_cases.cases())} cases and 2 models, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
