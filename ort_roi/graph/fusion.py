"""torchvision's RoI stage, fused: the subgraph torch.onnx writes for ``MultiScaleRoIAlign``
becomes one PyramidRoIAlign_L{n} node.

Traced for export, torchvision pools each feature-pyramid level separately and merges
(``torchvision.ops.poolers._onnx_merge_levels``): for each level l, the boxes of that level are
selected (Equal(levels, l) -> NonZero -> ... -> Gather of the rois), pooled by a RoiAlign and
scattered into a zero tensor by a ScatterElements over an index expanded to [k, C, h, w]. The
plumbing costs more than the pooling. ``fuse`` finds that structure (by the ops and how they
connect, not by names), checks it exactly, and replaces the per-level branches and the merge
with one node reading the rois, the graph's own level of each box (the nodes computing it
stay, so the assignment is bit-identical) and the levels' feature maps. A subgraph that does
not match exactly is left as it is, with a note saying which and why.

Exactly means: every node on the matched paths is the op torch.onnx writes (TorchScript
exporter, opsets 11-17 and later) with its whole attribute set as the exporter writes it
(``GraphIndex.made_by`` checks every attribute the op's ONNX schema declares: those the matcher
names hold the value it names, every other one its default), and every constant it reads is
the exporter's. ``unfuse`` writes the same form (and at opset >= 15 a CastLike of the zeros
to the pooled type, which the matcher accepts too), so a ``--to onnx`` model fuses again.
torch.onnx's dynamo exporter writes the merge with ScatterND: that form is not fused, and a
note says so.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from ..ops.pyramid_roi_align import SPECS as PYRAMID_SPECS
from ..spec import DOMAIN, MAX_LEVELS
from .nodes import given_attrs, opset
from .stages import (fused_name, is_positive_zero, level_roi_align, matched_or_noted,
                     merge_chain, pooled_by_roi_align, selected_level)
from .toolkit import (GraphIndex, NoMatch, anything, check_attrs, declared_attrs, indexed,
                      splice)

@dataclass
class Stage:
    """A matched MultiScaleRoIAlign stage."""

    last: onnx.NodeProto  # the last ScatterElements: its output is the stage's
    rois: str  # rois [K, 5]
    levels: str  # the level of each box (int)
    feats: list[str]  # the feature map of each level, level 0 first
    attrs: dict
    cast: int | None = None  # the type every level's result is Cast to, if it is


def _zeros_producer(g: GraphIndex, name: str) -> onnx.NodeProto | None:
    """The ConstantOfShape under a merge's data (through unfuse's CastLike), else None."""
    n = g.producer.get(name)
    if n is not None and n.op_type == "CastLike":
        n = g.producer.get(n.input[0])
    return n if n is not None and n.op_type == "ConstantOfShape" else None


def find_stages(model: onnx.ModelProto, g: GraphIndex | None = None
                ) -> tuple[list[Stage], list[str]]:
    """Every MultiScaleRoIAlign stage of the main graph, and a note for each subgraph that
    starts like one (a zero tensor scattered into by RoiAlign results) but does not match,
    and for each merge of RoiAlign results by ScatterND (torch.onnx's dynamo exporter).
    ``g``: the graph's index as it is (``rewrite``'s), else it is indexed here."""
    g = indexed(model, "torch.onnx", g)
    stages, notes = [], []
    for node in model.graph.node:
        if node.domain not in ("", "ai.onnx"):
            continue
        if node.op_type == "ScatterND" \
                and pooled_by_roi_align(g, node.input[2], "Cast")[0] is not None:
            before = g.producer.get(node.input[0])
            if before is None or before.op_type != "ScatterND":  # the first of a chain
                notes.append(
                    f"node {node_label(node)!r} (ScatterND) merges RoiAlign results as torch."
                    f"onnx's dynamo exporter writes torchvision's MultiScaleRoIAlign; ort_roi "
                    f"fuses only the TorchScript exporter's form (torch.onnx.export(..., "
                    f"dynamo=False)): left node by node (each RoiAlign still moved)")
            continue
        if node.op_type != "ScatterElements" or _zeros_producer(g, node.input[0]) is None:
            continue  # not the first merge of a chain
        chain = merge_chain(g, node)
        if not any(pooled_by_roi_align(g, s.input[2], "Cast")[0] is not None for s in chain):
            continue  # a scatter of something else: none of our business
        matched_or_noted(
            lambda: _match(g, chain), stages, notes,
            lambda why: f"node {node_label(node)!r} (ScatterElements) starts like "
                        f"torchvision's MultiScaleRoIAlign merge but does not match it exactly "
                        f"({why}); left as it is")
    return stages, notes


def _unsqueezed(g: GraphIndex, name: str) -> onnx.NodeProto:
    """name = Unsqueeze(x, axes=[0]): the Unsqueeze."""
    return g.operand(name, "Unsqueeze", "axes", 1, [0])


def _level_of(g: GraphIndex, sel: str, levels: str | None) -> tuple[int, str]:
    """The level a selection of boxes is, as torch.where(levels == l)[0] exports:
    Squeeze(Split(Transpose(NonZero(Equal(levels, l)), [1, 0]), [1], axis 1), [1]).
    Returns (l, the levels tensor)."""
    squeeze = g.operand(sel, "Squeeze", "axes", 1, [1])
    split = g.operand(squeeze.input[0], "Split", "split", 1, [1], axis=1)
    if len(split.output) != 1:
        raise NoMatch(f"Split {node_label(split)!r} has {len(split.output)} outputs where "
                      f"torch.onnx writes 1")
    nz = g.made_by(g.made_by(split.input[0], "Transpose", perm=[1, 0]).input[0], "NonZero")
    eq = g.made_by(nz.input[0], "Equal")
    for a, b in ((eq.input[0], eq.input[1]), (eq.input[1], eq.input[0])):
        v = g.const(b)
        if v is not None and v.size == 1 and v.dtype.kind in "iu":
            return selected_level(g, eq, v, a, levels)
    raise NoMatch(f"Equal {node_label(eq)!r} does not compare with a constant integer level")


def _rows_of(g: GraphIndex, name: str, cols: list[int]) -> tuple[str, str]:
    """name = Gather(Gather(rois, sel, axis 0), cols, axis 1): (the rois, sel)."""
    pick = g.made_by(name, "Gather", axis=1)
    g.const_is(pick, 1, cols)
    rows = g.made_by(pick.input[0], "Gather", axis=0)
    return rows.input[0], rows.input[1]


def _check_zeros(g: GraphIndex, name: str, levels: str, pooled: str) -> None:
    """name = torch.zeros(levels.shape[0], *pooled.shape[1:]) as torch.onnx writes it (and
    unfuse: then CastLike'd to ``pooled``)."""
    n = g.producer.get(name)
    if n is not None and n.op_type == "CastLike":
        n = g.made_by(name, "CastLike")
        if n.input[1] != pooled:
            raise NoMatch(f"CastLike {node_label(n)!r} casts the zeros like {n.input[1]!r}, not "
                          f"like the pooled {pooled!r}")
        name = n.input[0]
    cos = g.made_by(name, "ConstantOfShape", value=is_positive_zero)
    concat = g.made_by(cos.input[0], "Concat", axis=0)
    if len(concat.input) != 4:
        raise NoMatch(f"Concat {node_label(concat)!r} makes a shape of {len(concat.input)} "
                      f"dimensions, not [boxes, C, H, W]")
    for k, (dim, of) in enumerate(zip(concat.input, (levels, pooled, pooled, pooled))):
        gather = g.made_by(_unsqueezed(g, dim).input[0], "Gather", axis=0)
        g.const_is(gather, 1, [0, 1, 2, 3][k])
        shape = g.made_by(gather.input[0], "Shape")
        if shape.input[0] != of:
            raise NoMatch(f"the zeros' dimension {k} is that of {shape.input[0]!r}, not of "
                          f"{of!r}")


def _match(g: GraphIndex, chain: list[onnx.NodeProto]) -> Stage:
    if not 1 < len(chain) <= MAX_LEVELS:
        raise NoMatch(f"{len(chain)} levels merged: ort_roi fuses 2 to {MAX_LEVELS}")
    levels, rois, found, attrs, casts = None, None, {}, None, set()
    for s in chain:
        check_attrs(s, g.opset, g.exporter, axis=0, reduction="none")
        ra, cast = pooled_by_roi_align(g, s.input[2], "Cast")
        if ra is None:
            raise NoMatch(f"ScatterElements {node_label(s)!r} scatters {s.input[2]!r}, not a "
                          f"RoiAlign's result")
        casts.add(None if cast is None
                  else check_attrs(cast, g.opset, g.exporter, to=anything)["to"])
        attrs, scale = level_roi_align(g, ra, attrs)
        # the scatter's index: the selection, one per pooled row, over [k, C, H, W]; onnxruntime
        # requires the index's shape to be the pooled one's, so Expand's shape is that
        reshape = g.made_by(g.made_by(s.input[1], "Expand").input[0], "Reshape", allowzero=0)
        g.const_is(reshape, 1, [-1, 1, 1, 1])
        sel = reshape.input[0]
        level, levels = _level_of(g, sel, levels)
        # the boxes and batch indices this level pools: columns of the rois it selected
        sel_rois, sel1 = _rows_of(g, ra.input[1], [1, 2, 3, 4])
        batch = g.made_by(ra.input[2], "Cast", to=onnx.TensorProto.INT64)
        sel_batch, sel2 = _rows_of(g, g.operand(batch.input[0], "Squeeze", "axes", 1,
                                                [1]).input[0], [0])
        for what, src, pick in (("boxes", sel_rois, sel1), ("batch indices", sel_batch, sel2)):
            if rois is not None and src != rois:
                raise NoMatch(f"RoiAlign {node_label(ra)!r} reads its {what} from {src!r}, "
                              f"another level from {rois!r}")
            rois = src
            if pick != sel:
                raise NoMatch(f"RoiAlign {node_label(ra)!r} pools other boxes than the ones "
                              f"scattered to level {level}")
        if level in found:
            raise NoMatch(f"level {level} is merged twice")
        found[level] = (ra.input[0], scale)
    if sorted(found) != list(range(len(chain))):
        raise NoMatch(f"levels {sorted(found)} are not 0 .. {len(chain) - 1}")
    if len(casts) != 1:
        raise NoMatch(f"the levels' pooled results are cast differently ({sorted(casts, key=str)})")
    _check_zeros(g, chain[0].input[0], levels, chain[0].input[2])
    g.rows_agree(levels, rois)
    feats = [found[i][0] for i in range(len(chain))]
    attrs.update({f"spatial_scale_{i}": found[i][1] for i in range(len(chain))})
    return Stage(chain[-1], rois, levels, feats, attrs, casts.pop())


def fuse(model: onnx.ModelProto, g: GraphIndex | None = None
         ) -> tuple[list[tuple[str, int]], list[str]]:
    """Replace every MultiScaleRoIAlign stage of the main graph, in place, with one
    PyramidRoIAlign_L{n} node; returns ([(the new node's name, the nodes it replaced)], notes).
    ``g``: the graph's index as it is (``rewrite``'s), else it is indexed here."""
    stages, notes = find_stages(model, g)
    done = []
    for st in stages:
        spec = PYRAMID_SPECS[len(st.feats)]
        name = fused_name(st.last, spec.name)
        new, rois = indexed(model, "torch.onnx", g).first_columns(st.rois, 5, name)
        inputs = [rois, st.levels, *st.feats]
        out = st.last.output[0] if st.cast is None else f"{name}_output"
        new.append(helper.make_node(spec.name, inputs, [out], name=name, domain=DOMAIN,
                                    **{k: st.attrs[k] for k in sorted(st.attrs)}))
        if st.cast is not None:  # the levels' Cast, once (onnxruntime drops it when a no-op)
            new.append(helper.make_node("Cast", [out], [st.last.output[0]],
                                        name=f"{name}/Cast", to=st.cast))
        done.append((name, splice(model, st.last, new, [st.rois, st.levels, *st.feats])))
    return done, notes


def unfuse(node: onnx.NodeProto, onnx_opset: int) -> list[onnx.NodeProto]:
    """A PyramidRoIAlign_L{n} node as standard ONNX, in the form torch.onnx writes
    torchvision's stage (so that ``fuse`` fuses it again): per level, the boxes of that level
    selected (torch.where), pooled by a RoiAlign and scattered into a zero tensor in box order.
    Raises NoMatch when the model's opset cannot say it (aligned=1 needs RoiAlign's
    coordinate_transformation_mode, opset 16)."""
    a = given_attrs(node)
    if a.get("aligned", 0) and onnx_opset < 16:
        raise NoMatch(f"aligned=1 needs ONNX opset >= 16 (RoiAlign's "
                      f"coordinate_transformation_mode); the model imports opset {onnx_opset}")
    rois, levels, feats = node.input[0], node.input[1], list(node.input[2:])
    base = node.name or node.output[0]
    nodes: list[onnx.NodeProto] = []

    def op(op_type, inputs, **attrs) -> str:
        out = f"{base}/{op_type}_{len(nodes)}"
        nodes.append(helper.make_node(op_type, inputs, [out], name=out, **attrs))
        return out

    def const(value, dtype=np.int64) -> str:
        return op("Constant", [], value=numpy_helper.from_array(np.asarray(value, dtype)))

    def with_axes(op_type, x, name, values, **attrs) -> str:  # an attribute, since 13 an input
        if name in declared_attrs(op_type, "", onnx_opset):
            return op(op_type, [x], **{name: values}, **attrs)
        return op(op_type, [x, const(values)], **attrs)

    lv = op("Cast", [levels], to=onnx.TensorProto.INT64)
    res = None
    ra_attrs = dict(output_height=a.get("output_height", 1), output_width=a.get("output_width", 1),
                    sampling_ratio=max(0, a.get("sampling_ratio", 0)))
    if onnx_opset >= 16:
        ra_attrs["coordinate_transformation_mode"] = ("half_pixel" if a.get("aligned", 0)
                                                      else "output_half_pixel")
    for i, feat in enumerate(feats):
        nz = op("Transpose", [op("NonZero", [op("Equal", [lv, const(i)])])], perm=[1, 0])
        sel = with_axes("Squeeze", with_axes("Split", nz, "split", [1], axis=1), "axes", [1])
        rows = op("Gather", [rois, sel], axis=0)
        boxes = op("Gather", [rows, const([1, 2, 3, 4])], axis=1)
        batch = op("Cast", [with_axes("Squeeze", op("Gather", [rows, const([0])], axis=1),
                                      "axes", [1])], to=onnx.TensorProto.INT64)
        pooled = op("RoiAlign", [feat, boxes, batch], spatial_scale=a[f"spatial_scale_{i}"],
                    **ra_attrs)
        if res is None:  # zeros(levels.shape[0], *pooled.shape[1:])
            dims = [with_axes("Unsqueeze", op("Gather", [op("Shape", [x]), const(k)], axis=0),
                              "axes", [0]) for k, x in enumerate((lv, pooled, pooled, pooled))]
            res = op("ConstantOfShape", [op("Concat", dims, axis=0)])
            if onnx_opset >= 15:  # of the pooled type (ConstantOfShape makes float32)
                res = op("CastLike", [res, pooled])
        index = op("Expand", [op("Reshape", [sel, const([-1, 1, 1, 1])]), op("Shape", [pooled])])
        res = op("ScatterElements", [res, index, pooled], axis=0)
    nodes[-1].output[0] = node.output[0]
    return nodes


def unfuse_all(model: onnx.ModelProto) -> tuple[list[tuple[str, int]], list[str]]:
    """Every PyramidRoIAlign node of the main graph back to standard ONNX (``unfuse``), in
    place; returns ([(node, the nodes it became)], notes on those that cannot go back)."""
    onnx_opset = opset(model) or 1
    out, done, notes = [], [], []
    for node in model.graph.node:
        if node.domain == DOMAIN and node.op_type.startswith("PyramidRoIAlign_L"):
            try:
                new = unfuse(node, onnx_opset)
            except NoMatch as e:
                notes.append(f"node {node_label(node)!r}: ort_roi::{node.op_type} stays: {e}")
                out.append(node)
                continue
            out += new
            done.append((node_label(node), len(new)))
        else:
            out.append(node)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return done, notes
