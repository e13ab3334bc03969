"""torchvision's per-box Loops, fused: the Loops torch.onnx writes for Keypoint R-CNN's
``roi_heads.heatmaps_to_keypoints`` and Mask R-CNN's ``paste_masks_in_image`` become one
HeatmapsToKeypoints / PasteMasks node each.

Traced for export, torchvision decodes keypoints and pastes masks box by box in a Loop
(``_onnx_heatmaps_to_keypoints_loop``, ``_onnx_paste_masks_in_image_loop``): each iteration
resizes the box's maps (cubic / linear Resize) and appends the result to tensors that grow by
Concat. In a Keypoint R-CNN the first Loop is about a fifth of the model's time, in a Mask
R-CNN the second (with its Concat) about a fifth. ``fuse_loops`` recognises each Loop by its
body, compared node by node with the bodies torch.onnx writes
(``ort_roi/data/torchvision_loops.json``, made by ``tools/export_torchvision.py``: torch
2.14.1 / torchvision 0.29.1, opsets 11-17; the image size of the mask Loop, a constant of its
body, is a placeholder there), and by the tensors it reads; a Loop that reads like one but
does not match exactly is left as it is, with a note saying why.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from dataclasses import dataclass
from importlib import resources
from typing import Callable

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from ..ops.heatmaps_to_keypoints import SPEC as HEATMAPS_TO_KEYPOINTS
from ..ops.paste_masks import SPEC as PASTE_MASKS
from ..spec import DOMAIN, OpSpec
from .toolkit import GraphIndex, NoMatch, anything, check_attrs, indexed, loop_body, splice

#: What the keypoint Loop's outer-scope tensors are, in the order its body first reads them.
ROLES = ("maps", "widths_ceil", "heights_ceil", "widths", "heights", "offset_x", "offset_y",
         "num_keypoints")
#: And the mask Loop's: the padded masks and the integer boxes.
MASK_ROLES = ("masks", "boxes")


def constant_key(a: np.ndarray) -> str:
    """A constant by its value: an integer scalar (or one-element array) literally, so that
    a reference body can hold a placeholder for it; anything else by a hash of its bytes."""
    a = np.ascontiguousarray(a)
    if a.dtype.kind in "iu" and a.size == 1:
        return f"c:{a.dtype}{list(a.shape)}={int(a.ravel()[0])}"
    return f"c:{a.dtype}{list(a.shape)}:{hashlib.sha1(a.tobytes()).hexdigest()[:12]}"


def body_lines(loop: onnx.NodeProto, const) -> tuple[list[str], list[str]]:
    """The Loop's body, canonical: one line per node (op, attributes, where each input
    comes from: a body input, an earlier node, a constant by its value, wherever the
    exporter put it, or the n-th outer tensor), then the body's outputs. Returns (lines,
    the outer tensors in order of first use). ``const(name)`` gives the value of a constant
    of the enclosing graph, else None."""
    body = loop_body(loop)
    names = {i.name: f"in{k}" for k, i in enumerate(body.input)}
    names.update({t.name: constant_key(numpy_helper.to_array(t)) for t in body.initializer})
    outer: list[str] = []
    lines: list[str] = []

    def ref(name: str) -> str:
        if not name:
            return "-"
        if name not in names:
            v = const(name)
            names[name] = constant_key(v) if v is not None else f"o{len(outer)}"
            if v is None:
                outer.append(name)
        return names[name]

    for n in body.node:
        value = next((a.t for a in n.attribute if a.name == "value"), None)
        if n.op_type == "Constant" and n.domain in ("", "ai.onnx") and value is not None:
            names[n.output[0]] = constant_key(numpy_helper.to_array(value))
            continue
        attrs = []
        for a in sorted(n.attribute, key=lambda a: a.name):
            if a.type == onnx.AttributeProto.TENSOR:
                attrs.append(f"{a.name}={constant_key(numpy_helper.to_array(a.t))}")
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
def references() -> dict[str, dict]:
    """The bodies torch.onnx writes for torchvision's Loops: {Loop: {"bodies": {"opset N":
    lines}, "params": placeholders}}."""
    text = resources.files("ort_roi").joinpath("data/torchvision_loops.json").read_text()
    return json.loads(text)


_PLACEHOLDER = re.compile(r"\{(\w+)\}")


@functools.lru_cache(maxsize=None)
def _pattern(line: str) -> re.Pattern:
    parts = _PLACEHOLDER.split(line)  # text, name, text, name, ..., text
    return re.compile("".join(re.escape(p) if i % 2 == 0 else f"(?P<{p}_{i}>-?[0-9]+)"
                              for i, p in enumerate(parts)) + r"\Z")


def unify(lines: list[str], ref: list[str]) -> dict[str, int] | None:
    """The placeholder values ({name} in ``ref``) under which ``lines`` is ``ref``, or None
    (a placeholder takes one value throughout)."""
    if len(lines) != len(ref):
        return None
    bound: dict[str, int] = {}
    for got, want in zip(lines, ref):
        if got == want:
            continue
        if "{" not in want:
            return None
        m = _pattern(want).match(got)
        if m is None:
            return None
        for key, v in m.groupdict().items():
            name = key.rsplit("_", 1)[0]
            if bound.setdefault(name, int(v)) != int(v):
                return None
    return bound


def _first_difference(lines: list[str], bodies: dict[str, list[str]]) -> str:
    best = None
    for key, ref in bodies.items():
        k = next((i for i, (a, b) in enumerate(zip(lines, ref))
                  if a != b and ("{" not in b or not _pattern(b).match(a))),
                 min(len(lines), len(ref)))
        if best is None or k > best[0]:
            best = (k, key, ref)
    k, key, ref = best
    got = lines[k] if k < len(lines) else "(end)"
    want = ref[k] if k < len(ref) else "(end)"
    return f"body node {k} is {got!r} where torch.onnx's ({key}) has {want!r}"


def _resizes(loop: onnx.NodeProto) -> bool:
    """The Loop's body resizes (in any mode: a mode other than torch.onnx's is then named in
    the note)."""
    body = loop_body(loop)
    return body is not None and any(n.op_type == "Resize" for n in body.node)


def _column(g: GraphIndex, name: str, col: int) -> str:
    """name = Gather(R, col, axis=1): R."""
    n = g.made_by(name, "Gather", axis=1)
    g.const_is(n, 1, col)
    return n.input[0]


def _size(g: GraphIndex, name: str, hi: int, lo: int, rois: str) -> None:
    """name = Clip(Sub(rois[:, hi], rois[:, lo]), min=1): torchvision's box side."""
    clip = g.made_by(name, "Clip")
    low = g.const(clip.input[1]) if len(clip.input) > 1 and clip.input[1] else None
    if low is None or low.size != 1 or float(low.ravel()[0]) != 1.0 or (
            len(clip.input) > 2 and clip.input[2]):
        raise NoMatch(f"Clip {node_label(clip)!r} does not clamp {name!r} to at least 1 (and "
                      f"no more)")
    sub = g.made_by(clip.input[0], "Sub")
    if _column(g, sub.input[0], hi) != rois or _column(g, sub.input[1], lo) != rois:
        raise NoMatch(f"{name!r} is not columns {hi} - {lo} of the boxes {rois!r}")


def _empty(g: GraphIndex, name: str, shape: tuple | None = None) -> bool:
    """A tensor of 0 rows (of ``shape`` when given): a constant, or
    ConstantOfShape(Concat([0], ...)) as torch.onnx writes it (every attribute checked:
    raises NoMatch naming the node where one differs)."""
    v = g.const(name)
    if v is not None:
        return v.ndim >= 1 and v.shape[0] == 0 and (shape is None or v.shape == shape)
    n = g.producer.get(name)
    if n is None or n.op_type != "ConstantOfShape" or shape is not None:
        return False
    n = g.made_by(name, "ConstantOfShape", value=_one_value)
    dims = g.producer.get(n.input[0])
    if dims is None or dims.op_type != "Concat":
        return False
    first = g.const(g.made_by(n.input[0], "Concat", axis=0).input[0])
    return first is not None and first.size == 1 and int(first.ravel()[0]) == 0


def _one_value(value) -> bool:
    """ConstantOfShape's value as torch.onnx writes it: absent or one element."""
    return value is None or numpy_helper.to_array(value).size == 1


def _runs(g: GraphIndex, loop: onnx.NodeProto, items: str) -> None:
    """The Loop runs once per row of ``items``: trip count Shape(items)[0], no condition or a
    true one."""
    trips = g.made_by(loop.input[0], "Gather", axis=0)
    g.const_is(trips, 1, 0)
    if g.made_by(trips.input[0], "Shape").input[0] != items:
        raise NoMatch(f"its trip count is not the number of rows of {items!r}")
    cond = g.const(loop.input[1]) if loop.input[1] else np.array(True)
    if cond is None or cond.size != 1 or not bool(cond.ravel()[0]):
        raise NoMatch("its condition is not a constant true")


def _match_keypoints(g: GraphIndex, loop, outer: list[str], params) -> tuple[list[str], dict]:
    """(maps, rois) of torchvision's keypoint Loop; raises NoMatch saying why not."""
    t = dict(zip(ROLES, outer))
    rois = _column(g, t["offset_x"], 0)
    if _column(g, t["offset_y"], 1) != rois:
        raise NoMatch("offset_y is not column 1 of the boxes offset_x is column 0 of")
    _size(g, t["widths"], 2, 0, rois)
    _size(g, t["heights"], 3, 1, rois)
    for ceil, side in (("widths_ceil", "widths"), ("heights_ceil", "heights")):
        if g.made_by(t[ceil], "Ceil").input[0] != t[side]:
            raise NoMatch(f"{ceil} is not Ceil({side})")
    _runs(g, loop, rois)
    for name in loop.input[2:]:  # the growing results start empty: [0, ...]
        if not _empty(g, name):
            raise NoMatch(f"its loop-carried {name!r} does not start empty")
    return [t["maps"], rois], {}


def _match_masks(g: GraphIndex, loop, outer: list[str], params) -> tuple[list[str], dict]:
    """(masks, boxes) and the image size of torchvision's mask-pasting Loop."""
    t = dict(zip(MASK_ROLES, outer))
    height, width = params["height"], params["width"]
    if height < 1 or width < 1:
        raise NoMatch(f"its image size {height} x {width} is empty")
    _runs(g, loop, t["masks"])
    if not _empty(g, loop.input[2], (0, height, width)):
        raise NoMatch(f"its loop-carried {loop.input[2]!r} does not start as zeros(0, "
                      f"{height}, {width})")
    g.made_by(t["boxes"], "Cast", to=onnx.TensorProto.INT64)
    return [t["masks"], t["boxes"]], dict(image_size=np.array([height, width], np.int64))


@dataclass(frozen=True)
class LoopForm:
    """One of torchvision's per-box Loops: how to recognise it and the node it becomes."""

    key: str  # its entry in torchvision_loops.json
    what: str  # what it computes, for notes
    spec: OpSpec  # the op it becomes
    roles: tuple[str, ...]
    reads_like: Callable[[onnx.NodeProto], bool]
    match: Callable  # (GraphIndex, loop, outer, placeholders) -> (inputs, constant inputs)
    transpose: bool  # the op's first output is the Loop's transposed (keypoints)


LOOPS = (
    LoopForm("heatmaps_to_keypoints", "torchvision's keypoint decoding",
             HEATMAPS_TO_KEYPOINTS, ROLES,
             lambda n: _resizes(n) and "ArgMax" in {m.op_type for m in loop_body(n).node},
             _match_keypoints, True),
    LoopForm("paste_masks_in_image", "torchvision's mask pasting", PASTE_MASKS, MASK_ROLES,
             lambda n: _resizes(n) and "ConstantOfShape" in {
                 m.op_type for m in loop_body(n).node}, _match_masks, False),
)


def match(g: GraphIndex, loop: onnx.NodeProto, form: LoopForm):
    """(the op's inputs from the graph, {name: value} of its constant inputs after them) for
    a Loop of ``form``; raises NoMatch saying why not."""
    check_attrs(loop, g.opset, g.exporter, body=anything)
    lines, outer = body_lines(loop, g.const)
    bodies = references()[form.key]["bodies"]
    params = next((p for p in (unify(lines, ref) for ref in bodies.values()) if p is not None),
                  None)
    if params is None or len(outer) != len(form.roles):
        raise NoMatch(_first_difference(lines, bodies))
    return form.match(g, loop, outer, params)


def _replacement(node: onnx.NodeProto, form: LoopForm, inputs, values):
    """(the op's node's name, the nodes in the Loop's place: the Constants of its
    ``values`` inputs, the node, the Transpose of a transposed form)."""
    base = node.name or node.output[0]
    name = f"{base}/{form.spec.name}"
    consts = [helper.make_node("Constant", [], [f"{name}_{k}"], name=f"{name}_{k}",
                               value=numpy_helper.from_array(v, f"{name}_{k}"))
              for k, v in values.items()]
    inputs = [*inputs, *(c.output[0] for c in consts)]
    outputs = list(node.output)
    after = []
    if form.transpose:  # the op's first output, transposed to the Loop's
        outputs[0] = f"{name}_{form.spec.outputs[0].name}"
        after = [helper.make_node("Transpose", [outputs[0]], [node.output[0]],
                                  name=f"{base}/Transpose", perm=[0, 2, 1])]
    op = helper.make_node(form.spec.name, inputs, outputs, name=name, domain=DOMAIN)
    return name, [*consts, op, *after]


def fuse_loops(model: onnx.ModelProto, g: GraphIndex | None = None
               ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Replace every keypoint-decoding and mask-pasting Loop of torchvision's in the main
    graph, in place, with a HeatmapsToKeypoints node (and the Transpose to the Loop's
    [R, 3, K] layout) or a PasteMasks node, dropping what only the Loop read; returns
    ([(the new node's name, what it replaced, its op)], notes on Loops that read like one
    but do not match). ``g``: the graph's index as it is (``rewrite``'s), else it is indexed
    here (and again after each Loop replaced)."""
    done, notes = [], []
    firsts = [n.output[0] for n in model.graph.node
              if n.op_type == "Loop" and n.domain in ("", "ai.onnx")]
    for first in firsts:  # (found again each time: a splice rebuilds the node list)
        loop = next(n for n in model.graph.node if n.output[:1] == [first])
        form = next((f for f in LOOPS if f.reads_like(loop)), None)
        if form is None:
            continue
        gi = indexed(model, "torch.onnx", g)
        try:
            inputs, values = match(gi, loop, form)
        except NoMatch as e:
            notes.append(f"node {node_label(loop)!r} (Loop) reads like {form.what} but "
                         f"does not match it exactly ({e}); left as it is")
            continue
        # the body reads columns 0..3 of the boxes: the op reads the same, of wider rows too
        sliced, boxes = gi.first_columns(inputs[1], 4, f"{node_label(loop)}/boxes")
        name, new = _replacement(loop, form, [inputs[0], boxes, *inputs[2:]], values)
        splice(model, loop, sliced + new, inputs)
        g = None  # the graph changed: index it afresh
        done.append((name, f"{form.what} Loop", f"{DOMAIN}::{form.spec.name}"))
    return done, notes
