"""MMDeploy's variant of the ScatterND family of RoI stages (``scatter_nd``): the padding rows
and the boxes' offset, recognised and, once fused, written back as the graph computes them.

MMDeploy's onnxruntime export of MMDetection's two-stage detectors (mmdeploy 1.x,
``single_roi_extractor__forward`` and its ``roi_align`` symbolic; ``/bbox_roi_extractor``,
``/mask_roi_extractor``) writes the family's stage with three differences:

- **padding**: P = 2 x levels zero rows go before the rois (Concat(axis 0) of a constant
  [P, 5] and the rois), P constant levels before the levels (Concat of [0 .. L-1] twice and
  the levels), P zero rows before the merge's zeros (Concat of ConstantOfShape([P, C, H, W])
  and the zeros), so that no level selects nothing; a Slice(starts [P], ends INT64_MAX, axes
  [0], steps 1) after the last merge drops them. Row P + r of the padded stage is row r of the
  unpadded one, so the fused node reads the rois and levels before the padding and replaces
  the Slice.
- **the boxes' offset**: below opset 16 (ONNX RoiAlign has no half-pixel mode there) each
  level's RoiAlign reads its boxes as Add(Gather(rows, [1, 2, 3, 4], axis 1), c) with the
  constant c = -0.5 / spatial_scale: mmcv's aligned=True written out, on RoiAlign's
  output_half_pixel arithmetic (a box under one map pixel still stretched to one, unlike
  mmcv's aligned=True). The fused node reads the rois with each row's level's c added the same
  way (the same bits: one float Add per coordinate) and pools with aligned=0.
- the selection ``Squeeze(Transpose(NonZero(...)), [1])`` has no Split between.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from .toolkit import GraphIndex, NoMatch, is_default

#: Slice's ends that reach the last row, as torch.onnx writes ``x[P:]`` (INT64_MAX); any end
#: beyond 2**31 - 1 rows does too.
_TO_THE_END = 2**31 - 1


def padded(g: GraphIndex, name: str) -> bool:
    """``name`` is Concat(axis 0) of ConstantOfShapes: the padded zeros a chain may start on."""
    n = g.producer.get(name)
    return n is not None and n.op_type == "Concat" and is_default(n) and len(n.input) == 2 \
        and all(getattr(g.producer.get(i), "op_type", None) == "ConstantOfShape"
                for i in n.input)


def _one(g: GraphIndex, name: str) -> int | None:
    v = g.const(name)
    return int(v.ravel()[0]) if v is not None and v.size == 1 and v.dtype.kind == "i" else None


def _padding(g: GraphIndex, name: str, what: str) -> tuple[str, int]:
    """name = Concat(axis 0) of constants and, last, the unpadded tensor: (it, the rows the
    constants add)."""
    cat = g.made_by(name, "Concat", axis=0)
    pads = [g.const(i) for i in cat.input[:-1]]
    if not pads or any(p is None or p.ndim < 1 for p in pads):
        raise NoMatch(f"the {what} are padded by Concat {node_label(cat)!r} with other than "
                      f"constant rows before them")
    return cat.input[-1], sum(p.shape[0] for p in pads)


def _pad_zeros(g: GraphIndex, name: str, rows: int, zeros: str, zero) -> None:
    """name = ConstantOfShape(Concat([rows], dims 1..3 of ``zeros``)) of float 0."""
    cat = g.made_by(g.made_by(name, "ConstantOfShape", value=zero).input[0], "Concat", axis=0)
    if len(cat.input) != 4 or _one(g, cat.input[0]) != rows:
        raise NoMatch(f"the padding zeros' shape ({node_label(cat)!r}) is not [{rows}, C, H, "
                      f"W] where the rois have {rows} padding rows")
    want = g.const(g.made_by(zeros, "ConstantOfShape", value=zero).input[0])
    for k, dim in enumerate(cat.input[1:], 1):
        if g.const(dim) is not None and want is not None and np.array_equal(g.const(dim),
                                                                              want[k:k + 1]):
            continue
        sq = g.operand(dim, "Unsqueeze", "axes", 1, [0])
        gather = g.made_by(sq.input[0], "Gather", axis=0)
        if _one(g, gather.input[1]) != k or g.made_by(gather.input[0], "Shape").input[0] != zeros:
            raise NoMatch(f"the padding zeros' dimension {k} ({dim!r}) is not the zeros'")


def unpad(g: GraphIndex, base: str, rois: str, levels: str, last: onnx.NodeProto, zero
          ) -> tuple[str, str, str, onnx.NodeProto] | None:
    """The padding around a chain whose merge starts on ``base`` and ends with ``last``:
    (the zeros, rois and levels before it, the Slice dropping it); None when ``base`` is not
    padded. ``zero``: the ConstantOfShape value check. NoMatch where it differs."""
    if not padded(g, base):
        return None
    pad_zeros, zeros = g.made_by(base, "Concat", axis=0).input
    rois0, n = _padding(g, rois, "rois")
    levels0, m = _padding(g, levels, "levels")
    if n != m:
        raise NoMatch(f"{n} padding rows of rois, {m} padding levels")
    _pad_zeros(g, pad_zeros, n, zeros, zero)
    users = g.consumers.get(last.output[0], [])
    if len(users) != 1 or users[0].op_type != "Slice" or last.output[0] in g.outputs:
        raise NoMatch(f"the padded merge {node_label(last)!r} is read by other than one Slice")
    sl = g.made_by(users[0].output[0], "Slice")
    g.const_is(sl, 1, [n])
    end = g.const(sl.input[2]) if len(sl.input) > 2 else None
    if end is None or end.shape != (1,) or int(end[0]) < _TO_THE_END:
        raise NoMatch(f"Slice {node_label(sl)!r} does not keep the rows after the padding to "
                      f"the end")
    if len(sl.input) > 3 and sl.input[3]:
        g.const_is(sl, 3, [0])
    if len(sl.input) > 4 and sl.input[4]:
        g.const_is(sl, 4, [1])
    return zeros, rois0, levels0, sl


def boxes_plus_offset(g: GraphIndex, name: str) -> tuple[str, np.ndarray | None]:
    """The boxes a RoiAlign reads, and what was added to them: name = Add(x, c) (either order)
    with c one float constant (MMDeploy's aligned=True written out at opset 11): (x, c); else
    (name, None) (detectron2's, and MMDeploy's at opset 16)."""
    n = g.producer.get(name)
    if n is None or n.op_type != "Add" or not is_default(n):
        return name, None
    for x, c in ((n.input[0], n.input[1]), (n.input[1], n.input[0])):
        v = g.const(c)
        if v is not None and v.size == 1 and v.dtype.kind == "f" and g.const(x) is None:
            return x, v
    raise NoMatch(f"RoiAlign's boxes come from Add {node_label(n)!r}, not the boxes plus one "
                  f"float constant")


def offset_aligned(g: GraphIndex, ra: onnx.NodeProto) -> bool:
    """The RoiAlign's boxes are offset by -0.5 / spatial_scale: aligned=True written out."""
    try:
        _, c = boxes_plus_offset(g, ra.input[1])
    except NoMatch:
        return False
    scale = next((a.f for a in ra.attribute if a.name == "spatial_scale"), 1.0)
    return c is not None and float(c.ravel()[0]) == np.float32(-0.5 / scale)


def shifted(name: str, rois: str, levels: str, offsets: list) -> list[onnx.NodeProto]:
    """Nodes computing ``name``: rois [R, 5] with each row's boxes plus its level's offset
    (levels taken mod L: a row no level selects is pooled as 0 by the fused node anyway)."""
    L = len(offsets)
    dtype = next(c.dtype for c in offsets if c is not None)
    table = np.array([[0 if c is None else c.ravel()[0]] for c in offsets], dtype)
    p = f"{name}_"

    def const(tag, value):
        return helper.make_node("Constant", [], [p + tag], name=p + tag,
                                value=numpy_helper.from_array(np.asarray(value), p + tag))

    i64 = np.int64
    return [
        const("L", np.array(L, i64)), const("table", table),
        const("b0", np.array([0], i64)), const("b1", np.array([1], i64)),
        const("b5", np.array([5], i64)),
        helper.make_node("Cast", [levels], [p + "lv"], name=p + "Cast", to=onnx.TensorProto.INT64),
        helper.make_node("Mod", [p + "lv", p + "L"], [p + "i"], name=p + "Mod", fmod=0),
        helper.make_node("Gather", [p + "table", p + "i"], [p + "c"], name=p + "Gather", axis=0),
        helper.make_node("Slice", [rois, p + "b0", p + "b1", p + "b1"], [p + "batch"],
                         name=p + "SliceBatch"),
        helper.make_node("Slice", [rois, p + "b1", p + "b5", p + "b1"], [p + "boxes"],
                         name=p + "SliceBoxes"),
        helper.make_node("Add", [p + "boxes", p + "c"], [p + "moved"], name=p + "Add"),
        helper.make_node("Concat", [p + "batch", p + "moved"], [name], name=p + "Concat",
                         axis=1),
    ]
