"""Small example detection heads that use the ort_roi ops (random weights).

tools/make_models.py writes them to models/; ``ort-roi demo`` builds and runs them with
inputs from graph/inputs.py. Each example has a builder (fixed seed, so the bytes are
reproducible).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import builders as B

from .inputs import FEAT_C, FEAT_H, FEAT_W, STRIDE  # features of a 384 x 512 image


def _init(rng, name, shape, scale=0.1) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32), name)


def _conv(rng, x, y, cin, cout, k, inits, act=True) -> list[onnx.NodeProto]:
    inits += [_init(rng, f"{y}_w", (cout, cin, k, k)), _init(rng, f"{y}_b", (cout,))]
    nodes = [helper.make_node("Conv", [x, f"{y}_w", f"{y}_b"], [y + ("_pre" if act else "")],
                              pads=[k // 2] * 4, name=y)]
    if act:
        nodes.append(helper.make_node("Relu", [y + "_pre"], [y], name=y + "_relu"))
    return nodes


def _fc(rng, x, y, cin, cout, inits) -> onnx.NodeProto:
    inits += [_init(rng, f"{y}_w", (cin, cout)), _init(rng, f"{y}_b", (cout,))]
    return helper.make_node("Gemm", [x, f"{y}_w", f"{y}_b"], [y], name=y)


def _features() -> onnx.ValueInfoProto:
    return B.tensor("features", "float32", [1, FEAT_C, FEAT_H, FEAT_W])


def fast_rcnn() -> onnx.ModelProto:
    """Fast R-CNN head: conv -> ROIPooling(max, 7x7, 1/16) -> FC -> class scores and boxes."""
    rng, inits = np.random.default_rng(10), []
    classes, P = 5, 7
    nodes = _conv(rng, "features", "conv", FEAT_C, 32, 3, inits)
    nodes.append(B.roi_pooling("conv", "rois", "pool", name="roi_pooling", pooled_h=P, pooled_w=P,
                               spatial_scale=1 / STRIDE, method="max"))
    nodes.append(helper.make_node("Flatten", ["pool"], ["flat"]))
    nodes += [_fc(rng, "flat", "fc6", 32 * P * P, 64, inits),
              helper.make_node("Relu", ["fc6"], ["fc6_relu"]),
              _fc(rng, "fc6_relu", "cls_score", 64, classes, inits),
              helper.make_node("Softmax", ["cls_score"], ["cls_prob"], axis=1),
              _fc(rng, "fc6_relu", "bbox_pred", 64, 4 * classes, inits)]
    return B.make_model(nodes, [_features(), B.tensor("rois", "float32", ["R", 5])],
                        [B.tensor("cls_prob", "float32", ["R", classes]),
                         B.tensor("bbox_pred", "float32", ["R", 4 * classes])],
                        initializers=inits, name="fast_rcnn_head", doc=fast_rcnn.__doc__)


def rfcn() -> onnx.ModelProto:
    """R-FCN head: 1x1 conv to k*k*classes score maps -> PSROIPool(3x3) -> mean -> softmax."""
    rng, inits = np.random.default_rng(11), []
    classes, k = 4, 3
    nodes = _conv(rng, "features", "score_maps", FEAT_C, classes * k * k, 1, inits, act=False)
    nodes.append(B.psroi_pool("score_maps", "rois", "rois_num", "ps", name="psroi_pool", output_channels=classes,
                              spatial_scale=1 / STRIDE, pooled_height=k, pooled_width=k))
    nodes += [helper.make_node("ReduceMean", ["ps"], ["vote"], axes=[2, 3], keepdims=0),
              helper.make_node("Softmax", ["vote"], ["cls_prob"], axis=1)]
    return B.make_model(nodes, [_features(), B.tensor("rois", "float32", ["R", 4]),
                                B.tensor("rois_num", "int32", [1])],
                        [B.tensor("cls_prob", "float32", ["R", classes])],
                        initializers=inits, name="rfcn_head", doc=rfcn.__doc__)


def mask_rcnn() -> onnx.ModelProto:
    """Mask R-CNN mask head: conv -> RoIAlign(14x14, aligned) -> conv -> deconv -> masks."""
    rng, inits = np.random.default_rng(12), []
    classes = 3
    nodes = _conv(rng, "features", "conv", FEAT_C, 16, 3, inits)
    nodes.append(B.roi_align("conv", "boxes", "boxes_num", "align", name="roi_align", pooled_height=14,
                             pooled_width=14, spatial_scale=1 / STRIDE, sampling_ratio=2,
                             aligned=1))
    nodes += _conv(rng, "align", "mask_conv", 16, 16, 3, inits)
    inits += [_init(rng, "deconv_w", (16, 16, 2, 2)), _init(rng, "deconv_b", (16,))]
    nodes += [helper.make_node("ConvTranspose", ["mask_conv", "deconv_w", "deconv_b"],
                               ["deconv"], strides=[2, 2]),
              helper.make_node("Relu", ["deconv"], ["deconv_relu"])]
    nodes += _conv(rng, "deconv_relu", "mask_logits", 16, classes, 1, inits, act=False)
    nodes.append(helper.make_node("Sigmoid", ["mask_logits"], ["masks"]))
    return B.make_model(nodes, [_features(), B.tensor("boxes", "float32", ["R", 4]),
                                B.tensor("boxes_num", "int64", [1])],
                        [B.tensor("masks", "float32", ["R", classes, 28, 28])],
                        initializers=inits, name="mask_rcnn_mask_head", doc=mask_rcnn.__doc__)


def bilinear() -> onnx.ModelProto:
    """Bilinear RoI head: conv -> ROIPooling(bilinear, 7x7, normalized boxes) -> pool -> FC."""
    rng, inits = np.random.default_rng(13), []
    classes = 6
    nodes = _conv(rng, "features", "conv", FEAT_C, 32, 3, inits)
    nodes.append(B.roi_pooling("conv", "rois", "pool", name="roi_pooling_bilinear", pooled_h=7, pooled_w=7,
                               spatial_scale=1.0, method="bilinear"))
    nodes += [helper.make_node("GlobalAveragePool", ["pool"], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              _fc(rng, "flat", "logits", 32, classes, inits),
              helper.make_node("Softmax", ["logits"], ["cls_prob"], axis=1)]
    return B.make_model(nodes, [_features(), B.tensor("rois", "float32", ["R", 5])],
                        [B.tensor("cls_prob", "float32", ["R", classes])],
                        initializers=inits, name="bilinear_roi_head", doc=bilinear.__doc__)


@dataclass(frozen=True)
class Example:
    name: str
    build: Callable[[], onnx.ModelProto]

    @property
    def file(self) -> str:
        return f"{self.name}.onnx"


EXAMPLES = (Example("fast_rcnn_head", fast_rcnn), Example("rfcn_head", rfcn),
            Example("mask_rcnn_head", mask_rcnn), Example("bilinear_roi_head", bilinear))
