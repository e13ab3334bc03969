"""What the recognisers of multi-level RoI stages share (torchvision's in fusion.py, the
ScatterND family's in scatter_nd.py): a level's RoiAlign (or MMCVRoIAlignRotated) checked,
the chain of merges, the level an Equal selects, the zeros merged into, what a merge writes,
a candidate matched or noted, and the fused node's name."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import RoiOpError, node_label
from ..ops import form
from .nodes import node_attrs
from .toolkit import GraphIndex, NoMatch, anything, check_attrs, is_default


def level_roi_align(g: "GraphIndex", ra: onnx.NodeProto,
                    attrs: dict | None) -> tuple[dict, float]:
    """One level's RoiAlign of a multi-level stage (torchvision's, the ScatterND family's):
    its attributes checked (avg, a positive scale, a sampling ratio >= 0, a half-pixel or
    output-half-pixel mode) and read as PyramidRoIAlign's (output sizes, sampling_ratio,
    aligned), which must equal the other levels' (``attrs``; None for the first level).

    Returns:
        (those attributes, the level's spatial_scale).

    Raises:
        NoMatch: an attribute outside those, or other values than the other levels'.
    """
    a = check_attrs(ra, g.opset, g.exporter, mode="avg", output_height=anything,
                    output_width=anything, spatial_scale=lambda v: v > 0,
                    sampling_ratio=lambda v: v >= 0,
                    coordinate_transformation_mode=lambda v: v in ("half_pixel",
                                                                   "output_half_pixel"))
    these = dict(output_height=a["output_height"], output_width=a["output_width"],
                 sampling_ratio=a["sampling_ratio"],
                 aligned=int(a.get("coordinate_transformation_mode") == "half_pixel"))
    if attrs is not None and these != attrs:
        raise NoMatch(f"RoiAlign {node_label(ra)!r} pools with {these}, another level "
                      f"with {attrs}")
    return these, float(a["spatial_scale"])


def level_rotated(g: GraphIndex, node: onnx.NodeProto, attrs: dict | None
                   ) -> tuple[dict, float]:
    """One level's MMCVRoIAlignRotated: its attributes as its form's spec resolves them (what
    the unfused node computes with), read as PyramidRotatedRoIAlign's, which must equal the
    other levels'. Returns (those attributes, the level's spatial_scale)."""
    try:
        a = node_attrs(node, form(node.domain, node.op_type).spec)
    except RoiOpError as e:
        raise NoMatch(str(e)) from None
    these = {k: a[k] for k in ("output_height", "output_width", "sampling_ratio", "aligned",
                               "clockwise")}
    if attrs is not None and these != attrs:
        raise NoMatch(f"MMCVRoIAlignRotated {node_label(node)!r} pools with {these}, another "
                      f"level with {attrs}")
    return these, float(a["spatial_scale"])


def merge_chain(g: "GraphIndex", first: onnx.NodeProto,
                also: frozenset[str] = frozenset()) -> list[onnx.NodeProto]:
    """A multi-level stage's merges, from ``first`` (the one reading the zeros) on: each next
    one a node of ``first``'s op type reading the previous one's output as its data input,
    once; nothing else reads that output but nodes of the op types ``also`` (ScatterND's: the
    next level's Shape), and it is no graph output."""
    chain = [first]
    while True:
        out = chain[-1].output[0]
        users = g.consumers.get(out, [])  # a node once per input it reads ``out`` as
        nxt = [u for u in users if u.op_type == first.op_type and u.input[0] == out]
        others = [u for u in users if u is not nxt[0]] if len(nxt) == 1 else users
        if len(nxt) != 1 or len(others) != len(users) - 1 or out in g.outputs or any(
                u.op_type not in also for u in others):
            return chain
        chain.append(nxt[0])


def selected_level(g: GraphIndex, eq: onnx.NodeProto, level: np.ndarray, levels: str,
                   known: str | None) -> tuple[int, str]:
    """The level an ``Equal(levels, level)`` of a multi-level stage selects (torchvision's
    and the ScatterND family's), checked to select rows: ``level`` a scalar or one-element
    vector (a [1, 1] one would broadcast the comparison to a matrix, whose NonZero's first
    column is no longer the row) and ``levels`` a vector (``GraphIndex.rank``: by shape
    inference, else by the ops computing it), the same tensor as the other levels'
    (``known``; None for the first).

    Returns:
        (the level, the levels tensor).

    Raises:
        NoMatch: naming what differs.
    """
    value = int(level.ravel()[0])
    if level.ndim > 1:
        raise NoMatch(f"Equal {node_label(eq)!r} compares with level {value} of shape "
                      f"{list(level.shape)}, which broadcasts the levels to a matrix")
    if known is not None and levels != known:
        raise NoMatch(f"level {value} is selected from {levels!r}, the others from {known!r}")
    if known is None:
        g.is_vector(levels, "the levels")
    return value, levels


def is_positive_zero(value: Any) -> bool:
    """A ConstantOfShape's ``value`` makes +0 (the zeros a multi-level stage merges into):
    absent (float 0) or one element equal to +0, of any type (a type other than the pooled
    one fails to load, or is Cast to it)."""
    if value is None:
        return True
    a = numpy_helper.to_array(value)
    return a.size == 1 and a.ravel()[0] == 0 and not np.signbit(a.ravel()[0])


def pooled_by_roi_align(g: GraphIndex, name: str, through: str,
                        also: frozenset[tuple[str, str]] = frozenset()
                        ) -> tuple[onnx.NodeProto | None, onnx.NodeProto | None]:
    """What a multi-level stage's merge writes: (the ONNX RoiAlign, or a node of a form in
    ``also`` ((domain, op type): the ScatterND family's MMCVRoIAlignRotated), computing
    ``name``, the node of op ``through`` between them or None: torchvision's Cast, the
    ScatterND family's Reshape); (None, None) when ``name`` is not such a node's result."""
    n = g.producer.get(name)
    between = n if n is not None and n.op_type == through and is_default(n) else None
    if between is not None:
        n = g.producer.get(between.input[0])
    if n is None or not ((n.op_type == "RoiAlign" and is_default(n))
                         or (n.domain, n.op_type) in also):
        return None, None
    return n, between


def matched_or_noted(match: Callable[[], Any], stages: list, notes: list[str],
                     note: Callable[[str], str]) -> None:
    """``match()``'s stage added to ``stages``; where it raises NoMatch, ``note(why)`` added
    to ``notes`` instead (what every recogniser of a multi-level stage does with a
    candidate)."""
    try:
        stages.append(match())
    except NoMatch as e:
        notes.append(note(str(e)))


def fused_name(last: onnx.NodeProto, op_type: str) -> str:
    """The name of the node that replaces a stage whose output ``last`` computes: ``op_type``
    under ``last``'s scope ("/roi_heads/box_pooler/ScatterND_3" ->
    "/roi_heads/box_pooler/PyramidRoIAlign_L4")."""
    prefix = last.name.rsplit("/", 1)[0] if "/" in last.name else last.name
    return f"{prefix}/{op_type}" if prefix else op_type
