"""torchvision's keypoint decoding, fused: the Loop torch.onnx writes for
``roi_heads.heatmaps_to_keypoints`` becomes one HeatmapsToKeypoints node.

Traced for export, torchvision decodes the keypoints box by box in a Loop
(``_onnx_heatmaps_to_keypoints_loop``): each iteration resizes the box's heatmaps with a cubic
Resize, takes their ArgMax and appends the result to tensors that grow by Concat. In a
Keypoint R-CNN this Loop is about a fifth of the model's time (onnxruntime's cubic Resize,
one thread). ``fuse_loops`` recognises the Loop by its body, compared node by node with the
bodies torch.onnx writes (``ort_roi/data/torchvision_loops.json``, made by
``tools/export_torchvision.py --loops``: torch 2.14.1 / torchvision 0.29.1, opsets 11-17), and by
the tensors it reads (the boxes' columns, widths and their ceilings, as torchvision computes
them); a Loop that reads like one (a cubic Resize and an ArgMax in its body) but does not
match exactly is left as it is, with a note saying why.
"""

from __future__ import annotations

import functools
import hashlib
import json
from importlib import resources

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from ..specs import DOMAIN, HEATMAPS_TO_KEYPOINTS
from .fusion import NoMatch, GraphIndex
from .nodes import given_attrs

#: What the Loop's outer-scope tensors are, in the order its body first reads them.
ROLES = ("maps", "widths_ceil", "heights_ceil", "widths", "heights", "offset_x", "offset_y",
         "num_keypoints")


def _value(a: np.ndarray) -> str:
    a = np.ascontiguousarray(a)
    return f"c:{a.dtype}{list(a.shape)}:{hashlib.sha1(a.tobytes()).hexdigest()[:12]}"


def body_lines(loop: onnx.NodeProto, const) -> tuple[list[str], list[str]]:
    """The Loop's body, canonical: one line per node (op, attributes, where each input
    comes from: a body input, an earlier node, a constant by its value, wherever the
    exporter put it, or the n-th outer tensor), then the body's outputs. Returns (lines,
    the outer tensors in order of first use). ``const(name)`` gives the value of a constant
    of the enclosing graph, else None."""
    body = next(a.g for a in loop.attribute if a.name == "body")
    names = {i.name: f"in{k}" for k, i in enumerate(body.input)}
    names.update({t.name: _value(numpy_helper.to_array(t)) for t in body.initializer})
    outer: list[str] = []
    lines: list[str] = []

    def ref(name: str) -> str:
        if not name:
            return "-"
        if name not in names:
            v = const(name)
            names[name] = _value(v) if v is not None else f"o{len(outer)}"
            if v is None:
                outer.append(name)
        return names[name]

    for n in body.node:
        value = next((a.t for a in n.attribute if a.name == "value"), None)
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and value is not None:
            names[n.output[0]] = _value(numpy_helper.to_array(value))
            continue
        attrs = []
        for a in sorted(n.attribute, key=lambda a: a.name):
            if a.type == onnx.AttributeProto.TENSOR:
                attrs.append(f"{a.name}={_value(numpy_helper.to_array(a.t))}")
            elif a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS):
                attrs.append(f"{a.name}=<graph>")  # nested control flow: never ours
            else:
                v = helper.get_attribute_value(a)
                attrs.append(f"{a.name}={v.decode() if isinstance(v, bytes) else v!r}")
        ins = ",".join(ref(i) for i in n.input)
        names.update({o: f"n{len(lines)}.{k}" for k, o in enumerate(n.output) if o})
        lines.append(f"{n.domain}::{n.op_type}({ins}) {' '.join(attrs)} -> {len(n.output)}")
    lines.append("out(" + ",".join(ref(o.name) for o in body.output) + ")")
    return lines, outer


@functools.lru_cache(maxsize=None)
def references() -> dict[str, list[str]]:
    """The bodies torch.onnx writes for torchvision's keypoint Loop: {"opset N": lines}."""
    text = resources.files("ort_roi").joinpath("data/torchvision_loops.json").read_text()
    return json.loads(text)["heatmaps_to_keypoints"]["bodies"]


def _reads_like_keypoints(loop: onnx.NodeProto) -> bool:
    body = next((a.g for a in loop.attribute if a.name == "body"), None)
    if body is None:
        return False
    ops = {n.op_type for n in body.node}
    cubic = any(n.op_type == "Resize" and given_attrs(n).get("mode") == "cubic"
                for n in body.node)
    return cubic and "ArgMax" in ops


def _first_difference(lines: list[str]) -> str:
    best = None
    for key, ref in references().items():
        k = next((i for i, (a, b) in enumerate(zip(lines, ref)) if a != b),
                 min(len(lines), len(ref)))
        if best is None or k > best[0]:
            best = (k, key, ref)
    k, key, ref = best
    got = lines[k] if k < len(lines) else "(end)"
    want = ref[k] if k < len(ref) else "(end)"
    return f"body node {k} is {got!r} where torch.onnx's ({key}) has {want!r}"


def _column(g: GraphIndex, name: str, col: int) -> str:
    """name = Gather(R, col, axis=1): R."""
    n = g.made_by(name, "Gather")
    c = g.const(n.input[1])
    if int(given_attrs(n).get("axis", 0)) != 1 or c is None or c.size != 1 or int(c) != col:
        raise NoMatch(f"{name!r} is not column {col} of the boxes")
    return n.input[0]


def _size(g: GraphIndex, name: str, hi: int, lo: int, rois: str) -> None:
    """name = Clip(Sub(rois[:, hi], rois[:, lo]), min=1): torchvision's box side."""
    clip = g.made_by(name, "Clip")
    a = given_attrs(clip)
    low = a.get("min", g.const(clip.input[1]) if len(clip.input) > 1 and clip.input[1] else None)
    high = a.get("max", g.const(clip.input[2]) if len(clip.input) > 2 and clip.input[2] else None)
    if low is None or float(np.asarray(low)) != 1.0 or (
            len(clip.input) > 2 and clip.input[2] and high is None) or (
            high is not None and np.isfinite(float(np.asarray(high)))):
        raise NoMatch(f"{name!r} is not the box side clamped to at least 1")
    sub = g.made_by(clip.input[0], "Sub")
    if _column(g, sub.input[0], hi) != rois or _column(g, sub.input[1], lo) != rois:
        raise NoMatch(f"{name!r} is not columns {hi} - {lo} of the boxes {rois!r}")


def _empty(g: GraphIndex, name: str) -> bool:
    """A tensor of 0 rows: a constant, or ConstantOfShape(Concat([0], ...))."""
    v = g.const(name)
    if v is not None:
        return v.ndim >= 1 and v.shape[0] == 0
    n = g.producer.get(name)
    if n is None or n.op_type != "ConstantOfShape":
        return False
    shape = g.producer.get(n.input[0])
    first = g.const(shape.input[0]) if shape is not None and shape.op_type == "Concat" else None
    return first is not None and first.size == 1 and int(first.ravel()[0]) == 0


def match(g: GraphIndex, loop: onnx.NodeProto) -> tuple[str, str]:
    """(maps, rois) of torchvision's keypoint Loop; raises NoMatch saying why not."""
    lines, outer = body_lines(loop, g.const)
    if lines not in references().values():
        raise NoMatch(_first_difference(lines))
    t = dict(zip(ROLES, outer))
    rois = _column(g, t["offset_x"], 0)
    if _column(g, t["offset_y"], 1) != rois:
        raise NoMatch("offset_y is not column 1 of the boxes offset_x is column 0 of")
    _size(g, t["widths"], 2, 0, rois)
    _size(g, t["heights"], 3, 1, rois)
    for ceil, side in (("widths_ceil", "widths"), ("heights_ceil", "heights")):
        if g.made_by(t[ceil], "Ceil").input[0] != t[side]:
            raise NoMatch(f"{ceil} is not Ceil({side})")
    trips = g.made_by(loop.input[0], "Gather")
    first = g.const(trips.input[1])
    if (first is None or first.size != 1 or int(first) != 0
            or g.made_by(trips.input[0], "Shape").input[0] != rois):
        raise NoMatch("its trip count is not the number of boxes")
    for name in loop.input[2:]:  # the growing results start empty: [0, ...]
        if not _empty(g, name):
            raise NoMatch(f"its loop-carried {name!r} does not start empty")
    return t["maps"], rois


def fuse_loops(model: onnx.ModelProto) -> tuple[list[tuple[str, int]], list[str]]:
    """Replace every keypoint-decoding Loop of torchvision's in the main graph, in place,
    with a HeatmapsToKeypoints node (and the Transpose to the Loop's [R, 3, K] layout);
    returns ([(the new node's name, 1)], notes on Loops that read like one but do not
    match)."""
    g = GraphIndex(model.graph)
    done, notes, out = [], [], []
    for node in model.graph.node:
        if node.op_type != "Loop" or node.domain not in ("", "ai.onnx") \
                or not _reads_like_keypoints(node):
            out.append(node)
            continue
        try:
            maps, rois = match(g, node)
        except NoMatch as e:
            notes.append(f"node {node_label(node)!r} (Loop) reads like torchvision's keypoint "
                         f"decoding but does not match it exactly ({e}); left as it is")
            out.append(node)
            continue
        base = node.name or node.output[0]
        name = f"{base}/{HEATMAPS_TO_KEYPOINTS.name}"
        keypoints = f"{name}_keypoints"
        out.append(helper.make_node(HEATMAPS_TO_KEYPOINTS.name, [maps, rois],
                                    [keypoints, node.output[1]], name=name, domain=DOMAIN))
        out.append(helper.make_node("Transpose", [keypoints], [node.output[0]],
                                    name=f"{base}/Transpose", perm=[0, 2, 1]))
        done.append((name, 1))
    if done:
        del model.graph.node[:]
        model.graph.node.extend(out)
    return done, notes
