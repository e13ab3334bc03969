"""The graph toolkit convert's recognisers share: a graph indexed (producers, consumers,
constants), a matched node's whole attribute set checked against what its exporter writes, and
a node spliced in place of the subgraph it replaces. torchvision's stage (fusion.py), its Loops
(loops.py) and the other exporters' forms use it."""

from __future__ import annotations

import copy
import heapq
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import RoiOpError, node_label
from .nodes import attribute_value, given_attrs, opset
from .shapes import inferred_shapes

#: Ops whose output has their first input's rank, and ops that broadcast their inputs.
_SAME_RANK = frozenset({"Cast", "Floor", "Ceil", "Round", "Neg", "Abs", "Relu", "Sqrt", "Log",
                        "Exp", "Identity", "Clip", "Not", "Sign", "Reciprocal"})
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Pow", "Equal",
                        "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or"})


class NoMatch(Exception):
    """The subgraph is not the form the recogniser looks for, exactly: why."""


def anything(value: Any) -> bool:
    """An attribute value the matcher reads rather than prescribes (``GraphIndex.made_by``)."""
    return True


def _shown(value: Any) -> str:
    if isinstance(value, onnx.TensorProto):
        a = numpy_helper.to_array(value)
        return f"a {a.dtype} tensor {a.tolist()!r}" if a.size <= 8 else f"a {a.dtype} tensor"
    if value is None:
        return "none"
    return repr(value)


def declared_attrs(op_type: str, domain: str, onnx_opset: int | None) -> dict[str, Any]:
    """The attributes an ONNX op declares at ``onnx_opset`` (the newest when None), each with
    its default (None: none). Raises NoMatch for an op onnx does not know there."""
    try:
        schema = (onnx.defs.get_schema(op_type, domain or "") if onnx_opset is None
                  else onnx.defs.get_schema(op_type, onnx_opset, domain or ""))
    except onnx.defs.SchemaError:
        raise NoMatch(f"{op_type} is not an ONNX op at opset {onnx_opset}") from None
    return {name: attribute_value(a.default_value) if a.default_value.name else None
            for name, a in schema.attributes.items()}


def check_attrs(node: onnx.NodeProto, onnx_opset: int | None, exporter: str = "the exporter",
                **want: Any) -> dict[str, Any]:
    """Check a matched node's whole attribute set against what the exporter writes.

    Args:
        node: a node of the default domain.
        onnx_opset: the model's ONNX opset (the op's schema there says which attributes it has
            and their defaults); None: the newest.
        exporter: who writes the form (named in the NoMatch message).
        **want: attribute -> the value the exporter writes, or a predicate (``anything``: read,
            not prescribed). An attribute the op does not declare at this opset is ignored.
            Every declared attribute not named here must be absent or hold its default.

    Returns:
        Every declared attribute's value (given, else its default; None when it has none).

    Raises:
        NoMatch: naming the node and the first attribute that differs (or that the op does
            not declare).
    """
    declared = declared_attrs(node.op_type, node.domain, onnx_opset)
    given = given_attrs(node)
    label = f"{node.op_type} {node_label(node)!r}"
    for name in given:
        if name not in declared:
            raise NoMatch(f"{label} has attribute {name!r}, which {node.op_type} does not "
                          f"declare at opset {onnx_opset}")
    values = {**declared, **given}
    for name, value in values.items():
        expected = want.get(name, declared[name])
        ok = expected(value) if callable(expected) else (
            not isinstance(value, onnx.TensorProto) and value == expected)
        if not ok:
            wants = ("another value" if callable(expected) else _shown(expected))
            raise NoMatch(f"{label} has attribute {name}={_shown(value)} where {exporter} "
                          f"writes {wants}")
    return values


class GraphIndex:
    """A graph indexed: the producer and consumers of each tensor, its constants; the
    model's ONNX opset (``onnx_opset``, None: the newest) for checking matched nodes."""

    def __init__(self, graph: onnx.GraphProto, onnx_opset: int | None = None,
                 exporter: str = "the exporter"):
        self.graph = graph
        self.opset = onnx_opset
        self.exporter = exporter  # who writes the forms matched here (for NoMatch messages)
        self.producer = {o: n for n in graph.node for o in n.output if o}
        self.consumers: dict[str, list[onnx.NodeProto]] = {}
        for n in graph.node:
            for i in n.input:
                self.consumers.setdefault(i, []).append(n)
        self.outputs = {o.name for o in graph.output}
        self.inits = {t.name: t for t in graph.initializer}
        self._shapes: list[dict] = []  # the inferred shapes, once (its views share it)
        self._rows: dict[str, set[str]] = {}  # same_rows, once per tensor (shared too)
        self._ranks: dict[str, int | None] = {}  # rank, likewise
        self._read_as: dict[str, int] = {}  # read_as: the rank a tensor runs with

    def seen_by(self, exporter: str) -> GraphIndex:
        """This index, not rebuilt, naming ``exporter`` in its NoMatch messages (the one
        index ``rewrite`` makes of a graph, handed to each exporter's recogniser)."""
        view = copy.copy(self)
        view.exporter = exporter
        return view

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

    def made_by(self, name: str, op: str, **want: Any) -> onnx.NodeProto:
        """The node computing ``name``, an ONNX ``op`` whose whole attribute set is what the
        exporter writes (``check_attrs(node, self.opset, **want)``); else NoMatch."""
        n = self.producer.get(name)
        if n is None or n.op_type != op or n.domain not in ("", "ai.onnx"):
            got = "a graph input" if n is None else f"{n.op_type} {node_label(n)!r}"
            raise NoMatch(f"{name!r} comes from {got}, not a {op}")
        check_attrs(n, self.opset, self.exporter, **want)
        return n

    def const_is(self, node: onnx.NodeProto, index: int, value: Any) -> None:
        """Input ``index`` of ``node`` is a constant equal to ``value`` (shape included);
        else NoMatch naming the node and the input."""
        got = self.const(node.input[index]) if len(node.input) > index and node.input[index] \
            else None
        want = np.asarray(value)
        if got is None or got.shape != want.shape or not np.array_equal(got, want):
            shown = "not a constant" if got is None else repr(got.tolist())
            raise NoMatch(f"{node.op_type} {node_label(node)!r} reads {shown} as input "
                          f"{index} where {self.exporter} writes {want.tolist()!r}")

    def operand(self, name: str, op: str, attr: str, index: int, value: list,
                **want: Any) -> onnx.NodeProto:
        """``made_by(name, op)`` whose ``attr`` (an attribute at the model's opset, or input
        ``index`` since the op took it as an input: axes, split) is ``value``."""
        if attr in declared_attrs(op, "", self.opset):
            return self.made_by(name, op, **{attr: list(value)}, **want)
        n = self.made_by(name, op, **want)
        self.const_is(n, index, value)
        return n

    def shape(self, name: str) -> tuple[int | None, ...] | None:
        """The shape of tensor ``name`` as onnx's shape inference tells it (a dim it does not
        know: None; computed once per index, ``shapes.inferred_shapes``), None where it
        cannot tell the rank."""
        if not self._shapes:
            self._shapes.append(inferred_shapes(self.graph, self.opset))
        return self._shapes[0].get(name)

    def rank(self, name: str, depth: int = 32) -> int | None:
        """The rank of tensor ``name``: shape inference's, else what the ops computing it
        say (a constant's; ``read_as``'s; a Concat's, whose inputs share one rank; an
        elementwise op's, the largest of its inputs' where each is told; a Gather's), None
        where neither can tell."""
        if name not in self._ranks:  # (once per tensor, as same_rows)
            self._ranks[name] = self._rank(name, depth)
        return self._ranks[name]

    def read_as(self, name: str, rank: int) -> None:
        """Tensor ``name`` has rank ``rank`` wherever the graph runs: a node of ort_roi's
        reads it (or a Gather of its rows) and refuses any other, so the graph fails there
        and a fused node may take it as told. ``rank`` answers it where shape inference
        cannot tell."""
        self._read_as[name] = rank
        self._ranks.clear()

    def _rank(self, name: str, depth: int) -> int | None:
        shape = self.shape(name)
        if shape is not None:
            return len(shape)
        v = self.const(name)
        if v is not None:
            return v.ndim
        if name in self._read_as:
            return self._read_as[name]
        n = self.producer.get(name)
        if n is None or depth <= 0 or not is_default(n):
            return None
        if n.op_type == "Concat":
            return next((r for r in (self.rank(x, depth - 1) for x in n.input if x)
                         if r is not None), None)
        if n.op_type in _SAME_RANK and n.input:
            return self.rank(n.input[0], depth - 1)
        if n.op_type in _BROADCAST:
            ranks = [self.rank(x, depth - 1) for x in n.input if x]
            return max(ranks) if ranks and None not in ranks else None
        if n.op_type == "Gather" and len(n.input) == 2:  # data's axis replaced by the indices'
            data, idx = self.rank(n.input[0], depth - 1), self.rank(n.input[1], depth - 1)
            return None if data is None or idx is None else data - 1 + idx
        return None

    def same_rows(self, name: str, depth: int = 64) -> set[str]:
        """Tensors that have as many rows (dimension 0) as ``name`` by how it is computed:
        ``name`` itself, and following back elementwise ops (the other operand a constant of
        one element, or a tensor of the same rows), a Gather or Concat on another axis than
        0 (or of one input), a Gather on axis 0 by a vector of indices (their rows), a Slice,
        Squeeze or Unsqueeze of other axes, the tensors they read; a
        Concat on axis 0 of several: a token naming its inputs' rows in order."""
        if name not in self._rows:  # (once: the graphs' diamonds would make the walk exponential)
            self._rows[name] = self._same_rows(name, depth)
        return self._rows[name]

    def _same_rows(self, name: str, depth: int) -> set[str]:
        out, n = {name}, self.producer.get(name)
        if n is None or depth <= 0 or not is_default(n):
            return out
        ins = [x for x in n.input if x]
        if n.op_type in _SAME_RANK and ins:
            return out | self.same_rows(ins[0], depth - 1)
        if n.op_type in _BROADCAST and len(ins) == 2:
            a, b = (self._one_value(x) for x in ins)
            if a or b:
                return out | (set() if a and b else self.same_rows(ins[0] if b else ins[1],
                                                                  depth - 1))
            rows = [self.same_rows(x, depth - 1) for x in ins]
            return out | rows[0] | rows[1] if rows[0] & rows[1] else out
        axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
        if axis < 0:  # counted from the end: axis 0 where it is -rank
            r = self.rank(ins[0])
            axis = None if r is None else axis + r
        if n.op_type == "Gather" and axis not in (0, None):
            return out | self.same_rows(ins[0], depth - 1)
        if n.op_type == "Gather" and self.rank(ins[1]) == 1:  # axis 0: the indices' rows
            return out | self.same_rows(ins[1], depth - 1)
        if n.op_type == "Concat" and (axis not in (0, None) or len(ins) == 1):
            return out.union(*(self.same_rows(x, depth - 1) for x in ins))
        if n.op_type == "Concat" and axis == 0:  # its inputs' rows in order: a token
            ends = [self._row_ends(self.same_rows(x, depth - 1)) for x in ins]
            return out | {"concat0(" + "; ".join(",".join(e) for e in ends) + ")"}
        if n.op_type == "Slice":  # of other axes than 0
            axes = next((list(a.ints) for a in n.attribute if a.name == "axes"), None)
            if axes is None and len(ins) > 3 and self.const(ins[3]) is not None:
                axes = self.const(ins[3]).ravel().tolist()
            if axes and all(x > 0 for x in axes):
                return out | self.same_rows(ins[0], depth - 1)
        if n.op_type in ("Squeeze", "Unsqueeze"):
            axes = next((list(a.ints) for a in n.attribute if a.name == "axes"), None)
            if axes is None and len(ins) > 1 and self.const(ins[1]) is not None:
                axes = self.const(ins[1]).ravel().tolist()
            r = self.rank(ins[0])
            rank = None if r is None else r + len(axes or []) * (n.op_type == "Unsqueeze")
            if axes and all(x > 0 or (rank is not None and x + rank > 0) for x in axes):
                return out | self.same_rows(ins[0], depth - 1)
        return out

    def _row_ends(self, rows: set[str]) -> list[str]:
        """The tensors of a same_rows set that nothing further is followed back from (graph
        inputs, and what ops ``same_rows`` does not follow compute)."""
        followed = _SAME_RANK | _BROADCAST | {"Gather", "Concat", "Slice", "Squeeze",
                                              "Unsqueeze"}
        return sorted(x for x in rows if not x.startswith("concat0(") and (
            self.producer.get(x) is None or self.producer[x].op_type not in followed))

    def rows_agree(self, levels: str, rois: str) -> None:
        """The levels have the rois' rows (``same_rows`` of both meet): a fused node reads
        level r for row r, as the graph's selections do; else NoMatch naming both."""
        if not self.same_rows(levels) & self.same_rows(rois):
            raise NoMatch(f"the levels {levels!r} are not computed row by row from the rois "
                          f"{rois!r}: that they have as many rows cannot be told")

    def _one_value(self, name: str) -> bool:
        v = self.const(name)
        return v is not None and v.size == 1

    def is_vector(self, name: str, what: str) -> None:
        """Tensor ``name`` has rank 1 (``rank``); else NoMatch naming it as ``what``."""
        r = self.rank(name)
        if r != 1:
            told = f"has rank {r}" if r is not None else "has a rank that cannot be told"
            raise NoMatch(f"{what} {name!r} {told}, not a vector")

    def first_columns(self, name: str, cols: int, prefix: str
                      ) -> tuple[list[onnx.NodeProto], str]:
        """Columns 0 .. cols-1 of ``name`` [K, >= cols], as a node reading them by index (a
        Gather of columns) sees them: ([], name) where shape inference says it has exactly
        ``cols`` columns, else a Slice of them (nodes named from ``prefix``) and its output.
        An exporter's graph that Gathers columns 0..4 of wider rows runs natively; the
        fused op then reads the same five."""
        shape = self.shape(name)
        if shape is not None and len(shape) == 2 and shape[1] == cols:
            return [], name
        out = f"{prefix}/columns"
        if self.opset is not None and self.opset < 10:  # Slice's bounds as attributes
            return [onnx.helper.make_node("Slice", [name], [out], name=out, starts=[0],
                                          ends=[cols], axes=[1])], out
        bounds = [onnx.helper.make_node(
            "Constant", [], [f"{out}/{k}"], name=f"{out}/{k}",
            value=numpy_helper.from_array(np.array([v], np.int64)))
            for k, v in (("starts", 0), ("ends", cols), ("axes", 1))]
        return bounds + [onnx.helper.make_node(
            "Slice", [name, *(b.output[0] for b in bounds)], [out], name=out)], out


def indexed(model: onnx.ModelProto, exporter: str, g: GraphIndex | None = None) -> GraphIndex:
    """``g`` (an index of ``model`` as it is now: the one ``rewrite`` made, or None) seen by
    ``exporter``, else ``model``'s main graph indexed afresh (after a recogniser changed it)."""
    if g is not None:
        return g.seen_by(exporter)
    return GraphIndex(model.graph, opset(model) or 1, exporter)


def ancestors(g: GraphIndex, names: list[str]) -> set[int]:
    """Indices (in the graph) of the nodes every tensor in ``names`` is computed from (what
    their subgraphs read included)."""
    index = {id(n): i for i, n in enumerate(g.graph.node)}
    seen, todo = set(), list(names)
    while todo:
        n = g.producer.get(todo.pop())
        if n is None or index[id(n)] in seen:
            continue
        seen.add(index[id(n)])
        todo.extend(reads(n))
    return seen


def splice(model: onnx.ModelProto, old: onnx.NodeProto, new: list[onnx.NodeProto],
           keep: list[str]) -> int:
    """Put ``new`` in the place of node ``old`` of the main graph, in place, and drop the
    nodes (and initializers) that computed only what ``old`` read: those not also computing
    ``keep`` (the new nodes' inputs) or anything else still read. Returns how many nodes
    went."""
    g = GraphIndex(model.graph)
    plumbing = ancestors(g, list(old.output)) - ancestors(g, keep)
    nodes = list(model.graph.node)  # (copies: an earlier fusion rebuilt the list)
    at = next(i for i, n in enumerate(nodes) if n.output[:1] == old.output[:1])
    removed = dead_after(nodes, plumbing, model.graph, at)
    out = [n for i, n in enumerate(nodes) if i not in removed]
    out[sum(1 for i in range(at) if i not in removed):0] = new
    read = {name for n in out for name in reads(n)} | {o.name for o in model.graph.output}
    gone = {name for i in removed for name in reads(nodes[i])} - read
    for t in [t for t in model.graph.initializer if t.name in gone]:
        model.graph.initializer.remove(t)
    del model.graph.node[:]
    model.graph.node.extend(out)
    return len(removed)


def dead_after(nodes: list[onnx.NodeProto], candidates: set[int], graph: onnx.GraphProto,
          merge: int) -> set[int]:
    """The merge, and the candidates nothing reads once it is gone."""
    readers: dict[str, int] = {}
    for n in nodes:
        for name in reads(n):
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
        for name in reads(nodes[i]):
            readers[name] -= 1
            p = producer.get(name)
            if (p is not None and p in candidates and p not in removed
                    and all(readers.get(o, 0) == 0 for o in nodes[p].output if o)):
                todo.append(p)
    return removed


def reads(node: onnx.NodeProto) -> list[str]:
    """The tensors a node reads, in its subgraphs too."""
    names = [i for i in node.input if i]
    for a in node.attribute:
        for sub in ([a.g] if a.type == onnx.AttributeProto.GRAPH else []) + list(a.graphs):
            for n in sub.node:
                names += reads(n)
    return names


def is_default(node: onnx.NodeProto) -> bool:
    """The node is of ONNX's default domain (``""`` or ``"ai.onnx"``)."""
    return node.domain in ("", "ai.onnx")


def loop_body(loop: onnx.NodeProto) -> onnx.GraphProto | None:
    """A Loop's body graph, else None."""
    return next((a.g for a in loop.attribute if a.name == "body"), None)


def topological(nodes: list[onnx.NodeProto], op: str) -> list[onnx.NodeProto]:
    """The nodes in an order where each comes after its producers, as close to the given
    one as that allows (RoiOpError naming ``op`` on a cycle)."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[x] for x in reads(n) if x in producer} - {i} for i, n in enumerate(nodes)]
    users: dict[int, list[int]] = {}
    for i, d in enumerate(deps):
        for j in d:
            users.setdefault(j, []).append(i)
    ready = [i for i, d in enumerate(deps) if not d]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users.get(i, ()):
            deps[u].discard(i)
            if not deps[u]:
                heapq.heappush(ready, u)
    if len(out) != len(nodes):
        raise RoiOpError(op, "graph", "the exported graph has a cycle")
    return out


def prune(graph: onnx.GraphProto) -> None:
    """Drop the nodes, initializers and value infos no output depends on."""
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output) or not node.output:
            keep.append(node)
            needed.update(reads(node))
    del graph.node[:]
    graph.node.extend(reversed(keep))
    inits = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    infos = [v for v in graph.value_info if v.name in needed]
    del graph.value_info[:]
    graph.value_info.extend(infos)
