"""Inputs for a graph that pools boxes: feature maps, boxes, per-image counts or batch indices,
generated to fit what the graph declares (``ort-roi validate``, the demo, the tests).

Each graph input is generated for the role of the first RoI node that reads it (any node form:
ours, the exporters', ONNX RoiAlign / MaxRoiPool): a feature map, boxes (in image pixels;
normalized for bilinear ROIPooling; rows with a batch column or rotated rows as the node wants
them), counts per image or a batch index per box. Declared dimensions are kept: the number of
images comes from a declared batch dimension of a feature map or the length of a counts
input, the number of boxes from a declared box dimension (also of boxes that reach their RoI
node through other nodes, as a torchvision stage's ``boxes: [300, 4]``), else ``r``; an input
that declares its own number of rows gets that many. A detector's image ([N, 3, H, W], read by
no RoI node) gets the image size the boxes are in where H and W are open, and
PaddleDetection's ``im_shape`` / ``scale_factor`` inputs its size and 1.

Counts and batch indices that reach their RoI node through other nodes (paddle2onnx feeds
``boxes_num`` through Unsqueeze / Add / Squeeze; a standard export computes batch indices from
the counts) are chosen so that what reaches the node is valid: the nodes between the graph
input and the node's input are run in onnxruntime on candidate values (the counts or batch
indices themselves, shaped as the input declares, then corrected by what the nodes added; for
nodes linear in the input, as Mul or a Concat with constants, the value solved from probes)
until the counts reaching the node sum to its boxes' rows and the batch indices have a row
per box, each an image of the batch. Where none fits, ``InputsUnsatisfied`` names the
input and why; ``ort-roi validate`` then asks for the user's own inputs (``--inputs``)
rather than calling the model failed. tf2onnx's crop_and_resize forms (its Loop,
com.microsoft::CropAndResize) give their image, boxes and box indices roles too.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..errors import node_label
from ..ops import form
from ..spec import DOMAIN, Input, OpSpec
from .cones import cone, dims, per_image, runner, sources, why_invalid, why_no_value_fits
from . import pyramid
from .nodes import given_attrs, iter_nodes, opset, plain
from .tensorflow.forms import EXPORTER, match_loop, reads_like_loop
from .toolkit import GraphIndex, NoMatch, is_default

#: Feature maps whose size the graph leaves open: C, H, W of the finest level, its stride.
FEAT_C, FEAT_H, FEAT_W, STRIDE = 16, 24, 32, 16


class InputsUnsatisfied(ValueError):
    """The generator cannot make inputs that the graph's RoI nodes accept, or the inputs given
    to it do not fit the graph: the message names the input and why. A limit of the
    generator's, not a fault of the model's."""


class GivenInputsUnfit(InputsUnsatisfied):
    """An input given to the generator (the user's) is not one of the graph's, or not of its
    declared type, rank and sizes."""


@dataclass
class Role:
    """What a graph input is to the first RoI node that reads it (``node``: that node's
    label)."""

    spec: OpSpec
    input: Input
    attrs: dict
    node: str = ""
    names: tuple[str, ...] = ()  # what that node reads, in the order of the spec's inputs

    @property
    def kind(self) -> str | None:
        """features, boxes, levels, image_size, batch ([R]), counts ([N]); None for another
        input (a proposal stage's deltas, image shapes, variances): its declared shape."""
        i = list(self.spec.inputs).index(self.input)
        if i == self.spec.boxes_input:  # before features: DistributeFpnProposals' rois are both
            return "boxes"
        if i in self.spec.features:
            return "features"
        if self.input.name in ("levels", "image_size"):
            return self.input.name
        return {"[R]": "batch", "[N]": "counts"}.get(self.input.shape)

    @property
    def level(self) -> int:
        return self.spec.features.index(list(self.spec.inputs).index(self.input))


def roles(model: onnx.ModelProto) -> dict[str, Role]:
    """Graph tensor -> its role for the first RoI node (of any form, tf2onnx's crop_and_resize
    forms included) reading it; a feature map or boxes also for the graph input that reaches
    the node through a layout copy (Transpose of a map, Identity, Cast)."""
    found: dict[str, Role] = {}
    for node in iter_nodes(model.graph):
        f = form(node.domain, node.op_type)
        spec = f.target(len(node.input)) if f is not None else None
        if spec is None:
            continue
        attrs = given_attrs(node)
        for name, inp in zip(node.input, spec.inputs):
            found.setdefault(name, Role(spec, inp, attrs, node_label(node),
                                        tuple(node.input)))
    g = GraphIndex(model.graph, opset(model) or 1, EXPORTER)
    crop = form(DOMAIN, "CropAndResize").spec
    for node in model.graph.node:  # tf2onnx's forms: what they read as ort_roi's node would
        try:
            if node.op_type == "Loop" and is_default(node) and reads_like_loop(node):
                names, attrs, _ = match_loop(g, node)
            elif node.op_type == "CropAndResize" and node.domain == "com.microsoft":
                names, attrs = node.input[:3], {"method": given_attrs(node).get("mode", "bilinear")}
            else:
                continue
        except NoMatch:
            continue
        for name, inp in zip(names, crop.inputs):
            found.setdefault(name, Role(crop, inp, attrs, node_label(node), tuple(names)))
    for name, rl in list(found.items()):
        copies = ("Transpose", "Identity", "Cast") if rl.kind == "features" else \
            ("Identity", "Cast") if rl.kind == "boxes" else ()
        p = g.producer.get(name)
        while p is not None and p.op_type in copies and is_default(p) and len(p.input) == 1:
            found.setdefault(p.input[0], rl)
            p = g.producer.get(p.input[0])
    return found


def _first_param(vi: onnx.ValueInfoProto) -> str | None:
    """The name of the first dimension, where it is symbolic."""
    t = vi.type.tensor_type
    dims = t.shape.dim if t.HasField("shape") else []
    return dims[0].dim_param or None if len(dims) else None


def generate_inputs(model: onnx.ModelProto, r: int = 6, seed: int = 0,
                    given: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Inputs for every graph input (initializers excepted) that fit their declarations and
    the graph's RoI nodes.

    Args:
        model: the graph.
        r: the number of boxes where no declared dimension fixes it.
        seed: of the random values.
        given: inputs to use as they are (the user's), by graph input name: their sizes fix
            the number of images and boxes of the others, which are generated.

    Returns:
        graph input name -> array of the input's declared type and shape.

    Raises:
        GivenInputsUnfit: a given input is not one of the graph's, or not of its declared
            type, rank and sizes (an InputsUnsatisfied).
        InputsUnsatisfied: counts or batch indices reaching a RoI node through other nodes
            cannot be made valid there (the node, its input, the graph input and why named).
    """
    rng = np.random.default_rng(seed)
    weights = {i.name for i in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in weights]
    given = dict(given or {})
    _check_given(graph_inputs, given)
    role = roles(model)
    sizes = {vi.name: list(given[vi.name].shape) if vi.name in given else dims(vi)
             for vi in graph_inputs}

    kinds = {}
    for vi in graph_inputs:
        d, rl = sizes[vi.name], role.get(vi.name)
        kinds[vi.name] = rl.kind if rl is not None else None
        if kinds[vi.name] == "boxes" and d is not None and len(d) != 2:
            kinds[vi.name] = None  # anchors [H, W, A, 4]: as declared
        elif kinds[vi.name] is None and d is not None and len(d) == 2 and d[1] in (4, 5, 6):
            kinds[vi.name] = "boxes"  # rows of boxes on their way to a RoI node, most likely

    # integer inputs of no role of their own from which counts or batch indices reaching a
    # RoI node are computed (paddle2onnx's boxes_num through Unsqueeze / Add / Squeeze)
    g = GraphIndex(model.graph, opset(model) or 1)
    chained: dict[str, str] = {}
    index_like = {vi.name for vi in graph_inputs if kinds[vi.name] is None
                  and len(sizes[vi.name] or [0]) <= 2 and helper.tensor_dtype_to_np_dtype(
                      vi.type.tensor_type.elem_type).kind in "iu"}
    for name, rl in role.items():
        if rl.kind in ("counts", "batch") and name not in sizes:
            for s in sources(cone(g, [name]) or [], index_like):
                chained.setdefault(s, rl.kind)

    # images and boxes: what the given inputs and the declarations fix, else 1 image, r boxes
    n = r_ = None
    for name in sorted(sizes, key=lambda k: k not in given):
        rl, d = role.get(name), sizes[name]
        if not d:
            continue
        if rl is not None and rl.kind in ("features", "counts") and d[0] and not rl.spec.per_box \
                or len(d) == 1 and chained.get(name) == "counts":
            n = n or d[0]
        if kinds[name] in ("boxes", "batch", "levels") and d[0] or \
                len(d) == 1 and chained.get(name) == "batch":
            r_ = r_ or d[0]
    n, r = n or 1, r_ if r_ is not None else r
    counts = per_image(r, n)[0]
    normalized = any("normalized" in rl.spec.boxes.doc or plain(rl.attrs.get("method"))
                     == "bilinear" for rl in role.values())

    # an input read by no RoI node whose first dimension is named as the boxes' is per box
    per_box = {_first_param(vi) for vi in graph_inputs
               if kinds[vi.name] in ("boxes", "batch", "levels")} - {None}

    # a detector's image (an input [N, 3, H, W] no RoI node reads): open sizes the image's
    # that the generated boxes are in; PaddleDetection's im_shape and scale_factor follow it
    image = (FEAT_H * STRIDE, FEAT_W * STRIDE)
    for vi in graph_inputs:
        d = sizes[vi.name]
        if kinds[vi.name] is None and d is not None and len(d) == 4 and d[1] == 3:
            image = (d[2] or image[0], d[3] or image[1])
            break

    pyr = pyramid.plan(model, graph_inputs, sizes, kinds)  # boxes for every level
    out = {}
    for vi in graph_inputs:
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        d, rl, kind = sizes[vi.name], role.get(vi.name), kinds[vi.name]
        if kind is None and d is not None and len(d) == 2 and d[1] in (None, 2) and \
                vi.name in ("im_shape", "scale_factor"):  # PaddleDetection's inputs
            value = image if vi.name == "im_shape" else (1.0, 1.0)
            out[vi.name] = np.tile(np.asarray(value, np.float64), (d[0] or n, 1)).astype(dtype)
        elif kind is None:  # no role: its declared shape (open sizes 1; r per box)
            shape = [v or 1 for v in d] if d is not None else [1]
            if d and len(d) == 4 and d[1] == 3:
                shape[2:] = [d[2] or image[0], d[3] or image[1]]
            if d and d[0] is None and _first_param(vi) in per_box:
                shape[0] = r
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
        elif kind == "counts":
            out[vi.name] = counts.astype(dtype)
        elif kind == "batch":
            rows = d[0] if d and d[0] else r
            out[vi.name] = per_image(rows, n)[1].astype(dtype)
        elif kind == "image_size":  # the image the boxes are in
            out[vi.name] = np.array([FEAT_H * STRIDE, FEAT_W * STRIDE]).astype(dtype)
        elif kind == "levels":  # one of the feature maps each
            rows = d[0] if d and d[0] else r
            out[vi.name] = rng.integers(0, len(rl.spec.features), rows).astype(dtype)
        elif kind == "boxes":  # a declared number of rows is kept (a stage's boxes [300, 4])
            rows = d[0] if d and d[0] else r
            cols = (d[1] if d and len(d) == 2 and d[1] else
                    rl.spec.box_cols[0] if rl and isinstance(rl.spec.box_cols, tuple) else
                    rl.spec.box_cols if rl else 4)
            out[vi.name] = _boxes(rng, rows, cols, per_image(rows, n)[1], normalized,
                                  _extent(model, vi.name, sizes),
                                  pyr if pyr is not None and pyr.boxes == vi.name else None
                                  ).astype(dtype)
        else:
            level = rl.level if rl is not None else 0
            c = FEAT_C
            if rl is not None and rl.spec.channels_attr:  # position-sensitive: oc * PH * PW
                a = rl.attrs
                c = a[rl.spec.channels_attr] * a.get(rl.spec.pooled[0], 1) * a.get(
                    rl.spec.pooled[1], 1)
            first = r if rl is not None and rl.spec.per_box else n  # keypoints, masks: per box
            default = [first, c, *(pyr.maps[vi.name] if pyr and vi.name in pyr.maps else
                                    (max(1, FEAT_H >> level), max(1, FEAT_W >> level)))]
            shape = ([v or default[i] for i, v in enumerate(d)] if d and len(d) == 4
                     else [v or 1 for v in d] if d else default)
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
    out.update(given)
    _through_nodes(model, g, out, role, set(chained) - set(given), n, r)
    return out


def _extent(model: onnx.ModelProto, name: str, sizes: dict) -> tuple[float, float] | None:
    """The image (h, w) that boxes ``name`` are in, where the RoI node reading them (else,
    boxes on their way through other nodes, the graph's first RoI node) scales them onto a
    feature map the graph declares with a fixed size: its H, W over its spatial_scale; None
    otherwise (the default image)."""
    nodes = []
    for node in iter_nodes(model.graph):
        f = form(node.domain, node.op_type)
        spec = f.target(len(node.input)) if f is not None else None
        if spec is not None and spec.features:
            nodes.append((name not in node.input, node, spec))
    if not nodes:
        return None
    _, node, spec = min(nodes, key=lambda t: t[0])  # a direct reader first, in graph order
    scale = given_attrs(node).get("spatial_scale")
    i = spec.features[0]
    d = sizes.get(node.input[i]) if i < len(node.input) else None
    if isinstance(scale, float) and scale > 0 and d and len(d) == 4 and d[2] and d[3]:
        return d[2] / scale, d[3] / scale
    return None


def _boxes(rng, r: int, cols: int, batch: np.ndarray, normalized: bool,
           extent: tuple[float, float] | None = None,
           pyr: pyramid.Pyramid | None = None) -> np.ndarray:
    """r boxes [x1, y1, x2, y2] inside an image of the finest map's size (``extent``: of
    that (h, w), boxes of 6-40 % of it; ``pyr``: in its image, of sizes that cycle over its
    levels), as ``cols`` columns: 4, 5 (batch first) or 6 (rotated: batch, cx, cy, w, h,
    theta)."""
    h, w = extent or (FEAT_H * STRIDE, FEAT_W * STRIDE)
    xy = rng.uniform(0, 1, (r, 2)) * [w * 0.8, h * 0.8]
    wh = (rng.uniform(0.06, 0.4, (r, 2)) * [w, h] if extent is not None else
          rng.uniform(32, 200, (r, 2)))
    b = np.concatenate([xy, np.minimum(xy + wh, [w - 1, h - 1])], 1)
    if pyr is not None and cols in (4, 5, 6):  # rotated rows: w, h of the drawn boxes
        try:
            b = pyramid.draw(rng, r, pyr)
            h, w = pyr.image
        except ValueError:  # no level known for any candidate: as for one map
            pass
    if normalized:
        b = b / [w, h, w, h]
    if cols == 6:
        b = np.concatenate([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2],
                            rng.uniform(-1.5, 1.5, (r, 1))], 1)
    if cols in (5, 6):
        b = np.concatenate([batch[:, None].astype(np.float64), b], 1)
    return b


def _check_given(graph_inputs: list[onnx.ValueInfoProto], given: dict) -> None:
    """Each given input is one of the graph's, of its declared type, rank and fixed sizes."""
    declared = {vi.name: vi for vi in graph_inputs}
    for name, a in given.items():
        if name not in declared:
            raise GivenInputsUnfit(f"given input {name!r} is not an input of the graph (its "
                                   f"inputs: {', '.join(declared) or 'none'})")
        vi = declared[name]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        d = dims(vi)
        shown = ", ".join("?" if v is None else str(v) for v in d or [])
        if a.dtype != dtype or (d is not None and (a.ndim != len(d) or any(
                v is not None and v != k for v, k in zip(d, a.shape)))):
            raise GivenInputsUnfit(f"given input {name!r} is {a.dtype} {list(a.shape)}; the "
                                   f"graph declares {dtype} [{shown}]")


def _through_nodes(model: onnx.ModelProto, g: GraphIndex, feed: dict, role: dict[str, Role],
                   free: set[str], n: int, r: int) -> None:
    """Counts and batch indices reaching their RoI node through other nodes from an input
    the generator is free to choose (``free``: integer, of no role of its own, not given):
    it is chosen so that what reaches the node is valid there (for the node's boxes and
    images); raises InputsUnsatisfied where no value is."""
    declared = {vi.name: vi for vi in model.graph.input if vi.name in feed}
    for name, rl in role.items():
        nodes = cone(g, [name]) if rl.kind in ("counts", "batch") and name not in feed else None
        srcs = sources(nodes or [], set(declared))
        chosen = [s for s in srcs if s in free]
        run = runner(model, nodes, [declared[s] for s in srcs], [name]) if chosen else None
        if run is None:  # the model's own value, or not runnable apart: checked after the run
            continue
        spec, names = rl.spec, rl.names + ("",) * len(rl.spec.inputs)
        first = spec.features[0]
        maps = None if spec.per_box or first == spec.boxes_input else names[first]
        n_at = None if maps is None else feed[maps].shape[0] if maps in feed else n
        rows = _rows(model, g, feed, declared, names[spec.boxes_input])
        why = why_no_value_fits(lambda f: run(f)[0], feed, declared[chosen[0]], rl.kind,
                                n_at or n, r if rows is None else rows,
                                lambda y: why_invalid(rl.kind, y, n_at, rows))  # noqa: B023
        if why is not None:
            raise InputsUnsatisfied(
                f"node {rl.node!r}'s input {rl.input.name!r} (tensor {name!r}) comes from "
                f"{', '.join(map(repr, srcs))} through "
                f"{' -> '.join(dict.fromkeys(x.op_type for x in nodes))}: no value of "
                f"{chosen[0]!r} found that makes it valid there ({why})")


def _rows(model: onnx.ModelProto, g: GraphIndex, feed: dict, declared: dict,
          boxes: str) -> int | None:
    """The rows of a RoI node's boxes on ``feed``: a fed input's, else computed from graph
    inputs by other nodes apart; None where a RoI node or a custom op computes them."""
    if boxes in feed:
        return len(feed[boxes])
    nodes = cone(g, [boxes])
    srcs = sources(nodes or [], set(declared))
    run = runner(model, nodes, [declared[s] for s in srcs], [boxes]) if nodes else None
    try:
        return None if run is None else len(run(feed)[0])
    except Exception:  # noqa: BLE001 - onnxruntime refused: the run will say why
        return None


def feed_problems(model: onnx.ModelProto, seen: dict[str, np.ndarray],
                  generated: set[str]) -> list[str]:
    """After a run: the RoI nodes whose counts or batch indices (captured in ``seen`` with
    their boxes and feature maps) do not fit their boxes or images, where they come from
    generated inputs (``generated``) through no RoI node: the generator's mistake, not the
    model's.

    Args:
        model: the graph that ran.
        seen: tensor name -> its value in the run (at least the RoI nodes' inputs).
        generated: the graph inputs the generator made (not the user's).

    Returns:
        one line per such node, naming the node, its input and value, and the inputs it
        came from; empty when there is none.
    """
    g = GraphIndex(model.graph, opset(model) or 1)
    found = []
    for node in model.graph.node:
        f = form(node.domain, node.op_type)
        spec = f.target(len(node.input)) if f is not None else None
        index = [(i, Role(spec, inp, {}).kind) for i, inp in enumerate(spec.inputs)
                 if Role(spec, inp, {}).kind in ("counts", "batch")] if spec else []
        if len(index) != 1 or max(index[0][0], spec.boxes_input, spec.features[0]) >= len(
                node.input):
            continue
        (i, kind), name = index[0], node.input[index[0][0]]
        y, boxes = seen.get(name), seen.get(node.input[spec.boxes_input])
        first = spec.features[0]
        maps = None if spec.per_box or first == spec.boxes_input else seen.get(node.input[first])
        if y is None or boxes is None:
            continue
        why = why_invalid(kind, np.asarray(y), None if maps is None else maps.shape[0], len(boxes))
        srcs = [name] if name in generated else sources(cone(g, [name]) or [], generated)
        if why is not None and srcs:
            found.append(f"node {node_label(node)!r}: input {spec.inputs[i].name!r} (tensor "
                         f"{name!r}) {why}; it comes from the generated input(s) "
                         f"{', '.join(srcs)}")
    return found
