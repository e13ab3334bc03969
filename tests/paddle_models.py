"""The Paddle models the end-to-end tests run, built from PaddleDetection's pieces with random
seeded weights that carry a trained model's load: ``build`` (Faster / Mask / Cascade /
Cascade Mask R-CNN FPN, as PaddleDetection configures them; tools/paddledet_e2e.py says how
they are built and loaded) and ``build_rfcn`` (an R-FCN-style detector with psroi_pool;
tools/paddle_rfcn_e2e.py), the ``feeds`` they take, Paddle Inference's predictor
(``paddle_predictor``), and the marks that skip the tests where Paddle or paddledet is absent.
The tools that compare and time these models import them from here.

paddledet 2.6.0 needs these patches under Paddle 3.3.1 (``import_ppdet`` applies them, in this
process, to copies of the functions; the installed package is not touched):
``RPNHead._gen_proposal``, ``CascadeHead._get_rois_from_boxes`` and
``BBoxPostProcess.get_pred`` index 0-D tensors (``shape(x)[0]``, concatenated;
``scale_factor[0][0]``); and ``ops.multiclass_nms`` builds the op with the old static API,
which PIR refuses.
"""

from __future__ import annotations

import importlib.util
import inspect
import linecache
import os
import sys
import tempfile
import textwrap
import types

import numpy as np

#: What the Paddle end-to-end tests need that is not installed.
NEEDS = [m for m in ("paddle", "paddle2onnx", "ppdet") if importlib.util.find_spec(m) is None]
INSTALL = ("pip install '.[paddle]' and `pip install --no-deps paddledet==2.6.0` with its "
           "imports (pyyaml typeguard tqdm scipy shapely terminaltables pycocotools "
           "opencv-python-headless requests six matplotlib scikit-learn pandas)")


def needs_paddledet(*ops: str) -> list:
    """The marks of a test of these models: skipped without Paddle, paddle2onnx and
    paddledet, or when ort_roi does not register one of ``ops`` (op types of domain ort_roi).

    Args:
        *ops: the ort_roi op types the exported models hold.

    Returns:
        A list of ``pytest.mark.skipif`` marks (a module's ``pytestmark``).
    """
    import pytest  # the marks only: the tools that build these models run without pytest

    import ort_roi
    from ort_roi.ops import form

    missing = [n for n in ops if form(ort_roi.DOMAIN, n) is None]
    return [pytest.mark.skipif(bool(NEEDS), reason="needs " + ", ".join(NEEDS) + ": " + INSTALL),
            pytest.mark.skipif(bool(missing),
                               reason="ort_roi does not register " + ", ".join(missing))]


def assert_detections_equal(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    """onnxruntime's detections (``got``: [K, 6] rows label, score, box, and the count per
    image) equal Paddle Inference's (``want``): the counts and labels exactly, scores and boxes
    within 1e-4."""
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[0][:, 0], want[0][:, 0])  # labels
    np.testing.assert_allclose(got[0][:, 1:], want[0][:, 1:], rtol=0, atol=1e-4)


CONFIG = """
architecture: FasterRCNN
export_onnx: true
num_classes: 80
FasterRCNN: {backbone: ResNet, neck: FPN, rpn_head: RPNHead, bbox_head: BBoxHead,
             bbox_post_process: BBoxPostProcess}
ResNet: {depth: %(depth)d, norm_type: bn, freeze_at: 0, return_idx: [0, 1, 2, 3],
         num_stages: 4}
FPN: {out_channel: 256}
RPNHead:
  anchor_generator: {aspect_ratios: [0.5, 1.0, 2.0],
                     anchor_sizes: [[32], [64], [128], [256], [512]],
                     strides: [4, 8, 16, 32, 64]}
  rpn_target_assign: {batch_size_per_im: 256, fg_fraction: 0.5, negative_overlap: 0.3,
                      positive_overlap: 0.7, use_random: true}
  train_proposal: {min_size: 0.0, nms_thresh: 0.7, pre_nms_top_n: 2000,
                   post_nms_top_n: 1000, topk_after_collect: true}
  test_proposal: {min_size: 0.0, nms_thresh: 0.7, pre_nms_top_n: %(pre)d,
                  post_nms_top_n: %(post)d}
BBoxHead:
  head: TwoFCHead
  roi_extractor: {resolution: 7, sampling_ratio: 0, aligned: true}
  bbox_assigner: BBoxAssigner
BBoxAssigner: {batch_size_per_im: 512, bg_thresh: 0.5, fg_thresh: 0.5, fg_fraction: 0.25,
               use_random: true}
TwoFCHead: {out_channel: 1024}
BBoxPostProcess:
  decode: RCNNBox
  nms: {name: MultiClassNMS, keep_top_k: %(keep)d, score_threshold: 0.05, nms_threshold: 0.5}
"""
#: PaddleDetection's mask_rcnn_r50_fpn_1x_coco on top of CONFIG: MaskHead (MaskFeat, 4 convs
#: of 256 and a 2x deconvolution, on RoIAlign 14x14 aligned adaptive sampling of the final
#: boxes through the FPN levels again), mask_fcn_logits per class, MaskPostProcess (the
#: label's mask, sigmoid, pasted onto the image by grid_sample, >= 0.5; export_onnx's route).
MASK_CONFIG = CONFIG.replace("architecture: FasterRCNN", "architecture: MaskRCNN").replace(
    "FasterRCNN: {backbone: ResNet, neck: FPN, rpn_head: RPNHead, bbox_head: BBoxHead,\n"
    "             bbox_post_process: BBoxPostProcess}",
    "MaskRCNN: {backbone: ResNet, neck: FPN, rpn_head: RPNHead, bbox_head: BBoxHead,\n"
    "           mask_head: MaskHead, bbox_post_process: BBoxPostProcess,\n"
    "           mask_post_process: MaskPostProcess}") + """
MaskHead:
  head: MaskFeat
  roi_extractor: {resolution: 14, sampling_ratio: 0, aligned: true}
  mask_assigner: MaskAssigner
  share_bbox_feat: false
MaskFeat: {num_convs: 4, out_channel: 256}
MaskAssigner: {mask_resolution: 28}
MaskPostProcess: {binary_thresh: 0.5}
"""
#: PaddleDetection's cascade_rcnn_r50_fpn_1x_coco on the same pieces: CascadeHead, three
#: stages (CascadeTwoFCHead 1024 each, class-agnostic deltas weighted 10/10/5/5, 20/20/10/10,
#: 30/30/15/15), each pooling its boxes through the FPN levels (RoIAlign 7x7), the next stage
#: on the previous one's boxes; the three stages' softmax averaged, the last stage's boxes
#: decoded with prior_box_var 30/30/15/15.
CASCADE_CONFIG = CONFIG.replace("architecture: FasterRCNN", "architecture: CascadeRCNN").replace(
    "FasterRCNN: {backbone: ResNet, neck: FPN, rpn_head: RPNHead, bbox_head: BBoxHead,",
    "CascadeRCNN: {backbone: ResNet, neck: FPN, rpn_head: RPNHead, bbox_head: CascadeHead,"
).replace("BBoxHead:\n  head: TwoFCHead", "CascadeHead:\n  head: CascadeTwoFCHead").replace(
    "use_random: true}\nTwoFCHead: {out_channel: 1024}",
    "use_random: true, cascade_iou: [0.5, 0.6, 0.7]}\nCascadeTwoFCHead: {out_channel: 1024}"
).replace("decode: RCNNBox", "decode: {name: RCNNBox, prior_box_var: [30.0, 30.0, 15.0, 15.0]}")
#: PaddleDetection's cascade_mask_rcnn_r50_fpn_1x_coco: CASCADE_CONFIG with MASK_CONFIG's mask
#: head and post-processing on the final boxes.
CASCADE_MASK_CONFIG = CASCADE_CONFIG.replace(
    "CascadeRCNN: {backbone: ResNet, neck: FPN, rpn_head: RPNHead, bbox_head: CascadeHead,\n"
    "             bbox_post_process: BBoxPostProcess}",
    "CascadeRCNN: {backbone: ResNet, neck: FPN, rpn_head: RPNHead, bbox_head: CascadeHead,\n"
    "             mask_head: MaskHead, bbox_post_process: BBoxPostProcess,\n"
    "             mask_post_process: MaskPostProcess}") + MASK_CONFIG[MASK_CONFIG.index(
        "\nMaskHead:") + 1:]
ARCHS = {"faster_rcnn": CONFIG, "mask_rcnn": MASK_CONFIG, "cascade_rcnn": CASCADE_CONFIG,
         "cascade_mask_rcnn": CASCADE_MASK_CONFIG}
#: the architectures with a mask head (outputs bbox, bbox_num, mask)
MASKED = ("mask_rcnn", "cascade_mask_rcnn")


def _repatch(owner, name: str, edits: list[tuple[str, str]]) -> None:
    """Replace ``owner.name`` by a copy of its source with the edits made (each must occur
    once); the source goes to linecache so that Paddle's dy2static can read it."""
    fn = getattr(owner, name)
    fn = getattr(fn, "__func__", fn)
    src = textwrap.dedent(inspect.getsource(fn))
    for old, new in edits:
        if src.count(old) != 1:
            raise RuntimeError(f"paddledet patch: {fn.__qualname__} has changed ({old!r})")
        src = src.replace(old, new)
    fname = f"<paddledet patched {fn.__module__}.{fn.__qualname__}>"
    linecache.cache[fname] = (len(src), None, src.splitlines(True), fname)
    ns: dict = {}
    exec(compile(src, fname, "exec"), fn.__globals__, ns)  # noqa: S102 - our own edit
    ns[name].__qualname__ = fn.__qualname__
    setattr(owner, name, ns[name])


def import_ppdet():
    """ppdet with the four patches for Paddle 3.3.1 (see the module's doc); idempotent."""
    try:
        import pkg_resources  # noqa: F401 - ppdet.model_zoo imports it (setuptools < 81)
    except ImportError:
        sys.modules["pkg_resources"] = types.ModuleType("pkg_resources")
    import ppdet  # noqa: F401
    from ppdet.modeling import ops, post_process
    from ppdet.modeling.heads import cascade_head
    from ppdet.modeling.proposal_generator import rpn_head

    if getattr(ops, "_ort_roi_patched", False):
        return
    _repatch(rpn_head.RPNHead, "_gen_proposal", [(
        "output_rois_num = paddle.shape(onnx_topk_rois)[0]",
        "output_rois_num = paddle.shape(onnx_topk_rois)[0:1]")])
    _repatch(cascade_head.CascadeHead, "_get_rois_from_boxes", [(
        "paddle.shape(r)[0] for r in rois", "paddle.shape(r)[0:1] for r in rois")])
    _repatch(post_process.BBoxPostProcess, "get_pred", [(
        "scale_factor[0][0], scale_factor[0][1]", "scale_factor[0][0:1], scale_factor[0][1:2]")])
    _repatch(ops, "multiclass_nms", [("    if in_dynamic_mode():", """\
    if paddle.framework.in_pir_mode():
        output, index, nms_rois_num = paddle._C_ops.multiclass_nms3(
            bboxes, scores, rois_num, score_threshold, nms_top_k, keep_top_k,
            nms_threshold, normalized, nms_eta, background_label)
        return output, nms_rois_num, (index if return_index else None)
    if in_dynamic_mode():""")])
    ops._ort_roi_patched = True


def build(prefix: str, depth: int = 50, pre_nms_top_n: int = 1000,
          post_nms_top_n: int = 1000, seed: int = 0,
          calibrate: tuple[int, int] | None = None, arch: str = "faster_rcnn",
          keep_top_k: int = 100) -> str:
    """PaddleDetection's FPN detector ``arch`` (see tools/paddledet_e2e.py), saved under
    ``prefix`` (PREFIX.json and PREFIX.pdiparams); returns prefix. ``calibrate``: an image
    size (H, W) on whose ``feeds`` image the box head's class logits are scaled to std 1 and
    its deltas to std 0.5 (one dygraph forward, one per stage in order for Cascade R-CNN;
    Mask R-CNN's mask logits too, each class's to mean 0 and std 2 over its 28 x 28 masks,
    so that its masks hold both sides of 0.5), or None for the fixed load. ``arch``:
    ``faster_rcnn`` or ``cascade_rcnn`` (outputs bbox, bbox_num), ``mask_rcnn`` or
    ``cascade_mask_rcnn`` (bbox, bbox_num, mask: [K, H, W] int32 0/1 on the image).
    ``keep_top_k``: MultiClassNMS's (the detections kept, so the masks computed:
    PaddleDetection's configs say 100)."""
    import paddle

    import_ppdet()
    from ppdet.core.workspace import create, load_config

    if arch not in ARCHS:
        raise ValueError(f"arch {arch!r}: one of {sorted(ARCHS)}")
    with tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False) as fh:
        fh.write(ARCHS[arch] % dict(depth=depth, pre=pre_nms_top_n, post=post_nms_top_n,
                                    keep=keep_top_k))
    try:
        cfg = load_config(fh.name)
    finally:
        os.unlink(fh.name)
    paddle.disable_static()
    paddle.seed(seed)
    model = create(cfg.architecture)
    model.eval()
    with paddle.no_grad():  # a trained model's load
        rpn = model.rpn_head
        rpn.rpn_rois_delta.weight.set_value(paddle.zeros_like(rpn.rpn_rois_delta.weight))
        rpn.rpn_rois_delta.bias.set_value(paddle.zeros_like(rpn.rpn_rois_delta.bias))
        rpn.rpn_rois_score.weight.set_value(rpn.rpn_rois_score.weight * 0.1)
        head = model.bbox_head  # Cascade R-CNN's: a classifier and a regressor per stage
        stages = (list(zip(head.bbox_score_list, head.bbox_delta_list))
                  if hasattr(head, "bbox_score_list") else [(head.bbox_score, head.bbox_delta)])
        for cls, _ in stages:
            cls.weight.set_value(cls.weight * 0.1)
            bias = np.full(cls.bias.shape, -4.0, np.float32)
            bias[1] = 2.0
            cls.bias.set_value(paddle.to_tensor(bias))
        if calibrate:  # the box head's logits and deltas at a trained model's scale
            f = feeds(calibrate)
            for k, (cls, reg) in enumerate(stages):  # in order: a stage's boxes feed the next
                fc = []
                hook = head.head.register_forward_post_hook(
                    lambda layer, inputs, out: fc.append(out))
                model({key: paddle.to_tensor(v) for key, v in f.items()})
                hook.remove()
                x = fc[k]
                for layer, std in ((cls, 1.0), (reg, 0.5)):
                    w = layer.weight
                    got = float(paddle.matmul(x, w).std())
                    w.set_value(w * (std / got))
            if arch in MASKED:  # on the final boxes of the calibrated box head
                logits = []
                hook = model.mask_head.mask_fcn_logits.register_forward_post_hook(
                    lambda layer, inputs, out: logits.append(out))
                model({k: paddle.to_tensor(v) for k, v in f.items()})
                hook.remove()
                y = logits[0].numpy().astype(np.float64)  # [K, classes, 28, 28]
                mean, std = y.mean(axis=(0, 2, 3)), y.std(axis=(0, 2, 3)) + 1e-12
                conv = model.mask_head.mask_fcn_logits
                gain = 2.0 / std
                conv.weight.set_value(conv.weight * paddle.to_tensor(
                    gain.astype(np.float32)).reshape([-1, 1, 1, 1]))
                conv.bias.set_value(paddle.to_tensor(
                    ((conv.bias.numpy() - mean) * gain).astype(np.float32)))
    spec = [{"image": paddle.static.InputSpec([None, 3, -1, -1], "float32", "image"),
             "im_shape": paddle.static.InputSpec([None, 2], "float32", "im_shape"),
             "scale_factor": paddle.static.InputSpec([None, 2], "float32", "scale_factor")}]
    static = paddle.jit.to_static(model, input_spec=spec, full_graph=True)
    paddle.jit.save(static, prefix, input_spec=spec)
    return prefix


def feeds(size: tuple[int, int], seed: int = 0) -> dict[str, np.ndarray]:
    """One image (normalised like PaddleDetection's NormalizeImage) and its shapes."""
    rng = np.random.default_rng(seed)
    h, w = size
    image = rng.standard_normal((1, 3, h, w)).astype(np.float32)
    return {"image": image, "im_shape": np.array([[h, w]], np.float32),
            "scale_factor": np.array([[1.0, 1.0]], np.float32)}


def paddle_predictor(prefix: str, mkldnn: bool, threads: int):
    """A Paddle Inference predictor on CPU; None and the reason when it cannot run."""
    from paddle import inference

    config = inference.Config(prefix + ".json", prefix + ".pdiparams")
    config.disable_gpu()
    config.set_cpu_math_library_num_threads(threads)
    if mkldnn:
        config.enable_mkldnn()
    else:
        config.disable_mkldnn()
    config.disable_glog_info()
    try:
        predictor = inference.create_predictor(config)
    except Exception as e:  # noqa: BLE001 - reported
        return None, f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}"

    def run(f):
        for name in predictor.get_input_names():
            predictor.get_input_handle(name).copy_from_cpu(f[name])
        predictor.run()
        return [predictor.get_output_handle(n).copy_to_cpu()
                for n in predictor.get_output_names()]
    try:
        run(feeds((64, 64)))
    except Exception as e:  # noqa: BLE001 - reported
        return None, f"{type(e).__name__}: {str(e).strip().splitlines()[-1][:200]}"
    return run, None


#: Output names of the probe, after the detector's two.
PROBE = ("rois", "rois_num", "psroi_cls", "psroi_box", "cls_maps", "box_maps")


def _rfcn_layers(depth: int, num_classes: int, k: int, pre_nms_top_n: int,
                 post_nms_top_n: int):
    """The model's classes (ppdet imported with its patches); returns (RFCN, Probe)."""
    import paddle
    import paddle.nn.functional as F
    from paddle import nn

    import_ppdet()
    from ppdet.modeling.backbones.resnet import ResNet
    from ppdet.modeling.layers import MultiClassNMS, RCNNBox
    from ppdet.modeling.post_process import BBoxPostProcess
    from ppdet.modeling.proposal_generator.rpn_head import RPNHead

    class PSHead(nn.Layer):
        """R-FCN's position-sensitive head: score and box maps, psroi_pool, vote."""

        def __init__(self, in_channel: int):
            super().__init__()
            self.reduce = nn.Conv2D(in_channel, 512, 1)
            self.cls_maps = nn.Conv2D(512, k * k * (num_classes + 1), 1)
            self.box_maps = nn.Conv2D(512, k * k * 4, 1)

        def forward(self, feat, rois, rois_num):
            h = F.relu(self.reduce(feat))
            rois_num = rois_num.cast("int32")  # the RPN's count is int64 (paddle.shape)
            cls_maps, box_maps = self.cls_maps(h), self.box_maps(h)
            ps_cls = paddle.vision.ops.psroi_pool(cls_maps, rois, rois_num, k, 1 / 16)
            ps_box = paddle.vision.ops.psroi_pool(box_maps, rois, rois_num, k, 1 / 16)
            return ps_cls, ps_box, cls_maps, box_maps

    class RFCN(nn.Layer):
        def __init__(self):
            super().__init__()
            self.backbone = ResNet(depth=depth, norm_type="bn", freeze_at=0, return_idx=[2],
                                   num_stages=3)
            channels = self.backbone.out_shape[0].channels
            self.rpn_head = RPNHead(
                anchor_generator=dict(anchor_sizes=[32, 64, 128, 256, 512],
                                      aspect_ratios=[0.5, 1.0, 2.0], strides=[16.0]),
                test_proposal=dict(min_size=0.0, nms_thresh=0.7, pre_nms_top_n=pre_nms_top_n,
                                   post_nms_top_n=post_nms_top_n),
                in_channel=channels, export_onnx=True)
            self.head = PSHead(channels)
            self.post = BBoxPostProcess(
                num_classes=num_classes, export_onnx=True,
                decode=RCNNBox(num_classes=num_classes, export_onnx=True),
                nms=MultiClassNMS(score_threshold=0.05, keep_top_k=100, nms_threshold=0.5))

        def proposals(self, inputs):
            feat = self.backbone(inputs)[0]
            rois, rois_num, _ = self.rpn_head([feat], inputs)
            return feat, rois, rois_num

        def run(self, inputs):
            feat, rois, rois_num = self.proposals(inputs)
            ps_cls, ps_box, cls_maps, box_maps = self.head(feat, rois[0], rois_num)
            cls_prob = F.softmax(ps_cls.mean(axis=[2, 3]), axis=-1)
            deltas = ps_box.mean(axis=[2, 3])
            im_shape, scale_factor = inputs["im_shape"], inputs["scale_factor"]
            bbox, bbox_num, _ = self.post((deltas, cls_prob), (rois, rois_num), im_shape,
                                          scale_factor)
            _, bbox_pred, bbox_num = self.post.get_pred(bbox, bbox_num, im_shape, scale_factor)
            return (bbox_pred, bbox_num, rois[0], rois_num, ps_cls, ps_box, cls_maps,
                    box_maps)

        def forward(self, inputs):
            return self.run(inputs)[:2]

    class Probe(nn.Layer):
        """The same model with the proposals and the psroi_pool outputs fetched too."""

        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, inputs):
            return self.model.run(inputs)

    return RFCN, Probe


def _rfcn_load(model, f: dict[str, np.ndarray] | None) -> None:
    """A trained model's load (see tools/paddle_rfcn_e2e.py); ``f``: the calibration image, or None
    to keep the conv's own scale."""
    import paddle

    with paddle.no_grad():
        rpn = model.rpn_head
        rpn.rpn_rois_delta.weight.set_value(paddle.zeros_like(rpn.rpn_rois_delta.weight))
        rpn.rpn_rois_delta.bias.set_value(paddle.zeros_like(rpn.rpn_rois_delta.bias))
        rpn.rpn_rois_score.weight.set_value(rpn.rpn_rois_score.weight * 0.1)
        head = model.head
        for conv in (head.cls_maps, head.box_maps):
            conv.bias.set_value(paddle.zeros_like(conv.bias))
        if f is not None:  # the voted logits and deltas at a trained model's scale
            inputs = {n: paddle.to_tensor(v) for n, v in f.items()}
            feat, rois, rois_num = model.proposals(inputs)
            ps = head(feat, rois[0], rois_num)
            for conv, out, std in ((head.cls_maps, ps[0], 1.0), (head.box_maps, ps[1], 0.5)):
                got = float(out.mean(axis=[2, 3]).std())
                conv.weight.set_value(conv.weight * (std / got))
        c = head.cls_maps.bias.shape[0] // (model.post.num_classes + 1)  # k * k per class
        bias = np.full(head.cls_maps.bias.shape, -4.0, np.float32)
        bias[c:2 * c] = 2.0  # class 1 (channels of class c: c*k*k ... (c+1)*k*k - 1)
        head.cls_maps.bias.set_value(paddle.to_tensor(bias))


def build_rfcn(prefix: str, depth: int = 50, k: int = 7, num_classes: int = 80,
               pre_nms_top_n: int = 6000, post_nms_top_n: int = 300, seed: int = 0,
               calibrate: tuple[int, int] | None = (480, 640)) -> tuple[str, str]:
    """The R-FCN-style detector and its probe (see tools/paddle_rfcn_e2e.py), saved by
    ``paddle.jit.save`` under ``prefix`` and ``prefix + "_probe"`` (``.json`` and
    ``.pdiparams`` each).

    Args:
        prefix: where to save (a path without suffix).
        depth: the ResNet's depth (18, 34, 50, 101).
        k: psroi_pool's bins per side (its ``output_size``).
        num_classes: foreground classes (the score maps have ``k*k*(num_classes+1)``).
        pre_nms_top_n, post_nms_top_n: the RPN's generate_proposals settings.
        seed: Paddle's seed for the weights.
        calibrate: the image size (H, W) of the ``feeds`` image (seed 0) on which the voted
            logits and deltas are scaled, or None for the conv's own scale.

    Returns:
        The two prefixes (detector, probe).
    """
    import paddle

    paddle.disable_static()
    paddle.seed(seed)
    rfcn, probe = _rfcn_layers(depth, num_classes, k, pre_nms_top_n, post_nms_top_n)
    model = rfcn()
    model.eval()
    _rfcn_load(model, feeds(tuple(calibrate)) if calibrate else None)
    spec = [{"image": paddle.static.InputSpec([None, 3, -1, -1], "float32", "image"),
             "im_shape": paddle.static.InputSpec([None, 2], "float32", "im_shape"),
             "scale_factor": paddle.static.InputSpec([None, 2], "float32", "scale_factor")}]
    out = []
    for layer, path in ((model, prefix), (probe(model), prefix + "_probe")):
        layer.eval()
        static = paddle.jit.to_static(layer, input_spec=spec, full_graph=True)
        paddle.jit.save(static, path, input_spec=spec)
        out.append(path)
    return out[0], out[1]
