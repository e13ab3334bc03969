"""The source frameworks as oracles: each function runs one case (see cases.py) through the
real framework and returns its output. Imported lazily: paddle / openvino may be absent."""

from __future__ import annotations

import numpy as np


def paddle_available() -> bool:
    try:
        import paddle  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


#: OpenVINO's CPU plugin computes in bfloat16 by default on CPUs that support it (AVX512-BF16,
#: AMX): 2.3849 came back as 2.390625. The oracle must compute in float32.
OPENVINO_CONFIG = {"INFERENCE_PRECISION_HINT": "f32"}


def openvino_compile(model):
    """An OpenVINO model (or ONNX bytes read by OpenVINO) compiled for its CPU plugin in float32."""
    import openvino as ov

    core = ov.Core()
    if isinstance(model, bytes):
        model = core.read_model(model, b"")
    return core.compile_model(model, "CPU", OPENVINO_CONFIG)


def openvino_available() -> bool:
    try:
        import openvino  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


def paddle(case: dict) -> np.ndarray:
    import paddle as pd
    from paddle.vision import ops

    a, i = case["attrs"], case["inputs"]
    x = pd.to_tensor(i["X"])
    size = (a["pooled_height"], a["pooled_width"])
    boxes = list(i.values())[1]
    if len(boxes) == 0:  # not asked of Paddle; the empty result is [0, C_out, ph, pw]
        c = a.get("output_channels", i["X"].shape[1])
        return np.zeros((0, c) + size, i["X"].dtype)
    # Paddle's kernels read the counts as int32 whatever their dtype
    counts = pd.to_tensor(list(i.values())[2].astype(np.int32))
    if case["op"] == "RoIPool":
        y = ops.roi_pool(x, pd.to_tensor(i["boxes"]), counts, size, a["spatial_scale"])
    elif case["op"] == "PSROIPool":
        y = ops.psroi_pool(x, pd.to_tensor(i["rois"]), counts, size, a["spatial_scale"])
    elif case["op"] == "RoIAlign":
        y = ops.roi_align(x, pd.to_tensor(i["boxes"]), counts, size,
                          a["spatial_scale"], a["sampling_ratio"], bool(a["aligned"]))
    else:
        raise ValueError(case["op"])
    return y.numpy()


def openvino_roi_pooling(case: dict) -> np.ndarray:
    """OpenVINO ROIPooling-1 on its CPU plugin."""
    import openvino as ov
    import openvino.opset8 as ops

    a, i = case["attrs"], case["inputs"]
    x, rois = i["X"], i["rois"]
    if len(rois) == 0:  # not asked of OpenVINO; the empty result is [0, C, ph, pw]
        return np.zeros((0, x.shape[1], a["pooled_h"], a["pooled_w"]), x.dtype)
    px = ops.parameter(list(x.shape), x.dtype, name="x")
    pr = ops.parameter(list(rois.shape), rois.dtype, name="rois")
    node = ops.roi_pooling(px, pr, output_roi=[a["pooled_h"], a["pooled_w"]],
                           spatial_scale=a["spatial_scale"], method=a["method"])
    compiled = openvino_compile(ov.Model([node], [px, pr]))
    return np.asarray(compiled([x, rois])[0])


MXNET_SCRIPT = r"""
import sys, json, numpy as np, mxnet as mx
data = np.load(sys.argv[1])
specs = json.loads(str(data["__specs__"]))
out = {}
for name, (ph, pw, scale) in specs.items():
    x, rois = data[name + ":X"], data[name + ":rois"]
    if len(rois) == 0:  # MXNet refuses R = 0; the empty result is [0, C, ph, pw]
        out[name] = np.zeros((0, x.shape[1], ph, pw), x.dtype)
        continue
    y = mx.nd.ROIPooling(mx.nd.array(x, dtype=x.dtype), mx.nd.array(rois, dtype=rois.dtype),
                         (ph, pw), scale)
    out[name] = y.asnumpy()
np.savez(sys.argv[2], **out)
"""


def mxnet_roi_pooling(cases: list[dict], python: str) -> dict[str, np.ndarray]:
    """MXNet ROIPooling for many cases at once, in MXNet's own interpreter (it needs
    numpy 1.23, so it lives in a venv of its own)."""
    import json
    import os
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        arrays, specs = {}, {}
        for c in cases:
            arrays[c["name"] + ":X"] = c["inputs"]["X"]
            arrays[c["name"] + ":rois"] = c["inputs"]["rois"]
            a = c["attrs"]
            specs[c["name"]] = (a["pooled_h"], a["pooled_w"], a["spatial_scale"])
        np.savez(os.path.join(d, "in.npz"), __specs__=json.dumps(specs), **arrays)
        script = os.path.join(d, "mx.py")
        with open(script, "w") as f:
            f.write(MXNET_SCRIPT)
        subprocess.run([python, script, os.path.join(d, "in.npz"), os.path.join(d, "out.npz")],
                       check=True)
        with np.load(os.path.join(d, "out.npz")) as out:
            return {k: out[k] for k in out.files}


def openvino_onnx(model, feed: dict) -> list[np.ndarray]:
    """An ONNX model read and run by OpenVINO's ONNX frontend on its CPU plugin (it reads
    mmdeploy::MMCVRoIAlignRotated and org.openvinotoolkit's ROI feature extractor)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp in m.graph.input:  # OpenVINO's CPU plugin wants static shapes
        if inp.name in feed:
            inp.type.tensor_type.ClearField("shape")
            for d in feed[inp.name].shape:
                inp.type.tensor_type.shape.dim.add().dim_value = d
    compiled = openvino_compile(m.SerializeToString())
    res = compiled(feed)
    return [np.asarray(res[o]) for o in compiled.outputs]


def openvino_rotated(case: dict) -> np.ndarray:
    """MMCVRoIAlignRotated as OpenVINO reads it from an mmdeploy graph."""
    from ort_roi import builders

    i = case["inputs"]
    m = builders.single_op_model("MMCVRoIAlignRotated", i["input"].dtype, domain="mmdeploy",
                                 **case["attrs"])
    if len(i["rois"]) == 0:
        a = case["attrs"]
        return np.zeros((0, i["input"].shape[1], a["output_height"], a["output_width"]),
                        i["input"].dtype)
    return openvino_onnx(m, i)[0]


def extractor_node_model(case: dict, domain: str = "org.openvinotoolkit"):
    """The node as exporters write it (pyramid_scales a list, extra attributes) from an
    ROIFeatureExtractor_L{L} case."""
    from onnx import helper

    a = dict(case["attrs"])
    L = len(case["inputs"]) - 1
    scales = [a.pop(f"scale_{i}") for i in range(L)]
    names = list(case["inputs"])
    node = helper.make_node("ExperimentalDetectronROIFeatureExtractor", names,
                            ["output", "rois_out"], domain=domain, name="extractor",
                            pyramid_scales=scales, image_id=0,
                            distribute_rois_between_levels=1, preserve_rois_order=1, **a)
    elem = helper.np_dtype_to_tensor_dtype(case["inputs"]["rois"].dtype)
    g = helper.make_graph([node], "extractor", [
        helper.make_tensor_value_info(n, elem, [None] * v.ndim)
        for n, v in case["inputs"].items()],
        [helper.make_tensor_value_info("output", elem, None),
         helper.make_tensor_value_info("rois_out", elem, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                               helper.make_opsetid(domain, 1)], ir_version=9)


def openvino_extractor(case: dict) -> np.ndarray:
    """OpenVINO's ExperimentalDetectronROIFeatureExtractor read from the exported node."""
    i = case["inputs"]
    if len(i["rois"]) == 0:
        C, p = i["feat_0"].shape[1], case["attrs"]["output_size"]
        return np.zeros((0, C, p, p), i["rois"].dtype)
    return openvino_onnx(extractor_node_model(case), i)[0]


def torchvision_available() -> bool:
    try:
        import torchvision  # noqa: F401
        return True
    except Exception:  # noqa: BLE001
        return False


def torchvision(case: dict) -> np.ndarray:
    """torchvision.ops on the CPU: ps_roi_align, ps_roi_pool, and the PyramidRoIAlign stage
    as MultiScaleRoIAlign computes it eagerly (each level's boxes by roi_align, merged in
    box order; a box on no level stays 0)."""
    import torch
    from torchvision import ops

    a, i = case["attrs"], case["inputs"]
    f32 = lambda v: float(np.float32(v))  # noqa: E731 - float attributes are float32
    if case["op"] in ("TorchvisionPSRoIAlign", "TorchvisionPSRoIPool"):
        x, rois = torch.from_numpy(i["X"]), torch.from_numpy(i["rois"])
        size = (a["pooled_height"], a["pooled_width"])
        if case["op"] == "TorchvisionPSRoIAlign":
            y = ops.ps_roi_align(x, rois, size, f32(a["spatial_scale"]), a["sampling_ratio"])
        else:
            y = ops.ps_roi_pool(x, rois, size, f32(a["spatial_scale"]))
        return y.numpy()
    rois, levels = torch.from_numpy(i["rois"]), torch.from_numpy(i["levels"]).long()
    feats = [torch.from_numpy(v) for k, v in i.items() if k.startswith("feat_")]
    size = (a["output_height"], a["output_width"])
    out = torch.zeros((len(rois), feats[0].shape[1], *size), dtype=feats[0].dtype)
    for level, feat in enumerate(feats):
        idx = torch.where(levels == level)[0]
        out[idx] = ops.roi_align(feat, rois[idx], size, f32(a[f"spatial_scale_{level}"]),
                                 a["sampling_ratio"], aligned=bool(a["aligned"]))
    return out.numpy()


def paddle_proposals(case: dict) -> list[np.ndarray]:
    """Paddle's outputs for a proposal case (tests/proposal_cases.py: GenerateProposals,
    DistributeFpnProposals_L*, CollectFpnProposals_L*), in the order of the ort_roi node's
    outputs (tools.make_proposal_goldens writes them to the goldens)."""
    import paddle

    from tests import proposal_cases

    t = paddle.to_tensor
    a = case["attrs"]
    x = case["inputs"]
    with paddle.base.dygraph.guard(paddle.CPUPlace()):
        if case["op"].startswith("CollectFpnProposals_L"):
            rois, scores, nums = proposal_cases.collect_levels(case)
            out = paddle._C_ops.collect_fpn_proposals(
                [t(r) for r in rois], [t(s) for s in scores], [t(n) for n in nums],
                a["post_nms_topN"])
            return [o.numpy() for o in out]
        if case["op"] == "GenerateProposals":
            out = paddle.vision.ops.generate_proposals(
                t(x["scores"]), t(x["bbox_deltas"]), t(x["im_shape"]), t(x["anchors"]),
                t(x["variances"]), pre_nms_top_n=a["pre_nms_top_n"],
                post_nms_top_n=a["post_nms_top_n"], nms_thresh=a["nms_thresh"],
                min_size=a["min_size"], eta=a["eta"], pixel_offset=bool(a["pixel_offset"]),
                return_rois_num=True)
            return [o.numpy() for o in out]
        rois, restore, nums = paddle.vision.ops.distribute_fpn_proposals(
            t(x["fpn_rois"]), a["min_level"], a["max_level"], a["refer_level"],
            a["refer_scale"], pixel_offset=bool(a["pixel_offset"]), rois_num=t(x["rois_num"]))
        return [r.numpy() for r in rois] + [n.numpy() for n in nums] + [restore.numpy()]


def tf_crop_and_resize(image, boxes, box_indices, *, crop_height, crop_width,
                       method="bilinear", extrapolation_value=0.0) -> np.ndarray:
    """TensorFlow's op (eager, CPU) on NumPy inputs (tools.make_tf_goldens writes it to the
    goldens)."""
    import tensorflow as tf

    with tf.device("/CPU:0"):
        return tf.image.crop_and_resize(image, boxes, np.asarray(box_indices, np.int32),
                                        [crop_height, crop_width], method=method,
                                        extrapolation_value=extrapolation_value).numpy()
