"""What ``ort-roi bench`` times on one row: ``cases(workload, op)`` makes the row's inputs
(bench_workloads) and returns our runner and every peer's on them (bench_peers; the
CropAndResize rows' from bench_crop): the single ops against onnxruntime's native node,
OpenVINO, Paddle and torchvision; the exporters' multi-level nodes (W7); torchvision's
per-level calls and its fused RoI stage (W8, W8f)."""

from __future__ import annotations

from importlib import resources

import numpy as np
import onnx
from onnx import TensorProto, helper

from . import bench_crop
from ..graph.rewrite import convert
from ..runtime.session import session_options
from .bench_peers import (Ours, cpu_session, openvino_onnx, openvino_op, ort_native, paddle_op,
                          torchvision_op)
from .bench_timing import Runner
from .bench_workloads import make_fpn_inputs, make_inputs, make_level_inputs


def _level_cases(w: dict, op: str):
    """W8: one RoiAlign call of one level's boxes (ort_roi::RoiAlign as convert writes it,
    against onnxruntime's and torchvision's), or a pooler's whole stage: torchvision's
    exported MultiScaleRoIAlign (ort_roi/data/torchvision_stage_*.onnx, tools/export_torchvision.py)
    fused by convert into one PyramidRoIAlign, against the same graph run natively (the sum
    of its nodes) and converted without fusion."""
    maps, boxes = make_level_inputs(w)
    sr = w["sampling_ratio"]
    peers: dict[str, Runner | None] = {}
    if op == "RoiAlign":
        row = w["row"]
        X, b, P = maps[row["level"]], boxes[(row["pooler"], row["level"])], row["pooled"]
        attrs = dict(output_height=P, output_width=P, sampling_ratio=sr,
                     spatial_scale=1.0 / row["stride"], mode="avg",
                     coordinate_transformation_mode="half_pixel" if w["aligned"]
                     else "output_half_pixel")
        batch = np.zeros(len(b), np.int64)
        ours = Ours("RoiAlign", dict(X=X, rois=b, batch_indices=batch.astype(np.int32)),
                    **attrs)
        node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], **attrs)
        peers["ORT RoiAlign"] = ort_native(node, dict(X=X, rois=b, batch_indices=batch))
        rois = np.concatenate([batch[:, None].astype(np.float32), b], 1)
        peers["torchvision roi_align"] = torchvision_op("roi_align", X, rois, P,
                                                        1.0 / row["stride"], sr,
                                                        aligned=bool(w["aligned"]))
        return ours, peers
    pooler = w["pooler"]
    rows = [r for r in w["rows"] if r["pooler"] == pooler]
    P = rows[0]["pooled"]
    b = np.concatenate([boxes[(r["pooler"], r["level"])] for r in rows])
    b = b[np.random.default_rng(1).permutation(len(b))]  # the levels interleaved
    with resources.files("ort_roi").joinpath(f"data/torchvision_stage_{P}.onnx").open("rb") as f:
        native = onnx.load(f)
    feed = {f"p{lvl}": maps[lvl] for lvl in (2, 3, 4, 5)}
    feed["boxes"] = b
    fused = cpu_session(convert(native), session_options())
    unfused = cpu_session(convert(native, fuse=False), session_options())
    plain = cpu_session(native)
    peers["ORT, torchvision's stage"] = lambda: plain.run(None, feed)[0]
    peers["ort_roi, unfused"] = lambda: unfused.run(None, feed)[0]
    peers["OpenVINO, torchvision's stage"] = openvino_onnx(native, feed)
    return (lambda: fused.run(None, feed)[0]), peers


def _fpn_cases(w: dict, op: str):
    """The exported multi-level node through ort_roi (converted, in a plain session), against
    OpenVINO reading the same node, and our RoIAlign on one level with the same boxes."""
    feats, boxes = make_fpn_inputs(w)
    L, P, sr = len(feats), w["pooled"], w["sampling_ratio"]
    names = [f"feat_{i}" for i in range(L)]
    if op == "ExperimentalDetectronROIFeatureExtractor":
        node = helper.make_node(op, ["rois"] + names, ["output", "rois_out"],
                                domain="org.openvinotoolkit", output_size=P, sampling_ratio=sr,
                                aligned=w["aligned"], pyramid_scales=list(w["strides"]))
        rois, outs = boxes, ["output", "rois_out"]
    else:
        node = helper.make_node("MMCVMultiLevelRoiAlign", ["rois"] + names, ["output"],
                                domain="mmdeploy", output_height=P, output_width=P,
                                sampling_ratio=sr, pool_mode=1, aligned=w["aligned"],
                                roi_scale_factor=-1.0, finest_scale=56,
                                featmap_strides=[float(s) for s in w["strides"]])
        rois, outs = np.concatenate([np.zeros((len(boxes), 1), np.float32), boxes], 1), ["output"]
    feed = {"rois": rois, **dict(zip(names, feats))}
    ins = [helper.make_tensor_value_info(k, TensorProto.FLOAT, list(v.shape))
           for k, v in feed.items()]
    g = helper.make_graph([node], "fpn", ins,
                          [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid(node.domain, 1)], ir_version=9)
    sess = cpu_session(convert(m), session_options())
    ours = lambda: sess.run(None, feed)[0]  # noqa: E731
    peers: dict[str, Runner | None] = {}
    if op == "ExperimentalDetectronROIFeatureExtractor":
        peers["OpenVINO extractor"] = openvino_onnx(m, feed)
    one = Ours("RoIAlign", dict(X=feats[0], boxes=boxes,
                                boxes_num=np.array([len(boxes)], np.int32)),
               pooled_height=P, pooled_width=P, spatial_scale=1 / w["strides"][0],
               sampling_ratio=sr, aligned=1)
    peers["ort_roi RoIAlign, level 0 only"] = one
    return ours, peers


def cases(w: dict, op: str, seed: int = 0) -> tuple[Ours, dict[str, Runner | None]]:
    """Our runner and the peers' for one workload and op."""
    if "strides" in w:
        return _fpn_cases(w, op)
    if "rows" in w:
        return _level_cases(w, op)
    if op == bench_crop.OP:
        return bench_crop.cases(w)
    P, s = w["pooled"], w["spatial_scale"]
    X, boxes, counts = make_inputs(w, seed, normalized=(op == "ROIPooling.bilinear"))
    batch = np.repeat(np.arange(len(counts)), counts)
    rois = np.concatenate([batch[:, None].astype(np.float32), boxes], 1)
    peers: dict[str, Runner | None] = {}
    if op == "RoIAlign":
        sr = w.get("sampling_ratio", 0)
        ours = Ours("RoIAlign", dict(X=X, boxes=boxes, boxes_num=counts), pooled_height=P,
                    pooled_width=P, spatial_scale=s, sampling_ratio=sr, aligned=1)
        node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"],
                                output_height=P, output_width=P, sampling_ratio=max(sr, 0),
                                spatial_scale=s, coordinate_transformation_mode="half_pixel")
        peers["ORT RoiAlign"] = ort_native(node, dict(X=X, rois=boxes,
                                                      batch_indices=batch.astype(np.int64)))
        peers["OpenVINO ROIAlign"] = openvino_op(
            lambda o, x, b, i: o.roi_align(x, b, i, P, P, max(sr, 0), s, "avg", "half_pixel"),
            [X, boxes, batch.astype(np.int32)])
        peers["Paddle roi_align"] = paddle_op("roi_align", X, boxes, counts, P, s, sr, True)
        peers["torchvision roi_align"] = torchvision_op("roi_align", X, rois, P, s, sr,
                                                        aligned=True)
    elif op == "RoiAlign":  # ONNX RoiAlign as ort-roi convert writes it, against the native op
        sr = max(w.get("sampling_ratio", 0), 0)
        attrs = dict(output_height=P, output_width=P, sampling_ratio=sr, spatial_scale=s,
                     coordinate_transformation_mode="half_pixel", mode="avg")
        ours = Ours("RoiAlign", dict(X=X, rois=boxes, batch_indices=batch.astype(np.int32)),
                    **attrs)
        node = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"], **attrs)
        peers["ORT RoiAlign"] = ort_native(node, dict(X=X, rois=boxes,
                                                      batch_indices=batch.astype(np.int64)))
    elif op == "ROIPooling.max":
        ours = Ours("ROIPooling", dict(X=X, rois=rois), pooled_h=P, pooled_w=P,
                    spatial_scale=s, method="max")
        node = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], pooled_shape=[P, P],
                                spatial_scale=s)
        peers["ORT MaxRoiPool"] = ort_native(node, dict(X=X, rois=rois))
        peers["OpenVINO ROIPooling"] = openvino_op(
            lambda o, x, r: o.roi_pooling(x, r, output_roi=[P, P], spatial_scale=s,
                                          method="max"), [X, rois])
        peers["Paddle roi_pool"] = paddle_op("roi_pool", X, boxes, counts, P, s)
        peers["torchvision roi_pool"] = torchvision_op("roi_pool", X, rois, P, s)
    elif op == "ROIPooling.bilinear":
        ours = Ours("ROIPooling", dict(X=X, rois=rois), pooled_h=P, pooled_w=P,
                    spatial_scale=s, method="bilinear")
        peers["OpenVINO ROIPooling"] = openvino_op(
            lambda o, x, r: o.roi_pooling(x, r, output_roi=[P, P], spatial_scale=s,
                                          method="bilinear"), [X, rois])
    elif op == "PSROIPool":
        oc = w["output_channels"]
        ours = Ours("PSROIPool", dict(X=X, rois=boxes, rois_num=counts), output_channels=oc,
                    spatial_scale=s, pooled_height=P, pooled_width=P)
        peers["OpenVINO PSROIPooling"] = openvino_op(
            lambda o, x, r: o.psroi_pooling(x, r, oc, P, s, 1, 1, "average"), [X, rois])
        peers["Paddle psroi_pool"] = paddle_op("psroi_pool", X, boxes, counts, P, s)
    else:
        raise ValueError(op)
    return ours, peers
