#!/usr/bin/env python3
"""PaddleDetection's Faster R-CNN FPN (and Mask R-CNN, Cascade R-CNN, Cascade Mask R-CNN FPN) end
to end: Paddle Inference against onnxruntime running the model ``ort-roi export-paddle`` wrote.

    pip install --no-deps paddledet==2.6.0
    pip install pyyaml typeguard tqdm scipy shapely terminaltables pycocotools \\
        opencv-python-headless requests six matplotlib scikit-learn pandas  # -c your pins
    python -m tools.paddledet_e2e [--arch faster_rcnn|mask_rcnn|cascade_rcnn|cascade_mask_rcnn]
                                  [--depth 50] [--size 480 640]
                                  [--repeat 5] [--profile] [--probe] [--images N]
                                  [--out DIR] [--json FILE]

The model is built from ``ppdet.modeling`` with PaddleDetection's faster_rcnn_r50_fpn_1x_coco
settings (ResNet depth 18/34/50, FPN 256, RPN 5 levels, 1000 proposals, RoIAlign 7x7 aligned
adaptive sampling, TwoFCHead 1024, MultiClassNMS 0.05 / 0.5 / keep 100), random weights
seeded and made to carry a trained model's load (as tools/torchvision_e2e.py does: the RPN's
box regression zeroed so that the proposals are anchors of every size on every level, its
objectness x 0.1; the box classifier's weights x 0.1 and biases -4 but class 1 at +2, so one
class wins each box with scores spread over 0.5-0.99 (not ~1 - 1e-5, where float32 ties
decide which 100 are kept) and NMS sees about a thousand boxes; the script's default then
scales the class logits to std 1 and the box deltas to std 0.5 on the image, since a deeper
random backbone's features reach 1e3-1e4: without it R50's box head saturates, its softmax
ties near 1 - 1e-7 and its deltas of ~30 decode into hundreds of zero-area boxes;
``--no-calibrate`` keeps the fixed load). ``--arch mask_rcnn`` builds PaddleDetection's
mask_rcnn_r50_fpn_1x_coco on the same pieces (``MASK_CONFIG``: MaskHead with MaskFeat 4 x conv
256 + deconv on RoIAlign 14 x 14 of the final boxes through the FPN levels, per-class 28 x 28
mask logits, MaskPostProcess pasting the label's sigmoid onto the image with grid_sample and
thresholding it at 0.5; outputs bbox, bbox_num, mask [K, H, W] int32); its calibration also
sets each class's mask logits to mean 0 and std 2 on the image, so that every mask crosses 0.5.
``--arch cascade_rcnn`` builds cascade_rcnn_r50_fpn_1x_coco (``CASCADE_CONFIG``: CascadeHead's
three stages, each a CascadeTwoFCHead on RoIAlign 7 x 7 of the previous stage's boxes through
the FPN levels; each stage's classifier and regressor get the load above, calibrated stage by
stage), ``cascade_mask_rcnn`` adds Mask R-CNN's mask head and paste on its final boxes.
Either is saved as PaddleDetection's
``tools/export_model.py ... export_onnx=True`` saves it (``paddle.jit.save`` of the traced
model, inputs image / im_shape / scale_factor, one image; PaddleDetection's documented route
to ONNX). Then:

1. ``ort_roi.paddle_export`` (paddle2onnx in a child process; generate_proposals,
   distribute_fpn_proposals and roi_align written as ort_roi nodes, multiclass_nms3 as ONNX
   NonMaxSuppression), run by a plain ``onnxruntime.InferenceSession`` with
   ``ort_roi.session_options()``;
2. Paddle Inference (``paddle.inference``, CPU; oneDNN off: with it on, Paddle 3.3.1 fails on
   this program, "ConvertPirAttribute2RuntimeAttribute not support
   [pir::ArrayAttribute<pir::DoubleAttribute>]", which the script reports);

checks that the detections are equal (same count and labels, scores within 1e-4, boxes
within 1e-4 + 1e-6 x the largest coordinate: at 512-1024 a float32 ulp is 6.1e-5), counts
the mask pixels that differ (with ``--probe``, ``mask_probe``: both models' masks before the
threshold, how far from 0.5 Paddle's value is where they differ), and times
both in one process, interleaved (each round in a fresh random order; the median of the
rounds' ratios), with ``--profile`` onnxruntime's profile by op type.

The models are built by ``tests/paddle_models.py`` (``build``, ``feeds``,
``paddle_predictor``: one definition, which the tests run too); paddledet 2.6.0 needs four
patches under Paddle 3.3.1, which its ``import_ppdet`` applies (in this process, to copies of
the functions; the installed package is not touched) and its doc lists.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

# the models (built as the tests build them) and Paddle Inference's predictor
from tests.paddle_models import ARCHS, MASKED, build, feeds, paddle_predictor

TITLES = {"faster_rcnn": "Faster R-CNN", "mask_rcnn": "Mask R-CNN",
          "cascade_rcnn": "Cascade R-CNN", "cascade_mask_rcnn": "Cascade Mask R-CNN"}


def compare(got: list[np.ndarray], want: list[np.ndarray]) -> dict:
    """Detections [K, 6] (label, score, box) and their count: equal count and labels,
    differences of scores and boxes (equal: scores within 1e-4, boxes within 1e-4 + 1e-6 x
    the largest coordinate, a few float32 ulps where coordinates pass 512)."""
    g, w = got[0], want[0]
    out = {"count_ours": int(got[1].sum()), "count_paddle": int(want[1].sum()),
           "rows": [int(g.shape[0]), int(w.shape[0])]}
    if g.shape == w.shape:
        out["labels_equal"] = bool(np.array_equal(g[:, 0], w[:, 0]))
        out["max_score_diff"] = float(np.abs(g[:, 1] - w[:, 1]).max(initial=0))
        d = np.abs(g[:, 2:] - w[:, 2:])
        out["max_box_diff"] = float(d.max(initial=0))
        # in float32 ulps of Paddle's coordinate (at 512-1024 one ulp is 6.1e-5)
        ulp = np.spacing(np.abs(w[:, 2:]).astype(np.float32))
        out["max_box_diff_ulps"] = float((d / ulp).max(initial=0))
    out["equal"] = (out["count_ours"] == out["count_paddle"] and g.shape == w.shape
                    and out["labels_equal"] and out["max_score_diff"] <= 1e-4
                    and out["max_box_diff"] <= 1e-4 + 1e-6 * float(np.abs(w[:, 2:]).max()))
    if len(got) > 2 and len(want) > 2:  # Mask R-CNN's masks [K, H, W] int32 0/1
        out["mask_shapes"] = [list(got[2].shape), list(want[2].shape)]
        if got[2].shape == want[2].shape:
            out["mask_pixels"] = int(want[2].size)
            out["mask_foreground_paddle"] = int((want[2] != 0).sum())
            out["mask_pixels_differ"] = int((got[2] != want[2]).sum())
        else:
            out["equal"] = False
    return out


def mask_probe(prefix: str, onnx_path: str, f: dict[str, np.ndarray], work: str,
               threads: int = 1, reference: list[np.ndarray] | None = None) -> dict:
    """Mask R-CNN's masks before the 0.5 threshold (MaskPostProcess's grid_sample result, [K,
    1, H, W] float32; and the mask head's sigmoid [K, 28, 28] it pastes) from both: Paddle
    Inference on the program re-saved with them as outputs, onnxruntime on the model with the
    GridSample's and the Sigmoid's results as outputs. Returns the largest
    difference of those values, the pixels whose thresholded values differ, how far from 0.5
    Paddle's value is at each (largest), and how many pixels lie within the largest
    difference of 0.5 (where float noise may flip one either way). ``reference``: Paddle
    Inference's outputs of the program itself, which the re-saved one must equal."""
    import onnx
    import onnxruntime as ort
    import paddle

    import ort_roi

    paddle.enable_static()
    try:
        exe = paddle.static.Executor(paddle.CPUPlace())
        prog, _, _ = paddle.static.load_inference_model(prefix, exe)
        block = prog.global_block()
        grid = [o for o in block.ops if o.name() == "pd_op.grid_sample"][-1]
        sigmoid = [o for o in block.ops if o.name() == "pd_op.sigmoid"][-1]
        fetch0 = [o.operand_source(0) for o in block.ops
                  if o.name() in ("pd_op.fetch", "builtin.shadow_output")]
        data = [o.result(0) for o in block.ops if o.name() in ("pd_op.data", "pd_op.feed")]
        with paddle.static.program_guard(prog):
            extra = [paddle.assign(grid.result(0)), paddle.assign(sigmoid.result(0))]
        probe = os.path.join(work, "probe")
        paddle.static.save_inference_model(probe, data, fetch0 + extra, exe, program=prog)
    finally:
        paddle.disable_static()
    run, why = paddle_predictor(probe, False, threads)
    if run is None:
        raise RuntimeError(f"Paddle Inference cannot run the probe: {why}")
    want = run(f)
    model = onnx.load(onnx_path)
    for kind in ("GridSample", "Sigmoid"):
        node = [n for n in model.graph.node if n.op_type == kind][-1]
        model.graph.output.append(onnx.ValueInfoProto(name=node.output[0]))
    sess = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options())
    got = sess.run(None, f)
    res = {}
    if reference is not None:
        res["probe_outputs_equal_program"] = all(
            np.array_equal(a, b) for a, b in zip(want[:3], reference))
    if got[3].shape != want[3].shape:
        res["pre_threshold_shapes"] = [list(got[3].shape), list(want[3].shape)]
        return res
    o, p = got[3][:, 0].astype(np.float64), want[3][:, 0].astype(np.float64)
    flip = got[2] != want[2]
    noise = float(np.abs(o - p).max(initial=0))
    res.update({
        "max_pre_threshold_diff": noise,
        # the mask head's [K, 28, 28] sigmoid, which the paste interpolates
        "max_mask_head_diff": float(np.abs(got[4] - want[4]).max(initial=0))
        if got[4].shape == want[4].shape else None,
        "mask_pixels_differ": int(flip.sum()),
        "max_distance_from_threshold_at_differ": float(np.abs(p[flip] - 0.5).max(initial=0)),
        "pixels_within_max_diff_of_threshold": int((np.abs(p - 0.5) <= noise).sum()),
    })
    # the paste alone: onnxruntime's GridSample on Paddle's own masks and boxes (the grid
    # computed in float32 as paste_mask's ops do), against Paddle's pasted values
    boxes, masks = want[0][:, 2:], want[4]
    if masks.shape[0] == boxes.shape[0]:
        h, w = p.shape[1:]
        x0, y0, x1, y1 = (boxes[:, i:i + 1] for i in range(4))
        two, one = np.float32(2), np.float32(1)
        gx = (np.arange(w, dtype=np.float32) + np.float32(0.5) - x0) / (x1 - x0) * two - one
        gy = (np.arange(h, dtype=np.float32) + np.float32(0.5) - y0) / (y1 - y0) * two - one
        grid = np.stack(np.broadcast_arrays(gx[:, None, :], gy[:, :, None]), axis=3)
        gs = onnx.helper.make_node("GridSample", ["X", "grid"], ["Y"])
        gs.attribute.extend([n for n in model.graph.node if n.op_type == "GridSample"][-1]
                            .attribute)
        fl = onnx.TensorProto.FLOAT
        g = onnx.helper.make_graph([gs], "paste", [
            onnx.helper.make_tensor_value_info("X", fl, None),
            onnx.helper.make_tensor_value_info("grid", fl, None)],
            [onnx.helper.make_tensor_value_info("Y", fl, None)])
        m = onnx.helper.make_model(g, opset_imports=[o for o in model.opset_import
                                                     if o.domain in ("", "ai.onnx")])
        y = ort.InferenceSession(m.SerializeToString()).run(
            None, {"X": masks[:, None].astype(np.float32), "grid": grid.astype(np.float32)})[0]
        res["max_paste_alone_diff"] = float(np.abs(y[:, 0] - want[3][:, 0]).max(initial=0))
    return res


def profile(path: str, f: dict, runs: int = 3) -> list[tuple[str, float]]:
    """onnxruntime's profile: mean ms per run by op type, largest first."""
    import onnxruntime as ort

    import ort_roi

    so = ort_roi.session_options()
    so.enable_profiling = True
    with tempfile.TemporaryDirectory() as d:
        so.profile_file_prefix = os.path.join(d, "prof")
        sess = ort.InferenceSession(path, so)
        for _ in range(runs + 1):
            sess.run(None, f)
        events = json.load(open(sess.end_profiling()))
    total: dict[str, float] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            op = e["args"].get("op_name", "?")
            total[op] = total.get(op, 0.0) + e["dur"] / 1000.0
    return sorted(((k, v / (runs + 1)) for k, v in total.items()), key=lambda kv: -kv[1])


def interleaved(runners: dict, repeat: int, seed: int = 0) -> dict:
    """Median seconds of each runner over ``repeat`` rounds (each in a fresh random order:
    ``ort_roi.cli.bench_timing.time_together``, one call per sample) and the median of the rounds'
    ratios paddle / ort."""
    from ort_roi.cli.bench_timing import time_together

    timed = time_together(runners, repeat, min_sample_s=0, shuffle=seed)
    times = {k: v[2] for k, v in timed.items()}
    return {"seconds": {k: round(statistics.median(v), 4) for k, v in times.items()},
            "paddle_over_ort": round(statistics.median(
                p / o for p, o in zip(times["paddle"], times["ort"])), 3)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--arch", default="faster_rcnn", choices=sorted(ARCHS),
                    help="faster_rcnn, cascade_rcnn, or mask_rcnn / cascade_mask_rcnn (their "
                         "masks compared pixel by pixel and, before the 0.5 threshold, through "
                         "--probe)")
    ap.add_argument("--depth", type=int, default=50, choices=(18, 34, 50, 101))
    ap.add_argument("--size", type=int, nargs=2, default=(480, 640), metavar=("H", "W"))
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--images", type=int, default=1,
                    help="compare on this many seeded images (seeds 0..N-1; timed on seed 0)")
    ap.add_argument("--probe", action="store_true",
                    help="mask_rcnn, cascade_mask_rcnn: the masks before the threshold "
                         "from both (mask_probe)")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="keep the box head's load fixed (x 0.1) instead of scaling its class "
                         "logits to std 1 and its deltas to std 0.5 on the image")
    ap.add_argument("--out", help="directory for the saved program and the ONNX model")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)

    import onnxruntime as ort

    import ort_roi

    out = args.out or tempfile.mkdtemp(prefix="paddledet_e2e_")
    os.makedirs(out, exist_ok=True)
    prefix = os.path.join(out, f"{args.arch}_r{args.depth}_fpn")
    t = time.perf_counter()
    build(prefix, args.depth, calibrate=None if args.no_calibrate else tuple(args.size),
          arch=args.arch)
    title = TITLES[args.arch]
    res: dict = {"model": f"{title} R{args.depth}-FPN", "size": list(args.size),
                 "build_s": round(time.perf_counter() - t, 1)}
    path = prefix + ".onnx"
    t = time.perf_counter()
    model = ort_roi.paddle_export(prefix, path, args.opset)
    res["export_s"] = round(time.perf_counter() - t, 1)
    res["ort_roi_nodes"] = sorted({n.op_type for n in model.graph.node if n.domain == "ort_roi"})
    so = ort_roi.session_options()
    so.intra_op_num_threads = args.threads
    sess = ort.InferenceSession(path, so)
    f = feeds(tuple(args.size))
    paddle_run, why = paddle_predictor(prefix, True, args.threads)
    res["paddle_onednn"] = "on" if paddle_run else f"off (on fails: {why})"
    if paddle_run is None:
        paddle_run, why = paddle_predictor(prefix, False, args.threads)
        if paddle_run is None:
            raise SystemExit(f"Paddle Inference cannot run the model: {why}")
    want = paddle_run(f)
    got = sess.run(None, f)
    res["detections"] = compare(got, want)
    if args.probe and args.arch in MASKED:
        res["mask_probe"] = mask_probe(prefix, path, f, out, args.threads, reference=want)
    for seed in range(1, args.images):
        fs = feeds(tuple(args.size), seed)
        ws = paddle_run(fs)
        more = {"seed": seed, "detections": compare(sess.run(None, fs), ws)}
        if args.probe and args.arch in MASKED:
            more["mask_probe"] = mask_probe(prefix, path, fs, out, args.threads, reference=ws)
        res.setdefault("more_images", []).append(more)
    res.update(interleaved({"ort": lambda: sess.run(None, f), "paddle": lambda: paddle_run(f)},
                           args.repeat))
    if args.profile:
        res["ort_profile_ms"] = [(k, round(v, 2)) for k, v in profile(path, f)[:12]]
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0 if all(r["detections"]["equal"]
                    for r in [res] + res.get("more_images", [])) else 1


if __name__ == "__main__":
    sys.exit(main())
