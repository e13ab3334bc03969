#!/usr/bin/env python3
"""An R-FCN-style Paddle detector (position-sensitive RoI pooling) end to end: Paddle Inference
against onnxruntime running the model ``ort_roi.paddle_export`` wrote.

    pip install --no-deps paddledet==2.6.0   # with its imports, see tools/paddledet_e2e.py
    python -m tools.paddle_rfcn_e2e [--depth 50] [--k 7] [--size 480 640] [--seed 0]
                                    [--repeat 5] [--profile] [--out DIR] [--json FILE]

The model (R-FCN, Dai et al. 2016, with PaddleDetection's pieces; paddledet has no R-FCN):

- ``ppdet`` ResNet (depth 18/34/50/101, three stages: C4, stride 16, 256 or 1024 channels);
- ``ppdet`` RPNHead on C4 alone (AnchorGenerator sizes 32-512 x ratios 0.5/1/2, stride 16;
  generate_proposals with PaddleDetection's C4 settings: NMS 0.7, 6000 before it, 300 after:
  R-FCN's 300 RoIs), ``export_onnx`` as PaddleDetection exports for ONNX (one image);
- the position-sensitive head: a 1x1 conv to 512 channels and ReLU, then two 1x1 convs, to
  ``k*k*(num_classes+1)`` score maps and ``k*k*4`` class-agnostic box maps;
  ``paddle.vision.ops.psroi_pool`` of each (k x k bins, spatial_scale 1/16, ``boxes_num``
  from the RPN), averaged over the bins (the vote), softmax over the classes (background
  last, PaddleDetection's order);
- ``ppdet`` BBoxPostProcess: RCNNBox (deltas / [10, 10, 5, 5], class-agnostic boxes
  expanded to every class, clipped) and MultiClassNMS (0.05 / 0.5 / keep 100:
  multiclass_nms3), then ``get_pred`` (rescaled, clipped, empty boxes labelled -1).

Random weights seeded and made to carry a trained model's load (as tools/paddledet_e2e.py
does): the RPN's box regression zeroed (the proposals are anchors), its objectness x 0.1; on
the image the voted class logits scaled to std 1 and the voted deltas to std 0.5, the score
maps' biases -4 but class 1's +2 (one class wins each box, scores over 0.5-0.99, NMS sees
hundreds of boxes). Saved by ``paddle.jit.save`` (inputs image / im_shape / scale_factor,
as PaddleDetection's ``tools/export_model.py`` saves), twice: the detector (outputs
detections [K, 6] and their count) and a probe, the same weights with the proposals, their
count and both psroi_pool outputs fetched too. Each goes through ``ort_roi.paddle_export``
(generate_proposals -> ``ort_roi::GenerateProposals``, psroi_pool -> ``ort_roi::PSROIPool``,
multiclass_nms3 -> ONNX NonMaxSuppression) into a plain ``onnxruntime.InferenceSession`` with
``ort_roi.session_options()``, and Paddle Inference (CPU; oneDNN tried first, off when it
fails) runs the same program on the same image. Checked: detections equal (count, labels,
scores within 1e-4, boxes within 1e-4 + 1e-6 x the largest coordinate), the proposals and
counts equal, both psroi_pool outputs bit for bit. Timed in one process, interleaved (each
round in a fresh random order; the median of the rounds' ratios); ``--profile``:
onnxruntime's profile by op type.

The model is built by ``tests/paddle_models.py`` (``build_rfcn``: one definition, which the
tests run too), with paddledet 2.6.0's patches for Paddle 3.3.1 (its ``import_ppdet``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

# the model (built as the tests build it), its feeds and Paddle Inference's predictor
from tests.paddle_models import PROBE, build_rfcn, feeds, paddle_predictor
# the Faster R-CNN tool beside this one: its comparison, profile and timing
from tools import paddledet_e2e as fr

compare = fr.compare
profile = fr.profile



def compare_probe(got: list[np.ndarray], want: list[np.ndarray]) -> dict:
    """The probe's outputs, onnxruntime's (``got``) against Paddle's: detections as
    ``compare``; the proposals (as a set, within 1e-4) and their count equal; for the rest
    (psroi_pool outputs, the maps they pool) the largest difference: the backbone's convs
    round differently in the two runtimes, so the maps differ by float32 roundings, and two
    proposals whose RPN scores round apart may swap rows (``psroi_alone`` checks the op)."""
    out: dict = {"detections": compare(got[:2], want[:2])}
    for name, g, w in zip(PROBE, got[2:], want[2:]):
        out[name] = {"shape": list(w.shape), "max_diff": float(np.abs(
            g.astype(np.float64) - w).max(initial=0)) if g.shape == w.shape else None,
            "bitwise_equal": bool(g.shape == w.shape and g.dtype == w.dtype
                                  and np.array_equal(g, w))}
    g, w = got[2 + PROBE.index("rois")], want[2 + PROBE.index("rois")]
    if g.shape == w.shape:  # as sets: RPN scores that round apart may swap two proposals
        g, w = (r[np.lexsort(r.T[::-1])] for r in (g, w))
        out["rois"]["max_diff_as_set"] = float(np.abs(g - w).max(initial=0))
    out["equal"] = (out["detections"]["equal"] and out["rois_num"]["bitwise_equal"]
                    and out["rois"].get("max_diff_as_set", np.inf) <= 1e-4)
    return out


def psroi_alone(path: str, want: list[np.ndarray]) -> dict:
    """Each ``ort_roi::PSROIPool`` node of the exported probe (``path``), alone in a plain
    session, fed Paddle's maps, proposals and count: its output against Paddle's psroi_pool
    output, bit for bit.

    Args:
        path: the probe's ONNX model (``paddle_export``'s).
        want: Paddle Inference's probe outputs (``PROBE`` after the detections).

    Returns:
        {output name: {"bitwise_equal": bool, "max_diff": float}} per node (named by the
        probe output it computes: psroi_cls, psroi_box).
    """
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper

    import ort_roi

    model = onnx.load(path)
    fetched = dict(zip(PROBE, want[2:]))
    out = {}
    for node in model.graph.node:
        if node.domain != ort_roi.DOMAIN or node.op_type != "PSROIPool":
            continue
        oc = next(a.i for a in node.attribute if a.name == "output_channels")
        name = "psroi_cls" if fetched["psroi_cls"].shape[1] == oc else "psroi_box"
        x = fetched["cls_maps" if name == "psroi_cls" else "box_maps"]
        alone = onnx.NodeProto()
        alone.CopyFrom(node)
        alone.ClearField("input")
        alone.ClearField("output")
        alone.input.extend(["X", "rois", "rois_num"])
        alone.output.append("Y")
        graph = helper.make_graph(
            [alone], "psroi_pool_alone",
            [helper.make_tensor_value_info("X", TensorProto.FLOAT, None),
             helper.make_tensor_value_info("rois", TensorProto.FLOAT, None),
             helper.make_tensor_value_info("rois_num", TensorProto.INT32, None)],
            [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
        one = helper.make_model(graph, opset_imports=list(model.opset_import))
        sess = ort.InferenceSession(one.SerializeToString(), ort_roi.session_options())
        y = sess.run(None, {"X": x, "rois": fetched["rois"],
                            "rois_num": fetched["rois_num"].astype(np.int32)})[0]
        w = fetched[name]
        out[name] = {"bitwise_equal": bool(y.shape == w.shape and y.dtype == w.dtype
                                           and np.array_equal(y, w)),
                     "max_diff": float(np.abs(y.astype(np.float64) - w).max(initial=0))
                     if y.shape == w.shape else None}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=50, choices=(18, 34, 50, 101))
    ap.add_argument("--k", type=int, default=7, help="psroi_pool's bins per side")
    ap.add_argument("--classes", type=int, default=80)
    ap.add_argument("--size", type=int, nargs=2, default=(480, 640), metavar=("H", "W"))
    ap.add_argument("--seed", type=int, default=0, help="the weights' and the image's")
    ap.add_argument("--sizes", type=int, nargs="+", default=None, metavar="H W",
                    help="more images to compare on (pairs H W; seeds --seed + 1, ...)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--out", help="directory for the saved programs and the ONNX models")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    import onnxruntime as ort

    import ort_roi

    out = args.out or tempfile.mkdtemp(prefix="paddle_rfcn_e2e_")
    os.makedirs(out, exist_ok=True)
    size = tuple(args.size)
    t = time.perf_counter()
    prefixes = build_rfcn(os.path.join(out, f"rfcn_r{args.depth}_k{args.k}"), args.depth,
                          args.k, args.classes, seed=args.seed, calibrate=size)
    res: dict = {"model": f"R-FCN R{args.depth}-C4, psroi_pool {args.k}x{args.k}, "
                 f"{args.classes} classes", "build_s": round(time.perf_counter() - t, 1)}
    sessions, runs = {}, {}
    for name, prefix in zip(("detector", "probe"), prefixes):
        t = time.perf_counter()
        model = ort_roi.paddle_export(prefix, prefix + ".onnx", args.opset)
        res[f"{name}_export_s"] = round(time.perf_counter() - t, 1)
        res[f"{name}_ort_roi_nodes"] = sorted(
            n.op_type for n in model.graph.node if n.domain == ort_roi.DOMAIN)
        so = ort_roi.session_options()
        so.intra_op_num_threads = args.threads
        sessions[name] = ort.InferenceSession(prefix + ".onnx", so)
        run, why = paddle_predictor(prefix, True, args.threads)
        res[f"{name}_paddle_onednn"] = "on" if run else f"off (on fails: {why})"
        if run is None:
            run, why = paddle_predictor(prefix, False, args.threads)
            if run is None:
                raise SystemExit(f"Paddle Inference cannot run the {name}: {why}")
        runs[name] = run
    more = args.sizes or []
    if len(more) % 2:
        raise SystemExit("--sizes takes pairs H W")
    images = [(size, args.seed)] + [((more[i], more[i + 1]), args.seed + 1 + i // 2)
                                    for i in range(0, len(more), 2)]
    ok = True
    res["images"] = []
    for hw, seed in images:
        f = feeds(hw, seed)
        det = compare(sessions["detector"].run(None, f), runs["detector"](f))
        want = runs["probe"](f)
        probe = compare_probe(sessions["probe"].run(None, f), want)
        alone = psroi_alone(prefixes[1] + ".onnx", want)
        res["images"].append({"size": list(hw), "seed": seed, "detector": det,
                              "probe": probe, "psroi_alone": alone})
        ok = (ok and det["equal"] and probe["equal"] and len(alone) == 2
              and all(a["bitwise_equal"] for a in alone.values()))
    f = feeds(size, args.seed)
    sess, run = sessions["detector"], runs["detector"]
    res.update(fr.interleaved({"ort": lambda: sess.run(None, f), "paddle": lambda: run(f)},
                           args.repeat))
    if args.profile:
        res["ort_profile_ms"] = [(k, round(v, 2))
                                 for k, v in profile(prefixes[0] + ".onnx", f)[:12]]
    res["equal"] = ok
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
