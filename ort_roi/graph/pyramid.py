"""Boxes that reach every level of a multi-level RoI node (``generate_inputs``): a feature
pyramid pools each box from the level its size picks, so boxes of one size exercise one
level alone. Where a graph holds a node of several feature maps (a fused stage, MMDeploy's
MultiLevelRoiAlign, OpenVINO's ROIFeatureExtractor, Paddle's DistributeRoIAlign), the
image is made large enough for its coarsest level's boxes, the maps open in size follow
it (each level's scale from the node's attributes), and the boxes are drawn from
candidates of every size whose level is the graph's own: its level nodes run apart in
onnxruntime where the node reads levels the graph computes (torchvision's and detectron2's
stages), else the node's rule (ort_roi.levels, with its attributes), so that the rows
cycle over the levels."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
from onnx import helper

from ..levels import fpn_levels, mmdeploy_levels, openvino_levels
from ..ops import form
from .cones import cone, dims, runner, sources
from .nodes import iter_nodes
from .toolkit import GraphIndex

#: A box of side CANONICAL / 4 * 2**i lands on level i under the rules exporters write
#: (torchvision's and detectron2's 224 at level 4 of p2..p5, mmdeploy's finest_scale 56,
#: OpenVINO's 224 at level 2): the image is made to hold boxes twice the coarsest's side.
FINEST = 56
#: Candidate boxes drawn per level (and rounds of them) before a level is given up on.
CANDIDATES, ROUNDS = 256, 8


@dataclass
class Pyramid:
    """What ``plan`` found: the boxes input to draw (``boxes``), the image they are in
    (``image`` (h, w)), the size of each open feature map input (``maps``: name -> (H, W)),
    the number of levels and ``level_of``: boxes [K, 4] in the image -> their levels (None:
    not known, sizes are drawn on the canonical ladder)."""

    boxes: str
    image: tuple[int, int]
    maps: dict[str, tuple[int, int]]
    L: int
    level_of: Callable[[np.ndarray], np.ndarray] | None
    fixed: int | None = None  # the boxes' declared number of rows, where fixed


def plan(model: onnx.ModelProto, graph_inputs: list[onnx.ValueInfoProto], sizes: dict,
         kinds: dict) -> Pyramid | None:
    """The pyramid of the graph's first RoI node of several feature maps whose boxes come
    from a graph input; None where there is none.

    Args:
        model: the graph.
        graph_inputs: its inputs (initializers left out).
        sizes: input name -> declared sizes (None: open).
        kinds: input name -> its kind ("boxes", "features", ...).

    Returns:
        the ``Pyramid``, or None.
    """
    g = GraphIndex(model.graph, 1)
    declared = {vi.name: vi for vi in graph_inputs}
    for node in iter_nodes(model.graph):
        f = form(node.domain, node.op_type)
        spec = f.target(len(node.input)) if f is not None else None
        if spec is None or len(spec.features) < 2 or spec.boxes_input >= len(node.input):
            continue
        rois = node.input[spec.boxes_input]
        nodes = [] if rois in declared else cone(g, [rois])
        srcs = [rois] if rois in declared else sources(nodes or [], set(declared))
        boxes = [s for s in srcs if kinds.get(s) == "boxes"]
        if not boxes:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        L = len(spec.features)
        scales = [_scale(attrs, i) for i in range(L)]
        maps = [node.input[i] if i < len(node.input) else "" for i in spec.features]
        side = FINEST * 2 ** (L - 1) * math.sqrt(2) * 1.3  # the coarsest level's, with room
        h = w = int(math.ceil(side / 32) * 32)
        first = sizes.get(maps[0])
        if first and len(first) == 4 and first[2] and first[3]:  # declared: the image it is
            h, w = int(first[2] / scales[0]), int(first[3] / scales[0])
        open_maps = {m: (max(1, math.ceil(h * s)), max(1, math.ceil(w * s)))
                     for m, s in zip(maps, scales) if m in declared}
        return Pyramid(boxes[0], (h, w), open_maps, L,
                       _rule(model, g, node, spec, attrs, declared, boxes[0], open_maps, L),
                       (dims(declared[boxes[0]]) or [None])[0])
    return None


def _scale(attrs: dict, i: int) -> float:
    """Level i's scale (feature pixels per image pixel) from the node's attributes: a
    ``*scale_i`` below 1 is one, a ``*stride_i`` or ``scale_i`` of 1 or more its inverse;
    else 1 / (4 * 2**i), p2's."""
    for name, v in attrs.items():
        if name.endswith(f"_{i}") and ("scale" in name or "stride" in name) and \
                isinstance(v, (int, float)) and v > 0:
            return float(v) if v < 1 else 1.0 / v
    for name in ("spatial_scales", "featmap_strides"):
        v = attrs.get(name)
        if isinstance(v, (list, tuple)) and len(v) > i and v[i] > 0:
            return float(v[i]) if v[i] < 1 else 1.0 / v[i]
    return 1.0 / (4 * 2 ** i)


def _rule(model, g, node, spec, attrs, declared, boxes, maps, L):
    """boxes [K, 4] -> the level of each as the graph picks it, or None where not known."""
    names = [i.name for i in spec.inputs]
    if "levels" in names and names.index("levels") < len(node.input):
        levels = node.input[names.index("levels")]
        nodes = cone(g, [levels])
        srcs = sources(nodes or [], set(declared))
        if not nodes or boxes not in srcs or not set(srcs) <= {boxes, *maps}:
            return None
        run = runner(model, nodes, [declared[s] for s in srcs], [levels])
        if run is None:
            return None
        vi = declared[boxes]
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        shapes = {m: [dims(declared[m])[0] or 1, dims(declared[m])[1] or 1, *hw]
                  for m, hw in maps.items()}

        def by_graph(b: np.ndarray) -> np.ndarray:
            feed = {m: np.zeros(s, helper.tensor_dtype_to_np_dtype(
                declared[m].type.tensor_type.elem_type)) for m, s in shapes.items()}
            feed[boxes] = b.astype(dtype)
            return np.asarray(run(feed)[0]).reshape(-1)

        return by_graph
    a = {**spec.defaults(), **attrs}
    if "finest_scale" in a:
        return lambda b: mmdeploy_levels(b, int(a["finest_scale"]), L)
    if "refer_scale" in a and a.get("min_level") is not None:
        top = a.get("max_level") if a.get("max_level") is not None else a["min_level"] + L - 1
        return lambda b: fpn_levels(b.astype(np.float32), a["min_level"], top, a["refer_level"],
                                    a["refer_scale"], bool(a.get("pixel_offset", 0))
                                    ) - a["min_level"]
    if any(n.startswith("scale_") for n in a):  # OpenVINO's ROIFeatureExtractor
        return lambda b: openvino_levels(b, L)
    return None


def draw(rng: np.random.Generator, rows: int, p: Pyramid) -> np.ndarray:
    """``rows`` boxes [x1, y1, x2, y2] in ``p.image`` whose levels cycle over the pyramid's
    (row j on level j % L, where candidates of it were found).

    Args:
        rng: the generator's random numbers.
        rows: how many.
        p: the plan.

    Returns:
        [rows, 4] float64.

    Raises:
        ValueError: no candidate got any level (the caller draws boxes as for one map).
    """
    h, w = p.image
    by_level: dict[int, list[np.ndarray]] = {}
    for _ in range(ROUNDS):
        k = p.fixed if p.level_of is not None and p.fixed else CANDIDATES * p.L
        side = np.exp(rng.uniform(np.log(12), np.log(0.95 * min(h, w)), k))
        if p.level_of is None:  # the canonical ladder: level i of side FINEST * 2**i * 1.4
            side = FINEST * 2.0 ** rng.integers(0, p.L, k) * rng.uniform(1.1, 1.8, k)
            side = np.minimum(side, 0.95 * min(h, w))
        ratio = np.exp(rng.uniform(-0.3, 0.3, k))
        bw, bh = np.minimum(side * ratio, w - 1), np.minimum(side / ratio, h - 1)
        x1, y1 = rng.uniform(0, 1, k) * (w - 1 - bw), rng.uniform(0, 1, k) * (h - 1 - bh)
        cand = np.stack([x1, y1, x1 + bw, y1 + bh], 1)
        try:
            lv = p.level_of(cand) if p.level_of is not None else None
        except Exception:  # noqa: BLE001 - the rule would not run on them: sizes as drawn
            lv = None
        if lv is None:
            lv = np.clip(np.floor(np.log2(np.sqrt(bw * bh) / FINEST)), 0, p.L - 1)
        for i in range(p.L):
            by_level.setdefault(i, []).extend(cand[np.asarray(lv).reshape(-1)[:k] == i])
        if all(len(by_level[i]) >= -(-rows // p.L) for i in range(p.L)):
            break
    order = [i for i in range(p.L) if by_level[i]]
    if not order:
        raise ValueError("no candidate box got a level of the pyramid")
    out, used = [], {i: 0 for i in order}
    for j in range(rows):
        i = order[j % len(order)]
        out.append(by_level[i][used[i] % len(by_level[i])])
        used[i] += 1
    return np.asarray(out, np.float64).reshape(rows, 4)
