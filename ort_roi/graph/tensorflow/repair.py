"""The layers after the crops that tf2onnx converted from a shape it lacked or had wrong
(``layers.py``: why, and how each is found) rewritten as TF's layer, where one reading of the
node is left: ``repair_layers``, which ``fuse.fuse_crop_and_resize`` runs after the crops."""

from __future__ import annotations

import onnx
from onnx import helper

from ...errors import node_label
from ...spec import DOMAIN, OPSET_VERSION
from ..nodes import given_attrs, iter_nodes
from ..shapes import without_weights
from ..toolkit import GraphIndex, is_default
from .layers import Crops, Reading, find_suspects, may_have_suspects

#: Combinations of readings checked against the graph's shapes at most (each one an inference).
MAX_READINGS = 32
#: Initializers larger than this (elements) are graph inputs in the copies shape inference sees.
_SKELETON = 4096


def repair_layers(model: onnx.ModelProto, crops: list[Crops]
                  ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Rewrite, in place, the layers reading the converted crops that tf2onnx converted from
    a shape it lacked or had wrong (``layers.py``) as TF's layer, where one reading of the
    node is left; the others stay, with a note. Returns (moved, notes)."""
    if not crops or not may_have_suspects(model, crops):
        return [], []
    _channels(model, crops)
    suspects, notes = find_suspects(model, crops)
    moved = []
    sure = [s for s in suspects if len(s.readings) == 1]
    open_ = [s for s in suspects if len(s.readings) > 1]
    chosen: dict[int, tuple[Reading, str]] = {
        id(s): (s.readings[0], "the only reading tf2onnx's code leaves") for s in sure}
    if open_:
        combos = [[]]
        for s in open_:
            combos = [c + [r] for c in combos for r in s.readings]
        ok: list = []
        if len(combos) <= MAX_READINGS:
            skeleton = _skeleton(model)
            for s in sure:
                _apply(skeleton, s.node, s.readings[0])
            for combo in combos:
                m = onnx.ModelProto()
                m.CopyFrom(skeleton)
                for s, r in zip(open_, combo):
                    _apply(m, s.node, r)
                if _consistent(m):
                    ok.append(combo)
            for k, s in enumerate(open_):
                keys = {combo[k].key for combo in ok}
                if len(keys) == 1:
                    chosen[id(s)] = (ok[0][k], "the one reading whose shapes agree with the "
                                     "rest of the graph (its declared outputs, onnx's strict "
                                     "shape inference, each Conv's input channels)")
        for s in open_:
            if id(s) not in chosen:
                shown = "; ".join(r.what for r in s.readings)
                why = (f"{len(combos)} combinations of readings, more than convert checks "
                       f"({MAX_READINGS})" if len(combos) > MAX_READINGS
                       else "the graph's shapes do not tell them apart" if ok
                       else "no reading's shapes agree with the rest of the graph")
                notes.append(f"node {node_label(s.node)!r} ({s.node.op_type}): {s.cause}. It "
                             f"may be {shown}: {why}; left as it is (onnxruntime fails or "
                             f"computes otherwise than TensorFlow); {s.remedy}")
    for s in suspects:
        if id(s) not in chosen:
            continue
        r, how = chosen[id(s)]
        _apply(model, s.node, r)
        if r.nodes is None:
            continue
        label = node_label(s.node)
        moved.append((label, f"onnx::{s.node.op_type} as tf2onnx wrote it after "
                      f"crop_and_resize", f"onnx::{s.node.op_type} of {r.what}"))
        notes.append(f"node {label!r} ({s.node.op_type}): {s.cause}. Repaired as {r.what}: "
                     f"{how}")
    return moved, notes


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for shape inference: its initializers of more than ``_SKELETON``
    elements graph inputs of their type (``shapes.without_weights``: their values are not
    needed); ort_roi's domain imported (convert imports it after the passes)."""
    m = without_weights(model, _SKELETON)
    if not any(o.domain == DOMAIN for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid(DOMAIN, OPSET_VERSION))
    return m


def _apply(model: onnx.ModelProto, node: onnx.NodeProto, reading: Reading) -> None:
    """``reading``'s nodes in the place of ``node`` (found by its output), in place."""
    if reading.nodes is None:
        return
    nodes = list(model.graph.node)
    at = next(i for i, n in enumerate(nodes) if n.output[:1] == node.output[:1])
    old = set(nodes[at].input)
    nodes[at:at + 1] = [_copy_node(n) for n in reading.nodes]
    have = {t.name for t in model.graph.initializer}
    model.graph.initializer.extend(t for t in reading.inits if t.name not in have)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    read = {i for n in iter_nodes(model.graph) for i in n.input} | {
        o.name for o in model.graph.output}
    for t in [t for t in model.graph.initializer if t.name in old and t.name not in read]:
        model.graph.initializer.remove(t)
    for name in [i.name for i in model.graph.input if i.name in old and i.name not in read]:
        model.graph.input.remove(next(i for i in model.graph.input if i.name == name))


def _copy_node(node: onnx.NodeProto) -> onnx.NodeProto:
    n = onnx.NodeProto()
    n.CopyFrom(node)
    return n


def _consistent(model: onnx.ModelProto) -> bool:
    """The graph's shapes hold together: onnx's strict shape inference (which also checks
    the declared output shapes, TensorFlow's) raises nothing, and every Conv's input has the
    channels its kernel and group take (which onnx's inference does not check)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, strict_mode=True, data_prop=True)
    except Exception:  # noqa: BLE001 (onnx raises several kinds: any is an inconsistency)
        return False
    g = GraphIndex(inferred.graph)
    shapes = {v.name: v.type.tensor_type.shape for v in (
        *inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output)}
    for n in inferred.graph.node:
        if n.op_type != "Conv" or not is_default(n) or len(n.input) < 2:
            continue
        x, w = shapes.get(n.input[0]), shapes.get(n.input[1])
        group = given_attrs(n).get("group", 1)
        if w is None and g.const(n.input[1]) is not None:
            wdims = list(g.const(n.input[1]).shape)
        elif w is not None and len(w.dim) > 1 and w.dim[1].HasField("dim_value"):
            wdims = [d.dim_value for d in w.dim]
        else:
            continue
        if x is not None and len(x.dim) > 1 and x.dim[1].HasField("dim_value") \
                and x.dim[1].dim_value != wdims[1] * group:
            return False
    return True


def _channels(model: onnx.ModelProto, crops: list[Crops]) -> None:
    """Each crop's channels C from onnx's shape inference (ort_roi's schemas), where known."""
    try:
        inferred = onnx.shape_inference.infer_shapes(_skeleton(model))
    except Exception:  # noqa: BLE001 (then unknown)
        return
    shapes = {v.name: v.type.tensor_type.shape for v in (
        *inferred.graph.value_info, *inferred.graph.output)}
    for c in crops:
        s = shapes.get(c.nhwc)
        if s is not None and len(s.dim) == 4 and s.dim[3].HasField("dim_value"):
            c.c = int(s.dim[3].dim_value)
