"""Every roi pooled on every level: MMDetection's GenericRoIExtractor (GRoIE), as MMDeploy's
onnxruntime export writes it, pools all the rois on each FPN level with one RoiAlign per level
(its own scale) and aggregates the L results in the graph. No level rule picks one map per
roi, so there is no stage to fuse into one node; ``every_level_note`` names the group and says
so, and each RoiAlign is moved on its own (convert changes nothing here)."""

from __future__ import annotations

import onnx

from ..errors import node_label
from .toolkit import GraphIndex, indexed, is_default


def _rows(g: GraphIndex, name: str) -> frozenset[str]:
    """The tensors ``name``'s rows are followed back to (``GraphIndex.same_rows``'s ends)."""
    return frozenset(g.row_ends(g.same_rows(name)))


def every_level_note(model: onnx.ModelProto, g: GraphIndex | None = None
                     ) -> tuple[list, list[str]]:
    """A note for each group of two or more RoiAligns of the main graph that pool the rows of
    the same rois (their boxes and batch indices followed back to the same tensors) from
    different maps at different scales: every roi on every level. Run after the fusing
    passes, so the RoiAligns of a fused stage are gone. Returns ([], notes)."""
    g = indexed(model, "torch.onnx", g)
    groups: dict[tuple, list[onnx.NodeProto]] = {}
    for n in model.graph.node:
        if n.op_type == "RoiAlign" and is_default(n) and len(n.input) == 3:
            key = (_rows(g, n.input[1]), _rows(g, n.input[2]))
            if all(key):
                groups.setdefault(key, []).append(n)
    notes = []
    for (boxes, _), ras in groups.items():
        scales = [next((a.f for a in r.attribute if a.name == "spatial_scale"), 1.0)
                  for r in ras]
        if len(ras) < 2 or len({r.input[0] for r in ras}) < len(ras) \
                or len(set(scales)) < len(ras):
            continue
        shown = ", ".join(repr(node_label(r)) for r in ras[:6]) + (", ..." if len(ras) > 6
                                                                     else "")
        maps = ", ".join(f"{r.input[0]!r} at {s:g}" for r, s in zip(ras[:6], scales))
        notes.append(
            f"{len(ras)} RoiAlign nodes ({shown}) pool the same rois (rows of "
            f"{', '.join(repr(b) for b in sorted(boxes))}) on {len(ras)} maps ({maps}): every "
            f"roi on every level, as MMDetection's GenericRoIExtractor (GRoIE) does; no level "
            f"rule picks one map per roi, so there is no RoI stage to fuse: each RoiAlign is "
            f"moved and runs alone")
    return [], notes
