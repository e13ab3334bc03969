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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from ..specs import DOMAIN, MAX_LEVELS, PYRAMID_SPECS
from .nodes import attribute_value, given_attrs, opset

#: Ops that only move the box indices around between NonZero and their use.
_INDEX_PLUMBING = {"Squeeze", "Unsqueeze", "Split", "Transpose", "Reshape", "Cast", "Flatten",
                   "Identity"}


class NoMatch(Exception):
    """The subgraph is not torchvision's stage, exactly: why."""


@dataclass
class Stage:
    """A matched MultiScaleRoIAlign stage."""

    merge: onnx.NodeProto  # the last ScatterElements: its output is the stage's
    rois: str  # rois [K, 5]
    levels: str  # the level of each box (int)
    feats: list[str]  # the feature map of each level, level 0 first
    attrs: dict


class GraphIndex:
    """A graph indexed: the producer and consumers of each tensor, its constants."""

    def __init__(self, graph: onnx.GraphProto):
        self.graph = graph
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in graph.output}
        self.inits = {t.name: t for t in graph.initializer}

    def const(self, name: str):
        """The value of a constant tensor (Constant node or initializer), else None."""
        if name in self.inits:
            return numpy_helper.to_array(self.inits[name])
        n = self.producer.get(name)
        if n is not None and n.op_type == "Constant":
            for a in n.attribute:
                if a.name == "value":
                    return numpy_helper.to_array(a.t)
                if a.name in ("value_int", "value_ints", "value_float", "value_floats"):
                    return np.asarray(attribute_value(a))
        return None

    def made_by(self, name: str, op: str) -> onnx.NodeProto:
        n = self.producer.get(name)
        if n is None or n.op_type != op or n.domain not in ("", "ai.onnx"):
            got = "a graph input" if n is None else f"{n.op_type} {node_label(n)!r}"
            raise NoMatch(f"{name!r} comes from {got}, not a {op}")
        return n

    def strip(self, name: str, ops: set[str]) -> str:
        """Follow the first input back through nodes of ``ops``."""
        n = self.producer.get(name)
        while n is not None and n.op_type in ops and n.domain in ("", "ai.onnx"):
            name = n.input[0]
            n = self.producer.get(name)
        return name


def find_stages(model: onnx.ModelProto) -> tuple[list[Stage], list[str]]:
    """Every MultiScaleRoIAlign stage of the main graph, and a note for each subgraph that
    starts like one (a zero tensor scattered into by RoiAlign results) but does not match."""
    g = GraphIndex(model.graph)
    stages, notes = [], []
    for node in model.graph.node:
        if node.op_type != "ScatterElements" or node.domain not in ("", "ai.onnx"):
            continue
        first = g.producer.get(node.input[0])
        if first is None or first.op_type != "ConstantOfShape":
            continue  # not the first merge of a chain
        try:
            chain = _chain(g, node)
            if not any(g.strip(s.input[2], {"Cast"}) in g.producer
                       and g.producer[g.strip(s.input[2], {"Cast"})].op_type == "RoiAlign"
                       for s in chain):
                continue  # a scatter of something else: none of our business
            stages.append(_match(g, chain, opset(model) or 1))
        except NoMatch as e:
            notes.append(f"node {node_label(node)!r} (ScatterElements) starts like torchvision's "
                         f"MultiScaleRoIAlign merge but does not match it exactly ({e}); left "
                         f"as it is")
    return stages, notes


def _chain(g: GraphIndex, first: onnx.NodeProto) -> list[onnx.NodeProto]:
    """The ScatterElements merging the levels, from the one reading the zeros on."""
    chain = [first]
    while True:
        out = chain[-1].output[0]
        users = g.consumers.get(out, [])
        nxt = [u for u in users if u.op_type == "ScatterElements" and u.input[0] == out]
        if len(nxt) != 1 or len(users) != 1 or out in g.outputs:
            return chain
        chain.append(nxt[0])


def _level_of(g: GraphIndex, index: str, levels: str | None) -> tuple[int, str, str]:
    """The level a selection of boxes is: index -> (plumbing) -> NonZero(Equal(levels, l)).
    Returns (l, the levels tensor, the NonZero's output)."""
    nz = g.made_by(g.strip(index, _INDEX_PLUMBING | {"Expand"}), "NonZero")
    eq = g.made_by(nz.input[0], "Equal")
    for a, b in ((eq.input[0], eq.input[1]), (eq.input[1], eq.input[0])):
        v = g.const(b)
        if v is not None and v.size == 1:
            if levels is not None and a != levels:
                raise NoMatch(f"level {int(v.ravel()[0])} is selected from {a!r}, the others "
                              f"from {levels!r}")
            return int(v.ravel()[0]), a, nz.output[0]
    raise NoMatch(f"Equal {node_label(eq)!r} does not compare with a constant level")


def _selected_rows(g: GraphIndex, name: str) -> tuple[str, str]:
    """rows -> Gather(axis 0) of the rois by a selection: (the rois, the selection)."""
    gather = g.made_by(name, "Gather")
    if int(given_attrs(gather).get("axis", 0)) != 0:
        raise NoMatch(f"Gather {node_label(gather)!r} does not select rows")
    return gather.input[0], gather.input[1]


def _columns(g: GraphIndex, name: str, want: list[int]) -> str:
    """A Gather (axis 1) or Slice of columns ``want`` of a [k, 5] tensor: the tensor."""
    n = g.producer.get(name)
    if n is not None and n.op_type == "Gather" and int(given_attrs(n).get("axis", 0)) == 1:
        cols = g.const(n.input[1])
        if cols is not None and np.array_equal(np.atleast_1d(cols), want):
            return n.input[0]
    if n is not None and n.op_type == "Slice":
        a = given_attrs(n)
        starts = a.get("starts", g.const(n.input[1]) if len(n.input) > 1 else None)
        ends = a.get("ends", g.const(n.input[2]) if len(n.input) > 2 else None)
        axes = a.get("axes", g.const(n.input[3]) if len(n.input) > 3 else [0])
        if (starts is not None and ends is not None
                and list(np.atleast_1d(axes)) == [1] and int(np.atleast_1d(starts)[0]) == want[0]
                and int(np.atleast_1d(ends)[0]) >= want[-1] + 1):
            return n.input[0]
    raise NoMatch(f"{name!r} is not columns {want} of the selected rois")


def _match(g: GraphIndex, chain: list[onnx.NodeProto], onnx_opset: int) -> Stage:
    if not 1 < len(chain) <= MAX_LEVELS:
        raise NoMatch(f"{len(chain)} levels merged: ort_roi fuses 2 to {MAX_LEVELS}")
    levels, rois, found = None, None, {}
    attrs = None
    for s in chain:
        if int(given_attrs(s).get("axis", 0)) != 0:
            raise NoMatch(f"ScatterElements {node_label(s)!r} does not scatter along axis 0")
        level, levels, nz = _level_of(g, s.input[1], levels)
        ra = g.made_by(g.strip(s.input[2], {"Cast"}), "RoiAlign")
        a = given_attrs(ra)
        if a.get("mode", "avg") != "avg":
            raise NoMatch(f"RoiAlign {node_label(ra)!r} has mode {a['mode']!r}")
        ctm = a.get("coordinate_transformation_mode",
                    "half_pixel" if onnx_opset >= 16 else "output_half_pixel")
        these = dict(output_height=int(a.get("output_height", 1)),
                     output_width=int(a.get("output_width", 1)),
                     sampling_ratio=int(a.get("sampling_ratio", 0)),
                     aligned=int(ctm == "half_pixel"))
        if these["sampling_ratio"] < 0:
            raise NoMatch(f"RoiAlign {node_label(ra)!r} has sampling_ratio < 0")
        if attrs is not None and these != attrs:
            raise NoMatch(f"RoiAlign {node_label(ra)!r} pools with {these}, another level "
                          f"with {attrs}")
        attrs = these
        # the boxes and batch indices of this level: columns of the rois it selected
        sel_rois, sel = _selected_rows(g, _columns(g, ra.input[1], [1, 2, 3, 4]))
        sel_batch, sel2 = _selected_rows(g, _columns(
            g, g.strip(ra.input[2], {"Cast", "Squeeze", "Reshape", "Flatten"}), [0]))
        for what, src, pick in (("boxes", sel_rois, sel), ("batch indices", sel_batch, sel2)):
            if rois is not None and src != rois:
                raise NoMatch(f"RoiAlign {node_label(ra)!r} reads its {what} from {src!r}, "
                              f"another level from {rois!r}")
            rois = src
            if _level_of(g, pick, levels)[2] != nz:
                raise NoMatch(f"RoiAlign {node_label(ra)!r} pools other boxes than the ones "
                              f"scattered to level {level}")
        if level in found:
            raise NoMatch(f"level {level} is merged twice")
        found[level] = (ra.input[0], float(a.get("spatial_scale", 1.0)))
    if sorted(found) != list(range(len(chain))):
        raise NoMatch(f"levels {sorted(found)} are not 0 .. {len(chain) - 1}")
    feats = [found[i][0] for i in range(len(chain))]
    attrs.update({f"spatial_scale_{i}": found[i][1] for i in range(len(chain))})
    return Stage(chain[-1], rois, levels, feats, attrs)


def _ancestors(g: GraphIndex, names: list[str]) -> set[int]:
    """Indices (in the graph) of the nodes every tensor in ``names`` is computed from (what
    their subgraphs read included)."""
    index = {id(n): i for i, n in enumerate(g.graph.node)}
    seen, todo = set(), list(names)
    while todo:
        n = g.producer.get(todo.pop())
        if n is None or index[id(n)] in seen:
            continue
        seen.add(index[id(n)])
        todo.extend(_reads(n))
    return seen


def splice(model: onnx.ModelProto, old: onnx.NodeProto, new: list[onnx.NodeProto],
           keep: list[str]) -> int:
    """Put ``new`` in the place of node ``old`` of the main graph, in place, and drop the
    nodes (and initializers) that computed only what ``old`` read: those not also computing
    ``keep`` (the new nodes' inputs) or anything else still read. Returns how many nodes
    went."""
    g = GraphIndex(model.graph)
    plumbing = _ancestors(g, list(old.output)) - _ancestors(g, keep)
    nodes = list(model.graph.node)  # (copies: an earlier fusion rebuilt the list)
    at = next(i for i, n in enumerate(nodes) if n.output[:1] == old.output[:1])
    removed = _dead(nodes, plumbing, model.graph, at)
    out = [n for i, n in enumerate(nodes) if i not in removed]
    out[sum(1 for i in range(at) if i not in removed):0] = new
    read = {name for n in out for name in _reads(n)} | {o.name for o in model.graph.output}
    gone = {name for i in removed for name in _reads(nodes[i])} - read
    for t in [t for t in model.graph.initializer if t.name in gone]:
        model.graph.initializer.remove(t)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return len(removed)


def fuse(model: onnx.ModelProto) -> tuple[list[tuple[str, int]], list[str]]:
    """Replace every MultiScaleRoIAlign stage of the main graph, in place, with one
    PyramidRoIAlign_L{n} node; returns ([(the new node's name, the nodes it replaced)], notes)."""
    stages, notes = find_stages(model)
    done = []
    for st in stages:
        spec = PYRAMID_SPECS[len(st.feats)]
        prefix = st.merge.name.rsplit("/", 1)[0] if "/" in st.merge.name else st.merge.name
        name = f"{prefix}/{spec.name}" if prefix else spec.name
        inputs = [st.rois, st.levels, *st.feats]
        node = helper.make_node(spec.name, inputs, [st.merge.output[0]], name=name,
                                domain=DOMAIN, **{k: st.attrs[k] for k in sorted(st.attrs)})
        done.append((name, splice(model, st.merge, [node], inputs)))
    return done, notes


def _dead(nodes: list[onnx.NodeProto], candidates: set[int], graph: onnx.GraphProto,
          merge: int) -> set[int]:
    """The merge, and the candidates nothing reads once it is gone."""
    readers: dict[str, int] = {}
    for n in nodes:
        for name in _reads(n):
            readers[name] = readers.get(name, 0) + 1
    for o in graph.output:
        readers[o.name] = readers.get(o.name, 0) + 1
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    removed, todo = set(), [merge]
    while todo:
        i = todo.pop()
        if i in removed:
            continue
        removed.add(i)
        for name in _reads(nodes[i]):
            readers[name] -= 1
            p = producer.get(name)
            if (p is not None and p in candidates and p not in removed
                    and all(readers.get(o, 0) == 0 for o in nodes[p].output if o)):
                todo.append(p)
    return removed


def _reads(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads, in its subgraphs too."""
    names = [i for i in node.input if i]
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else []) + list(a.graphs):
            for n in sub.node:
                names += _reads(n)
    return names


def unfuse(node: onnx.NodeProto, onnx_opset: int) -> list[onnx.NodeProto]:
    """A PyramidRoIAlign_L{n} node as standard ONNX (what torchvision's export computes):
    per level, the boxes of that level selected, pooled by a RoiAlign and scattered into a
    zero tensor in box order. Raises NoMatch when the model's opset cannot say it (aligned=1
    needs RoiAlign's coordinate_transformation_mode, opset 16)."""
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

    lv = op("Cast", [levels], to=onnx.TensorProto.INT64)
    k = op("Gather", [op("Shape", [rois]), const(0)], axis=0)
    c = op("Gather", [op("Shape", [feats[0]]), const(1)], axis=0)
    hw = const([a.get("output_height", 1), a.get("output_width", 1)])
    shape = op("Concat", [op("Unsqueeze", [k, const([0])]) if onnx_opset >= 13 else
                          op("Unsqueeze", [k], axes=[0]),
                          op("Unsqueeze", [c, const([0])]) if onnx_opset >= 13 else
                          op("Unsqueeze", [c], axes=[0]), hw], axis=0)
    res = op("ConstantOfShape", [shape])
    if onnx_opset >= 15:  # zeros of the rois' type (ConstantOfShape makes float32)
        res = op("CastLike", [res, rois])
    ra_attrs = dict(output_height=a.get("output_height", 1), output_width=a.get("output_width", 1),
                    sampling_ratio=max(0, a.get("sampling_ratio", 0)))
    if onnx_opset >= 16:
        ra_attrs["coordinate_transformation_mode"] = ("half_pixel" if a.get("aligned", 0)
                                                      else "output_half_pixel")
    for i, feat in enumerate(feats):
        idx = op("Reshape", [op("NonZero", [op("Equal", [lv, const(i)])]), const([-1])])
        sel = op("Gather", [rois, idx], axis=0)
        boxes = op("Slice", [sel, const([1]), const([5]), const([1])])
        batch = op("Cast", [op("Reshape", [op("Slice", [sel, const([0]), const([1]), const([1])]),
                                           const([-1])])], to=onnx.TensorProto.INT64)
        pooled = op("RoiAlign", [feat, boxes, batch], spatial_scale=a[f"spatial_scale_{i}"],
                    **ra_attrs)
        index = op("Expand", [op("Reshape", [idx, const([-1, 1, 1, 1])]), op("Shape", [pooled])])
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
