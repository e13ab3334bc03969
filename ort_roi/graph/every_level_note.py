"""Every roi pooled on every level: MMDetection's GenericRoIExtractor (GRoIE), as MMDeploy's
onnxruntime export writes it, pools all the rois on each FPN level with one RoiAlign per level
(its own scale) and aggregates the L results in the graph. No level rule picks one map per
roi, so there is no stage to fuse into one node; ``every_level_note`` names the group and says
so, and each RoiAlign is moved on its own (convert changes nothing here)."""

from __future__ import annotations

import onnx

from ..errors import node_label
from .toolkit import GraphIndex, indexed, is_default


#: What a RoiAlign's boxes and batch indices may be computed through from the rois, every
#: row kept as it is: columns picked (a Gather of other axes, a Slice, a Squeeze or
#: Unsqueeze), a Cast, and arithmetic with a constant (MMDeploy's offset). Not through a
#: product with another tensor: mmdet 2.x's export masks each level's rois that way (a level
#: rule), and that is no longer every roi.
_KEEPS_ROWS = frozenset({"Gather", "Slice", "Squeeze", "Unsqueeze", "Cast", "Identity"})
_WITH_CONSTANT = frozenset({"Add", "Sub", "Mul", "Div"})


def _source(g: GraphIndex, name: str, depth: int = 16) -> str | None:
    """The tensor whose every row ``name`` holds, followed back through ``_KEEPS_ROWS`` and
    ``_WITH_CONSTANT``; None where a step leaves that (a Gather on axis 0 picks rows)."""
    n = g.producer.get(name)
    if n is None or not is_default(n) or depth <= 0:
        return name
    ins = [x for x in n.input if x]
    if n.op_type == "Gather":
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        return None if axis == 0 or g.const(ins[1]) is None else _source(g, ins[0], depth - 1)
    if n.op_type == "Slice":
        axes = next((list(a.ints) for a in n.attribute if a.name == "axes"), None)
        if axes is None and len(ins) > 3:
            v = g.const(ins[3])
            axes = None if v is None else v.ravel().tolist()
        return _source(g, ins[0], depth - 1) if axes and 0 not in axes else None
    if n.op_type in _KEEPS_ROWS:
        return _source(g, ins[0], depth - 1)
    if n.op_type in _WITH_CONSTANT and len(ins) == 2:
        consts = [g.const(x) is not None for x in ins]
        if consts.count(True) == 1:
            return _source(g, ins[consts.index(False)], depth - 1)
    return name if n.op_type not in _WITH_CONSTANT else None


def _others(node: onnx.NodeProto) -> tuple:
    """A RoiAlign's attributes but its scale (the levels of one extractor share them)."""
    return tuple(sorted((a.name, str(onnx.helper.get_attribute_value(a)))
                        for a in node.attribute if a.name != "spatial_scale"))


def every_level_note(model: onnx.ModelProto, g: GraphIndex | None = None
                     ) -> tuple[list, list[str]]:
    """A note for each group of two or more RoiAligns of the main graph that pool every row
    of the same rois (their boxes and batch indices computed from one tensor's columns, row
    by row: ``_source``), with the same attributes, from different maps at different
    scales: every roi on every level. Run after the fusing passes, so the RoiAligns of a
    fused stage are gone. Returns ([], notes)."""
    g = indexed(model, "torch.onnx", g)
    groups: dict[tuple, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        if n.op_type == "RoiAlign" and is_default(n) and len(n.input) == 3:
            key = (_source(g, n.input[1]), _source(g, n.input[2]), _others(n))
            if key[0] is not None and key[0] == key[1]:
                groups.setdefault(key, []).append(n)
    notes = []
    for (boxes, _, _), ras in groups.items():
        scales = [next((a.f for a in r.attribute if a.name == "spatial_scale"), 1.0)
                  for r in ras]
        if len(ras) < 2 or len({r.input[0] for r in ras}) < len(ras) \
                or len(set(scales)) < len(ras):
            continue
        shown = ", ".join(repr(node_label(r)) for r in ras[:6]) + (", ..." if len(ras) > 6
                                                                     else "")
        maps = ", ".join(f"{r.input[0]!r} at {s:g}" for r, s in zip(ras[:6], scales))
        notes.append(
            f"{len(ras)} RoiAlign nodes ({shown}) pool the same rois (every row of "
            f"{boxes!r}) on {len(ras)} maps ({maps}): every "
            f"roi on every level, as MMDetection's GenericRoIExtractor (GRoIE) does; no level "
            f"rule picks one map per roi, so there is no RoI stage to fuse: each RoiAlign is "
            f"moved and runs alone")
    return [], notes
