"""The op registry: one entry per op, and the public kernels.

Each module here is one op: its spec (inputs, attributes and defaults, outputs and their
shapes, docs), the node forms graphs hold it in, its public kernel (attributes resolved, inputs
checked, host geometry, then the compute steps of ``ort_roi.kernels.dispatch``) and the
readable definition it is held to (``ort_roi.definitions``), tied together in ``ENTRY``.
Registration, schemas, builders, generated inputs, ``ort-roi info``, validate, convert and the
docs read ``ENTRIES``; nothing else lists ops. Adding an op = a module here and its name in
``MODULES`` (the one list: ``ENTRIES``, ``SPECS``, ``FORMS`` and the public kernels
``ort_roi.ops.<kernel>`` are derived from it), its definition, its compute step(s), its tests.

The kernels take arrays and the attributes as keyword arguments (NumPy in, NumPy out; a CuPy
feature map computes on the GPU) and raise [`ort_roi.RoiOpError`][ort_roi.RoiOpError] on bad
input:

    from ort_roi.ops import roi_align
    y = roi_align(X, boxes, boxes_num, pooled_height=7, pooled_width=7, spatial_scale=0.25)
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Callable

from ..spec import DOMAIN, NodeForm, Op, OpSpec

#: The registry: every op's module, in documentation order. Everything below is derived from
#: it (its order is the docs' and listings' order, and means nothing else).
MODULES: tuple[str, ...] = (
    "roi_pooling", "roi_pool", "psroi_pool", "roi_align", "onnx_roi_align",
    "roi_feature_extractor", "torchvision_ps_roi_align", "torchvision_ps_roi_pool",
    "pyramid_roi_align", "heatmaps_to_keypoints", "paste_masks", "multi_level_roi_align",
    "mmcv_roi_align", "mmcv_roi_align_rotated", "multi_level_rotated_roi_align",
    "pyramid_rotated_roi_align",
    "caffe2_roi_align", "crop_and_resize",
    "generate_proposals", "collect_fpn_proposals", "distribute_fpn_proposals",
    "distribute_roi_align", "nms_rotated",
)

#: Every op's entry, in ``MODULES`` order.
ENTRIES: tuple[Op, ...] = tuple(import_module(f"{__name__}.{m}").ENTRY for m in MODULES)

#: The ops of the ort_roi domain its own graphs are built from (the product's own: each
#: entry with ``own=True``).
SPECS: tuple[OpSpec, ...] = tuple(e.spec for e in ENTRIES if e.own)

#: Every node form ort_roi runs: registered ones first (the bridge runs them as they are),
#: then the standard / exporter nodes convert and the front door rewrite.
FORMS: tuple[NodeForm, ...] = (tuple(f for e in ENTRIES for f in e.forms if f.registered)
                               + tuple(f for e in ENTRIES for f in e.forms if not f.registered))

_BY_SPEC = {s.key: e for e in ENTRIES for s in e.specs}
_SPECS = {s.key: s for e in ENTRIES for s in e.specs}
_FORMS = {f.key: f for f in FORMS}


def all_specs() -> tuple[OpSpec, ...]:
    """The spec of every op, in ``ENTRIES`` order.

    Returns:
        Every ``OpSpec`` of every entry (the multi-level ops have one per number of levels),
        registered node forms' and standard ones' alike.
    """
    return tuple(s for e in ENTRIES for s in e.specs)


def entry(spec: OpSpec | tuple[str, str]) -> Op:
    """The entry of an op: its specs, kernel, definition, compute steps and node forms.

    Args:
        spec: one of the op's specs, or a spec's key ``(domain, name)``.

    Returns:
        The op's ``Op`` entry (its module's ``ENTRY``).

    Raises:
        KeyError: no op has that spec.
    """
    return _BY_SPEC[spec if isinstance(spec, tuple) else spec.key]


def kernel(spec: OpSpec | tuple[str, str]) -> Callable[..., Any]:
    """The kernel (the fast function that computes) the nodes of ``spec`` run.

    Args:
        spec: one of the op's specs, or a spec's key ``(domain, name)``.

    Returns:
        The op's public kernel (``ort_roi.ops.roi_align``, ...), which, called with the node's
        inputs (NumPy arrays; a CuPy feature map computes on the GPU) and its attributes as
        keyword arguments, returns the output array(s).

    Raises:
        KeyError: no op has that spec.
    """
    e = entry(spec)
    return e.node or e.kernel


def define(spec: OpSpec | tuple[str, str], *inputs, **attrs):
    """What the op's readable definition (``ort_roi.definitions``, a literal loop) computes.

    Slow by design: the reference the kernels are held to, not a way to compute.

    Args:
        spec: one of the op's specs, or a spec's key ``(domain, name)``.
        *inputs: the op's inputs as NumPy arrays, in the spec's order (e.g. RoIAlign's
            X [N, C, H, W] float32 or float64, boxes [R, 4] of X's dtype, boxes_num [N]
            int32 or int64).
        **attrs: its attributes, by the spec's names; the spec resolves them (defaults
            filled, values checked).

    Returns:
        The definition's output(s), NumPy arrays of the shapes and dtypes the spec's outputs
        declare (e.g. RoIAlign's [R, C, pooled_height, pooled_width] of X's dtype).

    Raises:
        KeyError: no op has that spec.
        RoiOpError: an unknown, missing required or out-of-range attribute.
    """
    s = spec if isinstance(spec, OpSpec) else _SPECS[spec]
    return entry(s).definition(*inputs, **s.resolve(attrs))


def form(domain: str, op_type: str) -> NodeForm | None:
    """The node form of ``domain::op_type``: which spec computes it, and how.

    Args:
        domain: the node's domain (``""`` or ``"ai.onnx"``: the default domain;
            ``"ort_roi"``, ``"mmcv"``, ...).
        op_type: the node's op type (``"RoIAlign"``, ``"RoiAlign"``, ...).

    Returns:
        Its ``NodeForm`` (registered ones the bridge runs as they are, others that convert
        and the front door rewrite), or None when ort_roi does not run such nodes.
    """
    return _FORMS.get(("" if domain == "ai.onnx" else domain, op_type))


def spec(name: str, domain: str = DOMAIN) -> OpSpec:
    """The spec (inputs, attributes, outputs, docs) of the registered node form ``domain::name``.

    Args:
        name: the node's op type (``"RoIAlign"``, ``"MMCVRoiAlign"``, ...).
        domain: the node's domain (default ``"ort_roi"``).

    Returns:
        The ``OpSpec`` that computes such nodes.

    Raises:
        KeyError: ``domain::name`` is not a registered node form.
    """
    f = form(domain, name)
    if f is None or not f.registered:
        raise KeyError(f"no op {domain}::{name}")
    return f.spec


#: The public kernels, ``ort_roi.ops.roi_align`` ...: each entry's kernel, by its name.
KERNELS: dict[str, Callable[..., Any]] = {e.kernel.__name__: e.kernel for e in ENTRIES}
globals().update(KERNELS)

__all__ = ["ENTRIES", "FORMS", "KERNELS", "MODULES", "SPECS", "all_specs", "define", "entry",
           "form", "kernel", "spec", *KERNELS]
