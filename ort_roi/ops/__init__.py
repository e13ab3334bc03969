"""The op registry: one entry per op, and the public kernels.

Each module here is one op: its spec (inputs, attributes and defaults, outputs and their
shapes, docs), the node forms graphs hold it in, its public kernel (attributes resolved, inputs
checked, host geometry, then the compute steps of ``ort_roi.kernels.dispatch``) and the
readable definition it is held to (``ort_roi.definitions``), tied together in ``ENTRY``.
Registration, schemas, builders, generated inputs, ``ort-roi info``, validate, convert and the
docs read ``ENTRIES``; nothing else lists ops. Adding an op = a module here (and its line
below), its definition, its compute step(s), its tests.

The kernels take arrays and the attributes as keyword arguments (NumPy in, NumPy out; a CuPy
feature map computes on the GPU) and raise :class:`ort_roi.RoiOpError` on bad input::

    from ort_roi.ops import roi_align
    y = roi_align(X, boxes, boxes_num, pooled_height=7, pooled_width=7, spatial_scale=0.25)
"""

from __future__ import annotations

from typing import Any, Callable

from ..spec import DOMAIN, NodeForm, Op, OpSpec
from . import (caffe2_roi_align, crop_and_resize, heatmaps_to_keypoints, mmcv_roi_align, mmcv_roi_align_rotated,
               multi_level_roi_align, onnx_roi_align, paste_masks, psroi_pool,
               pyramid_roi_align, roi_align, roi_feature_extractor, roi_pool, roi_pooling,
               torchvision_ps_roi_align, torchvision_ps_roi_pool)

#: Every op, in documentation order: the four ops of the ort_roi domain first.
ENTRIES: tuple[Op, ...] = (
    roi_pooling.ENTRY, roi_pool.ENTRY, psroi_pool.ENTRY, roi_align.ENTRY,
    onnx_roi_align.ENTRY, roi_feature_extractor.ENTRY, torchvision_ps_roi_align.ENTRY,
    torchvision_ps_roi_pool.ENTRY, pyramid_roi_align.ENTRY, heatmaps_to_keypoints.ENTRY,
    paste_masks.ENTRY, multi_level_roi_align.ENTRY, mmcv_roi_align.ENTRY,
    mmcv_roi_align_rotated.ENTRY, caffe2_roi_align.ENTRY, crop_and_resize.ENTRY,
)

#: The ops of the ort_roi domain its own graphs are built from (the product's four).
SPECS: tuple[OpSpec, ...] = tuple(e.spec for e in ENTRIES[:4])

#: Every node form ort_roi runs: registered ones first (the bridge runs them as they are),
#: then the standard / exporter nodes convert and the front door rewrite.
FORMS: tuple[NodeForm, ...] = (tuple(f for e in ENTRIES for f in e.forms if f.registered)
                               + tuple(f for e in ENTRIES for f in e.forms if not f.registered))

_BY_SPEC = {s.key: e for e in ENTRIES for s in e.specs}
_SPECS = {s.key: s for e in ENTRIES for s in e.specs}
_FORMS = {f.key: f for f in FORMS}


def all_specs() -> tuple[OpSpec, ...]:
    """The spec of every op (one per number of levels for the multi-level ones)."""
    return tuple(s for e in ENTRIES for s in e.specs)


def entry(spec: OpSpec | tuple[str, str]) -> Op:
    """The entry of an op, by its spec or its spec's key (domain, name)."""
    return _BY_SPEC[spec if isinstance(spec, tuple) else spec.key]


def kernel(spec: OpSpec | tuple[str, str]) -> Callable[..., Any]:
    """The kernel the nodes of ``spec`` run (inputs, attributes as keyword arguments)."""
    return entry(spec).kernel


def define(spec: OpSpec | tuple[str, str], *inputs, **attrs):
    """What ``spec``'s readable definition computes (attributes resolved by the spec)."""
    s = spec if isinstance(spec, OpSpec) else _SPECS[spec]
    return entry(s).definition(*inputs, **s.resolve(attrs))


def form(domain: str, op_type: str) -> NodeForm | None:
    """The form of a node (domain "ai.onnx" is the default domain), or None."""
    return _FORMS.get(("" if domain == "ai.onnx" else domain, op_type))


def spec(name: str, domain: str = DOMAIN) -> OpSpec:
    """The spec that computes node ``domain::name`` (a registered node form)."""
    f = form(domain, name)
    if f is None or not f.registered:
        raise KeyError(f"no op {domain}::{name}")
    return f.spec


from .caffe2_roi_align import caffe2_roi_align  # noqa: E402
from .crop_and_resize import crop_and_resize  # noqa: E402
from .heatmaps_to_keypoints import heatmaps_to_keypoints  # noqa: E402
from .mmcv_roi_align import mmcv_roi_align  # noqa: E402
from .mmcv_roi_align_rotated import mmcv_roi_align_rotated  # noqa: E402
from .multi_level_roi_align import multi_level_roi_align  # noqa: E402
from .onnx_roi_align import onnx_roi_align  # noqa: E402
from .paste_masks import paste_masks  # noqa: E402
from .psroi_pool import psroi_pool  # noqa: E402
from .pyramid_roi_align import pyramid_roi_align  # noqa: E402
from .roi_align import roi_align  # noqa: E402
from .roi_feature_extractor import roi_feature_extractor  # noqa: E402
from .roi_pool import roi_pool  # noqa: E402
from .roi_pooling import roi_pooling  # noqa: E402
from .torchvision_ps_roi_align import torchvision_ps_roi_align  # noqa: E402
from .torchvision_ps_roi_pool import torchvision_ps_roi_pool  # noqa: E402

__all__ = ["ENTRIES", "FORMS", "SPECS", "all_specs", "define", "entry", "form", "kernel",
           "spec", "caffe2_roi_align", "crop_and_resize", "heatmaps_to_keypoints", "mmcv_roi_align",
           "mmcv_roi_align_rotated", "multi_level_roi_align", "onnx_roi_align", "paste_masks",
           "psroi_pool", "pyramid_roi_align", "roi_align", "roi_feature_extractor", "roi_pool",
           "roi_pooling", "torchvision_ps_roi_align", "torchvision_ps_roi_pool"]
