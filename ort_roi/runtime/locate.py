"""Which node of which graph a failing op was running.

onnxruntime-extensions hands a Python op its kernel id, its inputs and its declared
attributes, never the node, the session or the run: two RoiAlign nodes of one graph are the
same kernel to it. ``place`` names the node, given the run (a ``Run``: the session and its
feed): in the session's graph (the front door's own copy, or the model the session was made
from: its path or bytes) the node of the failing op whose attributes, as onnxruntime printed
them for the op, are the ones the op received; where several nodes share them, the one whose
graph inputs hold the arrays the op received.

Where the run comes from:
- a front-door run is known exactly: ``bridge.raising`` registers it for the thread that
  called ``run``, the thread its ops run on (the front door's sessions use the sequential
  executor); and the front door's float tokens, one per attribute of each node, make the
  attribute text of a node with a float attribute its own, so the node is exact too;
- for a plain session's log line, ``running`` reads it off the thread stacks (the
  ``onnxruntime.InferenceSession`` whose ``run`` is on the calling thread's stack, or the one
  thread inside a run, as onnxruntime's parallel executor runs ops on its own threads); when
  that does not tell, the line names no node.

This runs only when an op has failed.
"""

from __future__ import annotations

import sys
import threading
import weakref
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

from .. import forksafe
from ..errors import RoiOpError, node_label
from ..graph.nodes import attribute_value, iter_nodes, spec_of

_lock = forksafe.Lock()


#: onnxruntime session -> the nodes of its graph that the bridge runs (built on first need)
_graphs: "weakref.WeakKeyDictionary[Any, Graph]" = weakref.WeakKeyDictionary()


@dataclass(frozen=True)
class Node:
    label: str
    op_type: str
    text: tuple  # sorted (attribute, text as onnxruntime prints it)
    inputs: dict  # spec input name -> graph tensor name


class Graph:
    """The nodes of a model that the bridge runs, by op, with their attribute text."""

    def __init__(self, model: onnx.ModelProto):
        self.inputs = {i.name for i in model.graph.input}
        self.nodes: dict[str, list[Node]] = {}
        for node in iter_nodes(model.graph):
            spec = spec_of(node)
            if spec is None:
                continue
            given = {a.name: attribute_value(a) for a in node.attribute}
            text = tuple(sorted((k, _text(v)) for k, v in given.items()
                                if k in {a.name for a in spec.attrs}))
            ins = {i.name: t for i, t in zip(spec.inputs, node.input)}
            self.nodes.setdefault(spec.name, []).append(
                Node(node_label(node), node.op_type, text, ins))

    def find(self, op: str, text: Mapping[str, str], arrays: Sequence,
             feed: Mapping | None, input_names: Sequence[str]) -> list[Node]:
        """The nodes of op ``op`` whose attributes print as ``text``; where several, those
        whose graph inputs (in ``feed``) hold ``arrays``."""
        want = tuple(sorted(text.items()))
        found = [n for n in self.nodes.get(op, []) if n.text == want]
        if len(found) > 1 and feed:
            def fed(n: Node) -> bool:
                for name, a in zip(input_names, arrays):
                    t = n.inputs.get(name)
                    if t in self.inputs and t in feed and not _same(feed[t], a):
                        return False
                return True
            found = [n for n in found if fed(n)] or found
        return found


def _text(v) -> str:
    """An attribute value as onnxruntime-extensions prints it for a Python op."""
    if isinstance(v, float):
        return "%g" % v
    return str(v)


def _same(a, b) -> bool:
    try:
        a, b = np.asarray(a), np.asarray(b)
        return a.shape == b.shape and np.array_equal(a, b, equal_nan=True)
    except Exception:  # noqa: BLE001 - anything odd in a user's feed: not evidence
        return True


def remember(session, model: onnx.ModelProto) -> None:
    """Record the graph an onnxruntime session runs (the front door's private copy)."""
    with _lock:
        _graphs[session] = Graph(model)


def _graph_of(session) -> Graph | None:
    with _lock:
        g = _graphs.get(session)
    if g is not None:
        return g
    try:
        path, data = getattr(session, "_model_path", None), getattr(session, "_model_bytes", None)
        if data is not None:
            model = onnx.load_from_string(bytes(data))
        elif path is not None:
            model = onnx.load(path, load_external_data=False)
        else:
            return None
        g = Graph(model)
    except Exception:  # noqa: BLE001 - no graph to read: the error goes out unplaced
        return None
    with _lock:
        _graphs[session] = g
    return g


@dataclass
class Run:
    """A run in progress: the onnxruntime session, the thread that called run, its feed."""

    session: Any
    thread: int
    feed: Mapping | None


def _run_in(frame) -> Run | None:
    import onnxruntime as ort

    while frame is not None:
        self = frame.f_locals.get("self")
        if isinstance(self, ort.InferenceSession):
            feed = frame.f_locals.get("input_feed")
            return Run(self, 0, feed if isinstance(feed, Mapping) else None)
        frame = frame.f_back
    return None


def running() -> Run | None:
    """The run of a plain session this op most likely belongs to (only to name the node in
    the log line; a front-door run is known exactly, see the module doc): on the calling
    thread's stack (the sequential executor runs Python ops on the thread that called run)
    or, failing that, the one thread now inside a run (onnxruntime's parallel executor runs
    them on its own threads); None when that does not tell.

    Returns:
        The run, or None.
    """
    run = _run_in(sys._getframe(1))
    if run is not None:
        run.thread = threading.get_ident()
        return run
    found = []
    for tid, frame in sys._current_frames().items():
        r = _run_in(frame)
        if r is not None:
            r.thread = tid
            found.append(r)
    return found[0] if len(found) == 1 else None


def place(err: RoiOpError, spec, text: Mapping[str, str], arrays: Sequence,
          run: Run | None) -> RoiOpError:
    """``err`` with the node (and the tensor of the input at fault) it came from, when the
    running graph tells."""
    if run is None or err.node is not None:
        return err
    graph = _graph_of(run.session)
    if graph is None:
        return err
    nodes = graph.find(spec.name, text, arrays, run.feed, [i.name for i in spec.inputs])
    if len(nodes) == 1:
        return err.at(nodes[0].label, nodes[0].inputs)
    if len(nodes) > 1:
        return err.at(tuple(n.label for n in nodes))
    return err
