"""torchvision's detection stages as one ort_roi node each, for ``torch_export``
(``pytorch.py``): stand-ins for MultiScaleRoIAlign (``fused_multiscale``: PyramidRoIAlign),
Keypoint R-CNN's heatmaps_to_keypoints (``fused_keypoints``: HeatmapsToKeypoints) and Mask
R-CNN's mask pasting (``fused_paste_masks``: PasteMasks) that compute what torchvision does.
Each stage is computed eagerly, then wrapped twice: a torch custom op in the ``ort_roi``
namespace for the dynamo exporter (``custom_ops`` registers them) and an autograd Function
whose symbolic writes the node for TorchScript. torch is imported when these are called.
"""

from __future__ import annotations

import functools
from typing import Callable

from ..spec import DOMAIN, MAX_LEVELS


def custom_ops() -> None:
    """Register the stages' torch custom ops (what dynamo traces, and what the translation
    table maps to ort_roi nodes): ``torch.ops.ort_roi.pyramid_roi_align``,
    ``heatmaps_to_keypoints`` and ``paste_masks``. Once per process; again does nothing."""
    _pyramid_op()
    _keypoints_op()
    _paste_op()


def _merge(rois, levels, feats, output_size, sampling_ratio: int, scales, aligned: int):
    """MultiScaleRoIAlign's result, eagerly: each box pooled from its level, in box order."""
    import torch
    from torchvision.ops import roi_align

    out = rois.new_zeros((rois.shape[0], feats[0].shape[1], *output_size),
                         dtype=feats[0].dtype)
    for level, (feat, scale) in enumerate(zip(feats, scales)):
        idx = torch.where(levels == level)[0]
        out[idx] = roi_align(feat, rois[idx], output_size=tuple(output_size),
                             spatial_scale=scale, sampling_ratio=sampling_ratio,
                             aligned=bool(aligned)).to(out.dtype)
    return out


@functools.lru_cache(maxsize=None)
def _pyramid_op():
    """ort_roi::pyramid_roi_align as a torch custom op (what dynamo traces)."""
    import torch

    @torch.library.custom_op(
        "ort_roi::pyramid_roi_align", mutates_args=(),
        schema="(Tensor rois, Tensor levels, Tensor[] feats, SymInt[] output_size, "
               "int sampling_ratio, float[] scales, int aligned=0) -> Tensor")
    def pyramid_roi_align(rois, levels, feats, output_size, sampling_ratio, scales, aligned=0):
        return _merge(rois, levels, feats, output_size, sampling_ratio, scales, aligned)

    @pyramid_roi_align.register_fake
    def _(rois, levels, feats, output_size, sampling_ratio, scales, aligned=0):
        return rois.new_empty((rois.shape[0], feats[0].shape[1], *output_size),
                              dtype=feats[0].dtype)

    return pyramid_roi_align


@functools.lru_cache(maxsize=None)
def _pyramid_function():
    """The fused stage for the TorchScript exporter: an autograd Function whose symbolic
    writes PyramidRoIAlign_L{n}."""
    import torch

    class PyramidRoIAlign(torch.autograd.Function):
        @staticmethod
        def forward(ctx, rois, levels, output_size, sampling_ratio, scales, aligned, *feats):
            return _merge(rois, levels, feats, output_size, sampling_ratio, scales, aligned)

        @staticmethod
        def symbolic(g, rois, levels, output_size, sampling_ratio, scales, aligned, *feats):
            out = g.op(f"{DOMAIN}::PyramidRoIAlign_L{len(feats)}", rois, levels, *feats,
                       output_height_i=output_size[0], output_width_i=output_size[1],
                       sampling_ratio_i=max(0, sampling_ratio), aligned_i=aligned,
                       **{f"spatial_scale_{i}_f": float(s) for i, s in enumerate(scales)})
            # the output's type and shape [R, C, PH, PW], which the exporter cannot infer
            # for a custom node (it warned "shape inference ... is missing" otherwise)
            from torch.onnx import symbolic_helper

            sizes = symbolic_helper._get_tensor_sizes(feats[0])  # noqa: SLF001
            C = sizes[1] if sizes and len(sizes) == 4 else None
            out.setType(feats[0].type().with_sizes([None, C, *output_size]))
            return out

    return PyramidRoIAlign


def _decode(maps, rois):
    """torchvision's heatmaps_to_keypoints, its eager path (traced, it would take its export
    path, a scripted Loop, which the exporter cannot lower inside a Function)."""
    import torchvision
    from torchvision.models.detection import roi_heads

    fn = getattr(roi_heads.heatmaps_to_keypoints, "original", roi_heads.heatmaps_to_keypoints)
    is_tracing = torchvision._is_tracing  # noqa: SLF001
    torchvision._is_tracing = lambda: False  # noqa: SLF001
    try:
        return fn(maps, rois)
    finally:
        torchvision._is_tracing = is_tracing  # noqa: SLF001


@functools.lru_cache(maxsize=None)
def _keypoints_op():
    """ort_roi::heatmaps_to_keypoints as a torch custom op (what dynamo traces)."""
    import torch

    @torch.library.custom_op("ort_roi::heatmaps_to_keypoints", mutates_args=(),
                             schema="(Tensor maps, Tensor rois) -> (Tensor, Tensor)")
    def heatmaps_to_keypoints(maps, rois):
        return tuple(t.contiguous() for t in _decode(maps, rois))

    @heatmaps_to_keypoints.register_fake
    def _(maps, rois):
        R, K = maps.shape[0], maps.shape[1]
        return maps.new_empty((R, K, 3)), maps.new_empty((R, K))

    return heatmaps_to_keypoints


@functools.lru_cache(maxsize=None)
def _keypoints_function():
    """Keypoint R-CNN's decoding for the TorchScript exporter: an autograd Function whose
    symbolic writes HeatmapsToKeypoints."""
    import torch

    class HeatmapsToKeypoints(torch.autograd.Function):
        @staticmethod
        def forward(ctx, maps, rois):
            return _decode(maps, rois)

        @staticmethod
        def symbolic(g, maps, rois):
            from torch.onnx import symbolic_helper

            keypoints, scores = g.op(f"{DOMAIN}::HeatmapsToKeypoints", maps, rois, outputs=2)
            sizes = symbolic_helper._get_tensor_sizes(maps)  # noqa: SLF001
            K = sizes[1] if sizes and len(sizes) == 4 else None
            keypoints.setType(maps.type().with_sizes([None, K, 3]))
            scores.setType(maps.type().with_sizes([None, K]))
            return keypoints, scores

    return HeatmapsToKeypoints


def fused_keypoints(dynamo: bool) -> Callable:
    """A stand-in for ``torchvision.models.detection.roi_heads.heatmaps_to_keypoints`` that
    computes the same and exports as one HeatmapsToKeypoints node."""
    from torchvision.models.detection import roi_heads

    original = roi_heads.heatmaps_to_keypoints

    def heatmaps_to_keypoints(maps, rois):
        if dynamo:
            import torch

            _keypoints_op()
            return torch.ops.ort_roi.heatmaps_to_keypoints(maps, rois)
        return _keypoints_function().apply(maps, rois)

    heatmaps_to_keypoints.original = original
    return heatmaps_to_keypoints


def _paste(masks, boxes, height: int, width: int):
    """torchvision's pasting of each mask, as its export path computes it (its eager path
    fails on a box beyond the image), without that path's Loop (scripted when traced, it
    would stay in the graph): [R, height, width]."""
    import torch
    from torchvision.models.detection import roi_heads

    h, w = (torch.tensor(v, dtype=torch.int64) for v in (height, width))
    res = [roi_heads._onnx_paste_mask_in_image(m[0], b, h, w)  # noqa: SLF001
           for m, b in zip(masks, boxes)]
    return torch.stack(res) if res else masks.new_zeros((0, height, width))


@functools.lru_cache(maxsize=None)
def _paste_op():
    """ort_roi::paste_masks as a torch custom op (what dynamo traces): torchvision's pasting
    of masks already padded into boxes already integer."""
    import torch

    @torch.library.custom_op("ort_roi::paste_masks", mutates_args=(),
                             schema="(Tensor masks, Tensor boxes, SymInt height, SymInt width) "
                                    "-> Tensor")
    def paste_masks(masks, boxes, height, width):
        return _paste(masks, boxes, height, width)

    @paste_masks.register_fake
    def _(masks, boxes, height, width):
        return masks.new_empty((masks.shape[0], height, width))

    return paste_masks


@functools.lru_cache(maxsize=None)
def _paste_function():
    """Mask R-CNN's mask pasting for the TorchScript exporter: an autograd Function whose
    symbolic writes PasteMasks, the image size (two int64 scalars) as its [2] input."""
    import torch

    class PasteMasks(torch.autograd.Function):
        @staticmethod
        def forward(ctx, masks, boxes, im_h, im_w):
            return _paste(masks, boxes, int(im_h), int(im_w))

        @staticmethod
        def symbolic(g, masks, boxes, im_h, im_w):
            one = g.op("Constant", value_t=torch.tensor([1]))
            size = g.op("Concat", g.op("Reshape", im_h, one), g.op("Reshape", im_w, one),
                        axis_i=0)
            out = g.op(f"{DOMAIN}::PasteMasks", masks, boxes, size)
            out.setType(masks.type().with_sizes([None, None, None]))
            return out

    return PasteMasks


def fused_paste_masks(dynamo: bool) -> Callable:
    """A stand-in that computes what torchvision's mask pasting does and exports as one
    PasteMasks node: for TorchScript, of ``roi_heads._onnx_paste_masks_in_image_loop`` (what
    its traced ``paste_masks_in_image`` calls); for dynamo, of ``paste_masks_in_image``."""
    from torchvision.models.detection import roi_heads

    if dynamo:
        original = roi_heads.paste_masks_in_image

        def paste_masks_in_image(masks, boxes, img_shape, padding=1):
            import torch

            _paste_op()
            masks, scale = roi_heads.expand_masks(masks, padding=padding)
            boxes = roi_heads.expand_boxes(boxes, scale).to(dtype=torch.int64)
            return torch.ops.ort_roi.paste_masks(masks, boxes, *img_shape)[:, None]

        paste_masks_in_image.original = original
        return paste_masks_in_image
    original = roi_heads._onnx_paste_masks_in_image_loop  # noqa: SLF001

    def paste_masks_loop(masks, boxes, im_h, im_w):
        return _paste_function().apply(masks, boxes, im_h, im_w)

    paste_masks_loop.original = original
    return paste_masks_loop


def fused_multiscale(dynamo: bool) -> Callable:
    """A stand-in for ``torchvision.ops.poolers._multiscale_roi_align`` that computes the same
    and exports as one PyramidRoIAlign node (2 to 6 feature maps; others as torchvision)."""
    from torchvision.ops import poolers

    original = poolers._multiscale_roi_align  # noqa: SLF001 - the function patched

    def multiscale_roi_align(x_filtered, boxes, output_size, sampling_ratio, scales, mapper):
        if scales is None or mapper is None or not 1 < len(x_filtered) <= MAX_LEVELS:
            return original(x_filtered, boxes, output_size, sampling_ratio, scales, mapper)
        rois = poolers._convert_to_roi_format(boxes)  # noqa: SLF001
        levels = mapper(boxes)
        if dynamo:
            import torch

            _pyramid_op()
            return torch.ops.ort_roi.pyramid_roi_align(
                rois, levels, list(x_filtered), list(output_size), sampling_ratio,
                [float(s) for s in scales], 0)
        return _pyramid_function().apply(rois, levels, tuple(output_size), sampling_ratio,
                                         tuple(float(s) for s in scales), 0, *x_filtered)

    multiscale_roi_align.original = original
    return multiscale_roi_align
