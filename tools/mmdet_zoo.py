#!/usr/bin/env python3
"""MMDetection 3.3.0's two-stage zoo through MMDeploy 1.3.1's onnxruntime export (issue 66):
Cascade (Mask) R-CNN, HTC, Mask Scoring R-CNN, Libra R-CNN, Grid R-CNN, GRoIE, Sparse R-CNN,
QueryInst, Double-Head R-CNN; and the RoI stages of the forms they add, cut into
ort_roi/data/mmdeploy_zoo_*.onnx.

The venv and the export are ``tools/mmdeploy_graphs.py``'s (its docstring holds the recipe:
torch 2.4.1, mmcv-lite with two kernels stood in for by torchvision's, random init, seed 0,
a 320 x 480 image, 800 x 1216 after mmdet's test pipeline and padding), with the model
configs below and the box heads' score threshold 0 (``--score-threshold``), so that random
weights still send 100 detections to the later heads::

    /work/venv-mmdeploy/bin/python -m tools.mmdet_zoo export --keep DIR [--models ...]
    python -m tools.mmdet_zoo e2e --keep DIR [--repeat 3]     # the project's venv
    python -m tools.mmdet_zoo cut --keep DIR                  # ort_roi/data/mmdeploy_zoo_*
    python -m tools.mmdet_zoo bench [--repeat 7] [--reuse-freed-memory]
    python -m tools.mmdet_zoo profile --keep DIR --models ... [--repeat 2]

1. ``export`` (the mmdeploy venv): each model with MMDeploy's
   ``detection_onnxruntime_dynamic`` (``instance-seg_onnxruntime_dynamic`` for the models
   with masks) at opset 11, kept as ``DIR/{model}.onnx`` (``--static``: no dynamic axes,
   ``DIR/{model}_static.onnx``); where MMDeploy cannot export one, its error goes to
   ``DIR/export_errors.json`` and the next model is tried.
2. ``e2e`` (the project's venv): each whole model converted (``ort_roi.convert``): the stages
   fused, the RoI nodes left, convert's notes; native and converted on the same 800 x 1216
   input, every output compared (the detections also as sets: rows of near-equal score may
   swap); the seconds per input in interleaved settled rounds (``--repeat 0``: one run each);
   ``DIR/e2e{--tag}_{repeat}.json``.
3. ``cut``: the stage graphs of the new forms (``STAGES``) from the whole models, no weights:
   the maps the RoiAligns read and the rois in, what the rest of the graph reads out.
4. ``bench``: each committed zoo stage native against converted (settled and back to back).
5. ``profile``: onnxruntime's profiler on whole models, native and converted: all nodes, the
   RoI extractors' nodes, the op types that changed most.
"""

from __future__ import annotations

import argparse
import json
import os
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ort_roi", "data")

#: model: (its mmdet 3.3.0 config under .mim/configs, masks)
ZOO = {
    "cascade_rcnn": ("cascade_rcnn/cascade-rcnn_r50_fpn_1x_coco.py", False),
    "cascade_mask_rcnn": ("cascade_rcnn/cascade-mask-rcnn_r50_fpn_1x_coco.py", True),
    "htc": ("htc/htc_r50_fpn_1x_coco.py", True),
    "ms_rcnn": ("ms_rcnn/ms-rcnn_r50_fpn_1x_coco.py", True),
    "libra_rcnn": ("libra_rcnn/libra-faster-rcnn_r50_fpn_1x_coco.py", False),
    "grid_rcnn": ("grid_rcnn/grid-rcnn_r50_fpn_gn-head_2x_coco.py", False),
    "groie": ("groie/faste-rcnn_r50_fpn_groie_1x_coco.py", False),
    "sparse_rcnn": ("sparse_rcnn/sparse-rcnn_r50_fpn_1x_coco.py", False),
    "queryinst": ("queryinst/queryinst_r50_fpn_1x_coco.py", True),
    "double_head": ("double_heads/dh-faster-rcnn_r50_fpn_1x_coco.py", False),
}


def _thresholds(test_cfg, thr: float) -> None:
    """Every box head's score_thr (a cascade's one rcnn dict, or a list of them) set to thr."""
    rcnn = test_cfg.get("rcnn") if test_cfg is not None else None
    for d in (rcnn if isinstance(rcnn, (list, tuple)) else [rcnn]):
        if d is not None and "score_thr" in d:
            d["score_thr"] = thr


def export_model(name: str, work: str, opset: int, thr: float, static: bool = False) -> str:
    """MMDeploy's onnxruntime export of the zoo's ``name``; the path."""
    import numpy as np
    import torch

    from mmdeploy.apis import torch2onnx
    from tools.mmdeploy_graphs import IMAGE_HW, deploy_config, model_config

    cfg, masks = ZOO[name]
    torch.manual_seed(0)
    img = np.random.default_rng(0).integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)
    model = model_config(cfg)
    _thresholds(model.model.get("test_cfg"), thr)
    save = f"{name}.onnx"
    deploy = deploy_config(masks, opset)
    if static:  # MMDeploy's *_onnxruntime_static: no dynamic axes, every size a constant
        deploy.onnx_config.pop("dynamic_axes")
        save = f"{name}_static.onnx"
    torch2onnx(img, work, save, deploy, model, None, "cpu")
    return os.path.join(work, save)


def export(keep: str, models: list[str], opset: int, thr: float, static: bool = False
           ) -> None:
    from tools import mmdeploy_graphs as mg

    print("mmcv._ext stood in for:", mg.stub_mmcv_ext())
    mg.DEPLOY["codebase_config"]["post_processing"]["score_threshold"] = thr
    os.makedirs(keep, exist_ok=True)
    log = os.path.join(keep, "export_errors.json")
    errors = json.load(open(log)) if os.path.exists(log) else {}
    tag = "_static" if static else ""
    for name in models:
        try:
            path = export_model(name, keep, opset, thr, static)
            print("exported", name, path, os.path.getsize(path), flush=True)
            errors.pop(name + tag, None)
        except Exception as e:  # MMDeploy's error, recorded; the next model is tried
            tb = traceback.extract_tb(e.__traceback__)
            where = next((f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                          for f in reversed(tb) if "site-packages" in f.filename), "")
            first = (str(e).splitlines() or [""])[0]  # torch's trace errors run to pages
            errors[name + tag] = f"{type(e).__name__}: {first[:300]} ({where})"
            print("FAILED", name, errors[name + tag], flush=True)
        with open(log, "w") as f:
            json.dump(errors, f, indent=1)


def cut(whole: str, prefixes: list[str], opset: int, name: str):
    """The nodes named under any of ``prefixes`` (and the Constants they read from outside
    them) as a model of their own, no weights: the maps the RoiAligns read in as ``feat0``,
    ``feat1`` .. (in the order the RoiAligns come; float [N, C, H, W]), the other tensors
    the nodes read in under their own names with their declared or inferred rank (the rois:
    ``rois``, [R, 5]), each tensor the rest of the graph reads out (``roi_feats`` for the
    first, ``roi_feats_1`` ..). A Conv's weights (GRoIE's) are inputs too (``w_...``)."""
    import onnx
    from onnx import TensorProto, helper

    from tools.mmdeploy_graphs import renamed, stage_reads

    m = onnx.load(whole)
    g = m.graph
    made = {o: n for n in g.node for o in n.output}
    inits = {i.name: i for i in g.initializer}
    stage, consts, read_maps, read, outs = stage_reads(
        m, prefixes, lambda n, k: n.op_type == "RoiAlign" and k == 0)
    maps = {t: f"feat{i}" for i, t in enumerate(read_maps)}
    others = {}
    for t in read:
        others[t] = (f"w_{len(others)}" if t in inits else "rois"
                     if "rois" not in others.values() else f"in_{len(others)}")
    rename = {**maps, **others,
              **{o: "roi_feats" + (f"_{k}" if k else "") for k, o in enumerate(outs)}}
    nodes = renamed(consts + stage, rename)
    def channels(t):  # the Conv's (the FPN's, the semantic head's) that writes the map
        w = inits.get(made[t].input[1]) if made[t].op_type == "Conv" else None
        return int(w.dims[0]) if w is not None else None

    ins = [helper.make_tensor_value_info(v, TensorProto.FLOAT, ["N", channels(t), f"H{v[4:]}",
                                                                 f"W{v[4:]}"])
           for t, v in maps.items()]
    for t, v in others.items():
        if t in inits:
            ins.append(helper.make_tensor_value_info(v, inits[t].data_type, list(inits[t].dims)))
        elif v == "rois":
            ins.append(helper.make_tensor_value_info(v, TensorProto.FLOAT, ["R", 5]))
        else:
            raise SystemExit(f"{name}: a third input {t!r} besides the maps and the rois")
    outv = [helper.make_tensor_value_info(rename[o], TensorProto.FLOAT, ["R", None, None, None])
            for o in outs]
    graph = helper.make_graph(nodes, name, ins, outv)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                              ir_version=m.ir_version, producer_name=m.producer_name,
                              producer_version=m.producer_version)
    onnx.checker.check_model(model, full_check=True)
    return model


#: the committed stage graphs of the zoo's new forms: file: (model, the node-name prefixes cut)
STAGES = {
    # a cascade's stages each their own SingleRoIExtractor (stage 1 of 3); in the whole graph
    # the rois come out of a Reshape to a computed shape (their rank unknown to inference)
    "mmdeploy_zoo_cascade_bbox_11.onnx": ("cascade_rcnn", ["/bbox_roi_extractor.1/"]),
    # Double-Head: the same extractor called twice, the second on rois scaled by 1.3 and
    # reading the first call's level selections
    "mmdeploy_zoo_double_head_11.onnx": ("double_head", ["/bbox_roi_extractor/",
                                                         "/bbox_roi_extractor_1/"]),
    # HTC's semantic RoI extractor: one level (stride 8), a plain RoiAlign
    "mmdeploy_zoo_htc_semantic_11.onnx": ("htc", ["/semantic_roi_extractor/roi_layers.0/"]),
    # GRoIE: every roi pooled on every level (then convolved and summed: not cut)
    "mmdeploy_zoo_groie_11.onnx": ("groie", ["/bbox_roi_extractor/roi_layers."]),
}


def cut_all(keep: str, out: str, only: list[str] | None = None) -> None:
    import onnx

    for fname, (model, prefixes) in STAGES.items():
        if only and fname not in only:
            continue
        path = os.path.join(keep, f"{model}.onnx")
        if not os.path.exists(path):
            print("no", path)
            continue
        m = cut(path, prefixes, 11, fname[:-5])
        dst = os.path.join(out, fname)
        onnx.save(m, dst)
        print("wrote", dst, os.path.getsize(dst), "bytes,", len(m.graph.node), "nodes,",
              [i.name for i in m.graph.input], "->", [o.name for o in m.graph.output])


ROI_OPS = ("RoiAlign", "ScatterND", "PyramidRoIAlign_L4", "PyramidRoIAlign_L1")


def _roi_nodes(model) -> dict:
    """The RoI-stage nodes of a graph by domain::op: its RoiAligns, ScatterNDs and fused
    nodes."""
    import collections

    return dict(collections.Counter(f"{n.domain or 'ai.onnx'}::{n.op_type}"
                                    for n in model.graph.node
                                    if n.op_type.startswith(("RoiAlign", "ScatterND",
                                                             "PyramidRoIAlign"))))


def e2e(keep: str, models: list[str], repeat: int, hw=(800, 1216), tag: str = "") -> None:
    """Each exported whole model native against converted: the stages fused (each named),
    the RoI nodes left, convert's notes, the outputs compared, the seconds per input in
    interleaved settled rounds (``repeat`` 0: one run each, no timing)."""
    import numpy as np
    import onnx

    from ort_roi.cli.bench_timing import time_together
    from tools.detectron2_graphs import SETTLE_S
    from tools.mmdeploy_graphs import _sessions

    feed = {"input": np.random.default_rng(0).standard_normal((1, 3, *hw)).astype(np.float32)}
    rows = {}
    for name in models:
        path = os.path.join(keep, f"{name}.onnx")
        if not os.path.exists(path):
            continue
        native = onnx.load(path)
        a, b, conv, done = _sessions(native)
        fused = [m[0] for m in done.moved if "PyramidRoIAlign" in m[2]]
        if repeat:
            t = time_together({"native": lambda: a.run(None, feed),
                               "converted": lambda: b.run(None, feed)}, repeat, 0, shuffle=0,
                              settle_s=SETTLE_S)
            outs = t["native"][1], t["converted"][1]
            ratios = sorted(x / y for x, y in zip(t["native"][2], t["converted"][2]))
            times = (t["native"][0], t["converted"][0], ratios[len(ratios) // 2],
                     (ratios[0], ratios[-1]))
        else:
            outs, times = (a.run(None, feed), b.run(None, feed)), None
        names = [o.name for o in a.get_outputs()]
        same = {n: (x.shape == y.shape, float(np.max(np.abs(x.astype(np.float64) - y),
                                                     initial=0)) if x.shape == y.shape else None)
                for n, x, y in zip(names, *outs)}
        row = dict(fused=fused, native_roi=_roi_nodes(native), converted_roi=_roi_nodes(conv),
                   notes=done.notes, outputs={n: list(map(int, x.shape))
                                              for n, x in zip(names, outs[0])},
                   max_diff=same,
                   labels_equal=bool(np.array_equal(outs[0][1], outs[1][1])))
        d = np.abs(outs[0][0][0].astype(np.float64) - outs[1][0][0]).max(1)  # dets [100, 5]
        row["dets_rows_differing"] = [  # (row, native score, converted score, max |diff|)
            (int(r), float(outs[0][0][0, r, 4]), float(outs[1][0][0, r, 4]), float(d[r]))
            for r in np.flatnonzero(d > 1e-3)]
        row["dets_max_diff_other_rows"] = float(np.max(d[d <= 1e-3], initial=0))
        if row["dets_rows_differing"]:  # the same detections in another order?
            rows_ = [np.concatenate([o[0][0], o[1][0][:, None].astype(np.float32)], 1)
                     for o in outs]
            a_, b_ = (r[np.lexsort(np.round(r, 2).T[::-1])] for r in rows_)
            row["dets_max_diff_as_sets"] = float(np.abs(a_.astype(np.float64) - b_).max())
        if times:
            row.update(native_s=times[0], converted_s=times[1], ratio=times[2],
                       ratios_range=times[3], repeat=repeat)
        rows[name] = row
        print(name, json.dumps(row, indent=1), flush=True)
    with open(os.path.join(keep, f"e2e{tag}_{repeat}.json"), "w") as f:
        json.dump(rows, f, indent=1)


def stage_feed(model, rois: int = 1000, hw=(800, 1216), seed: int = 0) -> dict:
    """A committed stage's inputs at the whole models' load: the maps of an 800 x 1216 input
    at the graph's RoiAligns' scales (256 channels), ``rois`` rois with sides 8 to 800 px
    log-uniform (every level)."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(seed)
    scales = {}
    for n in model.graph.node:
        if n.op_type == "RoiAlign":
            a = {x.name: helper.get_attribute_value(x) for x in n.attribute}
            scales.setdefault(n.input[0], a["spatial_scale"])
    feed = {}
    for i in model.graph.input:
        if i.name.startswith("feat"):
            s = next(v for k, v in scales.items() if k == i.name)
            feed[i.name] = rng.standard_normal((1, 256, int(hw[0] * s), int(hw[1] * s))
                                               ).astype(np.float32)
    xy = rng.uniform(0, 1000, (rois, 2))
    side = np.exp(rng.uniform(np.log(8), np.log(800), (rois, 2)))
    feed["rois"] = np.concatenate([np.zeros((rois, 1)), xy, xy + side], 1).astype(np.float32)
    return feed


def bench(out: str, repeat: int) -> None:
    """Each committed zoo stage native against converted (``stage_rounds``: back to back and
    settled), the outputs of a stage with several joined; the cascade's stage also as the
    whole model has it (rois of a rank inference cannot tell: left unfused, RoiAligns
    moved)."""
    import numpy as np
    import onnx

    from tests.test_mmdet_zoo import _whole_model_rois
    from tools.detectron2_graphs import stage_rounds
    from tools.mmdeploy_graphs import _sessions

    cases = [(k, onnx.load(os.path.join(out, k))) for k in STAGES]
    cases.insert(1, ("mmdeploy_zoo_cascade_bbox_11.onnx, rois as in the whole model",
                     _whole_model_rois(cases[0][1])))
    for name, m in cases:
        feed = stage_feed(m, 1000)
        if "rois_shape" in {i.name for i in m.graph.input}:
            feed["rois_shape"] = np.array(feed["rois"].shape, np.int64)
        a, b, conv, done = _sessions(m)
        ours = sorted(f"{n.op_type}" for n in conv.graph.node if n.domain == "ort_roi")

        def joined(s):
            return lambda: np.concatenate(s.run(None, feed), 0)
        print(f"{name}, 1000 rois, converted: {ours}: "
              + stage_rounds(joined(a), joined(b), repeat), flush=True)


def profile(keep: str, models: list[str], runs: int = 2, hw=(800, 1216)) -> None:
    """onnxruntime's profiler on each whole model, native and converted: the milliseconds per
    run of all nodes, of the RoI extractors' nodes (named under ``/*roi_extractor*``) and of
    the ten op types that changed most."""
    import collections
    import warnings

    import numpy as np
    import onnx
    import onnxruntime as ort

    import ort_roi
    from tools.detectron2_graphs import profiled_nodes

    feed = {"input": np.random.default_rng(0).standard_normal((1, 3, *hw)).astype(np.float32)}
    for name in models:
        path = os.path.join(keep, f"{name}.onnx")
        if not os.path.exists(path):
            continue
        native = onnx.load(path)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conv = ort_roi.convert(native)
        row = {}
        for kind, model, so in (("native", native, ort.SessionOptions()),
                                ("converted", conv, ort_roi.session_options())):
            events = profiled_nodes(model, so, feed, runs,
                                    os.path.join(keep, f"profile_{name}_{kind}"))
            by_op = collections.Counter()
            for e in events:
                by_op[e["args"].get("op_name", "?")] += e["dur"] / runs / 1e3
            row[kind] = dict(all=sum(e["dur"] for e in events) / runs / 1e3,
                             roi=sum(e["dur"] for e in events if "roi_extractor" in e["name"])
                             / runs / 1e3, by_op=by_op)
        ops_ = set(row["native"]["by_op"]) | set(row["converted"]["by_op"])
        delta = sorted(ops_, key=lambda o: -abs(row["converted"]["by_op"][o]
                                                - row["native"]["by_op"][o]))[:10]
        print(f"{name}: all nodes native {row['native']['all']:.0f} ms, converted "
              f"{row['converted']['all']:.0f} ms; the RoI extractors' nodes "
              f"{row['native']['roi']:.0f} / {row['converted']['roi']:.0f} ms; by op "
              + ", ".join(f"{o} {row['native']['by_op'][o]:.0f} / "
                          f"{row['converted']['by_op'][o]:.0f}" for o in delta), flush=True)


def main(argv=None) -> int:
    from tools.detectron2_graphs import ReuseFreedMemory

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("export", "cut", "e2e", "bench", "profile"))
    ap.add_argument("--out", default=OUT, help="where the stage graphs go (cut, bench)")
    ap.add_argument("--keep", default="/tmp/mmdet_zoo")
    ap.add_argument("--models", nargs="+", default=list(ZOO), choices=list(ZOO))
    ap.add_argument("--opset", type=int, default=11)
    ap.add_argument("--score-threshold", type=float, default=0.0)
    ap.add_argument("--static", action="store_true", help="export: MMDeploy's static deploy "
                    "config (no dynamic axes), saved as DIR/{model}_static.onnx")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tag", default="", help="e2e: written to DIR/e2e{tag}_{repeat}.json")
    ap.add_argument("--reuse-freed-memory", action=ReuseFreedMemory,
                    help="ort_roi.reuse_freed_memory() first (bench, e2e)")
    args = ap.parse_args(argv)
    if args.what == "export":
        export(args.keep, args.models, args.opset, args.score_threshold, args.static)
    elif args.what == "cut":
        cut_all(args.keep, args.out)
    elif args.what == "bench":
        bench(args.out, args.repeat)
    elif args.what == "profile":
        profile(args.keep, args.models, args.repeat)
    elif args.what == "e2e":
        e2e(args.keep, args.models, args.repeat, tag=args.tag)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
