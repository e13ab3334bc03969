"""Mutation of the graphs convert's recognisers read: each assumption a recogniser makes about
a pattern's constants, attributes and wiring, tried by breaking it, one part at a time.

``mutants(model)`` yields (what was changed, the changed model) for every node of the graph
and of its subgraphs (a Loop's body):
- each constant (a Constant node's value or an initializer): its value moved, its shape given
  one more leading dimension, its dtype changed (int64 <-> int32, float32 -> float64);
- each attribute of a node: an int moved by one, a float doubled, a list's first element
  moved, a string set to another value ONNX allows for it, the attribute removed;
- each node's wiring: two of its inputs swapped, one input read from a graph input instead.

``judge(native, feeds)`` converts every mutant and sorts it into one ``Outcome``: the native
graph cannot load ("invalid"); the stage was left as it is (with a note, or without one where
the mutant no longer starts like a stage); refused by convert with an error naming the node
(an attribute outside the op's contract: RoiAlign's output_height 0 on a level no box reaches
loads in onnxruntime); or fused, in which case each feed the native graph runs must give the
same outputs after convert (NaN where native has NaN), and a feed the native graph fails on
may fail after convert too. A fused mutant that differs, or fails where native ran, is a
defect of the recogniser: ``Outcome.defects`` names each.
"""

from __future__ import annotations

import copy
import warnings
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, Iterator

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import ort_roi
from ort_roi.errors import RoiOpError
from ort_roi.runtime import bridge

#: Other values ONNX allows for the string attributes the recognised patterns hold.
STRINGS = {"mode": ("avg", "max"), "coordinate_transformation_mode": (
    "half_pixel", "output_half_pixel"), "reduction": ("none", "add", "mul", "max", "min")}


def _const_value(node: onnx.NodeProto) -> onnx.AttributeProto | None:
    return next((a for a in node.attribute if a.name == "value"), None)


def _moved(a: np.ndarray) -> np.ndarray:
    """A constant's value moved: integers + 1, floats doubled and + 1, booleans flipped."""
    if a.dtype == np.bool_:
        return ~a
    if a.dtype.kind in "iu":
        return a + np.ones((), a.dtype)
    return (a * 2 + 1).astype(a.dtype)


#: The dtype a constant is changed to.
RETYPED = {np.dtype(np.int64): np.int32, np.dtype(np.int32): np.int64,
           np.dtype(np.float32): np.float64}


def _tensor_mutants(a: np.ndarray) -> Iterator[tuple[str, np.ndarray]]:
    if a.size <= 64:
        yield "value", _moved(a)
    yield "rank", a.reshape((1, *a.shape))
    if a.ndim == 0:
        yield "rank", a.reshape((1, 1))
    if a.dtype in RETYPED:
        yield "dtype", a.astype(RETYPED[a.dtype])


def _attr_mutants(a: onnx.AttributeProto) -> Iterator[tuple[str, onnx.AttributeProto | None]]:
    v = helper.get_attribute_value(a)
    if a.type == onnx.AttributeProto.INT:
        yield f"{v + 1}", helper.make_attribute(a.name, v + 1)
        if v != 0:
            yield "0", helper.make_attribute(a.name, 0)
    elif a.type == onnx.AttributeProto.FLOAT:
        yield f"{v * 2}", helper.make_attribute(a.name, v * 2)
    elif a.type == onnx.AttributeProto.INTS and v:
        yield f"{[v[0] + 1, *v[1:]]}", helper.make_attribute(a.name, [v[0] + 1, *v[1:]])
    elif a.type == onnx.AttributeProto.STRING:
        for other in STRINGS.get(a.name, ()):
            if other != v.decode():
                yield other, helper.make_attribute(a.name, other)
    elif a.type == onnx.AttributeProto.TENSOR:
        return  # a Constant's value: _tensor_mutants
    yield "removed", None


def _graphs(graph: onnx.GraphProto, path: tuple = ()
            ) -> Iterator[tuple[tuple, onnx.GraphProto]]:
    """``graph`` and every subgraph in it (a Loop's or an If's body), each with its path:
    ((node index, attribute name), ...) from the main graph."""
    yield path, graph
    for k, node in enumerate(graph.node):
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                yield from _graphs(a.g, (*path, (k, a.name)))


def _at(model: onnx.ModelProto, path: tuple) -> onnx.GraphProto:
    g = model.graph
    for k, name in path:
        g = next(a.g for a in g.node[k].attribute if a.name == name)
    return g


def mutants(model: onnx.ModelProto, only: Callable[[onnx.NodeProto], bool] | None = None
            ) -> Iterator[tuple[str, onnx.ModelProto]]:
    """Every one-part change of ``model``'s graph and its subgraphs (the module doc);
    ``only``: the nodes to change (default every node). Yields (what changed, a changed
    copy)."""
    for path, graph in _graphs(model.graph):
        inputs = [i.name for i in graph.input]
        inside = " (in a subgraph)" if path else ""
        for k, node in enumerate(graph.node):
            if only is None or only(node):
                label = f"{node.op_type} {node.name or node.output[0]!r}{inside}"
                yield from _node_mutants(model, path, k, node, label, inputs)
        for t_index, t in enumerate(graph.initializer):
            a = numpy_helper.to_array(t)
            for how, b in _tensor_mutants(a):
                m = copy.deepcopy(model)
                _at(m, path).initializer[t_index].CopyFrom(numpy_helper.from_array(b, t.name))
                yield f"initializer {t.name!r}{inside}: {how}", m


def _node_mutants(model: onnx.ModelProto, path: tuple, k: int, node: onnx.NodeProto,
                  label: str, inputs: list[str]) -> Iterator[tuple[str, onnx.ModelProto]]:
    """The changes of node ``k`` of the (sub)graph at ``path``: a Constant's value, else
    each attribute, two inputs swapped, an input read from the graph's first or last
    input."""
    def changed():
        m = copy.deepcopy(model)
        return m, _at(m, path).node[k]

    if node.op_type == "Constant" and _const_value(node) is not None:
        a = numpy_helper.to_array(_const_value(node).t)
        for how, b in _tensor_mutants(a):
            m, c = changed()
            del c.attribute[:]
            c.attribute.append(helper.make_attribute("value", numpy_helper.from_array(b)))
            yield f"{label}: constant {how} {a.tolist() if a.size <= 8 else ''} -> " \
                  f"{b.tolist() if b.size <= 8 else b.dtype}", m
        return
    for j, a in enumerate(node.attribute):
        for how, new in _attr_mutants(a):
            m, n = changed()
            del n.attribute[j]
            if new is not None:
                n.attribute.insert(j, new)
            yield f"{label}: attribute {a.name} -> {how}", m
    ins = list(node.input)
    for i in range(len(ins)):
        for j in range(i + 1, len(ins)):
            if ins[i] and ins[j] and ins[i] != ins[j]:
                m, n = changed()
                n.input[i], n.input[j] = ins[j], ins[i]
                yield f"{label}: inputs {i} and {j} swapped", m
        for g in inputs[:1] + inputs[-1:]:
            if ins[i] and ins[i] != g:
                m, n = changed()
                n.input[i] = g
                yield f"{label}: input {i} read from graph input {g!r}", m


@dataclass
class Outcome:
    """How the mutants of one graph ended: counts by kind, and the defects (fused and
    computing otherwise than the native graph, or failing where it ran)."""

    counts: Counter = field(default_factory=Counter)
    defects: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in sorted(self.counts.items()))


def _session(model: onnx.ModelProto, ours: bool) -> ort.InferenceSession:
    so = ort_roi.session_options() if ours else ort.SessionOptions()
    so.log_severity_level = 4
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def _run(s: ort.InferenceSession, feed: dict) -> list[np.ndarray] | str:
    """The outputs of one run, or why it failed: onnxruntime raised, or one of ort_roi's
    kernels refused its inputs (a plain session logs that and fills the node's output with
    NaN; the front door raises it: the run failed either way)."""
    try:
        with bridge.raising(s, feed) as errors:
            out = s.run(None, feed)
    except Exception as e:  # noqa: BLE001 - a failing run is an outcome
        return str(e).splitlines()[0][:200]
    return f"refused: {errors[0]}"[:200] if errors else out


def _same(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape:
        return False
    if a.dtype.kind not in "fc":
        return np.array_equal(a, b)
    return bool(np.allclose(a, b, rtol=1e-5, atol=2e-6, equal_nan=True)
                and np.array_equal(np.isnan(a), np.isnan(b)))


def judge(model: onnx.ModelProto, feeds: list[dict], fused: Callable[[onnx.ModelProto], int],
          only: Callable[[onnx.NodeProto], bool] | None = None,
          repairs_differ: bool = True, native_ours: bool = False) -> Outcome:
    """Convert every mutant of ``model`` (``mutants``) and sort it (the module doc).

    Args:
        model: the native graph (a recognised stage).
        feeds: inputs to run each fused mutant on, native and converted.
        fused: how many stages a converted model holds fused (the count for ``model``
            itself is what a mutant left as it is falls short of).
        only: the nodes to mutate (default every node).
        repairs_differ: a mutant convert repairs (its report's ``repairs``: the exporter's
            framework's arithmetic, told) is not compared with the native mutant, which
            computes otherwise on purpose; it must not ignore what the mutant changed: where
            the native mutant's outputs differ from the native graph's, the converted
            mutant's must differ from the converted graph's. False: compared as any other
            (mx2onnx's graphs at stamps <= 15, where MXNet's arithmetic is onnxruntime's).
        native_ours: the native graph holds ort_roi's nodes (export-paddle's unfused stage):
            run it in a session with ort_roi's ops.

    Returns:
        The outcome: counts of "invalid", "left with a note", "left, no longer the form",
        "fused, equal", "fused, native fails on every feed"; and the defects.
    """
    out = Outcome()
    original = _converted(model)[0]
    whole = fused(original)
    assert whole > 0, "the graph itself is not fused: nothing to mutate"
    before = [(_run(_session(model, native_ours), f), _run(_session(original, True), f))
              for f in feeds]
    for what, m in mutants(model, only):
        try:
            native = _session(m, ours=native_ours)
        except Exception:  # noqa: BLE001 - onnxruntime refuses the mutant: nothing to hold
            out.counts["invalid"] += 1
            continue
        try:
            conv, report = _converted(m)
        except RoiOpError as e:  # a node's attributes outside its op's contract, named
            if not str(e).startswith(tuple(f"{n.op_type} (node " for n in m.graph.node)):
                out.defects.append(f"{what}: convert refused without naming the node: {e}")
            runs = any(not isinstance(_run(native, f), str) for f in feeds)
            out.counts["refused by convert, naming the node" + (
                " (native runs: " + str(e).split(": ", 1)[-1] + ")" if runs else "")] += 1
            continue
        except Exception as e:  # noqa: BLE001 - any other failure of convert is a defect
            out.defects.append(f"{what}: convert raised {type(e).__name__}: {e}")
            continue
        if fused(conv) < whole:
            out.counts["left with a note" if report.notes else "left, no longer the form"] += 1
            continue
        if report.repairs and repairs_differ:  # told: the framework's arithmetic, on purpose
            out.counts[_repaired(what, native, _session(conv, ours=True), feeds, before,
                                 out.defects)] += 1
            continue
        out.counts[_compared(what, native, _session(conv, ours=True), feeds,
                             out.defects)] += 1
    return out


def _compared(what: str, native: ort.InferenceSession, ours: ort.InferenceSession,
              feeds: list[dict], defects: list[str]) -> str:
    """How a fused mutant ended: each feed the native mutant runs, run converted too; a
    converted output that differs (NaN where native has none: a kernel that refused) is a
    defect."""
    ran, found = 0, len(defects)
    for i, feed in enumerate(feeds):
        want = _run(native, feed)
        if isinstance(want, str):
            continue
        ran += 1
        got = _run(ours, feed)
        if isinstance(got, str):
            defects.append(f"{what}: feed {i}: native runs, converted fails: {got}")
        elif not all(_same(a, b) for a, b in zip(want, got)):
            diff = [np.nanmax(np.abs(a.astype(float) - b.astype(float)))
                    if a.shape == b.shape and a.size else f"{a.shape} vs {b.shape}"
                    for a, b in zip(want, got)]
            defects.append(f"{what}: feed {i}: fused and different (max |diff| {diff})")
    if len(defects) > found:
        return "fused, different"
    return "fused, equal" if ran else "fused, native fails on every feed"


def _outputs_same(a, b) -> bool:
    return not isinstance(a, str) and not isinstance(b, str) and len(a) == len(b) and all(
        _same(x, y) for x, y in zip(a, b))


def _repaired(what: str, native: ort.InferenceSession, ours: ort.InferenceSession,
              feeds: list[dict], before: list[tuple], defects: list[str]) -> str:
    """How a repaired mutant ended: a feed on which the native mutant computes otherwise
    than the native graph while the converted mutant gives what the converted graph gave is
    a change the repair ignored (a defect)."""
    changed = 0
    for i, (feed, (native_was, converted_was)) in enumerate(zip(feeds, before)):
        now = _run(native, feed)
        if isinstance(now, str) or _outputs_same(now, native_was):
            continue
        changed += 1
        if _outputs_same(_run(ours, feed), converted_was):
            defects.append(f"{what}: feed {i}: repaired, and blind to what the mutant changes "
                           f"(native's outputs moved, the converted graph's did not)")
            return "repaired, blind to the change"
    return "repaired, follows the change" if changed else "repaired, native unchanged"


def _converted(model: onnx.ModelProto):
    """convert's model and report, ONNX RoiAlign's max read as onnxruntime computes it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conv, report = ort_roi.convert(model, report=True, roialign_max="onnx")
    return conv, report
