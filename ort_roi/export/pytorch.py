"""PyTorch models to ONNX with torchvision's RoI ops written as ort_roi nodes, which a plain
``onnxruntime.InferenceSession(model, ort_roi.session_options())`` runs:

| torchvision                      | ort_roi node                                              |
|----------------------------------|-----------------------------------------------------------|
| ``ops.roi_align`` (aligned 0/1)   | ``RoiAlign`` (ONNX RoiAlign's inputs: the rois' boxes and batch column) |
| ``ops.roi_pool``                 | ``ROIPooling`` (method max)                               |
| ``ops.ps_roi_align``             | ``TorchvisionPSRoIAlign``                                 |
| ``ops.ps_roi_pool``              | ``TorchvisionPSRoIPool``                                  |
| ``ops.MultiScaleRoIAlign`` (2-6 maps) | ``PyramidRoIAlign_L{n}``: the whole stage in one node, the level of each box computed by the graph's own LevelMapper nodes |
| ``models.detection.roi_heads.heatmaps_to_keypoints`` | ``HeatmapsToKeypoints`` (Keypoint R-CNN's decoding: no per-box Loop) |
| ``models.detection.roi_heads.paste_masks_in_image`` | ``PasteMasks`` (Mask R-CNN's mask pasting: no per-box Loop, no growing Concat) |

``torch_export`` is ``torch.onnx.export`` with these installed, for both exporters: TorchScript
(``dynamo=False``, what exports whole torchvision detection models) and dynamo (onnxscript
translations, for models torch.export can trace). Users who call ``torch.onnx.export``
themselves take ``symbolics()`` (TorchScript: ``torch.onnx.register_custom_op_symbolic``) or
``translation_table()`` (dynamo: ``custom_translation_table``) and ``fused_multiscale()`` (the
MultiScaleRoIAlign stage as one op). The detection stages' stand-ins (MultiScaleRoIAlign,
keypoint decoding, mask pasting: each computed as torchvision does, exported as one node)
are in ``pytorch_fused.py``; this module holds the per-op translations and the export. torch
is imported when these are called, never by ``import ort_roi``.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Callable

from ..spec import DOMAIN
from .pytorch_fused import custom_ops, fused_keypoints, fused_multiscale, fused_paste_masks

#: The torchvision ops translated, by their TorchScript names.
TORCHVISION_OPS = ("roi_align", "roi_pool", "ps_roi_align", "ps_roi_pool")
#: Default-domain opsets the TorchScript symbolics are registered at: every one the exporter
#: writes, so that none of torchvision's own (at 11 and 16) is picked instead.
OPSETS = tuple(range(11, 21))


def symbolics() -> dict[str, Callable]:
    """TorchScript symbolics of torchvision's RoI ops, writing ort_roi nodes (register each
    with ``torch.onnx.register_custom_op_symbolic(name, fn, opset)`` for every opset of
    ``OPSETS``: torchvision registers its own at 11 and 16)."""
    import torch
    from torch.onnx import symbolic_helper as sh
    from torch.onnx import symbolic_opset11 as opset11

    def column(g, rois, cols):
        return opset11.select(g, rois, 1, g.op("Constant", value_t=torch.tensor(cols)))

    def batch_indices(g, rois):
        return g.op("Cast", opset11.squeeze(g, column(g, rois, [0]), 1),
                    to_i=torch.onnx.TensorProtoDataType.INT64)

    @sh.parse_args("v", "v", "f", "i", "i", "i", "i")
    def roi_align(g, input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio,
                  aligned):
        return g.op(f"{DOMAIN}::RoiAlign", input, column(g, rois, [1, 2, 3, 4]),
                    batch_indices(g, rois),
                    coordinate_transformation_mode_s="half_pixel" if aligned
                    else "output_half_pixel", mode_s="avg", output_height_i=pooled_height,
                    output_width_i=pooled_width, sampling_ratio_i=max(0, sampling_ratio),
                    spatial_scale_f=spatial_scale)

    @sh.parse_args("v", "v", "f", "i", "i")
    def roi_pool(g, input, rois, spatial_scale, pooled_height, pooled_width):
        return g.op(f"{DOMAIN}::ROIPooling", input, rois, pooled_h_i=pooled_height,
                    pooled_w_i=pooled_width, spatial_scale_f=spatial_scale,
                    method_s="max"), None

    @sh.parse_args("v", "v", "f", "i", "i", "i")
    def ps_roi_align(g, input, rois, spatial_scale, pooled_height, pooled_width,
                     sampling_ratio):
        return g.op(f"{DOMAIN}::TorchvisionPSRoIAlign", input, rois,
                    pooled_height_i=pooled_height, pooled_width_i=pooled_width,
                    spatial_scale_f=spatial_scale, sampling_ratio_i=sampling_ratio), None

    @sh.parse_args("v", "v", "f", "i", "i")
    def ps_roi_pool(g, input, rois, spatial_scale, pooled_height, pooled_width):
        return g.op(f"{DOMAIN}::TorchvisionPSRoIPool", input, rois,
                    pooled_height_i=pooled_height, pooled_width_i=pooled_width,
                    spatial_scale_f=spatial_scale), None

    return {f"torchvision::{f.__name__}": f
            for f in (roi_align, roi_pool, ps_roi_align, ps_roi_pool)}


@functools.lru_cache(maxsize=None)
def _ort_roi_opset():
    from onnxscript import values

    return values.Opset(DOMAIN, 1)


def translation_table() -> dict[Callable, Callable]:
    """The dynamo exporter's translations (``torch.onnx.export(..., dynamo=True,
    custom_translation_table=translation_table())``): torchvision's RoI ops and ort_roi's
    fused MultiScaleRoIAlign op (``fused_multiscale``) as ort_roi nodes."""
    import torch
    from onnxscript import INT64, ir
    from onnxscript.onnx_opset import opset18 as op

    ours = _ort_roi_opset()
    custom_ops()  # torch.ops.ort_roi.pyramid_roi_align, heatmaps_to_keypoints, paste_masks

    def boxes_and_batch(rois):
        boxes = op.Slice(rois, [1], [5], [1])
        batch = op.Cast(op.Squeeze(op.Slice(rois, [0], [1], [1]), [1]), to=INT64.dtype)
        return boxes, batch

    def roi_align(input, rois, spatial_scale: float, pooled_height: int, pooled_width: int,
                  sampling_ratio: int = -1, aligned: bool = False):
        boxes, batch = boxes_and_batch(rois)
        return ours.RoiAlign(input, boxes, batch,
                             coordinate_transformation_mode="half_pixel" if aligned
                             else "output_half_pixel", mode="avg",
                             output_height=pooled_height, output_width=pooled_width,
                             sampling_ratio=max(0, sampling_ratio),
                             spatial_scale=spatial_scale)

    def with_indices(out):
        """torchvision's ops also return int32 indices (argmax, channel mapping) that only
        backward reads: zeros of the output's shape, dropped by the exporter when unused."""
        return out, op.ConstantOfShape(op.Shape(out), value=ir.tensor([0], ir.DataType.INT32))

    def roi_pool(input, rois, spatial_scale: float, pooled_height: int, pooled_width: int):
        return with_indices(ours.ROIPooling(input, rois, pooled_h=pooled_height,
                                            pooled_w=pooled_width,
                                            spatial_scale=spatial_scale, method="max"))

    def ps_roi_align(input, rois, spatial_scale: float, pooled_height: int,
                     pooled_width: int, sampling_ratio: int = -1):
        return with_indices(ours.TorchvisionPSRoIAlign(input, rois, pooled_height=pooled_height,
                                                       pooled_width=pooled_width,
                                                       spatial_scale=spatial_scale,
                                                       sampling_ratio=sampling_ratio))

    def ps_roi_pool(input, rois, spatial_scale: float, pooled_height: int, pooled_width: int):
        return with_indices(ours.TorchvisionPSRoIPool(input, rois, pooled_height=pooled_height,
                                                      pooled_width=pooled_width,
                                                      spatial_scale=spatial_scale))

    def pyramid_roi_align(rois, levels, feats, output_size, sampling_ratio: int,
                          scales, aligned: int = 0):
        node = getattr(ours, f"PyramidRoIAlign_L{len(feats)}")
        return node(rois, levels, *feats, output_height=output_size[0],
                    output_width=output_size[1], sampling_ratio=max(0, sampling_ratio),
                    aligned=aligned, **{f"spatial_scale_{i}": float(s)
                                        for i, s in enumerate(scales)})

    def heatmaps_to_keypoints(maps, rois):
        return ours.HeatmapsToKeypoints(maps, rois, _outputs=2)

    def paste_masks(masks, boxes, height, width):
        if isinstance(height, int) and isinstance(width, int):
            size = op.Constant(value=ir.tensor([height, width], ir.DataType.INT64))
        else:  # the image's size a dynamic dimension
            size = op.Concat(op.Reshape(height, [1]), op.Reshape(width, [1]), axis=0)
        return ours.PasteMasks(masks, boxes, size)

    tv = torch.ops.torchvision
    return {torch.ops.ort_roi.heatmaps_to_keypoints.default: heatmaps_to_keypoints,
            torch.ops.ort_roi.paste_masks.default: paste_masks,
            tv.roi_align.default: roi_align, tv.roi_pool.default: roi_pool,
            tv.ps_roi_align.default: ps_roi_align, tv.ps_roi_pool.default: ps_roi_pool,
            torch.ops.ort_roi.pyramid_roi_align.default: pyramid_roi_align}


@contextlib.contextmanager
def installed(dynamo: bool):
    """ort_roi's translations in place for one export: the fused MultiScaleRoIAlign,
    keypoint decoding and mask pasting and (for TorchScript) the symbolics; torchvision's own
    come back afterwards."""
    import torch
    from torchvision.models.detection import roi_heads, transform
    from torchvision.ops import poolers

    original = poolers._multiscale_roi_align  # noqa: SLF001
    poolers._multiscale_roi_align = fused_multiscale(dynamo)  # noqa: SLF001
    decode = roi_heads.heatmaps_to_keypoints
    roi_heads.heatmaps_to_keypoints = fused_keypoints(dynamo)
    # the mask pasting: where each exporter's path through torchvision looks it up
    pasting = ([(roi_heads, "paste_masks_in_image"), (transform, "paste_masks_in_image")]
               if dynamo else [(roi_heads, "_onnx_paste_masks_in_image_loop")])
    paste, pasted = fused_paste_masks(dynamo), [getattr(m, n) for m, n in pasting]
    for m, n in pasting:
        setattr(m, n, paste)
    registered = []
    try:
        if not dynamo:
            for name, fn in symbolics().items():
                for opset in OPSETS:
                    torch.onnx.register_custom_op_symbolic(name, fn, opset)
                    registered.append((name, opset))
        yield
    finally:
        poolers._multiscale_roi_align = original  # noqa: SLF001
        roi_heads.heatmaps_to_keypoints = decode
        for (m, n), fn in zip(pasting, pasted):
            setattr(m, n, fn)
        for name, opset in registered:
            torch.onnx.unregister_custom_op_symbolic(name, opset)
        if registered:  # torchvision's own symbolics (RoiAlign, MaxRoiPool), registered again
            from torchvision.ops import _register_onnx_ops  # noqa: SLF001

            _register_onnx_ops._register_custom_op()  # noqa: SLF001


def torch_export(model, args: tuple = (), f=None, **kwargs: Any):
    """``torch.onnx.export(model, args, f, **kwargs)`` with ort_roi's translations installed:
    torchvision's roi_align, roi_pool, ps_roi_align, ps_roi_pool, MultiScaleRoIAlign (one
    fused node per stage), Keypoint R-CNN's heatmaps_to_keypoints and Mask R-CNN's
    paste_masks_in_image (one node each, no per-box Loop) are written as ort_roi nodes that
    a plain onnxruntime session with ``ort_roi.session_options()`` runs. Every keyword goes to torch.onnx.export, ``dynamo``
    included (its default is torch's); with dynamo, a ``custom_translation_table`` of yours
    is kept (yours win). Returns what torch.onnx.export returns."""
    import inspect

    import torch

    dynamo = kwargs.get("dynamo", inspect.signature(torch.onnx.export).parameters[
        "dynamo"].default)
    with installed(dynamo):
        if dynamo:
            kwargs["custom_translation_table"] = {**translation_table(),
                                                  **(kwargs.get("custom_translation_table")
                                                     or {})}
        else:
            kwargs.setdefault("custom_opsets", {DOMAIN: 1})
        return torch.onnx.export(model, args, f, **kwargs)
