"""MXNet's exported RoI graphs (``mx.onnx.export_model``, MXNet 1.9.1) given MXNet's semantics.

mx2onnx translates with its opset-12 and opset-13 tables but stamps the model with the newest
opset of the installed onnx package (onnx 1.10.2 -> 15, 1.11 -> 16, 1.14 -> 19); it has no
opset argument. What it writes then means something else than MXNet computes, or does not load:

- ``contrib.ROIAlign`` (always aligned=False: the exporter refuses aligned=True) becomes
  Slice(rois, 1:5) for the boxes; Slice(rois, 0:1), Squeeze, Relu, Cast(int64) for the batch
  indices; a ``RoiAlign`` written without coordinate_transformation_mode (from opset 16 its
  default, half_pixel, is not MXNet's arithmetic: off by ~3 on a 7x7 grid) and with MXNet's
  sample_ratio (-1, MXNet's adaptive, is refused by onnxruntime); then Unsqueeze, Less(batch,
  0), Where(-> 0): rows whose batch index is negative are zero. ``fix_roi_aligns`` recognises
  that pattern exactly and makes its RoiAlign an ort_roi::RoiAlign with MXNet's arithmetic
  (coordinate_transformation_mode output_half_pixel, sampling_ratio <= 0 as 0: adaptive); the
  exporter's batch plumbing and row masking stay as they are (exact by construction).
- GluonCV's FPN RoI stage (``FasterRCNN._pyramid_roi_feats``, roi_mode "align") pools every box
  at every level: per level l, the rois of the other levels are masked to -1 (``where(roi_level
  == l, rois, -1)``, exported as Equal, Cast, a Pad-computed shape, Reshape, Cast(bool), Where
  over ConstantOfShape(1) * -1), pooled by the ROIAlign pattern above (the masked rows come
  out zero), and the levels are summed (Sum). ``fuse_fpn`` replaces the stage with one
  ort_roi::PyramidRoIAlign_L{L} fed the level of each box as the graph computes it (a Where
  chain over the graph's own Equal(roi_level, l) nodes: the first level whose Equal holds,
  else -1 for none), -1 also where the batch index is negative (the exporter's zero rows),
  and the rois with their batch index as the exporter reads it (Floor(Relu(b)), Cast's
  truncation of a non-negative value). Each box is pooled once, at its level.
- A ``Split`` written without ``num_outputs`` (nor a split input) is invalid from opset 18:
  onnxruntime does not load such a model (GluonCV's detectors stamped 18 or 19).
  ``repair_splits`` gives it ``num_outputs`` = its number of outputs: the equal split it means
  (MXNet's split and SliceChannel split evenly).

Exactly means what ``toolkit.check_attrs`` means: every node on the matched paths is the op
mx2onnx writes with its whole attribute set as the exporter writes it, and every constant it
reads is the exporter's. What starts like one of these forms but does not match is left as it
is, with a note naming the node and the first difference.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from ..ops.pyramid_roi_align import SPECS as PYRAMID_SPECS
from ..spec import DOMAIN, MAX_LEVELS
from .nodes import given_attrs, iter_nodes, opset
from .toolkit import (GraphIndex, NoMatch, anything, check_attrs, declared_attrs, indexed,
                      is_default, splice)

EXPORTER = "mx2onnx"


def _label(node: onnx.NodeProto) -> str:
    """A node as notes name it: its name, else its output's (mx2onnx names no node)."""
    return node.name or (node.output[0] if node.output else node_label(node))


def _slice(g: GraphIndex, name: str, start: int, end: int) -> onnx.NodeProto:
    """name = Slice(x, [start], [end], [1]) (columns start:end), as mx2onnx writes it."""
    n = g.made_by(name, "Slice")
    if len(n.input) != 4:
        raise NoMatch(f"Slice {node_label(n)!r} has {len(n.input)} inputs where {EXPORTER} "
                      f"writes 4 (data, starts, ends, axes)")
    for i, v in ((1, [start]), (2, [end]), (3, [1])):
        g.const_is(n, i, v)
    return n


def _zero_s(g: GraphIndex, node: onnx.NodeProto, index: int) -> None:
    """Input ``index`` of ``node`` is the exporter's float32 [0.]."""
    got = g.const(node.input[index]) if len(node.input) > index else None
    if got is None or got.dtype != np.float32:
        raise NoMatch(f"{node.op_type} {node_label(node)!r} reads {node.input[index]!r}, not "
                      f"the float32 zero {EXPORTER} writes")
    g.const_is(node, index, np.zeros(1, np.float32))


def match_roi_align(g: GraphIndex, where: onnx.NodeProto) -> dict:
    """MXNet's contrib.ROIAlign as mx2onnx writes it, from its last node (the Where): a dict
    with the RoiAlign ("roi_align"), the rois [R, 5] ("rois"), the feature map ("X"), its
    attributes ("attrs") and the Where; raises NoMatch saying why not."""
    check_attrs(where, g.opset, EXPORTER)
    if len(where.input) != 3:
        raise NoMatch(f"Where {node_label(where)!r} has {len(where.input)} inputs")
    _zero_s(g, where, 1)
    ra = g.made_by(where.input[2], "RoiAlign", mode="avg", output_height=anything,
                   output_width=anything, sampling_ratio=anything, spatial_scale=anything)
    if "coordinate_transformation_mode" in given_attrs(ra):
        raise NoMatch(f"RoiAlign {node_label(ra)!r} has coordinate_transformation_mode, which "
                      f"{EXPORTER} does not write")
    users = g.consumers.get(ra.output[0], [])
    if len(users) != 1 or ra.output[0] in g.outputs or len(ra.output) != 1:
        raise NoMatch(f"RoiAlign {node_label(ra)!r}'s result is read by another node than "
                      f"the Where")
    less = g.made_by(where.input[0], "Less")
    _zero_s(g, less, 1)
    unsq = g.operand(less.input[0], "Unsqueeze", "axes", 1, [2, 3])
    col = _slice(g, unsq.input[0], 0, 1)  # the batch column [R, 1]
    boxes = _slice(g, ra.input[1], 1, 5)
    if boxes.input[0] != col.input[0]:
        raise NoMatch(f"RoiAlign {node_label(ra)!r} reads its boxes from {boxes.input[0]!r} "
                      f"and its batch indices from {col.input[0]!r}")
    cast = g.made_by(ra.input[2], "Cast", to=onnx.TensorProto.INT64)
    relu = g.made_by(cast.input[0], "Relu")
    squeeze = g.operand(relu.input[0], "Squeeze", "axes", 1, [1])
    if squeeze.input[0] != col.output[0]:
        raise NoMatch(f"RoiAlign {node_label(ra)!r}'s batch indices are not the column the "
                      f"Where masks by ({squeeze.input[0]!r}, {col.output[0]!r})")
    a = given_attrs(ra)
    attrs = dict(output_height=a.get("output_height", 1), output_width=a.get("output_width", 1),
                 sampling_ratio=a.get("sampling_ratio", 0),
                 spatial_scale=a.get("spatial_scale", 1.0))
    return dict(roi_align=ra, rois=col.input[0], X=ra.input[0], attrs=attrs, where=where)


def _looks_like(g: GraphIndex, ra: onnx.NodeProto) -> bool:
    """A RoiAlign whose batch indices are a Cast of a Relu (the exporter's batch column)."""
    cast = g.producer.get(ra.input[2]) if len(ra.input) > 2 else None
    relu = g.producer.get(cast.input[0]) if cast is not None and cast.op_type == "Cast" else None
    return relu is not None and relu.op_type == "Relu"


def _roi_align_node(ra: onnx.NodeProto, attrs: dict) -> onnx.NodeProto:
    """ort_roi::RoiAlign in place of the exporter's RoiAlign, with MXNet's arithmetic."""
    return helper.make_node(
        "RoiAlign", list(ra.input), list(ra.output), name=ra.name or None, domain=DOMAIN,
        coordinate_transformation_mode="output_half_pixel", mode="avg",
        output_height=attrs["output_height"], output_width=attrs["output_width"],
        sampling_ratio=max(0, attrs["sampling_ratio"]), spatial_scale=attrs["spatial_scale"])


def _what_changed(onnx_opset: int, sampling_ratio: int) -> str:
    why = []
    if onnx_opset >= 16:
        why.append(f"its RoiAlign has no coordinate_transformation_mode, which reads as "
                   f"half_pixel at the stamped opset {onnx_opset} where MXNet computes "
                   f"aligned=False: computed as output_half_pixel")
    else:
        why.append(f"at the stamped opset {onnx_opset} its RoiAlign is MXNet's aligned=False "
                   f"(output_half_pixel)")
    if sampling_ratio < 0:
        why.append(f"sample_ratio {sampling_ratio} (which onnxruntime refuses) as MXNet's "
                   f"adaptive sampling (0)")
    return "; ".join(why)


def _roi_align_patterns(g: GraphIndex):
    """(index, RoiAlign, the match or the NoMatch saying why not) of every ONNX RoiAlign of
    the main graph (``match_roi_align`` from the one Where reading it)."""
    for i, node in enumerate(g.graph.node):
        if node.op_type != "RoiAlign" or not is_default(node):
            continue
        users = g.consumers.get(node.output[0], []) if node.output else []
        try:
            if len(users) != 1 or users[0].op_type != "Where" or not is_default(users[0]):
                raise NoMatch("its result is not read by one Where (the exporter's masking "
                              "of negative batch indices)")
            yield i, node, match_roi_align(g, users[0])
        except NoMatch as e:
            yield i, node, e


def find_roi_aligns(model: onnx.ModelProto, g: GraphIndex | None = None) -> list[str]:
    """The RoiAligns of the main graph (as notes name them) that are MXNet's contrib.ROIAlign
    as mx2onnx writes it exactly, left as they are: what ``fix_roi_aligns`` would change.
    ``g``: the graph's index as it is, else it is indexed here."""
    return [_label(node) for _, node, m in _roi_align_patterns(indexed(model, EXPORTER, g))
            if not isinstance(m, NoMatch)]


def fix_roi_aligns(model: onnx.ModelProto, g: GraphIndex | None = None
                   ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Every contrib.ROIAlign pattern of the main graph (``match_roi_align``) given MXNet's
    arithmetic in place: its RoiAlign becomes ort_roi::RoiAlign. ``g``: the graph's index as
    it is (``rewrite``'s), else it is indexed here. Returns (moved, notes)."""
    onnx_opset = opset(model) or 1
    g = indexed(model, EXPORTER, g)
    moved, notes = [], []
    for i, node, m in list(_roi_align_patterns(g)):
        if isinstance(m, NoMatch):
            if _looks_like(g, node):
                notes.append(f"node {_label(node)!r} (RoiAlign) starts like MXNet's "
                             f"contrib.ROIAlign as {EXPORTER} writes it but does not match it "
                             f"exactly ({m}); left to the ONNX RoiAlign rule")
            continue
        model.graph.node[i].CopyFrom(_roi_align_node(node, m["attrs"]))
        moved.append((_label(node), "onnx::RoiAlign (MXNet contrib.ROIAlign)",
                      f"{DOMAIN}::RoiAlign"))
        notes.append(f"node {_label(node)!r}: MXNet's contrib.ROIAlign as {EXPORTER} "
                     f"writes it: {_what_changed(onnx_opset, m['attrs']['sampling_ratio'])}; "
                     f"rows whose batch index is negative stay zero (the exporter's Where)")
    return moved, notes


# -- GluonCV's FPN stage ---------------------------------------------------------------------


def _masked_rois(g: GraphIndex, name: str) -> tuple[str, str, float, onnx.NodeProto]:
    """name = where(roi_level == l, rois, ones_like(rois) * -1) as mx2onnx writes GluonCV's
    masking: (rois, roi_level, l, the Equal)."""
    where = g.made_by(name, "Where")
    rois = where.input[1]
    # the other rows: ConstantOfShape(Shape(rois), 1.0) * -1
    mul = g.made_by(where.input[2], "Mul")
    g.const_is(mul, 1, np.array([-1.0], np.float32))
    ones = g.made_by(mul.input[0], "ConstantOfShape",
                     value=lambda v: v is not None and numpy_helper.to_array(v).tolist() == [1.0]
                     and numpy_helper.to_array(v).dtype == np.float32)
    if g.made_by(ones.input[0], "Shape").input[0] != rois:
        raise NoMatch(f"ConstantOfShape {node_label(ones)!r} is not shaped like {rois!r}")
    # the condition: Cast(Reshape(Cast(Equal(level, l), float), [R, 1]), bool)
    to_bool = g.made_by(where.input[0], "Cast", to=onnx.TensorProto.BOOL)
    reshape = g.made_by(to_bool.input[0], "Reshape", allowzero=0)
    to_float = g.made_by(reshape.input[0], "Cast", to=onnx.TensorProto.FLOAT)
    eq = g.made_by(to_float.input[0], "Equal")
    level = g.const(eq.input[1])
    if level is None or level.shape != (1,) or level.dtype != np.float32:
        raise NoMatch(f"Equal {node_label(eq)!r} does not compare with a float32 [l] constant")
    # the shape: Pad(Shape(cond), Concat([0], Shape(Shape(rois)) - Shape(Shape(cond))), 1)
    pad = g.made_by(reshape.input[1], "Pad", mode="constant")
    if len(pad.input) != 3:
        raise NoMatch(f"Pad {node_label(pad)!r} has {len(pad.input)} inputs where {EXPORTER} "
                      f"writes 3")
    g.const_is(pad, 2, [1])
    cond_shape = g.made_by(pad.input[0], "Shape")
    if cond_shape.input[0] != to_float.output[0]:
        raise NoMatch(f"Pad {node_label(pad)!r} pads the shape of {cond_shape.input[0]!r}, "
                      f"not of the condition")
    concat = g.made_by(pad.input[1], "Concat", axis=0)
    if len(concat.input) != 2:
        raise NoMatch(f"Concat {node_label(concat)!r} has {len(concat.input)} inputs")
    g.const_is(concat, 0, [0])
    sub = g.made_by(concat.input[1], "Sub")
    x_rank = g.made_by(g.made_by(sub.input[0], "Shape").input[0], "Shape")
    c_rank = g.made_by(sub.input[1], "Shape")
    if x_rank.input[0] != rois or c_rank.input[0] != cond_shape.output[0]:
        raise NoMatch(f"Sub {node_label(sub)!r} is not rank(rois) - rank(condition)")
    return rois, eq.input[0], float(level[0]), eq


def match_fpn(g: GraphIndex, total: onnx.NodeProto) -> dict:
    """GluonCV's FPN RoI stage from its Sum: rois, roi_level, the Equal node of each level
    (level order), the feature maps, the pooling attributes; raises NoMatch saying why not."""
    check_attrs(total, g.opset, EXPORTER)
    if not 1 < len(total.input) <= MAX_LEVELS:
        raise NoMatch(f"{len(total.input)} levels summed: ort_roi fuses 2 to {MAX_LEVELS}")
    rois = level = attrs = None
    found = {}
    for name in total.input:
        users = g.consumers.get(name, [])
        if len(users) != 1 or name in g.outputs:
            raise NoMatch(f"{name!r} is read by another node than the Sum")
        m = match_roi_align(g, g.made_by(name, "Where"))
        r, lv, value, eq = _masked_rois(g, m["rois"])
        for what, got, have in (("rois", r, rois), ("levels", lv, level)):
            if have is not None and got != have:
                raise NoMatch(f"level {value:g} reads its {what} from {got!r}, another level "
                              f"from {have!r}")
        rois, level = r, lv
        these = {k: m["attrs"][k] for k in ("output_height", "output_width", "sampling_ratio")}
        if attrs is not None and these != attrs:
            raise NoMatch(f"level {value:g} pools with {these}, another level with {attrs}")
        attrs = these
        if value in found:
            raise NoMatch(f"level {value:g} is pooled twice")
        found[value] = (eq, m["X"], float(m["attrs"]["spatial_scale"]), m["roi_align"])
    order = sorted(found)
    return dict(rois=rois, levels=level, attrs=attrs, eqs=[found[v][0] for v in order],
                feats=[found[v][1] for v in order], scales=[found[v][2] for v in order],
                values=order, roi_aligns=[found[v][3] for v in order])


def _fpn_nodes(m: dict, total: onnx.NodeProto, name: str,
               model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The nodes replacing a matched stage: the level of each box (a Where chain over the
    graph's Equal nodes, -1 where none holds or the batch index is negative), the rois with
    their batch index as the exporter reads it (Floor(Relu(b))), PyramidRoIAlign_L{L}."""
    L = len(m["feats"])
    nodes: list[onnx.NodeProto] = []

    def const(value, dtype) -> str:
        t = numpy_helper.from_array(np.asarray(value, dtype), f"{name}/const_{len(nodes)}_"
                                    f"{len(model.graph.initializer)}")
        model.graph.initializer.append(t)
        return t.name

    def op(op_type, inputs, **attrs) -> str:
        out = f"{name}/{op_type}_{len(nodes)}"
        nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    one = const([1], np.int64)
    col = op("Slice", [m["rois"], const([0], np.int64), one, one])  # [R, 1]
    boxes = op("Slice", [m["rois"], one, const([5], np.int64), one])  # [R, 4]
    batch = op("Reshape", [col, const([-1], np.int64)])  # [R]
    level = const(-1, np.int64)
    for k in reversed(range(L)):
        level = op("Where", [m["eqs"][k].output[0], const(k, np.int64), level])
    # one level per box: the exporter reshapes the condition to [R, 1] (or [1, 1]: all boxes)
    level = op("Reshape", [level, const([-1], np.int64)])
    level = op("Where", [op("Less", [batch, const(0, np.float32)]), const(-1, np.int64), level])
    rois = op("Concat", [op("Floor", [op("Relu", [col])]), boxes], axis=1)
    spec = PYRAMID_SPECS[L]
    nodes.append(helper.make_node(
        spec.name, [rois, level, *m["feats"]], [total.output[0]], name=f"{name}/{spec.name}",
        domain=DOMAIN, aligned=0, output_height=m["attrs"]["output_height"],
        output_width=m["attrs"]["output_width"],
        sampling_ratio=max(0, m["attrs"]["sampling_ratio"]),
        **{f"spatial_scale_{i}": s for i, s in enumerate(m["scales"])}))
    return nodes


def fuse_fpn(model: onnx.ModelProto, g: GraphIndex | None = None
             ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Every GluonCV FPN RoI stage of the main graph (``match_fpn``) replaced, in place, by one
    PyramidRoIAlign_L{L} (and the small nodes computing its levels and rois). ``g``: the
    graph's index as it is (``rewrite``'s), else it is indexed here (and again after each
    stage fused). Returns (moved, notes); a Sum of RoiAlign patterns that does not match gets
    a note."""
    onnx_opset = opset(model) or 1
    moved, notes = [], []
    while True:
        g = indexed(model, EXPORTER, g)
        todo = None
        for node in model.graph.node:
            if node.op_type != "Sum" or not is_default(node):
                continue
            ras = [g.producer.get(i) for i in node.input]
            ras = [g.producer.get(w.input[2]) if w is not None and w.op_type == "Where"
                   and len(w.input) == 3 else None for w in ras]
            if not any(r is not None and r.op_type == "RoiAlign" for r in ras):
                continue  # a sum of something else
            try:
                todo = (node, match_fpn(g, node))
                break
            except NoMatch as e:
                notes.append(f"node {_label(node)!r} (Sum) starts like GluonCV's FPN RoI "
                             f"stage as {EXPORTER} writes it but does not match it exactly "
                             f"({e}); left level by level")
        if todo is None:
            return moved, notes
        total, m = todo
        base = total.name or total.output[0]
        new = _fpn_nodes(m, total, base, model)
        inits = {t.name for t in model.graph.initializer}
        n = splice(model, total, new, [i for k in new for i in k.input])
        g = None  # the graph changed: index it afresh
        # mx2onnx lists its constants as graph inputs too: those splice dropped go there too
        gone = inits - {t.name for t in model.graph.initializer}
        for v in [v for v in model.graph.input if v.name in gone]:
            model.graph.input.remove(v)
        L = len(m["feats"])
        moved.append((f"{base}/{PYRAMID_SPECS[L].name}",
                      f"GluonCV FPN RoI stage ({n} nodes)", f"{DOMAIN}::PyramidRoIAlign"))
        sr = m["attrs"]["sampling_ratio"]
        notes.append(f"node {base!r}: GluonCV's FPN RoI stage ({L} levels, roi_level "
                     f"{', '.join(f'{v:g}' for v in m['values'])}) as {EXPORTER} writes it: "
                     f"one {DOMAIN}::{PYRAMID_SPECS[L].name} pooling each box once at its "
                     f"level with MXNet's arithmetic ("
                     f"{_what_changed(onnx_opset, sr)}); rows whose batch index is negative "
                     f"or on no level are zero, as the exporter's graph makes them")


# -- Split -----------------------------------------------------------------------------------


def _bare_splits(model: onnx.ModelProto) -> list[onnx.NodeProto]:
    """The Splits of the graph (subgraphs too) with neither ``num_outputs`` nor a split input
    at an opset (>= 18) that requires one."""
    onnx_opset = opset(model) or 1
    if onnx_opset < 18 or "num_outputs" not in declared_attrs("Split", "", onnx_opset):
        return []
    return [node for node in iter_nodes(model.graph)
            if node.op_type == "Split" and is_default(node)
            and "num_outputs" not in given_attrs(node)
            and (len(node.input) < 2 or not node.input[1])]


def find_splits(model: onnx.ModelProto, g: GraphIndex | None = None) -> list[str]:
    """The Splits (as notes name them) that ``repair_splits`` would repair, left as they are
    (``g`` is not needed: it is taken for the table's sake)."""
    return [_label(node) for node in _bare_splits(model)]


def repair_splits(model: onnx.ModelProto, g: GraphIndex | None = None
                  ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """From opset 18 a Split needs ``num_outputs`` or a split input; mx2onnx writes neither
    (its opset-13 table's equal split). Each such Split of the graph (subgraphs too) gets
    ``num_outputs`` = its number of outputs, in place (``g`` is not needed: it is taken for
    the table's sake). Returns (moved, notes)."""
    onnx_opset = opset(model) or 1
    fixed = []
    for node in _bare_splits(model):
        node.attribute.append(helper.make_attribute("num_outputs", len(node.output)))
        fixed.append(_label(node))
    if not fixed:
        return [], []
    shown = ", ".join(repr(f) for f in fixed[:5]) + (", ..." if len(fixed) > 5 else "")
    return [], [f"{len(fixed)} Split node(s) ({shown}) had neither num_outputs nor a split "
                f"input, which opset {onnx_opset} requires (mx.onnx.export_model writes its "
                f"opset-13 equal split and stamps the installed onnx's newest opset): given "
                f"num_outputs = their number of outputs, the equal split they mean (onnxruntime "
                f"does not load the model otherwise)"]

