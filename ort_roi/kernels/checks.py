"""The kernels' input checks: every one raises RoiOpError naming the op, the input and the
offending value. Boxes and counts are checked on the host for both backends.

The NaN / Inf policy, one for every op (``check_finite``; docs/semantics.md says it too):
an input that places something (boxes, rois, image sizes, anchors, variances) must be finite;
an input that is ranked, decoded or clamped (scores, bbox deltas, the rois
DistributeFpnProposals assigns to levels: an infinite one lands on an end level) must not be
NaN, and may be infinite; feature maps are not checked (NaN and Inf propagate as in the
references)."""

from __future__ import annotations

import functools
import inspect
import math
from typing import Any, Callable, TypeVar, cast

import numpy as np

from ..errors import RoiOpError
from ..geometry import BoxGeometry, align_bins
from ..spec import MAX_LEVELS, MAX_OUTPUT_ELEMENTS, TYPES, check_channels_per_bin
from .dispatch import Step, compute, host, is_cupy


_Kernel = TypeVar("_Kernel", bound=Callable[..., Any])


def quiet(kernel: _Kernel) -> _Kernel:
    """Run a kernel with IEEE behaviour: a huge box may overflow T on purpose (inf bin
    sizes follow the references' arithmetic), so no warnings and no FloatingPointError.

    The kernel keeps its signature: its name, docstring and ``__wrapped__`` (functools.wraps),
    its ``__signature__`` (``inspect.signature`` shows its parameters even where it does not
    follow ``__wrapped__``) and its type (an IDE or type checker sees the kernel's own)."""
    @functools.wraps(kernel)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return kernel(*args, **kwargs)
    wrapper.__signature__ = inspect.signature(kernel)  # type: ignore[attr-defined]
    return cast(_Kernel, wrapper)


#: Arrays of at most this many values are checked with Python's arithmetic over their values
#: (a list of them costs less than one NumPy call on a few boxes); larger ones with NumPy.
FEW_VALUES = 64
_FINITE_MAX = {np.dtype(t): float(np.finfo(t).max) for t in (np.float32, np.float64)}


def _show(a: np.ndarray, limit: int = 6) -> str:
    flat = np.asarray(a).ravel()
    s = ", ".join(repr(v.item()) for v in flat[:limit])
    return f"[{s}{', ...' if flat.size > limit else ''}]"


def check_features(op: str, X, name: str = "X") -> np.ndarray:
    """X must be a [N, C, H, W] float32/float64 array with H, W >= 1."""
    X = _as_array(op, name, X)
    if X.dtype not in TYPES["T"]:
        raise RoiOpError(op, f"input '{name}'", f"must be float32 or float64, got {X.dtype}")
    if X.ndim != 4:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have rank 4 [N, C, H, W], got shape {list(X.shape)}")
    if X.shape[2] < 1 or X.shape[3] < 1:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have H >= 1 and W >= 1, got shape {list(X.shape)}")
    return X


def check_boxes(op: str, name: str, boxes, X: np.ndarray, cols: int) -> np.ndarray:
    """boxes must be [R, cols] of X's dtype, all finite. Returns them on the host."""
    boxes = _as_array(op, name, host(boxes))
    if boxes.ndim != 2 or boxes.shape[1] != cols:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have shape [R, {cols}], got {list(boxes.shape)}")
    if boxes.dtype != X.dtype:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have the dtype of X ({X.dtype}), got {boxes.dtype}")
    check_finite(op, name, boxes, unit="row")
    return boxes


def batch_from_column(op: str, name: str, col: np.ndarray, n: int) -> np.ndarray:
    """Batch indices given as the first column of rois: integer values in [0, N)."""
    if col.size <= FEW_VALUES and all(0 <= v < n and v == int(v) for v in col.tolist()):
        return col.astype(np.intp)  # a few, each an index (NaN fails 0 <= v): no more to check
    b = col.astype(np.intp)  # a non-integer or huge value does not survive the round trip
    bad = (b != col) | (b.view(np.uintp) >= n)  # negatives wrap to huge unsigned values
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        v = col[r].item()
        why = "is not an integer" if v != np.floor(v) else f"is out of range [0, {n})"
        raise RoiOpError(op, f"input '{name}'", f"row {r} has batch index {v!r}, which {why}")
    return b


def int_vector(op: str, name: str, a, n: int, shape: str) -> np.ndarray:
    """An int32/int64 input of shape [n] (``shape``: how the message names it)."""
    a = _as_array(op, name, host(a))
    if a.dtype not in TYPES["I"]:
        raise RoiOpError(op, f"input '{name}'", f"must be int32 or int64, got {a.dtype}")
    if a.ndim != 1 or a.shape[0] != n:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have shape {shape.format(n)}, got {list(a.shape)}")
    return a


def batch_from_indices(op: str, name: str, indices, n: int, r: int) -> np.ndarray:
    """Batch indices given as their own input: int32/int64 [R], each in [0, N)."""
    idx = int_vector(op, name, indices, r, "[R] = [{}] (one index per box)")
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RoiOpError(op, f"input '{name}'",
                         f"box {i} has batch index {idx[i].item()}, out of range [0, {n})")
    return idx.astype(np.intp)


def image_counts(op: str, name: str, counts, n: int, r: int,
                 shape: str = "[N] = [{}] (one count per image of X)",
                 rows: str = "R = {} (the rows of the boxes)") -> np.ndarray:
    """The per-image counts input (the one check of every op that takes them): int32/int64
    [n] (n -1: any [N]; ``shape`` names it in the message), each >= 0, summing to ``r``
    (``rows`` names it). Returns the counts as given."""
    counts = int_vector(op, name, counts, n, shape)
    values = counts.tolist()  # N is small: Python ints, no overflow
    if min(values, default=0) < 0:
        i = next(i for i, v in enumerate(values) if v < 0)
        raise RoiOpError(op, f"input '{name}'", f"count {i} is negative: {values[i]}")
    if sum(values) != r:
        raise RoiOpError(op, f"input '{name}'",
                         f"must sum to {rows.format(r)}, got {_show(counts)}")
    return counts


def batch_from_counts(op: str, name: str, counts, n: int, r: int) -> np.ndarray:
    """Batch indices from per-image counts: int32/int64 [N], non-negative, summing to R."""
    counts = image_counts(op, name, counts, n, r)
    if n == 1:
        return np.zeros(r, np.intp)
    return np.repeat(np.arange(n, dtype=np.intp), counts.astype(np.intp))


def float_input(op: str, name: str, a, dtype=None, of: str = "scores") -> np.ndarray:
    """A float32 / float64 input, on the host (``dtype``: it must have that one, the dtype of
    input ``of``)."""
    a = _as_array(op, name, host(a))
    if dtype is None:
        if a.dtype not in TYPES["T"]:
            raise RoiOpError(op, f"input '{name}'", f"must be float32 or float64, got {a.dtype}")
    elif a.dtype != dtype:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have the dtype of {of} ({dtype}), got {a.dtype}")
    return a


def check_finite(op: str, name: str, a: np.ndarray, *, nan_only: bool = False,
                 unit: str = "element", shown: np.ndarray | None = None) -> None:
    """The NaN / Inf policy (module docstring): every value of ``a`` finite (``nan_only``:
    not NaN; infinities allowed). The message names the first bad value by ``unit``:
    "element" (its index), "row" (a box: its row and coordinates, of ``shown`` where given,
    e.g. the values before rounding) or another word for the items of a 1-D ``a``."""
    if a.size <= FEW_VALUES:  # a few: their sum in Python floats (no NumPy call to pay)
        if math.isfinite(sum(a.ravel().tolist())):
            return
    elif np.isfinite(np.sum(a, dtype=np.float64)):  # no NaN, no inf: one pass
        return
    bad = np.isnan(a) if nan_only else ~np.isfinite(a)
    if not bad.any():
        return
    i = tuple(int(k) for k in np.argwhere(bad)[0])
    if unit == "row":
        v = a if shown is None else shown
        raise RoiOpError(op, f"input '{name}'",
                         f"row {i[0]} has a {'NaN' if nan_only else 'non-finite'} coordinate "
                         f"{v[i].item()!r}{'' if shown is None else f' in {a.dtype}'}: "
                         f"{_show(v[i[0]])}")
    what = "is NaN" if nan_only else "is not finite"
    at = f"element {list(i)}" if unit == "element" else f"{unit} {i[0]}"
    raise RoiOpError(op, f"input '{name}'", f"{at} {what}: {a[i].item()!r}")


def _as_array(op: str, name: str, a) -> np.ndarray:
    if is_cupy(a):  # X on the GPU: its metadata is checked, its data stays there
        return a
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except Exception as e:  # noqa: BLE001 - any conversion failure is a bad input
            raise RoiOpError(op, f"input '{name}'", f"is not an array: {e}") from None
    return a


# --- the small path's accepts (kernels/small.py): None wherever a check could refuse ---------

_INTS = frozenset(TYPES["I"])  # (a set: a dtype's hash is cheaper than its == to each)


def few_boxes(X, boxes, cols: int) -> list[float] | None:
    """A small call's X and boxes as ``check_features`` and ``check_boxes`` would accept
    them: X a NumPy [N, C, H, W] float32 / float64 with H, W >= 1, boxes a NumPy [R, cols]
    of its dtype, 1 to FEW_VALUES values (no boxes: the kernel's at once), all finite.
    Returns the boxes' values (Python floats, row by row), or None (anything else: the
    checks then run, and say why)."""
    if type(X) is not np.ndarray or type(boxes) is not np.ndarray or X.ndim != 4 \
            or X.dtype not in _FINITE_MAX or boxes.dtype != X.dtype or boxes.ndim != 2 \
            or boxes.shape[1] != cols or not 0 < boxes.size <= FEW_VALUES \
            or not (X.shape[2] and X.shape[3]):
        return None
    values = boxes.ravel().tolist()
    return values if math.isfinite(sum(values)) else None


def few_counted(X, boxes, counts) -> tuple[list[int], list[float]] | None:
    """``check_counted_boxes``'s accept (``few_boxes``; counts a NumPy int32 / int64 [N],
    each >= 0, summing to R): (each box's image, the boxes' values), or None."""
    values = few_boxes(X, boxes, 4)
    if values is None or type(counts) is not np.ndarray or counts.dtype not in _INTS \
            or counts.shape != X.shape[:1]:
        return None
    c = counts.tolist()
    if not c or min(c) < 0 or sum(c) != boxes.shape[0]:
        return None
    return [0] * c[0] if len(c) == 1 else [i for i, n in enumerate(c) for _ in range(n)], values


def few_batch_rois(X, rois) -> tuple[list[int], list[float]] | None:
    """``check_batch_rois``'s accept (``few_boxes`` of [R, 5] rows, each batch index an
    integer in [0, N)): (each box's image, the boxes' values without the batch column), or
    None."""
    values = few_boxes(X, rois, 5)
    if values is None:
        return None
    n, batch = X.shape[0], values[::5]
    if not all(0 <= v < n and v == int(v) for v in batch):
        return None
    del values[::5]
    return [int(v) for v in batch], values


def few_indexed(X, boxes, indices) -> tuple[list[int], list[float]] | None:
    """``check_boxes`` and ``batch_from_indices``' accept (``few_boxes``; indices a NumPy
    int32 / int64 [R], each in [0, N)): (each box's image, the boxes' values), or None."""
    values = few_boxes(X, boxes, 4)
    if values is None or type(indices) is not np.ndarray or indices.dtype not in _INTS \
            or indices.shape != boxes.shape[:1]:
        return None
    batch, n = indices.tolist(), X.shape[0]
    return (batch, values) if all(0 <= i < n for i in batch) else None


def few_sizes_fit(values: list[float], spatial_scale: float, dtype) -> bool:
    """``check_box_sizes``' fast accept of a few finite box values (Python floats) and one
    scale: the scale and every |corner * scale| within a quarter of T's largest value leave
    each scaled size finite in T (the products and their difference round to at most half
    of it)."""
    most, s = _FINITE_MAX[np.dtype(dtype)] / 4, abs(float(spatial_scale))
    return s <= most and (not values or max(max(values), -min(values)) * s <= most)


def check_box_sizes(op: str, name: str, boxes: np.ndarray, spatial_scale,
                    levels: np.ndarray | None = None, first_level: int = 0) -> None:
    """Samples of a box whose scaled size overflows T are undefined: reject it.

    ``spatial_scale``: one scale, or [R, 1] scales of boxes' dtype (each box's at its level:
    ``levels`` [R], named in the message counting from ``first_level``)."""
    per_box = np.ndim(spatial_scale) > 0
    if not per_box and boxes.size <= FEW_VALUES and boxes.dtype in _FINITE_MAX:
        values = boxes.ravel().tolist()  # (NaN and larger values: on to the check in T)
        if math.isfinite(sum(values)) and few_sizes_fit(values, spatial_scale, boxes.dtype):
            return
    s = spatial_scale if per_box else boxes.dtype.type(spatial_scale)
    size = boxes[:, 2:] * s - boxes[:, :2] * s
    if not np.isfinite(size).all():
        r = int(np.flatnonzero(~np.isfinite(size).all(axis=1))[0])
        shown = s[r, 0].item() if per_box else spatial_scale
        at = "" if levels is None else f", level {int(levels[r]) + first_level}"
        raise RoiOpError(op, f"input '{name}'",
                         f"row {r}: the scaled box size overflows {boxes.dtype} "
                         f"({boxes[r].tolist()} x {shown!r}{at})")


def check_output_size(spec, attrs: dict, R: int, C: int) -> None:
    """A pooling op's output [R, C, *its pooled sizes] at most MAX_OUTPUT_ELEMENTS, checked
    before anything is allocated (each box's part, the attributes alone, was checked when
    they were resolved): RoiOpError naming the boxes input (or, where one box's output is
    already too large, the attributes) and the shape."""
    sizes = [attrs[k] for k in spec.pooled]
    n = R * C * math.prod(int(v) for v in sizes)  # Python ints: no overflow
    if n <= MAX_OUTPUT_ELEMENTS:
        return
    names = spec.output_size_attrs()
    where = (f"input '{spec.boxes.name}'" if n // max(R, 1) <= MAX_OUTPUT_ELEMENTS
             else f"attribute '{names[0]}'")
    raise RoiOpError(spec.name, where,
                     f"the output [R, C, {', '.join(spec.pooled)}] = "
                     f"{[R, C, *sizes]} would have {n} elements, more than "
                     f"{MAX_OUTPUT_ELEMENTS}")


def check_rotated_sizes(op: str, rois: np.ndarray, spatial_scale, aligned: bool) -> None:
    """Rotated boxes: a scaled size (w, h) must be finite, and >= 0 when aligned (mmcv
    asserts "ROIs in ROIAlignRotated do not have non-negative size"). ``spatial_scale``: one
    scale, or [R] (each box's, at its level)."""
    s = np.asarray(spatial_scale, rois.dtype)
    w, h = rois[:, 3] * s, rois[:, 4] * s
    bad = ~(np.isfinite(w) & np.isfinite(h))
    if aligned:
        bad |= (w < 0) | (h < 0)
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        why = "overflows" if not (np.isfinite(w[r]) and np.isfinite(h[r])) else "is negative"
        raise RoiOpError(op, "input 'rois'",
                         f"row {r}: the scaled size (w, h) = ({w[r].item()!r}, {h[r].item()!r}) "
                         f"{why}" + (" (mmcv requires w, h >= 0 when aligned=1)"
                                     if aligned and why == "is negative" else ""))


def check_levels(op: str, feats, batch: int | None = None) -> list:
    """Feature maps of a pyramid: each [N, C, H, W] of one dtype, one N and one C (and N =
    ``batch`` when given)."""
    X = [check_features(op, x, f"feat_{i}") for i, x in enumerate(feats)]
    if batch is not None and X[0].shape[0] != batch:
        raise RoiOpError(op, "input 'feat_0'",
                         f"must hold one image (N = 1; the rois have no batch index), got "
                         f"{list(X[0].shape)}")
    for i, x in enumerate(X[1:], 1):
        if x.dtype != X[0].dtype:
            raise RoiOpError(op, f"input 'feat_{i}'",
                             f"must have the dtype of feat_0 ({X[0].dtype}), got {x.dtype}")
        if x.shape[:2] != X[0].shape[:2]:
            raise RoiOpError(op, f"input 'feat_{i}'",
                             f"must have feat_0's N and C {list(X[0].shape[:2])}, got "
                             f"{list(x.shape)}")
    return X


def check_batch_rois(op: str, name: str, rois, X: np.ndarray, cols: int = 5):
    """Rows [batch_id, x1, y1, x2, y2, ...] checked (``check_boxes``, ``batch_from_column``):
    (the rows, each box's image, the boxes without their batch column, contiguous)."""
    rois = check_boxes(op, name, rois, X, cols)
    batch = batch_from_column(op, name, rois[:, 0], X.shape[0])
    return rois, batch, np.ascontiguousarray(rois[:, 1:])


def check_counted_boxes(op: str, names: tuple[str, str], boxes, counts, X: np.ndarray):
    """Paddle's boxes [R, 4] and their per-image counts (inputs ``names``) checked
    (``check_boxes``, ``batch_from_counts``): (the boxes on the host, each box's image)."""
    boxes = check_boxes(op, names[0], boxes, X, 4)
    return boxes, batch_from_counts(op, names[1], counts, X.shape[0], boxes.shape[0])


def check_level_count(op: str, min_level: int, max_level: int, L: int | None = None,
                      what: str = "the op's levels") -> int:
    """The levels min_level .. max_level of a multi-level op: L of them (None: 1 to
    MAX_LEVELS). Returns their number; RoiOpError naming both attributes and their values."""
    n = max_level - min_level + 1
    if not 1 <= n <= MAX_LEVELS or (L is not None and n != L):
        want = f"{L}" if L is not None else f"1 to {MAX_LEVELS}"
        raise RoiOpError(op, "attribute 'max_level'",
                         f"max_level - min_level + 1 must be {want} ({what}), got max_level = "
                         f"{max_level}, min_level = {min_level}: {max_level} - {min_level} + 1 "
                         f"= {n}")
    return n


def level_spec(specs: dict, L: int, node: str):
    """The spec of a multi-level op for L feature maps (RoiOpError outside 1 .. MAX_LEVELS)."""
    if L not in specs:
        raise RoiOpError(node, "inputs", f"takes 1 to {max(specs)} feature maps, got {L}")
    return specs[L]


def resolve_levels(specs: dict, node: str, L: int, name: str, values, pattern: str,
                   attrs: dict):
    """A multi-level op's spec for L feature maps (``level_spec``) and its attributes
    resolved: ``attrs`` and list attribute ``name``, one value per map (``per_level``) as the
    attributes ``pattern`` names (e.g. "stride_{}"). Returns (spec, resolved attributes)."""
    spec = level_spec(specs, L, node)
    values = per_level(spec, name, values, L)
    return spec, spec.resolve({**attrs, **{pattern.format(i): v for i, v in enumerate(values)}})


def level_values(attrs: dict, pattern: str, L: int) -> list:
    """A list attribute as a fixed-arity node holds it, one attribute a feature map
    (``pattern``, e.g. "stride_{}"), taken out of ``attrs``: its L values (None where absent)."""
    return [attrs.pop(pattern.format(i), None) for i in range(L)]


def level_node(kernel, name: str, pattern: str, leading: int = 1):
    """The function a multi-level op's fixed-arity nodes call: ``kernel`` with its list
    attribute ``name`` gathered from the node's attributes ``pattern``, one a feature map
    (``level_values``; e.g. stride_0 .. stride_{L-1} into featmap_strides). The node's inputs:
    ``leading`` ones (rois, ...), then the L feature maps."""
    def node(*inputs, **attrs):
        values = level_values(attrs, pattern, len(inputs) - leading)
        return kernel(*inputs, **{name: values}, **attrs)

    node.__name__ = node.__qualname__ = f"{kernel.__name__}_levels"
    node.__doc__ = (f"``{kernel.__name__}`` with {name} as the node's attributes "
                    f"{pattern.format(0)} .. {pattern.format('{L-1}')}.")
    return node


def per_level(spec, name: str, values, L: int) -> list:
    """A list attribute with one value per feature map (RoiOpError naming it otherwise)."""
    values = list(np.atleast_1d(np.asarray(values)).tolist())
    if len(values) != L:
        raise RoiOpError(spec.name, f"attribute '{name}'",
                         f"must hold one value per feature map ({L}), got {values!r}")
    return values


def compute_align(step: Step, X, *, spec, attrs: dict, batch: np.ndarray, boxes: np.ndarray,
                  geometry: BoxGeometry, name: str, **extra):
    """The RoIAlign family's kernels once their inputs are checked, one helper for check ->
    bins -> compute: the boxes' scaled sizes (``check_box_sizes``, naming input ``name``)
    and the output's size (``check_output_size``) checked, the bins made on the host
    (``geometry.align_bins``: ``geometry``, the spec's pooled sizes), then compute ``step``
    (``steps.align`` or ``steps.align_max``) over them with the resolved
    ``attrs["sampling_ratio"]`` and ``extra`` (``empty=``, the max's start).

    ``attrs``: the spec's resolved attributes; ``batch``: each box's image; ``boxes``:
    [R, 4] on the host. Returns the step's output [R, C, *pooled]."""
    check_box_sizes(spec.name, name, boxes, attrs["spatial_scale"])
    check_output_size(spec, attrs, boxes.shape[0], X.shape[1])
    ph, pw = (attrs[k] for k in spec.pooled)
    bins = align_bins(boxes, attrs["spatial_scale"], geometry, ph, pw)
    return compute(step, X, batch=batch, start=bins.start, bin_size=bins.size, ph=ph, pw=pw,
                   sampling_ratio=attrs["sampling_ratio"], **extra)


def check_position_sensitive(op: str, X, rois, ph: int, pw: int):
    """torchvision's position-sensitive ops' inputs: X [N, C, H, W] (``check_features``) with
    C a multiple of ph * pw (``check_channels_per_bin``), rois [R, 5] (``check_batch_rois``).
    Returns (X, each box's image, the boxes [R, 4] without their batch column)."""
    X = check_features(op, X)
    check_channels_per_bin(op, X.shape[1], ph, pw)
    _, batch, boxes = check_batch_rois(op, "rois", rois, X)
    return X, batch, boxes
