#!/usr/bin/env python3
"""MMDeploy's onnxruntime export of MMDetection's Faster / Mask R-CNN R50-FPN, and the RoI
stages cut from it: ort_roi/data/mmdeploy_stage_{bbox,mask}_{11,16}.onnx.

MMDeploy needs torch 2.4 (its rewriters patch torch.onnx's TorchScript exporter), so it runs
in a venv of its own, not the project's. The recipe (Python 3.11, Linux x86_64; PyPI's
torch 2.4.1 is its CUDA build, ~5 GB installed with its nvidia-* wheels, run here on CPU)::

    python3 -m venv /work/venv-mmdeploy
    /work/venv-mmdeploy/bin/pip install torch==2.4.1 torchvision==0.19.1
    /work/venv-mmdeploy/bin/pip install mmengine==0.10.7 mmcv-lite==2.1.0 mmdet==3.3.0 \\
        mmdeploy==1.3.1 onnx==1.16.2 onnxruntime==1.19.2 'numpy<2'
    /work/venv-mmdeploy/bin/python -m tools.mmdeploy_graphs export [--keep DIR]
    python -m tools.mmdeploy_graphs bench [--repeat 7]           # the project's venv
    python -m tools.mmdeploy_graphs e2e --keep DIR [--repeat 7]  # the project's venv

mmcv-lite is mmcv 2.1.0 without its compiled kernels (mmcv's ops do not build against the
project's torch, and building them against 2.4 takes most of an hour on 2 cores). The
graph does not depend on them: mmdeploy's symbolic for ``mmcv.ops.roi_align`` writes the
ONNX RoiAlign (``mmdeploy/mmcv/ops/roi_align.py``) and its ``ONNXNMSop`` the ONNX
NonMaxSuppression. Only the trace runs the kernels, so ``mmcv._ext`` is stood in for by
torchvision's ``roi_align`` (avg mode) and ``nms`` (offset 0), the two the export calls;
any other kernel raises NotImplementedError naming itself.

1. ``export`` (the mmdeploy venv): the models are MMDetection 3.3.0's configs (the installed
   package's ``.mim/configs``), random init (seed 0), exported with MMDeploy's
   ``detection_onnxruntime_dynamic`` / ``instance-seg_onnxruntime_dynamic`` deploy configs
   (written out below: opset 11 unless ``--opsets`` says, the ``dets`` / ``labels`` (/
   ``masks``) outputs, 1000 RPN proposals as the model config says) through
   ``mmdeploy.apis.torch2onnx`` on a 320 x 480 image (800 x 1200 after the test pipeline).
   The whole models export (~170 MB each, kept with ``--keep``); mmdeploy's ONNX optimizer
   (a TorchScript extension the PyPI wheel does not ship) is skipped with its warning, as in
   any pip install. The stage graphs are the nodes named under ``/bbox_roi_extractor/`` and
   ``/mask_roi_extractor/`` (SingleRoIExtractor rewritten by MMDeploy's
   ``single_roi_extractor__forward``) and the Constants they read, with their other inputs
   made graph inputs: the four FPN maps ``feat0..feat3`` (strides 4..32) and ``rois``
   ``[R, 5]``; output ``roi_feats``. They hold no weights (24-26 KB).
2. ``bench`` (the project's venv): each stage graph native against converted (fused) in
   interleaved rounds, back to back and settled (``detectron2_graphs.stage_rounds``), on
   ``stage_feed``; ``--reuse-freed-memory``: with ``ort_roi.reuse_freed_memory()``.
3. ``e2e`` (the project's venv): each whole model native against converted: the stages
   fused, the outputs compared, the seconds per input in interleaved rounds.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import os
import sys
import tempfile
import types

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ort_roi", "data")
IMAGE_HW = (320, 480)
STAGES = {"bbox": "/bbox_roi_extractor/", "mask": "/mask_roi_extractor/"}

DEPLOY = dict(
    onnx_config=dict(type="onnx", export_params=True, keep_initializers_as_inputs=False,
                     opset_version=11, save_file="end2end.onnx", input_names=["input"],
                     output_names=["dets", "labels"], input_shape=None, optimize=True,
                     dynamic_axes={"input": {0: "batch", 2: "height", 3: "width"},
                                   "dets": {0: "batch", 1: "num_dets"},
                                   "labels": {0: "batch", 1: "num_dets"}}),
    codebase_config=dict(type="mmdet", task="ObjectDetection", model_type="end2end",
                         post_processing=dict(score_threshold=0.05, confidence_threshold=0.005,
                                              iou_threshold=0.5, max_output_boxes_per_class=200,
                                              pre_top_k=5000, keep_top_k=100,
                                              background_label_id=-1)),
    backend_config=dict(type="onnxruntime"))


def deploy_config(masks: bool, opset: int = 11):
    """MMDeploy's detection_onnxruntime_dynamic (instance-seg_onnxruntime_dynamic if masks),
    at ``opset`` (its configs' 11 unless told)."""
    import copy

    from mmengine import Config

    d = copy.deepcopy(DEPLOY)
    d["onnx_config"]["opset_version"] = opset
    if masks:
        d["onnx_config"]["output_names"].append("masks")
        d["onnx_config"]["dynamic_axes"]["masks"] = {0: "batch", 1: "num_dets",
                                                     2: "height", 3: "width"}
        d["codebase_config"]["post_processing"]["export_postprocess_mask"] = False
    return Config(d)


def stub_mmcv_ext() -> bool:
    """Stand in for mmcv's compiled ``mmcv._ext`` where it is missing (mmcv-lite); True if so."""
    try:
        import mmcv._ext  # noqa: F401
        return False
    except ImportError:
        pass
    import torch
    import torchvision

    class Ext(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)

            def missing(*args, **kwargs):
                raise NotImplementedError(f"mmcv._ext.{name}: mmcv-lite has no compiled kernels "
                                          "and tools/mmdeploy_graphs.py stands in only for "
                                          "roi_align_forward and nms")
            return missing

    ext = Ext("mmcv._ext")
    ext.__spec__ = importlib.machinery.ModuleSpec("mmcv._ext", None)  # no loader: not "full"

    def roi_align_forward(input, rois, output, argmax_y, argmax_x, aligned_height,
                          aligned_width, spatial_scale, sampling_ratio, pool_mode, aligned):
        if pool_mode != 1:
            raise NotImplementedError(f"mmcv._ext.roi_align_forward: pool_mode {pool_mode} "
                                      "(only avg, 1, is stood in for)")
        output.copy_(torchvision.ops.roi_align(input, rois, (aligned_height, aligned_width),
                                               spatial_scale, sampling_ratio, aligned))

    def nms(boxes, scores, iou_threshold, offset):
        if offset != 0:
            raise NotImplementedError(f"mmcv._ext.nms: offset {offset} (only 0 is stood in for)")
        return torchvision.ops.nms(boxes, scores, iou_threshold).to(torch.long)

    ext.roi_align_forward = roi_align_forward
    ext.nms = nms
    sys.modules["mmcv._ext"] = ext
    return True


def model_config(name: str):
    import mmdet
    from mmengine import Config

    root = os.path.join(os.path.dirname(mmdet.__file__), ".mim", "configs")
    return Config.fromfile(os.path.join(root, name))


def export_whole(kind: str, work: str, opset: int = 11) -> str:
    """Export MMDetection's R50-FPN ``kind`` ('faster' or 'mask', a backend's name after it)
    with MMDeploy; the path."""
    import numpy as np
    import torch

    from mmdeploy.apis import torch2onnx

    cfg = {"faster": "faster_rcnn/faster-rcnn_r50_fpn_1x_coco.py",
           "mask": "mask_rcnn/mask-rcnn_r50_fpn_1x_coco.py"}[kind.split("_")[0]]
    torch.manual_seed(0)
    img = np.random.default_rng(0).integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)
    save = f"{kind}_rcnn_{opset}.onnx"
    if DEPLOY["backend_config"]["type"] == "tensorrt":  # the graph is written on CPU alike:
        import mmdeploy.apis.utils.utils as u  # only mmdeploy's device check refuses it

        u.check_backend_device = lambda deploy_cfg, device: None
    model = model_config(cfg)  # the box head's threshold is the model config's
    model.model.test_cfg.rcnn.score_thr = DEPLOY["codebase_config"]["post_processing"][
        "score_threshold"]
    torch2onnx(img, work, save, deploy_config(kind.startswith("mask"), opset), model, None,
               "cpu")
    return os.path.join(work, save)


def cut_stage(whole: str, prefix: str, opset: int):
    """The nodes named under ``prefix`` (and the Constants they read from outside it) as a
    model of their own: the FPN maps ``feat0..3`` and ``rois`` in, ``roi_feats`` out."""
    import onnx
    from onnx import TensorProto, helper

    m = onnx.load(whole)
    g = m.graph
    made = {o: n for n in g.node for o in n.output}
    inits = {i.name for i in g.initializer}
    stage = [n for n in g.node if n.name.startswith(prefix)]
    inside = {o for n in stage for o in n.output}
    consts, maps, rois = [], {}, None
    for n in stage:
        for t in n.input:
            if not t or t in inside or t in inits:
                continue
            p = made[t]
            if p.op_type == "Constant":
                if p not in consts:
                    consts.append(p)
            elif n.op_type == "RoiAlign":  # the level's map: the stage's nth RoiAlign
                maps.setdefault(t, f"feat{len(maps)}")
            elif rois in (None, t):
                rois = t
            else:
                raise SystemExit(f"{prefix}: two inputs besides the maps: {rois!r}, {t!r}")
    outside = [n for n in g.node if n.name not in {s.name for s in stage}]
    outs = [o for n in stage for o in n.output if any(o in x.input for x in outside)]
    if len(outs) != 1 or len(maps) != 4 or rois is None:
        raise SystemExit(f"{prefix}: outputs {outs}, maps {list(maps)}, rois {rois}")
    rename = {**maps, rois: "rois", outs[0]: "roi_feats"}
    nodes = renamed(consts + stage, rename)
    used = {t for n in stage for t in n.input}
    side = "7" if "bbox" in prefix else "14"
    ins = [helper.make_tensor_value_info(v, TensorProto.FLOAT, ["N", 256, f"H{v[-1]}", f"W{v[-1]}"])
           for v in maps.values()]
    ins.append(helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", 5]))
    out = helper.make_tensor_value_info("roi_feats", TensorProto.FLOAT,
                                        ["R", 256, int(side), int(side)])
    graph = helper.make_graph(nodes, prefix.strip("/"), ins, [out],
                              [i for i in g.initializer if i.name in used])
    cut = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)],
                            ir_version=m.ir_version, producer_name=m.producer_name,
                            producer_version=m.producer_version)
    onnx.checker.check_model(cut, full_check=True)
    return cut


def export(out: str, keep: str | None, opsets: list[int], score_threshold: float,
           backend: str = "onnxruntime") -> None:
    """Both whole models at each opset (kept in ``keep``) and their stages cut into ``out``
    (another ``backend``'s deploy config: the whole models only,
    ``{kind}_{backend}_rcnn_{opset}.onnx``)."""
    import onnx

    print("mmcv._ext stood in for:", stub_mmcv_ext())
    work = keep or tempfile.mkdtemp(prefix="mmdeploy_")
    DEPLOY["codebase_config"]["post_processing"]["score_threshold"] = score_threshold
    DEPLOY["backend_config"]["type"] = backend
    for opset in opsets:
        for kind, stage in (("faster", "bbox"), ("mask", "mask")):
            path = export_whole(kind if backend == "onnxruntime" else f"{kind}_{backend}", work,
                                opset)
            print("exported", path, os.path.getsize(path))
            if backend != "onnxruntime":
                continue
            cut = cut_stage(path, STAGES[stage], opset)
            dst = os.path.join(out, f"mmdeploy_stage_{stage}_{opset}.onnx")
            onnx.save(cut, dst)
            print("wrote", dst, os.path.getsize(dst), "bytes,", len(cut.graph.node), "nodes")


def _sessions(native):
    """(a plain onnxruntime session on ``native``, one with ort_roi's ops on its conversion,
    the conversion's report)."""
    import warnings

    import onnxruntime as ort

    import ort_roi

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conv, done = ort_roi.convert(native, report=True)
    a = ort.InferenceSession(native.SerializeToString(), providers=["CPUExecutionProvider"])
    b = ort.InferenceSession(conv.SerializeToString(), ort_roi.session_options(),
                             providers=["CPUExecutionProvider"])
    return a, b, conv, done


def stage_feed(kind: str, seed: int = 0) -> dict:
    """The stage's inputs at the detectors' load: the FPN maps of an 800 x 1088 input (a
    480 x 640 image through mmdet's test pipeline), 1000 rois (the bbox head: the RPN's
    proposals) or 100 (the mask head: the detections), sides 8 to 800 px log-uniform."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n = 1000 if kind == "bbox" else 100
    feed = {f"feat{k}": rng.standard_normal((1, 256, 800 // s, 1088 // s)).astype(np.float32)
            for k, s in enumerate((4, 8, 16, 32))}
    xy = rng.uniform(0, 1000, (n, 2))
    side = np.exp(rng.uniform(np.log(8), np.log(800), (n, 2)))
    feed["rois"] = np.concatenate([np.zeros((n, 1)), xy, xy + side], 1).astype(np.float32)
    return feed


def bench(out: str, repeat: int) -> None:
    """Each committed stage graph native against fused, in interleaved rounds, back to back
    and settled, with the fused graph's kernel returning at once beside them
    (``detectron2_graphs.stage_rounds``)."""
    import onnx

    from ort_roi.cli.bench_peers import graph_floor
    from tools.detectron2_graphs import stage_rounds

    for kind in ("bbox", "mask"):
        for opset in (11, 16):
            a, b, conv, _ = _sessions(onnx.load(os.path.join(out, f"mmdeploy_stage_{kind}_"
                                                                  f"{opset}.onnx")))
            assert [n.op_type for n in conv.graph.node if n.domain] == ["PyramidRoIAlign_L4"]
            feed = stage_feed(kind)
            floor = graph_floor(conv, feed, b.run(None, feed)[0])
            print(f"{kind} opset {opset}, {len(feed['rois'])} rois: "
                  + stage_rounds(lambda: a.run(None, feed)[0], lambda: b.run(None, feed)[0],
                                 repeat, floor))


def e2e(models: str, opsets: list[int], repeat: int) -> None:
    """Each whole model (``export``'s, kept in ``models``) native against converted: the
    stages fused, the detections equal, the seconds per input (interleaved rounds)."""
    import numpy as np
    import onnx

    from ort_roi.cli.bench_timing import time_together
    from tools.detectron2_graphs import SETTLE_S

    feed = {"input": np.random.default_rng(0).standard_normal((1, 3, 800, 1088)
                                                              ).astype(np.float32)}
    for opset in opsets:
        for kind in ("faster", "mask"):
            path = os.path.join(models, f"{kind}_rcnn_{opset}.onnx")
            a, b, conv, done = _sessions(onnx.load(path))
            fused = [m for m in done.moved if "PyramidRoIAlign" in m[2]]
            left = sum(n.op_type in ("ScatterND", "RoiAlign") for n in conv.graph.node)
            t = time_together({"native": lambda: a.run(None, feed),
                               "converted": lambda: b.run(None, feed)}, repeat, 0, shuffle=0,
                              settle_s=SETTLE_S)
            diff = max(float(np.max(np.abs(x.astype(np.float64) - y), initial=0))
                       for x, y in zip(t["native"][1], t["converted"][1]))
            ratios = sorted(x / y for x, y in zip(t["native"][2], t["converted"][2]))
            print(f"{os.path.basename(path)}: {len(fused)} stage(s) fused, {left} ScatterND / "
                  f"RoiAlign left, notes {done.notes}; detections "
                  f"{t['native'][1][0].shape[1]}, max |diff| {diff:.3g}; native "
                  f"{t['native'][0] * 1e3:.0f} ms, converted {t['converted'][0] * 1e3:.0f} ms, "
                  f"native / converted {ratios[len(ratios) // 2]:.2f}x (median of {repeat})")


def stage_reads(m, prefixes: list[str], is_map) -> tuple[list, list, list, list, list]:
    """The nodes of model ``m`` named under any of ``prefixes`` and what they read from the
    rest of the graph, each in the order first read: (the stage's nodes, the Constant nodes
    they read, the maps (a tensor node ``n`` reads as input ``k`` where ``is_map(n, k)``),
    the other tensors (initializers among them), the stage's outputs the rest of the graph
    or the graph's outputs read)."""
    g = m.graph
    made = {o: n for n in g.node for o in n.output}
    inits = {i.name for i in g.initializer}
    stage = [n for n in g.node if n.name.startswith(tuple(prefixes))]
    inside = {o for n in stage for o in n.output}
    consts, maps, others = [], [], []
    for n in stage:
        for k, t in enumerate(n.input):
            if not t or t in inside:
                continue
            p = made.get(t)
            if t not in inits and p is not None and p.op_type == "Constant":
                kind, t = consts, p
            else:
                kind = maps if t not in inits and is_map(n, k) else others
            if t not in kind:
                kind.append(t)
    names = {n.name for n in stage}
    read = {t for n in g.node if n.name not in names for t in n.input} | {o.name
                                                                         for o in g.output}
    return stage, consts, maps, others, [o for n in stage for o in n.output if o in read]


def renamed(nodes: list, rename: dict) -> list:
    """Copies of ``nodes`` with the tensors ``rename`` names renamed (a stage cut out of a
    whole model, its inputs and outputs given the stage graph's names)."""
    import onnx

    out = []
    for n in nodes:
        n2 = onnx.NodeProto()
        n2.CopyFrom(n)
        n2.input[:] = [rename.get(t, t) for t in n.input]
        n2.output[:] = [rename.get(t, t) for t in n.output]
        out.append(n2)
    return out


def main(argv=None) -> int:
    from tools.detectron2_graphs import ReuseFreedMemory

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", default="export", choices=("export", "bench", "e2e"))
    ap.add_argument("--out", default=OUT, help="where the stage graphs go (export, bench)")
    ap.add_argument("--keep", default=None, help="keep the whole models here (export; e2e "
                    "reads them there)")
    ap.add_argument("--opsets", type=int, nargs="+", default=[11, 16],
                    help="MMDeploy's configs say 11; at 16 its RoiAlign keeps aligned itself")
    ap.add_argument("--score-threshold", type=float, default=0.05,
                    help="the deploy config's and the box head's (0: 100 detections of random "
                    "weights reach the mask head)")
    ap.add_argument("--backend", default="onnxruntime", choices=("onnxruntime", "pplnn",
                                                                  "tensorrt"),
                    help="the deploy config's backend (export; others: the whole models only)")
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--reuse-freed-memory", action=ReuseFreedMemory,
                    help="ort_roi.reuse_freed_memory() first (bench, e2e)")
    args = ap.parse_args(argv)
    if args.what == "export":
        export(args.out, args.keep, args.opsets, args.score_threshold, args.backend)
    elif args.what == "bench":
        bench(args.out, args.repeat)
    else:
        e2e(args.keep or "/tmp/mmdeploy_onnx", args.opsets, args.repeat)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
