#!/usr/bin/env python3
"""Generate tests/goldens/tf2onnx_crop_and_resize.npz: tf2onnx's graphs of
tf.image.crop_and_resize and TensorFlow's outputs, so that tests/test_tensorflow.py checks
``ort-roi convert`` of them without TensorFlow.

    python -m tools.make_tf_graphs [--out tests/goldens]

Needs tensorflow and tf2onnx (pip install '.[tensorflow]': tensorflow-cpu 2.20, tf2onnx
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

    python -m tools.make_tf_graphs --bench [--data ort_roi/data]

writes instead the graphs that ``ort-roi bench``'s CropAndResize workloads (W9, W10) run as
peers, so that the bench needs neither TensorFlow nor tf2onnx: tf2onnx's graph of
tf.image.crop_and_resize (bilinear, extrapolation 0, float32; image, boxes and box_indices
of dynamic shape) at its default opset, as a Loop ("tf2onnx_crop_and_resize_loop_<crop>.onnx")
and with extra_opset com.microsoft ("..._contrib_<crop>.onnx"), one pair per crop side of
those workloads (tf2onnx writes the crop size as a constant).

    python -m tools.make_tf_graphs --layers [--out tests/goldens]

writes tests/goldens/tf2onnx_layers.npz: TF models of crop_and_resize followed by a layer
(``LAYERS``: a Conv2D SAME with bias and ReLU, a Conv2D VALID of stride 2, a 1x1 Conv2D, a
MaxPool SAME, a Conv2D SAME whose output is averaged away), each returning the crops and the
layer's output, exported by tf2onnx at opsets 11, 13 and 17 as a Loop ("<case>:loop<opset>")
and with extra_opset com.microsoft ("<case>:contrib<opset>"), with the inputs ("<case>:image",
"<case>:boxes", "<case>:box_indices") and TensorFlow's outputs ("<case>:crops",
"<case>:expected"): below opset 14 tf2onnx leaves the Loop form's layer half converted, and the
contrib form's at every opset converted from a wrong shape (graph/tensorflow/layers.py;
``repair_layers`` in graph/tensorflow/repair.py).
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from tests import crop_cases
from tools import tf_e2e

HERE = os.path.dirname(os.path.abspath(__file__))

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


#: The layer cases of ``--layers``: name -> (TF's layer over the crops, from seeded weights).
LAYER_OPSETS = (11, 13, 17)
LAYERS_NAME = "tf2onnx_layers.npz"
#: The crops of the layer cases: 7 x 6 of a 16-channel map (crop height, width and channels
#: all differ, so a layout read wrong cannot pass for the right one).
LAYER_CROP, LAYER_CHANNELS = (7, 6), 16


def layer_fn(case: str):
    """TF's layer of ``case`` over the crops [R, 7, 6, 16] (seeded weights)."""
    import tensorflow as tf

    rng = np.random.default_rng(sum(map(ord, case)))
    c = LAYER_CHANNELS

    def w(*shape):  # (a NumPy array: a constant of the traced graph, not a capture)
        return (rng.standard_normal(shape) / np.sqrt(np.prod(shape[:-1]))).astype(np.float32)

    if case == "conv_same":
        k, b = w(3, 3, c, 8), w(8)
        return lambda x: tf.nn.relu(tf.nn.bias_add(tf.nn.conv2d(x, k, 1, "SAME"), b))
    if case == "conv_valid_s2":
        k = w(3, 3, c, 8)
        return lambda x: tf.nn.conv2d(x, k, 2, "VALID")
    if case == "conv1x1_mean":
        k = w(1, 1, c, 8)
        return lambda x: tf.reduce_mean(tf.nn.conv2d(x, k, 1, "SAME"), [1, 2])
    if case == "maxpool_same":
        return lambda x: tf.nn.max_pool2d(x, 3, 2, "SAME")
    if case == "conv_same_mean":
        k = w(3, 3, c, 8)
        return lambda x: tf.reduce_mean(tf.nn.conv2d(x, k, 1, "SAME"), [1, 2])
    raise ValueError(case)


LAYERS = ("conv_same", "conv_valid_s2", "conv1x1_mean", "maxpool_same", "conv_same_mean")


def layer_model(case: str, opset: int, contrib: bool):
    """(tf2onnx's graph of crop_and_resize -> the case's layer, outputs (crops, layer), the
    tf.function). Inputs: image [N, H, W, 16], boxes [R, 4], box_indices [R]."""
    import tensorflow as tf
    import tf2onnx

    sig = (tf.TensorSpec([None, None, None, LAYER_CHANNELS], tf.float32, name="image"),
           tf.TensorSpec([None, 4], tf.float32, name="boxes"),
           tf.TensorSpec([None], tf.int32, name="box_indices"))
    layer = layer_fn(case)

    @tf.function(input_signature=sig)
    def f(image, boxes, box_indices):
        crops = tf.image.crop_and_resize(image, boxes, box_indices, list(LAYER_CROP))
        return tf.identity(crops, name="crops"), tf.identity(layer(crops), name="out")

    extra = [tf2onnx.utils.make_opsetid("com.microsoft", 1)] if contrib else None
    model, _ = tf2onnx.convert.from_function(f, input_signature=sig, opset=opset,
                                             extra_opset=extra)
    model.doc_string = ""
    return model, f


def layer_inputs() -> dict:
    """The layer cases' inputs: 2 images 12 x 15, 6 boxes (three ending at 1.0)."""
    rng = np.random.default_rng(20261126)
    image = (rng.integers(-64, 64, (2, 12, 15, LAYER_CHANNELS)) / 8).astype(np.float32)
    boxes = np.sort(rng.uniform(0, 1, (6, 2, 2)), axis=1)
    boxes = np.stack([boxes[:, 0, 0], boxes[:, 0, 1], boxes[:, 1, 0], boxes[:, 1, 1]], 1)
    boxes[::2, 2] = 1.0
    return dict(image=image, boxes=boxes.astype(np.float32),
                box_indices=np.array([0, 1, 1, 0, 0, 1], np.int32))


def write_layers(out: str) -> None:
    """tests/goldens/tf2onnx_layers.npz (``--layers``)."""
    import tensorflow as tf
    import tf2onnx

    arrays, inputs = {}, layer_inputs()
    for case in LAYERS:
        for opset in LAYER_OPSETS:
            for form, contrib in (("loop", False), ("contrib", True)):
                model, f = layer_model(case, opset, contrib)
                arrays[f"{case}:{form}{opset}"] = as_bytes(model)
        crops, expected = f(**inputs)
        for k, v in inputs.items():
            arrays[f"{case}:{k}"] = v
        arrays[f"{case}:crops"], arrays[f"{case}:expected"] = crops.numpy(), expected.numpy()
    arrays["meta"] = np.array(json.dumps(dict(tensorflow=tf.__version__,
                                              tf2onnx=tf2onnx.__version__,
                                              opsets=LAYER_OPSETS)))
    path = os.path.join(out, LAYERS_NAME)
    np.savez_compressed(path, **arrays)
    print(f"{path}: {len(LAYERS)} cases, {os.path.getsize(path)} bytes")


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
    ap.add_argument("--layers", action="store_true",
                    help="write tests/goldens/tf2onnx_layers.npz (crop_and_resize -> a layer) "
                         "into --out instead")
    args = ap.parse_args()
    if args.bench:
        write_bench_graphs(args.data)
        return
    if args.layers:
        write_layers(args.out)
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
