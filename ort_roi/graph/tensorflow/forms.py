"""TensorFlow's ``tf.image.crop_and_resize`` as tf2onnx writes it: the forms, and how each
is recognised (``match_loop``, ``match_contrib``; ``fuse.py`` replaces what they match).

tf2onnx 1.17 translates crop_and_resize in one of two forms, neither computed as TensorFlow
computes it (boxes ending at 1.0, which detectors' clipped boxes mostly do, can put TF's last
sample above H - 1, where TF writes the extrapolation value for the whole row or column and
onnxruntime interpolates; nearest ties round half away from zero in TF, half down in
onnxruntime's Resize):

- a Loop over the boxes (opsets 11-18, its default 15 included): iteration i slices box i
  and image box_indices[i], transposes the image to NCHW, resizes it with
  ``Resize(coordinate_transformation_mode="tf_crop_and_resize", mode="linear" | "nearest",
  extrapolation_value)`` to [1, C, crop_height, crop_width] over the roi
  [0, 0, y1, x1, 1, 1, y2, x2], transposes back and squeezes: the scan output is
  [R, crop_height, crop_width, C]; a Reshape after the Loop (kept) restates that shape;
- with ``extra_opset=[com.microsoft:1]``: ``Transpose(perm=[0, 3, 1, 2])``,
  ``com.microsoft::CropAndResize(mode, extrapolation_value)`` with a constant crop size,
  ``Transpose(perm=[0, 2, 3, 1])``.

In a whole model tf2onnx's transpose optimiser moves the Transposes to NCHW into the Conv
that computes the map: the Loop's body then slices an NCHW map (``BODY_NCHW``: no Transpose
before its Resize), and the contrib op reads the NCHW map directly (and where crop_height
is 1, tf2onnx reshapes its output instead of transposing it back: to [R, crop_width, C, 1],
not TensorFlow's [R, 1, crop_width, C], a bug of tf2onnx's that the converted graph keeps).

``match_loop`` recognises the Loop by its body, compared line by line (``loops.body_lines``:
each node's op, every attribute it is given, where each input comes from, constants by
value) with the body tf2onnx writes (``BODY``, ``BODY_NCHW``) for the crop size, method and
extrapolation value its Resize holds, and by what it reads outside the body (its trip count
is Size(box_indices), its condition a constant true, nothing loop-carried); ``match_contrib``
the contrib node by its whole attribute set and its constant crop size. Each raises NoMatch
naming the first difference.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import numpy_helper

from ...errors import node_label
from ..loops import body_lines, constant_key
from ..nodes import given_attrs
from ..toolkit import GraphIndex, NoMatch, anything, check_attrs, is_default, loop_body

EXPORTER = "tf2onnx"
#: The body tf2onnx 1.17 writes for crop_and_resize's Loop, as ``loops.body_lines`` reads it:
#: in0 / in1 the iteration number and condition, o0 / o1 / o2 the boxes, box indices and image
#: of the enclosing graph, nK.0 node K's output. Placeholders: {ones} / {zeros} the float32
#: constants [1, 1] / [0, 0], {no_scales} the empty float32 scales, {sizes} the int64 crop
#: size [crop_height, crop_width], {extrapolation} and {mode} the Resize's, {squeeze} the
#: Squeeze of axis 0 (an attribute before opset 13, an input from 13).
BODY = (
    "::Identity(in1)  -> 1",  # the condition, passed on
    "::Add(in0,c:int64[1]=1)  -> 1",  # i + 1
    "::Slice(o0,in0,n1.0,c:int64[1]=0)  -> 1",  # boxes[i:i+1]
    "::Reshape(n2.0,c:int64[1]=4)  -> 1",  # [y1, x1, y2, x2]
    "::Slice(n3.0,c:int64[1]=2,c:int64[1]=4)  -> 1",  # [y2, x2]
    "::Concat({ones},n4.0) axis=0 -> 1",  # [1, 1, y2, x2]
    "::Slice(n3.0,c:int64[1]=0,c:int64[1]=2)  -> 1",  # [y1, x1]
    "::Concat({zeros},n6.0) axis=0 -> 1",  # [0, 0, y1, x1]
    "::Concat(n7.0,n5.0) axis=0 -> 1",  # the roi [0, 0, y1, x1, 1, 1, y2, x2]
    "::Slice(o1,in0,n1.0)  -> 1",  # box_indices[i:i+1]
    "::Add(n9.0,c:int32[1]=1)  -> 1",
    "::Slice(o2,n9.0,n10.0,c:int32[1]=0)  -> 1",  # image[b:b+1]
    "::Transpose(n11.0) perm=[0, 3, 1, 2] -> 1",  # NCHW
    "::Shape(n12.0)  -> 1",
    "::Slice(n13.0,c:int64[1]=0,c:int64[1]=2)  -> 1",  # [1, C]
    "::Concat(n14.0,{sizes}) axis=0 -> 1",  # [1, C, crop_height, crop_width]
    "::Resize(n12.0,n8.0,{no_scales},n15.0) coordinate_transformation_mode="
    "'tf_crop_and_resize' extrapolation_value={extrapolation} mode='{mode}' -> 1",
    "::Transpose(n16.0) perm=[0, 2, 3, 1] -> 1",  # NHWC
    "::Squeeze(n17.0{squeeze} -> 1",  # [crop_height, crop_width, C]
    "out(n0.0,n18.0)",
)


def _without_node(body: tuple[str, ...], k: int) -> tuple[str, ...]:
    """``body`` (``loops.body_lines``' lines) without its node ``k``, a node of one input
    and one output: its readers read its input instead, the nodes after it numbered one
    less."""
    source = re.fullmatch(r"::\w+\((n\d+\.0)\).*", body[k]).group(1)

    def renumber(m: re.Match) -> str:
        j = int(m.group(1))
        return source if j == k else f"n{j - (j > k)}.{m.group(2)}"

    return tuple(re.sub(r"\bn(\d+)\.(\d+)", renumber, line) for line in body[:k] + body[k + 1:])


#: The same where tf2onnx's transpose optimiser has moved the image's Transpose out of the
#: body (into the NCHW map a Conv computes, in a whole model): o2 is the image NCHW, and
#: ``BODY``'s node 12, the Transpose to NCHW, is not there (its readers read the image).
BODY_NCHW = _without_node(BODY, 12)
#: Resize's mode -> CropAndResize's method (TensorFlow's names; com.microsoft's too).
METHODS = {"linear": "bilinear", "nearest": "nearest"}


def reads_like_loop(loop: onnx.NodeProto) -> bool:
    """A Loop whose body resizes with coordinate_transformation_mode tf_crop_and_resize."""
    body = loop_body(loop)
    return body is not None and any(
        n.op_type == "Resize" and given_attrs(n).get("coordinate_transformation_mode")
        == "tf_crop_and_resize" for n in body.node)


def _body_const(body: onnx.GraphProto, g: GraphIndex, name: str) -> np.ndarray | None:
    """The value of a constant the body reads (its initializer, its Constant node, or one
    of the enclosing graph's), else None."""
    for t in body.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in body.node:
        if n.output[:1] == [name]:
            value = next((a.t for a in n.attribute if a.name == "value"), None)
            ok = n.op_type == "Constant" and is_default(n) and value is not None
            return numpy_helper.to_array(value) if ok else None
    return g.const(name)


def _params(g: GraphIndex, body: onnx.GraphProto) -> dict:
    """What the body's Resize holds (crop size, method, extrapolation value): the values
    ``BODY`` is rendered with. Raises NoMatch where there is not one such Resize or its
    values are not a crop_and_resize's."""
    resizes = [n for n in body.node if n.op_type == "Resize"]
    if len(resizes) != 1:
        raise NoMatch(f"its body has {len(resizes)} Resize nodes, not 1")
    resize = resizes[0]
    attrs = given_attrs(resize)
    mode = attrs.get("mode", "nearest")
    if mode not in METHODS:
        raise NoMatch(f"Resize {node_label(resize)!r} has mode={mode!r}, not linear or nearest")
    ext = attrs.get("extrapolation_value", 0.0)
    sizes_node = next((n for n in body.node if len(resize.input) > 3
                       and n.output[:1] == [resize.input[3]]), None)
    sizes = None
    if sizes_node is not None and sizes_node.op_type == "Concat" and len(sizes_node.input) == 2:
        sizes = _body_const(body, g, sizes_node.input[1])
    if sizes is None or sizes.shape != (2,) or sizes.dtype.kind not in "iu" or (sizes < 1).any():
        shown = "not a constant" if sizes is None else repr(sizes.tolist())
        raise NoMatch(f"Resize {node_label(resize)!r} resizes to a crop size that is {shown}, "
                      f"not two positive integers")
    return dict(crop_height=int(sizes[0]), crop_width=int(sizes[1]), method=METHODS[mode],
                extrapolation_value=float(ext), mode=mode, sizes=sizes)


def reference_body(params: dict, onnx_opset: int, nchw: bool = False) -> list[str]:
    """``BODY`` (``BODY_NCHW``) rendered for a Resize's values (``_params``) at
    ``onnx_opset``."""
    fill = dict(ones=constant_key(np.ones(2, np.float32)), zeros=constant_key(np.zeros(2, np.float32)),
                no_scales=constant_key(np.zeros(0, np.float32)),
                sizes=constant_key(np.array([params["crop_height"], params["crop_width"]], np.int64)),
                extrapolation=repr(params["extrapolation_value"]), mode=params["mode"],
                squeeze=") axes=[0]" if onnx_opset < 13 else ",c:int64[1]=0) ")
    return [re.sub(r"\{(\w+)\}", lambda m: fill[m.group(1)], line)
            for line in (BODY_NCHW if nchw else BODY)]


def match_loop(g: GraphIndex, loop: onnx.NodeProto) -> tuple[list[str], dict, bool]:
    """([image, boxes, box_indices], CropAndResize's attributes, whether the image is NCHW
    (``BODY_NCHW``)) of tf2onnx's crop_and_resize Loop; raises NoMatch saying why not."""
    check_attrs(loop, g.opset, EXPORTER, body=anything)
    if len(loop.input) != 2 or len(loop.output) != 1:
        raise NoMatch(f"it has {len(loop.input) - 2} loop-carried values and "
                      f"{len(loop.output)} outputs where tf2onnx's has none and 1")
    body = loop_body(loop)
    params = _params(g, body)
    lines, outer = body_lines(loop, g.const)
    refs = {nchw: reference_body(params, g.opset or 1, nchw) for nchw in (False, True)}
    firsts = {nchw: next((k for k, (a, b) in enumerate(zip(lines, ref)) if a != b),
                         None if len(lines) == len(ref) else min(len(lines), len(ref)))
              for nchw, ref in refs.items()}
    nchw = next((v for v, k in firsts.items() if k is None), None)
    if nchw is None:
        nchw = max(firsts, key=lambda v: firsts[v])  # the form it follows longer
        k, ref = firsts[nchw], refs[nchw]
        got = lines[k] if k < len(lines) else "(end)"
        want = ref[k] if k < len(ref) else "(end)"
        raise NoMatch(f"body node {k} is {got!r} where tf2onnx's (opset {g.opset}"
                      f"{', image NCHW' if nchw else ''}) has {want!r}")
    boxes, box_indices, image = outer  # (BODY reads o0, o1, o2 and nothing else outside)
    trips = g.made_by(loop.input[0], "Size")
    if trips.input[0] != box_indices:
        raise NoMatch(f"its trip count is not Size({box_indices!r}), the box indices")
    cond = g.const(loop.input[1]) if loop.input[1] else np.array(True)
    if cond is None or cond.size != 1 or not bool(cond.ravel()[0]):
        raise NoMatch("its condition is not a constant true")
    attrs = {k: params[k] for k in ("crop_height", "crop_width", "method",
                                    "extrapolation_value")}
    return [image, boxes, box_indices], attrs, nchw


def is_transpose(g: GraphIndex, node: onnx.NodeProto | None, perm: list[int]) -> bool:
    """``node`` is a Transpose of ``perm`` exactly as tf2onnx writes it."""
    if node is None or node.op_type != "Transpose" or not is_default(node):
        return False
    try:
        check_attrs(node, g.opset, EXPORTER, perm=perm)
    except NoMatch:
        return False
    return True



def match_contrib(g: GraphIndex, node: onnx.NodeProto) -> tuple[list[str], dict,
                                                                 onnx.NodeProto | None]:
    """A com.microsoft::CropAndResize node as ort_roi::CropAndResize reads it: ([its NCHW
    input, boxes, box_indices], its attributes, the Transpose(perm=[0, 2, 3, 1]) that alone
    reads its output, or None: a Transpose back to its NCHW output is needed). Raises NoMatch
    saying why not."""
    label = f"CropAndResize {node_label(node)!r}"
    attrs = given_attrs(node)
    other = sorted(set(attrs) - {"mode", "extrapolation_value"})
    if other:
        raise NoMatch(f"{label} has attribute {other[0]!r}, which com.microsoft::CropAndResize "
                      f"does not declare")
    method = attrs.get("mode", "bilinear")
    ext = attrs.get("extrapolation_value", 0.0)
    if method not in ("bilinear", "nearest") or not isinstance(ext, float):
        raise NoMatch(f"{label} has mode={method!r}, extrapolation_value={ext!r}")
    if len(node.input) != 4 or len(node.output) != 1 or not all(node.input):
        raise NoMatch(f"{label} has {len(node.input)} inputs and {len(node.output)} outputs, "
                      f"not 4 and 1")
    crop = g.const(node.input[3])
    if crop is None or crop.shape != (2,) or crop.dtype.kind not in "iu" or (crop < 1).any():
        shown = "not a constant" if crop is None else repr(crop.tolist())
        raise NoMatch(f"{label} reads a crop size that is {shown}, not two positive integers")
    readers = g.consumers.get(node.output[0], [])
    post = readers[0] if (node.output[0] not in g.outputs and len(readers) == 1
                          and is_transpose(g, readers[0], [0, 2, 3, 1])) else None
    return (list(node.input[:3]),
            dict(crop_height=int(crop[0]), crop_width=int(crop[1]), method=method,
                 extrapolation_value=float(ext)), post)

