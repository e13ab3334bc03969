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
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..ops import form
from ..spec import Input, OpSpec
from .nodes import given_attrs, iter_nodes

#: Feature maps whose size the graph leaves open: C, H, W of the finest level, its stride.
FEAT_C, FEAT_H, FEAT_W, STRIDE = 16, 24, 32, 16


@dataclass
class Role:
    """What a graph input is to the first RoI node that reads it."""

    spec: OpSpec
    input: Input
    attrs: dict

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
    """Graph tensor -> its role for the first RoI node (of any form) reading it."""
    found: dict[str, Role] = {}
    for node in iter_nodes(model.graph):
        f = form(node.domain, node.op_type)
        spec = f.target(len(node.input)) if f is not None else None
        if spec is None:
            continue
        attrs = given_attrs(node)
        for name, inp in zip(node.input, spec.inputs):
            found.setdefault(name, Role(spec, inp, attrs))
    return found


def _dims(vi: onnx.ValueInfoProto) -> list | None:
    t = vi.type.tensor_type
    if not t.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]


def _first_param(vi: onnx.ValueInfoProto) -> str | None:
    """The name of the first dimension, where it is symbolic."""
    t = vi.type.tensor_type
    dims = t.shape.dim if t.HasField("shape") else []
    return dims[0].dim_param or None if len(dims) else None


def generate_inputs(model: onnx.ModelProto, r: int = 6, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs for every graph input (initializers excepted) that fit their declarations.

    Args:
        model: the graph.
        r: the number of boxes where no declared dimension fixes it.
        seed: of the random values.

    Returns:
        graph input name -> array of the input's declared type and shape.
    """
    rng = np.random.default_rng(seed)
    weights = {i.name for i in model.graph.initializer}
    graph_inputs = [vi for vi in model.graph.input if vi.name not in weights]
    role = roles(model)
    dims = {vi.name: _dims(vi) for vi in graph_inputs}

    kinds = {}
    for vi in graph_inputs:
        d, rl = dims[vi.name], role.get(vi.name)
        kinds[vi.name] = rl.kind if rl is not None else None
        if kinds[vi.name] == "boxes" and d is not None and len(d) != 2:
            kinds[vi.name] = None  # anchors [H, W, A, 4]: as declared
        elif kinds[vi.name] is None and d is not None and len(d) == 2 and d[1] in (4, 5, 6):
            kinds[vi.name] = "boxes"  # rows of boxes on their way to a RoI node, most likely

    # images and boxes: what the declarations fix, else 1 image and r boxes
    n = r_ = None
    for name, d in dims.items():
        rl = role.get(name)
        if not d:
            continue
        if rl is not None and rl.kind in ("features", "counts") and d[0] and not rl.spec.per_box:
            n = n or d[0]
        if kinds[name] in ("boxes", "batch", "levels") and d[0]:
            r_ = r_ or d[0]
    n, r = n or 1, r_ if r_ is not None else r
    counts = _per_image(r, n)[0]
    normalized = any(rl.attrs.get("method") in ("bilinear", b"bilinear") for rl in role.values())

    # an input read by no RoI node whose first dimension is named as the boxes' is per box
    per_box = {_first_param(vi) for vi in graph_inputs
               if kinds[vi.name] in ("boxes", "batch", "levels")} - {None}

    # a detector's image (an input [N, 3, H, W] no RoI node reads): open sizes the image's
    # that the generated boxes are in; PaddleDetection's im_shape and scale_factor follow it
    image = (FEAT_H * STRIDE, FEAT_W * STRIDE)
    for vi in graph_inputs:
        d = dims[vi.name]
        if kinds[vi.name] is None and d is not None and len(d) == 4 and d[1] == 3:
            image = (d[2] or image[0], d[3] or image[1])
            break

    out = {}
    for vi in graph_inputs:
        dtype = helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        d, rl, kind = dims[vi.name], role.get(vi.name), kinds[vi.name]
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
            out[vi.name] = _per_image(rows, n)[1].astype(dtype)
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
            out[vi.name] = _boxes(rng, rows, cols, _per_image(rows, n)[1],
                                  normalized).astype(dtype)
        else:
            level = rl.level if rl is not None else 0
            c = FEAT_C
            if rl is not None and rl.spec.channels_attr:  # position-sensitive: oc * PH * PW
                a = rl.attrs
                c = a[rl.spec.channels_attr] * a.get(rl.spec.pooled[0], 1) * a.get(
                    rl.spec.pooled[1], 1)
            first = r if rl is not None and rl.spec.per_box else n  # keypoints, masks: per box
            default = [first, c, max(1, FEAT_H >> level), max(1, FEAT_W >> level)]
            shape = ([v or default[i] for i, v in enumerate(d)] if d and len(d) == 4
                     else [v or 1 for v in d] if d else default)
            out[vi.name] = rng.standard_normal(shape).astype(dtype)
    return out


def _per_image(r: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """r boxes over n images, in order and as even as can be: the count of each image and
    the image of each box."""
    counts = np.full(n, r // n, np.int64)
    counts[: r % n] += 1
    return counts, np.repeat(np.arange(n), counts)


def _boxes(rng, r: int, cols: int, batch: np.ndarray, normalized: bool) -> np.ndarray:
    """r boxes [x1, y1, x2, y2] inside an image of the finest map's size, as ``cols``
    columns: 4, 5 (batch first) or 6 (rotated: batch, cx, cy, w, h, theta)."""
    h, w = FEAT_H * STRIDE, FEAT_W * STRIDE
    xy = rng.uniform(0, 1, (r, 2)) * [w * 0.8, h * 0.8]
    wh = rng.uniform(32, 200, (r, 2))
    b = np.concatenate([xy, np.minimum(xy + wh, [w - 1, h - 1])], 1)
    if normalized:
        b = b / [w, h, w, h]
    if cols == 6:
        b = np.concatenate([(b[:, :2] + b[:, 2:]) / 2, b[:, 2:] - b[:, :2],
                            rng.uniform(-1.5, 1.5, (r, 1))], 1)
    if cols in (5, 6):
        b = np.concatenate([batch[:, None].astype(np.float64), b], 1)
    return b
