"""``ort-roi bench``'s CropAndResize workloads (W9, W10): TensorFlow Object Detection API's
Faster R-CNN second stage, tf.image.crop_and_resize of an NHWC map.

Ours is the ort_roi::CropAndResize node that ``ort-roi convert`` writes for both of tf2onnx's
forms, in a plain onnxruntime session (``session_options()``). Peers: onnxruntime (default
options) running tf2onnx 1.17's graph as a Loop over boxes and as
com.microsoft::CropAndResize between Transposes (ort_roi/data/tf2onnx_crop_and_resize_*.onnx,
written by ``tools/make_tf_graphs.py --bench`` from real tf2onnx, so that the bench needs
neither TensorFlow nor tf2onnx), and TensorFlow's own op (eager) when tensorflow is
importable. The tf2onnx graphs differ from TensorFlow (and from ours, which equals it bit for
bit) on boxes that end at 1.0: the bench reports their difference in its diff column.
"""

from __future__ import annotations

import importlib.util
from importlib import resources

import numpy as np
import onnx
import onnxruntime as ort

from ..graph.rewrite import convert
from ..runtime.session import session_options
from .bench_peers import Ours, cpu_session
from .bench_timing import Runner

OP = "CropAndResize"
#: The package's tf2onnx graphs (tools/make_tf_graphs.py BENCH_GRAPH).
GRAPH = "data/tf2onnx_crop_and_resize_{form}_{crop}.onnx"
#: Peer name -> tf2onnx graph form.
FORMS = {"ORT tf2onnx Loop": "loop", "ORT tf2onnx com.microsoft": "contrib"}
TF = "TF crop_and_resize"
#: Why a peer is missing, for the bench's log (a peer that is None was skipped).
NEEDS = {TF: "tensorflow is not installed: pip install '.[tensorflow]'"}
NAMES = ("image", "boxes", "box_indices")


def rows(name: str, w: dict) -> list[tuple[str, dict, str]]:
    """The bench's rows of a CropAndResize workload: one per (R, crop side) pair, named
    'W9_tf_crop_64 R100 7x7'."""
    return [(f"{name} R{r} {p}x{p}", dict(w, R=r, pooled=p), OP)
            for r in w["R"] for p in w["pooled"]]


def make_inputs(w: dict, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A row's inputs, as tools/tf_bench.py makes them.

    Args:
        w: the row: N, H, W, C, R.
        seed: the boxes' seed (the image's is seed + 1).

    Returns:
        image [N, H, W, C] float32 (standard normal), boxes [R, 4] float32 rows [y1, x1, y2, x2]
        (centres uniform in [0, 1], sides uniform in [0.05, 0.6], clipped to [0, 1]: about a
        quarter end at 1.0), box_indices [R] int32 (round robin over the images).
    """
    rng = np.random.default_rng(seed)
    c = rng.uniform(0, 1, (w["R"], 2))
    s = rng.uniform(0.05, 0.6, (w["R"], 2))
    boxes = np.clip(np.concatenate([c - s / 2, c + s / 2], 1), 0, 1).astype(np.float32)
    image = np.random.default_rng(seed + 1).standard_normal(
        (w["N"], w["H"], w["W"], w["C"])).astype(np.float32)
    return image, boxes, (np.arange(w["R"]) % w["N"]).astype(np.int32)


def tf2onnx_graph(form: str, crop: int) -> onnx.ModelProto:
    """tf2onnx 1.17's graph of crop_and_resize (bilinear, extrapolation 0, crop x crop) as
    shipped: form "loop" or "contrib"."""
    with resources.files("ort_roi").joinpath(GRAPH.format(form=form, crop=crop)).open("rb") as f:
        return onnx.load(f)


def _tensorflow(image, boxes, idx, crop: int) -> Runner | None:
    if importlib.util.find_spec("tensorflow") is None:
        return None
    import tensorflow as tf

    with tf.device("/CPU:0"):
        t = (tf.constant(image), tf.constant(boxes), tf.constant(idx))

    def run() -> np.ndarray:
        with tf.device("/CPU:0"):
            return tf.image.crop_and_resize(*t, [crop, crop]).numpy()
    return run


def cases(w: dict) -> tuple[Ours, dict[str, Runner | None]]:
    """Our runner and the peers' for one row.

    Args:
        w: the row (rows()).

    Returns:
        (ours: our node in a plain session, with its bridge floor (bench_peers.Ours),
        {peer name: runner, or None where its framework is not installed}).

    Raises:
        AssertionError: ``convert`` of the shipped Loop graph does not give our node's output.
    """
    crop = w["pooled"]
    image, boxes, idx = make_inputs(w)
    feed = dict(zip(NAMES, (image, boxes, idx)))
    ours = Ours(OP, feed, crop_height=crop, crop_width=crop, method="bilinear",
                extrapolation_value=0.0)
    graphs = {peer: tf2onnx_graph(form, crop) for peer, form in FORMS.items()}
    converted = cpu_session(convert(graphs["ORT tf2onnx Loop"]), session_options())
    if not np.array_equal(converted.run(None, feed)[0], ours()):  # a bug of ours: say so
        raise RuntimeError(f"ort-roi convert of tf2onnx's Loop graph differs from {OP} on {w}")
    quiet = ort.SessionOptions()
    quiet.intra_op_num_threads = 0
    quiet.log_severity_level = 3  # tf2onnx's contrib graph declares a wrong output shape
    peers: dict[str, Runner | None] = {}
    for peer, g in graphs.items():
        sess = cpu_session(g, quiet)
        peers[peer] = lambda sess=sess: sess.run(None, feed)[0]
    peers[TF] = _tensorflow(image, boxes, idx, crop)
    return ours, peers


def shape_line(w: dict) -> str:
    """``bench --help``'s description of a CropAndResize workload."""
    return (f"[{w['N']}, {w['H']}, {w['W']}, {w['C']}] NHWC map, R={'/'.join(map(str, w['R']))}, "
            f"{'/'.join(f'{p}x{p}' for p in w['pooled'])} crops")
