#!/usr/bin/env python3
"""MMRotate 1.x's Oriented R-CNN and RoI Transformer through MMDeploy 1.3.1 (issue 66,
"MMRotate"): the whole models, MMRotate's own (eager) detections on the same input, the
graphs' census and their rotated RoI stages cut out.

MMRotate 1.x is on PyPI as ``mmrotate-dev`` 1.0.1 (a pure-Python wheel of the dev-1.x line,
its configs under ``mmrotate/.mim/configs``). Its import-time asserts accept the
MMDetection venv's pins (mmcv <= 2.1.0, mmdet <= 3.4.0, mmengine < 1.0), so it shares
``tools/mmdeploy_graphs.py``'s venv, installed without its dependencies (they are mmdet's,
already there; the ``mim`` extra's ``mmdet < 3.2`` is not imported by anything)::

    /work/venv-mmdeploy/bin/pip install --no-deps mmrotate-dev==1.0.1
    /work/venv-mmdeploy/bin/python -m tools.mmrotate_zoo export [--keep DIR] [--as-is]
    /work/venv-mmdeploy/bin/python -m tools.mmrotate_zoo cut [--keep DIR]
    python -m tools.mmrotate_zoo census [--keep DIR]      # the project's venv

(from the repository root; DIR defaults to /tmp/w66rot; about 6 minutes on 2 cores with
``--as-is``.) mmrotate-dev 1.0.1 is upstream's dev-1.x branch (3ff004e) but for its version
string and the mmdet bound (dev-1.x asserts mmdet <= 3.2.0, which a source checkout would
need patched against mmdet 3.3.0).

(the 0.x line, PyPI's ``mmrotate`` 0.3.4, wants mmcv-full 1.x, mmdet 2.x and MMDeploy 0.14:
another venv and mmcv-full's ops compiled; ``onedl-mmrotate`` 1.2.1 is a source tarball of
a fork pinned to onedl-mmcv / onedl-mmdet.)

mmcv-lite has no compiled kernels. The graphs do not depend on them (MMDeploy's symbolics
write ``mmdeploy::MMCVRoIAlignRotated``, ``mmdeploy::NMSRotated``, the ONNX RoiAlign and
NonMaxSuppression), only the trace runs them, so ``mmcv._ext`` is stood in for: roi_align and
nms by torchvision's (``mmdeploy_graphs.stub_mmcv_ext``), and here

* ``roi_align_rotated_forward`` by the project's own ``ort_roi.ops.mmcv_roi_align_rotated``
  (its NumPy kernel: imported from this checkout, it needs neither onnxruntime-extensions nor
  onnxruntime), which the project checks against a literal transcription of mmcv's CPU
  kernel;
* ``nms_rotated`` by ``nms_rotated`` below: mmcv's CPU kernel's greedy loop (scores sorted
  descending by ``torch.sort``, the same call; a box suppressed when its IoU with a kept one
  is >= the threshold; the kept indices in score order) over the exact polygon IoU of two
  rotated rectangles in float64 (mmcv: float32), so a pair whose IoU lies within float32
  rounding of the threshold may be decided otherwise; every other decision is mmcv's.

Both the eager outputs and the trace use the same stand-ins.

MMDeploy 1.3.1 rewrites MMRotate's ``RotatedSingleRoIExtractor`` for TensorRT only (one
``mmdeploy::MMCVMultiLevelRotatedRoiAlign`` node); for onnxruntime the trace runs MMRotate's
own forward, whose ``if inds.numel() > 0`` keeps only the levels the export's rois reach.
Random weights send every proposal to level 0 (scales ~20-80 px, finest_scale 56), so the
graph as MMDeploy writes it here pools level 0 alone and zeroes the rest
(``..._onnxruntime_asis_11.onnx``, ``--as-is``). The default export traces
``every_level_forward`` (that forward with the branch always taken: the graph a trained
model's export gets when its export image's rois reach every level).

1. ``export``: each model (``MODELS``) with random init (``torch.manual_seed(0)`` before the
   model is built; the checksum of its weights printed at the eager build and at each
   export's), its box heads' ``score_thr`` and the deploy config's ``score_threshold`` set to
   ``--score-threshold`` (0: random weights still send rois to every later head), exported
   with MMDeploy's ``rotated-detection_onnxruntime_dynamic`` and
   ``rotated-detection_tensorrt_dynamic-320x320-1024x1024`` deploy configs (``DEPLOY``,
   written out from MMDeploy's configs/mmrotate: opset 11, outputs ``dets`` [1, n, 6] and
   ``labels`` [1, n], NMS iou 0.1, pre_top_k 3000, keep_top_k 2000) through
   ``mmdeploy.apis.torch2onnx`` on a 320 x 480 image: DOTA's test pipeline resizes it to
   683 x 1024, padded to 704 x 1024. The TensorRT config's export needs no TensorRT (only
   MMDeploy's device check refuses CPU; skipped). Kept as ``KEEP/{model}_{backend}_11.onnx``
   (~165 MB Oriented R-CNN, ~220 MB RoI Transformer). MMRotate's own detections
   (``model.predict``, ``rescale=False``: in the network input's frame, as the graph's) and
   the network input as ``KEEP/{model}_eager.npz`` (``input`` [1, 3, 704, 1024], ``dets``
   [n, 6]: cx, cy, w, h, theta, score; ``labels`` [n]); MMDeploy's rewritten forward on the
   same model and input, in PyTorch (what the graph computes), as
   ``KEEP/{model}_eager_mmdeploy.npz`` (``dets`` [1, n, 6], ``labels`` [1, n]): RoI
   Transformer's last box head regresses per class, which MMRotate's NMS keeps per class and
   MMDeploy's rewrite replaces by each roi's box of its top class. An export's error goes to
   ``KEEP/export_errors.json`` and the next is tried. ``--backends`` alone: the eager
   outputs only.
2. ``census``: each graph's node op types by domain, the custom nodes' attributes and
   inputs' shapes (onnx shape inference), the nodes under each RoI extractor's scope in
   order with their attributes and Constants; and ``ort_roi.InferenceSession`` on each
   onnxruntime graph (in the project's venv; in the mmdeploy venv without
   onnxruntime-extensions it reports the import error).
3. ``cut``: each RoI extractor's stage as a graph of its own, no weights: the four maps the
   pooling nodes read as ``feat0..3`` (strides 4..32), ``rois`` [R, 6] (rotated: batch, cx,
   cy, w, h, theta) or [R, 5] (RoI Transformer's first, horizontal stage) in, ``roi_feats``
   [R, 256, 7, 7] out; ``KEEP/stage_{graph}_11.onnx``, the horizontal stage
   ``KEEP/stage_{graph}_hbb_11.onnx`` (the TensorRT graphs' stages: their one node).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import sys
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ort_roi", "data")
IMAGE_HW = (320, 480)

#: model: its mmrotate-dev 1.0.1 config under .mim/configs
MODELS = {
    "oriented_rcnn": "oriented_rcnn/oriented-rcnn-le90_r50_fpn_1x_dota.py",
    "roi_trans": "roi_trans/roi-trans-le90_r50_fpn_1x_dota.py",
}

_DYNAMIC = {"input": {0: "batch", 2: "height", 3: "width"},
            "dets": {0: "batch", 1: "num_dets"}, "labels": {0: "batch", 1: "num_dets"}}
_BASE = dict(
    onnx_config=dict(type="onnx", export_params=True, keep_initializers_as_inputs=False,
                     opset_version=11, save_file="end2end.onnx", input_names=["input"],
                     output_names=["dets", "labels"], input_shape=None, optimize=True,
                     dynamic_axes=_DYNAMIC),
    codebase_config=dict(type="mmrotate", task="RotatedDetection",
                         post_processing=dict(score_threshold=0.05, iou_threshold=0.1,
                                              pre_top_k=3000, keep_top_k=2000,
                                              max_output_boxes_per_class=2000)))
#: MMDeploy's configs/mmrotate deploy configs (rotated-detection_static.py, _base_/onnx_config.py
#: and the backends' bases), written out
DEPLOY = {
    "onnxruntime": dict(copy.deepcopy(_BASE), backend_config=dict(type="onnxruntime")),
    "tensorrt": dict(copy.deepcopy(_BASE), backend_config=dict(
        type="tensorrt", common_config=dict(fp16_mode=False, max_workspace_size=1 << 30),
        model_inputs=[dict(input_shapes=dict(input=dict(min_shape=[1, 3, 320, 320],
                                                        opt_shape=[1, 3, 1024, 1024],
                                                        max_shape=[1, 3, 1024, 1024])))])),
}


def deploy_config(backend: str, opset: int, thr: float):
    from mmengine import Config

    d = copy.deepcopy(DEPLOY[backend])
    d["onnx_config"]["opset_version"] = opset
    d["codebase_config"]["post_processing"]["score_threshold"] = thr
    return Config(d)


# --- the trace's stand-ins ---------------------------------------------------------------

def _corners(b):
    """[..., 5] (cx, cy, w, h, theta) -> [..., 4, 2], counter-clockwise in a y-up frame."""
    import numpy as np

    c, s = np.cos(b[..., 4]), np.sin(b[..., 4])
    dx = np.stack([-0.5, 0.5, 0.5, -0.5]) * b[..., 2:3]
    dy = np.stack([-0.5, -0.5, 0.5, 0.5]) * b[..., 3:4]
    return np.stack([b[..., 0:1] + dx * c[..., None] - dy * s[..., None],
                     b[..., 1:2] + dx * s[..., None] + dy * c[..., None]], -1)


def _inside(p, q):
    """p [..., K, 2] inside (or on) the convex quads q [..., 4, 2] (either orientation)."""
    import numpy as np

    e = np.roll(q, -1, -2) - q  # [..., 4, 2]
    d = p[..., :, None, :] - q[..., None, :, :]  # [..., K, 4, 2]
    cross = e[..., None, :, 0] * d[..., 1] - e[..., None, :, 1] * d[..., 0]
    eps = 1e-9 * (np.abs(e).max((-1, -2))[..., None, None] ** 2 + 1)
    return (cross >= -eps).all(-1) | (cross <= eps).all(-1)


def rotated_iou(a, b):
    """IoU of rotated boxes a [5] against b [M, 5] (cx, cy, w, h, theta radians), float64:
    the intersection polygon's vertices (edge crossings, corners inside the other box)
    ordered by angle about their mean, its area by the shoelace formula."""
    import numpy as np

    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    ctr = a[:2].copy()  # about a's centre, as mmcv's kernel computes
    a = a.copy(); b = b.copy()
    a[:2] -= ctr; b[:, :2] -= ctr
    pa = np.broadcast_to(_corners(a), (len(b), 4, 2))
    pb = _corners(b)
    ea, eb = np.roll(pa, -1, 1) - pa, np.roll(pb, -1, 1) - pb
    # edge i of a against edge j of b: pa_i + t ea_i = pb_j + u eb_j
    A, E, B, F = pa[:, :, None], ea[:, :, None], pb[:, None], eb[:, None]
    den = E[..., 0] * F[..., 1] - E[..., 1] * F[..., 0]
    d = B - A
    with np.errstate(all="ignore"):
        t = (d[..., 0] * F[..., 1] - d[..., 1] * F[..., 0]) / den
        u = (d[..., 0] * E[..., 1] - d[..., 1] * E[..., 0]) / den
        ok = (den != 0) & (t >= 0) & (t <= 1) & (u >= 0) & (u <= 1)
        cross = (A + np.where(ok, t, 0)[..., None] * E).reshape(len(b), 16, 2)
    pts = np.concatenate([cross, pa, pb], 1)  # [M, 24, 2]
    valid = np.concatenate([ok.reshape(len(b), 16), _inside(pa, pb), _inside(pb, pa)], 1)
    pts = np.where(valid[..., None], pts, 0.0)
    n = valid.sum(1)
    mean = pts.sum(1) / np.maximum(n, 1)[:, None]
    ang = np.arctan2(pts[..., 1] - mean[:, 1:2], pts[..., 0] - mean[:, 0:1])
    ang = np.where(valid, ang, np.inf)
    order = np.argsort(ang, 1, kind="stable")
    pts = np.take_along_axis(pts, order[..., None], 1)
    first = pts[:, :1]
    pts = np.where(np.take_along_axis(valid, order, 1)[..., None], pts, first)
    nxt = np.roll(pts, -1, 1)
    inter = 0.5 * np.abs((pts[..., 0] * nxt[..., 1] - pts[..., 1] * nxt[..., 0]).sum(1))
    inter = np.where(n > 2, inter, 0.0)
    area_a, area_b = a[2] * a[3], b[:, 2] * b[:, 3]
    union = area_a + area_b - inter
    with np.errstate(all="ignore"):
        return np.where(union > 0, inter / union, 0.0)


def nms_rotated(dets, scores, order, dets_sorted, labels, iou_threshold, multi_label):
    """mmcv._ext.nms_rotated's CPU path (nms_rotated_cpu: dets, scores, iou_threshold): the
    kept indices in descending score order (see the module's docstring for how exact)."""
    import numpy as np
    import torch

    if dets.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    _, order_t = scores.sort(0, descending=True)
    d = dets[:, :5].detach().double().numpy()[order_t.numpy()]
    alive = np.ones(len(d), bool)
    keep = []
    for i in range(len(d)):
        if not alive[i]:
            continue
        keep.append(i)
        rest = np.flatnonzero(alive[i + 1:]) + i + 1
        if len(rest):
            alive[rest[rotated_iou(d[i], d[rest]) >= float(iou_threshold)]] = False
    return order_t[torch.as_tensor(keep, dtype=torch.long)]


def stub_rotated_ext() -> bool:
    """``tools/mmdeploy_graphs.stub_mmcv_ext`` and the rotated kernels (module docstring)."""
    import torch

    from tools import mmdeploy_graphs as mg

    stubbed = mg.stub_mmcv_ext()
    if not stubbed:
        return False
    from ort_roi.ops import mmcv_roi_align_rotated  # this checkout's: run from its root

    def roi_align_rotated_forward(input, rois, output, pooled_height, pooled_width,
                                  spatial_scale, sampling_ratio, aligned, clockwise):
        out = mmcv_roi_align_rotated(
            input.detach().contiguous().numpy(), rois.detach().contiguous().numpy(),
            output_height=int(pooled_height), output_width=int(pooled_width),
            spatial_scale=float(spatial_scale), sampling_ratio=int(sampling_ratio),
            aligned=int(bool(aligned)), clockwise=int(bool(clockwise)))
        output.copy_(torch.from_numpy(out))

    ext = sys.modules["mmcv._ext"]
    ext.roi_align_rotated_forward = roi_align_rotated_forward
    ext.nms_rotated = nms_rotated
    return True


# --- export ------------------------------------------------------------------------------

def model_config(name: str, thr: float):
    import mmrotate
    from mmengine import Config

    cfg = Config.fromfile(os.path.join(os.path.dirname(mmrotate.__file__), ".mim", "configs",
                                       MODELS[name]))
    rcnn = cfg.model.test_cfg.get("rcnn")
    for d in (rcnn if isinstance(rcnn, (list, tuple)) else [rcnn]):
        if d is not None and "score_thr" in d:
            d["score_thr"] = thr
    return cfg


def _checksum(model) -> str:
    h = hashlib.sha1()
    for k, v in model.state_dict().items():
        h.update(k.encode())
        h.update(v.detach().cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:12]


def _image():
    import numpy as np

    return np.random.default_rng(0).integers(0, 256, (*IMAGE_HW, 3), dtype=np.uint8)


def eager(name: str, keep: str, thr: float) -> str:
    """MMRotate's own detections (random init, seed 0) on the export's input; the path."""
    import numpy as np
    import torch

    from mmdeploy.apis import build_task_processor

    cfg = model_config(name, thr)
    tp = build_task_processor(cfg, deploy_config("onnxruntime", 11, thr), "cpu")
    torch.manual_seed(0)
    model = tp.build_pytorch_model(None)
    print(name, "eager weights", _checksum(model), flush=True)
    data, inputs = tp.create_input(_image(), None, data_preprocessor=model.data_preprocessor)
    with torch.no_grad():
        res = model.predict(inputs, data["data_samples"], rescale=False)[0].pred_instances
    boxes = res.bboxes.tensor if hasattr(res.bboxes, "tensor") else res.bboxes
    dets = torch.cat([boxes, res.scores[:, None]], 1).numpy()
    path = os.path.join(keep, f"{name}_eager.npz")
    np.savez(path, input=inputs.numpy(), dets=dets, labels=res.labels.numpy())
    print(name, "eager: input", tuple(inputs.shape), "dets", dets.shape, "->", path, flush=True)
    rewritten(name, keep, thr, tp, model, data, inputs)
    return path


def rewritten(name: str, keep: str, thr: float, tp, model, data, inputs) -> str:
    """The same model and input through MMDeploy's rewritten forward in PyTorch (what the
    export traces, with MMRotate's extractor on every level): ``dets`` [1, n, 6],
    ``labels`` [1, n] in ``KEEP/{model}_eager_mmdeploy.npz``. It differs from MMRotate's
    own where MMDeploy's rewrites compute otherwise (a box head that regresses per class:
    MMDeploy keeps each roi's box of its top class for every class)."""
    import numpy as np
    import torch

    from mmdeploy.core import RewriterContext, patch_model
    from mmdeploy.utils import IR

    deploy = deploy_config("onnxruntime", 11, thr)
    pm = patch_model(model, cfg=deploy, backend="onnxruntime", ir=IR.ONNX)
    with RewriterContext(cfg=deploy, backend="onnxruntime", opset=11, ir=IR.ONNX), \
            torch.no_grad():
        dets, labels = pm.forward(inputs, data_samples=data["data_samples"], mode="predict")
    path = os.path.join(keep, f"{name}_eager_mmdeploy.npz")
    np.savez(path, dets=dets.numpy(), labels=labels.numpy())
    print(name, "MMDeploy's rewritten forward: dets", tuple(dets.shape), "->", path, flush=True)
    return path


def every_level_forward(self, feats, rois, roi_scale_factor=None):
    """MMRotate 1.x's ``RotatedSingleRoIExtractor.forward`` as it traces when every level
    holds rois: its ``if inds.numel() > 0`` always taken (MMDeploy has no onnxruntime rewrite
    of it, so the trace keeps only the levels the export's rois reach; the others become
    ``roi_feats += sum(params) * 0 + feats[i].sum() * 0``)."""
    rois = rois.type_as(feats[0])
    out_size = self.roi_layers[0].output_size
    num_levels = len(feats)
    roi_feats = feats[0].new_zeros(rois.size(0), self.out_channels, *out_size)
    if num_levels == 1:
        return self.roi_layers[0](feats[0], rois)
    target_lvls = self.map_roi_levels(rois, num_levels)
    if roi_scale_factor is not None:
        rois = self.roi_rescale(rois, roi_scale_factor)
    for i in range(num_levels):
        inds = (target_lvls == i).nonzero(as_tuple=False).squeeze(1)
        roi_feats[inds] = self.roi_layers[i](feats[i], rois[inds])
    return roi_feats


def export_model(name: str, backend: str, keep: str, opset: int, thr: float,
                 every_level: bool = True) -> str:
    import torch

    import mmdeploy.codebase.mmrotate.deploy.rotated_detection as rd
    from mmdeploy.apis import torch2onnx

    if backend == "tensorrt":  # the graph is written on CPU alike: only the device check
        import mmdeploy.apis.utils.utils as u  # refuses it

        u.check_backend_device = lambda deploy_cfg, device: None
    build = rd.RotatedDetection.build_pytorch_model

    def built(self, *a, **k):
        m = build(self, *a, **k)
        print(name, backend, "export weights", _checksum(m), flush=True)
        return m

    rd.RotatedDetection.build_pytorch_model = built
    from mmrotate.models.roi_heads.roi_extractors.rotate_single_level_roi_extractor import \
        RotatedSingleRoIExtractor as X

    forward = X.forward
    if every_level and backend == "onnxruntime":
        X.forward = every_level_forward
    try:
        save = f"{name}_{backend}{'' if every_level else '_asis'}_{opset}.onnx"
        torch.manual_seed(0)
        torch2onnx(_image(), keep, save, deploy_config(backend, opset, thr),
                   model_config(name, thr), None, "cpu")
    finally:
        rd.RotatedDetection.build_pytorch_model = build
        X.forward = forward
    return os.path.join(keep, save)


def _error(e) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    where = next((f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                  for f in reversed(tb) if "site-packages" in f.filename), "")
    first = (str(e).splitlines() or [""])[0]
    return f"{type(e).__name__}: {first[:300]} ({where})"


def export(keep: str, models: list[str], backends: list[str], opset: int, thr: float,
           with_eager: bool = True, as_is: bool = False) -> None:
    print("mmcv._ext stood in for:", stub_rotated_ext(), flush=True)
    os.makedirs(keep, exist_ok=True)
    log = os.path.join(keep, "export_errors.json")
    errors = json.load(open(log)) if os.path.exists(log) else {}
    jobs = ([(m, "eager") for m in models if with_eager] + [(m, b) for m in models
                                                              for b in backends]
            + [(m, "onnxruntime_asis") for m in models if as_is])
    for name, what in jobs:
        key = f"{name}_{what}"
        try:
            path = (eager(name, keep, thr) if what == "eager"
                    else export_model(name, what.split("_")[0], keep, opset, thr,
                                      not what.endswith("_asis")))
            print("done", key, path, os.path.getsize(path), flush=True)
            errors.pop(key, None)
        except Exception as e:  # recorded; the next is tried
            errors[key] = _error(e)
            print("FAILED", key, errors[key], flush=True)
        with open(log, "w") as f:
            json.dump(errors, f, indent=1)


# --- census ------------------------------------------------------------------------------

def _attrs(n) -> dict:
    from onnx import helper

    out = {}
    for a in n.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else (list(v) if isinstance(
            v, (list, tuple)) or type(v).__name__.startswith("Repeated") else v)
    return out


def _const(n):
    from onnx import numpy_helper

    for a in n.attribute:
        if a.name == "value":
            v = numpy_helper.to_array(a.t)
            return v.tolist() if v.size <= 8 else f"{v.dtype}{list(v.shape)}"
    return None


def _shapes(model) -> dict:
    import onnx

    try:
        inf = onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception as e:  # noqa: BLE001
        print("shape inference failed:", e)
        return {}
    out = {}
    for v in list(inf.graph.value_info) + list(inf.graph.input) + list(inf.graph.output):
        t = v.type.tensor_type
        if t.HasField("shape"):
            out[v.name] = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?")
                           for d in t.shape.dim]
    return out


def census(path: str, run: bool = True) -> None:
    import collections

    import onnx

    m = onnx.load(path)
    g = m.graph
    print(f"\n=== {os.path.basename(path)}: {len(g.node)} nodes, opsets "
          f"{[(o.domain or 'ai.onnx', o.version) for o in m.opset_import]}")
    print("inputs", [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
                     for i in g.input])
    print("outputs", [(o.name, [d.dim_param or d.dim_value
                                for d in o.type.tensor_type.shape.dim]) for o in g.output])
    count = collections.Counter(f"{n.domain or 'ai.onnx'}::{n.op_type}" for n in g.node)
    print("ops:", dict(sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))))
    shapes = _shapes(m)
    made = {o: n for n in g.node for o in n.output}
    for n in g.node:
        if n.domain not in ("", "ai.onnx") or n.op_type in ("NonMaxSuppression", "RoiAlign"):
            ins = []
            for t in n.input:
                p = made.get(t)
                ins.append((t, shapes.get(t), p.op_type if p is not None else "graph input"))
            print(f"  {n.domain}::{n.op_type} {n.name!r} attrs {_attrs(n)}\n    in {ins}\n"
                  f"    out {[(t, shapes.get(t)) for t in n.output]}")
    scopes = collections.OrderedDict()
    for n in g.node:
        if "roi_extractor" in n.name:
            scopes.setdefault(n.name.split("roi_extractor")[0] + "roi_extractor"
                              + n.name.split("roi_extractor")[1].split("/")[0] + "/",
                              []).append(n)
    for scope, nodes in scopes.items():
        print(f"  scope {scope}: {len(nodes)} nodes: "
              + dict.__repr__(collections.Counter(n.op_type for n in nodes)))
        for n in nodes:
            extra = ""
            if n.op_type == "Constant":
                extra = f" = {_const(n)}"
            elif n.attribute:
                extra = f" {_attrs(n)}"
            consts = [f"{t}={_const(made[t])}" for t in n.input
                      if t in made and made[t].op_type == "Constant"
                      and not made[t].name.startswith(scope)]
            print(f"    {n.op_type} {n.name}{extra}" + (f" reads {consts}" if consts else ""))
    if run:
        _try_run(m)


def _try_run(m) -> None:
    """The graph in onnxruntime with ort_roi's ops (when ort_roi's dependencies import)."""
    try:
        import ort_roi
        sess = ort_roi.InferenceSession(m.SerializeToString())
        print("  ort_roi.InferenceSession: opened; inputs",
              [(i.name, i.shape) for i in sess.get_inputs()])
    except Exception as e:  # noqa: BLE001
        print("  ort_roi.InferenceSession:", _error(e))


def census_all(keep: str, run: bool) -> None:
    for f in sorted(os.listdir(keep)):
        if f.endswith(".onnx") and not f.startswith("stage_"):
            census(os.path.join(keep, f), run and "onnxruntime" in f)


# --- cut ---------------------------------------------------------------------------------

ROTATED = "MMCVRoIAlignRotated"
MULTI = ("MMCVMultiLevelRoiAlign", "MMCVMultiLevelRotatedRoiAlign")  # TensorRT's: rois, feats


def cut(whole: str, prefixes: list[str], opset: int, name: str):
    """The nodes named under ``prefixes`` (and the Constants they read from outside them),
    no weights: the maps the MMCVRoIAlignRotated nodes read as ``feat0..``, the other
    tensor read as ``rois`` [R, 6], what the rest of the graph reads as ``roi_feats``."""
    import onnx
    from onnx import TensorProto, helper

    from tools.mmdeploy_graphs import renamed, stage_reads

    m = onnx.load(whole)
    made = {o: n for n in m.graph.node for o in n.output}
    inits = {i.name for i in m.graph.initializer}
    stage, consts, read_maps, read, outs = stage_reads(
        m, prefixes, lambda n, k: ((n.op_type in (ROTATED, "RoiAlign") and k == 0)
                                   or n.op_type == "ReduceSum" or (n.op_type in MULTI and k > 0)))
    # (ReduceSum: an empty level's ``sum() * 0``)
    if not stage:
        raise SystemExit(f"{name}: no node under {prefixes}")
    if any(t in inits for t in read):
        raise SystemExit(f"{name}: the stage reads the weights {[t for t in read if t in inits]}")
    level = {t: (made[t].name.split("fpn_convs.")[1].split("/")[0] if t in made
                 and "fpn_convs." in made[t].name else str(len(read_maps) + k))
             for k, t in enumerate(read_maps)}
    maps = {t: f"feat{level[t]}" for t in sorted(read_maps, key=lambda t: int(level[t]))}
    others = {t: "rois" if not i else f"in_{i}" for i, t in enumerate(read)}
    if len(others) != 1:
        raise SystemExit(f"{name}: inputs besides the maps: {list(others)}")
    if len(outs) != 1:
        raise SystemExit(f"{name}: outputs {outs}")
    rename = {**maps, **others, outs[0]: "roi_feats"}
    nodes = renamed(consts + stage, rename)
    ins = [helper.make_tensor_value_info(v, TensorProto.FLOAT, ["N", 256, f"H{v[4:]}",
                                                                 f"W{v[4:]}"])
           for v in maps.values()]
    cols = 6 if any(n.op_type in (ROTATED, MULTI[1]) for n in stage) else 5
    ins.append(helper.make_tensor_value_info("rois", TensorProto.FLOAT, ["R", cols]))
    outv = [helper.make_tensor_value_info("roi_feats", TensorProto.FLOAT, ["R", 256, 7, 7])]
    graph = helper.make_graph(nodes, name, ins, outv)
    domains = sorted({n.domain for n in stage if n.domain})
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]
                              + [helper.make_opsetid(d, 1) for d in domains],
                              ir_version=m.ir_version, producer_name=m.producer_name,
                              producer_version=m.producer_version)
    onnx.checker.check_model(model)
    return model


def cut_all(keep: str, opset: int = 11) -> None:
    """Every RoI extractor's stage of every whole graph in ``keep``: the rotated one as
    ``stage_{graph}_{opset}.onnx``, a horizontal one (RoI Transformer's first stage) as
    ``stage_{graph}_hbb_{opset}.onnx``."""
    import onnx

    for f in sorted(os.listdir(keep)):
        if not f.endswith(f"_{opset}.onnx") or f.startswith("stage_"):
            continue
        m = onnx.load(os.path.join(keep, f))
        scopes = {}  # scope: rotated
        for n in m.graph.node:
            if "roi_extractor" not in n.name:
                continue
            if n.op_type in (ROTATED, "RoiAlign"):
                scopes.setdefault(n.name.split("/roi_layers")[0] + "/", n.op_type == ROTATED)
            elif n.op_type in MULTI:
                scopes.setdefault(n.name.rsplit("/", 1)[0] + "/", n.op_type == MULTI[1])
        stem = f[:-len(f"_{opset}.onnx")]
        for s, rotated in scopes.items():
            if not rotated and "_asis" in stem:  # MMDeploy's own rewrite: as without --as-is
                continue
            try:
                c = cut(os.path.join(keep, f), [s], opset, s.strip("/"))
            except SystemExit as e:
                print(f, s, "not cut:", e)
                continue
            dst = os.path.join(keep, f"stage_{stem}{'' if rotated else '_hbb'}_{opset}.onnx")
            onnx.save(c, dst)
            print("wrote", dst, os.path.getsize(dst), "bytes,", len(c.graph.node), "nodes,",
                  [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim])
                   for i in c.graph.input], "->", [o.name for o in c.graph.output])


def _dets_as_set(dets, labels):
    """Detections [n, 6] with their labels as rows, sorted (rows of near-equal score may
    come in another order)."""
    import numpy as np

    rows = np.concatenate([dets.reshape(-1, 6), labels.reshape(-1, 1).astype(np.float32)], 1)
    return rows[np.lexsort(np.round(rows, 2).T[::-1])].astype(np.float64)


def e2e(keep: str, models: list[str], repeat: int, asis: bool = True) -> dict:
    """Each exported onnxruntime graph (and ``..._asis``) run as it is (a plain onnxruntime
    session with ``ort_roi.session_options()``: its mmdeploy::MMCVRoIAlignRotated and
    NMSRotated nodes on ort_roi's kernels) against ``ort_roi.convert``'s graph (its rotated
    stage fused), on the network input of ``{model}_eager.npz``: outputs compared, then with
    MMDeploy's rewritten forward in PyTorch (``{model}_eager_mmdeploy.npz``: what the graph
    means) as sets, and the seconds per input in interleaved settled rounds (``repeat`` 0:
    one run each). ``KEEP/e2e_{repeat}.json``."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    import ort_roi
    from ort_roi.cli.bench_timing import time_together
    from tools.detectron2_graphs import SETTLE_S
    from tools.mmdet_zoo import _roi_nodes
    from tests.graph_helpers import convert_quietly

    rows = {}
    for name in models:
        with np.load(os.path.join(keep, f"{name}_eager.npz")) as d:
            feed = {"input": d["input"]}
        with np.load(os.path.join(keep, f"{name}_eager_mmdeploy.npz")) as d:
            meant = _dets_as_set(d["dets"], d["labels"])
        for variant in ("onnxruntime", "onnxruntime_asis") if asis else ("onnxruntime",):
            path = os.path.join(keep, f"{name}_{variant}_11.onnx")
            if not os.path.exists(path):
                continue
            native = onnx.load(path)
            conv, done = convert_quietly(native)
            so = ort_roi.session_options()
            a = ort.InferenceSession(native.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
            b = ort.InferenceSession(conv.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"])
            if repeat:
                t = time_together({"native": lambda: a.run(None, feed),
                                   "converted": lambda: b.run(None, feed)}, repeat, 0,
                                  shuffle=0, settle_s=SETTLE_S)
                outs = t["native"][1], t["converted"][1]
                ratios = sorted(x / y for x, y in zip(t["native"][2], t["converted"][2]))
            else:
                outs = a.run(None, feed), b.run(None, feed)
            sets = [_dets_as_set(o[0], o[1]) for o in outs]
            row = dict(moved=[m[2] for m in done.moved], notes=done.notes,
                       native_roi=_roi_nodes(native), converted_roi=_roi_nodes(conv),
                       dets=list(outs[0][0].shape),
                       equal=all(np.array_equal(x, y) for x, y in zip(*outs)),
                       max_diff=max(float(np.abs(x.astype(np.float64) - y).max(initial=0))
                                    for x, y in zip(*outs)),
                       vs_mmdeploy_eager_as_sets=[
                           float(np.abs(x - meant).max()) if x.shape == meant.shape else
                           f"shapes {list(x.shape)} / {list(meant.shape)}" for x in sets])
            if repeat:
                row.update(native_s=t["native"][0], converted_s=t["converted"][0],
                           ratio=ratios[len(ratios) // 2], ratios_range=(ratios[0], ratios[-1]),
                           repeat=repeat)
            rows[f"{name}_{variant}"] = row
            print(name, variant, json.dumps(row, indent=1), flush=True)
    with open(os.path.join(keep, f"e2e_{repeat}.json"), "w") as f:
        json.dump(rows, f, indent=1)
    return rows


#: the committed stage graphs (tools/mmrotate_zoo.py cut, renamed)
STAGES = ("mmrotate_stage_oriented_rcnn_onnxruntime_11.onnx",
          "mmrotate_stage_oriented_rcnn_onnxruntime_asis_11.onnx",
          "mmrotate_stage_oriented_rcnn_tensorrt_11.onnx")


def stage_feed(rois: int = 2000, hw=(1024, 1024), seed: int = 0) -> dict:
    """A committed stage's inputs at the detectors' load: the FPN maps of DOTA's 1024 x 1024
    input (strides 4..32, 256 channels), ``rois`` rotated rois (the RPN's 2000 proposals),
    sides 8 to 800 px log-uniform (every level), angles in [-pi/2, pi/2]."""
    import numpy as np

    rng = np.random.default_rng(seed)
    feed = {f"feat{k}": rng.standard_normal((1, 256, hw[0] >> (2 + k), hw[1] >> (2 + k))
                                            ).astype(np.float32) for k in range(4)}
    side = np.exp(rng.uniform(np.log(8), np.log(800), (rois, 2)))
    feed["rois"] = np.concatenate([np.zeros((rois, 1)), rng.uniform(0, hw[1], (rois, 1)),
                                   rng.uniform(0, hw[0], (rois, 1)), side,
                                   rng.uniform(-np.pi / 2, np.pi / 2, (rois, 1))],
                                  1).astype(np.float32)
    return feed


def bench(out: str, repeat: int) -> None:
    """Each committed stage as exported (its mmdeploy nodes on ort_roi's kernels, per level)
    against converted (fused), back to back and settled (``stage_rounds``)."""
    import onnx
    import onnxruntime as ort

    import ort_roi
    from tests.graph_helpers import convert_quietly
    from tools.detectron2_graphs import stage_rounds

    for k in STAGES[:2]:  # (the TensorRT stage's node runs only converted: nothing to race)
        m = onnx.load(os.path.join(out, k))
        conv, _ = convert_quietly(m)
        so = ort_roi.session_options()
        a, b = (ort.InferenceSession(x.SerializeToString(), so,
                                     providers=["CPUExecutionProvider"]) for x in (m, conv))
        feed = stage_feed()
        ours = sorted(n.op_type for n in conv.graph.node if n.domain == "ort_roi")
        print(f"{k}, 2000 rois, converted: {ours}: "
              + stage_rounds(lambda: a.run(None, feed)[0], lambda: b.run(None, feed)[0],
                             repeat), flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    from tools.detectron2_graphs import ReuseFreedMemory

    ap.add_argument("what", choices=("export", "census", "cut", "e2e", "bench"))
    ap.add_argument("--keep", default="/tmp/w66rot")
    ap.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    ap.add_argument("--backends", nargs="*", default=list(DEPLOY), choices=list(DEPLOY),
                    help="export: the deploy configs (none: the eager outputs only)")
    ap.add_argument("--opset", type=int, default=11)
    ap.add_argument("--score-threshold", type=float, default=0.0)
    ap.add_argument("--no-eager", action="store_true", help="export: skip the eager outputs")
    ap.add_argument("--as-is", action="store_true", help="export: also the onnxruntime graph "
                    "of MMRotate's extractor as it traces on the export's rois "
                    "({model}_onnxruntime_asis_11.onnx)")
    ap.add_argument("--no-run", action="store_true", help="census: do not open sessions")
    ap.add_argument("--repeat", type=int, default=3, help="e2e, bench: interleaved rounds")
    ap.add_argument("--out", default=OUT, help="bench: where the committed stages are")
    ap.add_argument("--reuse-freed-memory", action=ReuseFreedMemory,
                    help="ort_roi.reuse_freed_memory() first (e2e, bench)")
    args = ap.parse_args(argv)
    if args.what == "export":
        export(args.keep, args.models, args.backends, args.opset, args.score_threshold,
               not args.no_eager, args.as_is)
    elif args.what == "census":
        census_all(args.keep, not args.no_run)
    elif args.what == "e2e":
        e2e(args.keep, args.models, args.repeat)
    elif args.what == "bench":
        bench(args.out, args.repeat)
    else:
        cut_all(args.keep, args.opset)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
