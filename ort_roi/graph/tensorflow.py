"""TensorFlow's ``tf.image.crop_and_resize`` as tf2onnx writes it, replaced by one
ort_roi::CropAndResize node (TensorFlow's float32 arithmetic, exactly).

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

``fuse_crop_and_resize`` recognises the Loop by its body, compared line by line
(``loops.body_lines``: each node's op, every attribute it is given, where each input comes
from, constants by value) with the body tf2onnx writes (``BODY``, ``BODY_NCHW``) for the
crop size, method and extrapolation value its Resize holds, and by what it reads outside
the body (its trip count is Size(box_indices), its condition a constant true, nothing
loop-carried); the contrib node by its whole attribute set and its constant crop size.
Either becomes one ort_roi::CropAndResize node reading the NHWC image (the input of
tf2onnx's Transpose to NCHW where there is one; else a Transpose back to NHWC is inserted, a
layout copy), the boxes and the box indices, and the contrib op's Transpose back to NHWC
goes (a Transpose to NCHW is inserted where its NCHW output is read otherwise). What reads
like one but does not match exactly is left as it is, with a note naming the node and the
first difference.
"""

from __future__ import annotations

import re

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from ..ops.crop_and_resize import SPEC
from ..spec import DOMAIN, OPSET_VERSION
from .loops import body_lines, constant_key
from .nodes import given_attrs, iter_nodes, opset
from .toolkit import GraphIndex, NoMatch, anything, check_attrs, indexed, loop_body, splice

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
#: The same where tf2onnx's transpose optimiser has moved the image's Transpose out of the
#: body (into the NCHW map a Conv computes, in a whole model): o2 is the image NCHW.
BODY_NCHW = (
    *BODY[:12],
    "::Shape(n11.0)  -> 1",
    "::Slice(n12.0,c:int64[1]=0,c:int64[1]=2)  -> 1",  # [1, C]
    "::Concat(n13.0,{sizes}) axis=0 -> 1",  # [1, C, crop_height, crop_width]
    "::Resize(n11.0,n8.0,{no_scales},n14.0) coordinate_transformation_mode="
    "'tf_crop_and_resize' extrapolation_value={extrapolation} mode='{mode}' -> 1",
    "::Transpose(n15.0) perm=[0, 2, 3, 1] -> 1",  # NHWC
    "::Squeeze(n16.0{squeeze} -> 1",  # [crop_height, crop_width, C]
    "out(n0.0,n17.0)",
)
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
            ok = n.op_type == "Constant" and n.domain in ("", "ai.onnx") and value is not None
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


def _transpose(g: GraphIndex, node: onnx.NodeProto | None, perm: list[int]) -> bool:
    """``node`` is a Transpose of ``perm`` exactly as tf2onnx writes it."""
    if node is None or node.op_type != "Transpose" or node.domain not in ("", "ai.onnx"):
        return False
    try:
        check_attrs(node, g.opset, EXPORTER, perm=perm)
    except NoMatch:
        return False
    return True


def _nhwc(g: GraphIndex, base: str, nchw: str) -> tuple[str, list[onnx.NodeProto], str]:
    """The NHWC image behind an NCHW map: (its name, the nodes computing it, the tensor they
    read). The input of tf2onnx's Transpose(perm=[0, 3, 1, 2]) where that computes the map;
    else a Transpose(perm=[0, 2, 3, 1]) of it (a layout copy)."""
    pre = g.producer.get(nchw)
    if _transpose(g, pre, [0, 3, 1, 2]):
        return pre.input[0], [], pre.input[0]
    name = f"{base}/nhwc"
    return name, [helper.make_node("Transpose", [nchw], [name], name=f"{base}/ToNHWC",
                                   perm=[0, 2, 3, 1])], nchw


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
                          and _transpose(g, readers[0], [0, 2, 3, 1])) else None
    return (list(node.input[:3]),
            dict(crop_height=int(crop[0]), crop_width=int(crop[1]), method=method,
                 extrapolation_value=float(ext)), post)


def _restating_reshape(g: GraphIndex, loop: onnx.NodeProto, image: str, nchw: bool,
                       attrs: dict) -> onnx.NodeProto | None:
    """The Reshape tf2onnx writes after the Loop, when it is the only reader of the Loop's
    output and restates its shape exactly: Reshape(out, Concat([-1], [crop_height,
    crop_width], C)) with C the image's channels, Slice(Shape(image), [3], [4], [0]) (on an
    NCHW map, as tf2onnx's optimiser writes it: Slice(Gather(Shape(map), [0, 2, 3, 1]), ...));
    else None (the Reshape then stays: a copy of the crops)."""
    readers = g.consumers.get(loop.output[0], [])
    if loop.output[0] in g.outputs or len(readers) != 1:
        return None
    try:
        reshape = readers[0]
        if reshape.op_type != "Reshape" or reshape.input[0] != loop.output[0]:
            return None
        g.made_by(reshape.output[0], "Reshape")
        concat = g.made_by(reshape.input[1], "Concat", axis=0)
        if len(concat.input) != 3:
            return None
        g.const_is(concat, 0, np.array([-1], np.int64))
        g.const_is(concat, 1, np.array([attrs["crop_height"], attrs["crop_width"]], np.int64))
        sl = g.made_by(concat.input[2], "Slice")
        for k, v in ((1, [3]), (2, [4]), (3, [0])):
            g.const_is(sl, k, np.array(v, np.int64))
        if len(sl.input) > 4 and sl.input[4]:
            return None
        shape = sl.input[0]
        if nchw:
            gather = g.made_by(shape, "Gather", axis=0)
            g.const_is(gather, 1, np.array([0, 2, 3, 1], np.int64))
            shape = gather.input[0]
        if g.made_by(shape, "Shape").input[0] != image:
            return None
    except NoMatch:
        return None
    return reshape


def _node(base: str, inputs: list[str], output: str, attrs: dict) -> tuple[str, onnx.NodeProto]:
    """(its name, the ort_roi::CropAndResize node) in the place of node ``base``."""
    name = f"{base}/{SPEC.name}"
    return name, helper.make_node(SPEC.name, inputs, [output], name=name, domain=DOMAIN,
                                  **attrs)


def _candidates(model: onnx.ModelProto) -> list[str]:
    """The first outputs of the main graph's nodes that read like one of tf2onnx's forms."""
    return [n.output[0] for n in model.graph.node if n.output
            and ((n.op_type == "Loop" and n.domain in ("", "ai.onnx") and reads_like_loop(n))
                 or (n.op_type == "CropAndResize" and n.domain == "com.microsoft"))]


def find_crop_and_resize(model: onnx.ModelProto, g: GraphIndex | None = None) -> list[str]:
    """The nodes of the main graph (their labels) that are tf2onnx's crop_and_resize forms
    exactly, left as they are: what ``fuse_crop_and_resize`` would replace. ``g``: the
    graph's index as it is, else it is indexed here."""
    g = indexed(model, EXPORTER, g)
    found = []
    for first in _candidates(model):
        node = g.producer[first]
        try:
            (match_loop if node.op_type == "Loop" else match_contrib)(g, node)
        except NoMatch:
            continue
        found.append(node_label(node))
    return found


def fuse_crop_and_resize(model: onnx.ModelProto, g: GraphIndex | None = None
                         ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Replace tf2onnx's crop_and_resize forms in the main graph, in place, by
    ort_roi::CropAndResize nodes, dropping what only they read. Where tf2onnx hands the op
    an NCHW map with no NHWC one behind it (its transpose optimiser moved the Transpose into
    the Conv before it), a Transpose to NHWC goes before the node; where the contrib op's
    NCHW output is read by anything but tf2onnx's Transpose alone, a Transpose to NCHW goes
    after it.

    Args:
        model: the model (changed in place).
        g: the graph's index as it is (``rewrite``'s), else it is indexed here (and again
            after each node replaced).

    Returns:
        ([(the new node's name, what it replaced, its op)], notes on Loops and
        com.microsoft::CropAndResize nodes that read like tf2onnx's but do not match it
        exactly, each naming the node and the first difference).
    """
    done, notes, crops = [], [], []
    op = f"{DOMAIN}::{SPEC.name}"
    for first in _candidates(model):  # (found again each time: a splice rebuilds the list)
        node = next(n for n in model.graph.node if n.output[:1] == [first])
        g = indexed(model, EXPORTER, g)
        base = node.name or node.output[0]
        post = None
        try:
            if node.op_type == "Loop":
                inputs, attrs, nchw = match_loop(g, node)
                what = "tf2onnx crop_and_resize Loop"
            else:
                inputs, attrs, post = match_contrib(g, node)
                nchw = True
                what = "tf2onnx com.microsoft::CropAndResize"
        except NoMatch as e:
            kind = "Loop" if node.op_type == "Loop" else "com.microsoft::CropAndResize"
            notes.append(f"node {node_label(node)!r} ({kind}) reads like tf2onnx's "
                         f"tf.image.crop_and_resize but does not match it exactly ({e}); left "
                         f"as it is")
            continue
        new, keep, read = [], list(inputs), inputs[0]
        if nchw:
            inputs[0], new, keep[0] = _nhwc(g, base, inputs[0])
        last, out = node, node.output[0]
        reshape = (_restating_reshape(g, node, read, nchw, attrs)
                   if node.op_type == "Loop" else None)
        if reshape is not None:  # (it would copy the crops)
            last, out = reshape, reshape.output[0]
        if node.op_type != "Loop":
            last = post if post is not None else node
            out = post.output[0] if post is not None else f"{base}/crops"
        name, crop = _node(base, inputs, out, attrs)
        new.append(crop)
        if node.op_type != "Loop" and post is None:
            new.append(helper.make_node("Transpose", [out], [node.output[0]],
                                        name=f"{base}/ToNCHW", perm=[0, 3, 1, 2]))
        copies = [n.name for n in new if n.op_type == "Transpose"]
        if copies:
            what += f" (with {' and '.join(copies)}: layout copies)"
        splice(model, last, new, keep)
        g = None  # the graph changed: index it afresh
        done.append((name, what, op))
        contrib = node.op_type != "Loop"
        crops.append(_Crops(name, out, node.output[0] if contrib and post is None else None,
                            attrs, contrib))
        if contrib:  # (tf2onnx gives the contrib op's NCHW output TF's NHWC shape)
            for v in [v for v in model.graph.value_info if v.name == node.output[0]]:
                model.graph.value_info.remove(v)
    moved, more = repair_layers(model, crops)  # the layers after them tf2onnx got wrong
    return done + moved, notes + more


# -- the layers that read the crops: what tf2onnx wrote from a shape it lacked or had wrong -----
#
# tf2onnx converts a TF layer from the shape it holds for the layer's input. Two of its forms
# give the layers after crop_and_resize a bad one:
#
# - the Loop (opsets 11-13): the Reshape it writes after the Loop gets its shape from onnx's
#   shape inference, and Reshape before opset 14 infers no rank from a shape input of unknown
#   values, so the crops have no shape. tf2onnx's Conv2D conversion (``ConvOp.any_version``)
#   then raises in ``add_padding`` (``len(None)``; with VALID padding at the group: ``None[-1]``)
#   after turning the node into an ONNX Conv and setting kernel_shape, strides, dilations (and,
#   for EXPLICIT padding, pads), and tf2onnx logs the error and goes on: the node reads the NHWC
#   crops as NCHW, holds TF's HWIO kernel as OIHW, and has no padding, no group and no
#   Transposes. Its pools stop the same way where padding is SAME (VALID needs no shape). From
#   opset 14 Reshape infers the rank, tf2onnx falls back to auto_pad SAME_UPPER, and the layers
#   convert.
# - the contrib form (every opset): tf2onnx gives com.microsoft::CropAndResize's NCHW output
#   TF's NHWC shape [R, crop_height, crop_width, C], so the layer after it reads its input as
#   [R, crop_width, C, crop_height]: a Conv gets group = crop_height // C_in (0 where C_in >
#   crop_height: onnxruntime refuses it) and SAME pads computed for an input crop_width x C
#   (wrong, silently, where crop_height != crop_width or C != crop_width).
#
# ``repair_layers`` finds those nodes by what tf2onnx's code leaves, lists each one's readings
# (what TF's layer may have been: layout, padding, as tf2onnx's code would have left it from
# each), and rewrites the node as TF's layer only where one reading is left: one by
# construction, or one whose graph is consistent with the shapes the rest of the graph declares
# (tf2onnx declares the graph outputs with TF's shapes) and implies (onnx's strict shape
# inference, and each Conv's input channels against its kernel). Else the node stays, with a
# note naming it, the cause and its readings.

#: ONNX opset from which tf2onnx's Loop form gives the crops a shape (Reshape-14 infers a rank).
SHAPED_FROM = 14
#: Combinations of readings checked against the graph's shapes at most (each one an inference).
MAX_READINGS = 32
#: Initializers larger than this (elements) are graph inputs in the copies shape inference sees.
_SKELETON = 4096
_POOLS = ("MaxPool", "AveragePool")


class _Crops:
    """One converted crop: its node, its NHWC output [R, ch, cw, C] (C None: unknown), the
    tensors holding it NCHW, the form it came from."""

    def __init__(self, node: str, nhwc: str, nchw: str | None, attrs: dict, contrib: bool):
        self.node, self.nhwc, self.contrib = node, nhwc, contrib
        self.nchw = [nchw] if nchw else []
        self.ch, self.cw = attrs["crop_height"], attrs["crop_width"]
        self.c: int | None = None


class _Reading:
    """One reading of a node: what TF's layer was (``what``), what the graph then computes
    (``key``: readings with equal keys compute the same), the nodes computing it in the node's
    place and the initializers they add (``nodes`` None: the node as it is)."""

    def __init__(self, what: str, key: tuple, nodes: list | None = None,
                 inits: list | None = None):
        self.what, self.key, self.nodes, self.inits = what, key, nodes, inits or []


class _Suspect:
    def __init__(self, node: onnx.NodeProto, crops: _Crops, cause: str, remedy: str,
                 readings: list[_Reading]):
        self.node, self.crops, self.cause, self.remedy = node, crops, cause, remedy
        unique: dict[tuple, _Reading] = {}
        for r in readings:  # (one per computation: SAME's pads of 0 are VALID's)
            if r.key in unique:
                unique[r.key].what += f" (equally: {r.what})"
            else:
                unique[r.key] = r
        self.readings = list(unique.values())


def _same_pads(ins: list, outs: list, kernel: list, strides: list, dilations: list) -> list | None:
    """tf2onnx's ``add_padding`` for SAME (= TensorFlow's): [begin_h, begin_w, end_h, end_w]
    for input dims ``ins`` and output dims ``outs``; None where a dim is unknown."""
    if any(d is None or d < 0 for d in (*ins, *outs)):
        return None
    total = [max((o - 1) * s + d * (k - 1) + 1 - i, 0)
             for i, o, k, s, d in zip(ins, outs, kernel, strides, dilations)]
    return [t // 2 for t in total] + [t - t // 2 for t in total]


def _same_out(ins: list, strides: list) -> list:
    return [None if i is None else -(-i // s) for i, s in zip(ins, strides)]


def _valid_out(ins: list, kernel: list, strides: list, dilations: list) -> list:
    return [None if i is None else (i - d * (k - 1) - 1) // s + 1
            for i, k, s, d in zip(ins, kernel, strides, dilations)]


def _ints(attrs: dict, name: str, n: int, default: int) -> list[int] | None:
    v = attrs.get(name, [default] * n)
    return list(v) if isinstance(v, list) and len(v) == n else None


def _layer(node: onnx.NodeProto, base: str, x: str, layout: str, attrs: dict,
           inputs: list[str]) -> list[onnx.NodeProto]:
    """``node``'s op over ``x`` with ``attrs``: read as NCHW, or (layout NHWC) between
    Transposes to NCHW and back, writing ``node``'s output."""
    y = node.output[0]
    if layout == "NCHW":
        return [helper.make_node(node.op_type, [x, *inputs], [y], name=base, **attrs)]
    return [helper.make_node("Transpose", [x], [f"{base}/nchw_in"], name=f"{base}/ToNCHW",
                             perm=[0, 3, 1, 2]),
            helper.make_node(node.op_type, [f"{base}/nchw_in", *inputs], [f"{base}/nchw_out"],
                             name=base, **attrs),
            helper.make_node("Transpose", [f"{base}/nchw_out"], [y], name=f"{base}/ToNHWC",
                             perm=[0, 2, 3, 1])]


def _padding(pads: list | None, outs: list, padding: str,
             given: list | None) -> tuple[dict, tuple] | None:
    """(the padding attributes, its key) of one reading; None where TF could not have had it
    (a VALID output of no rows)."""
    if padding == "EXPLICIT":
        return dict(pads=list(given)), tuple(given)
    if padding == "VALID":
        if any(o is not None and o < 1 for o in outs):
            return None
        return {}, (0, 0, 0, 0)
    if pads is None:  # (dims unknown: what tf2onnx writes then)
        return dict(auto_pad="SAME_UPPER"), ("SAME_UPPER",)
    return dict(pads=pads), tuple(pads)


def _stopped_conv(g: GraphIndex, node: onnx.NodeProto, crops: _Crops) -> _Suspect | None:
    """A Conv whose conversion from TF's Conv2D tf2onnx stopped (the Loop form below opset
    14): it reads the NHWC crops, has no group (tf2onnx sets it on every Conv it finishes) and
    holds the HWIO kernel; None where the node is not that."""
    attrs = given_attrs(node)
    if ("group" in attrs or "auto_pad" in attrs
            or set(attrs) - {"kernel_shape", "strides", "dilations", "pads"}
            or len(node.input) not in (2, 3) or len(node.output) != 1):
        return None
    w = g.const(node.input[1])
    b = g.const(node.input[2]) if len(node.input) == 3 else None
    if (w is None or w.ndim != 4 or w.dtype.kind != "f"
            or (len(node.input) == 3 and (b is None or b.shape != (w.shape[3],)))):
        return None
    kh, kw, cin, _ = (int(d) for d in w.shape)
    kernel, strides = [kh, kw], _ints(attrs, "strides", 2, 1)
    dilations = _ints(attrs, "dilations", 2, 1)
    given = attrs.get("pads")
    if (attrs.get("kernel_shape", kernel) != kernel or strides is None or dilations is None
            or (given is not None and len(given) != 4)):
        return None
    oihw = numpy_helper.from_array(np.ascontiguousarray(w.transpose(3, 2, 0, 1)),
                                   f"{node.input[1]}/oihw")
    base = node.name or node.output[0]
    readings = []
    for layout in ("NHWC", "NCHW"):
        chans, ins = (crops.c, [crops.ch, crops.cw]) if layout == "NHWC" else (
            crops.ch, [crops.cw, crops.c])
        if chans is not None and (chans % cin or chans < cin):
            continue  # its channels are not a multiple of the kernel's
        group = 1 if chans is None else chans // cin
        for padding in (("EXPLICIT",) if given is not None else ("SAME", "VALID")):
            outs = (_same_out(ins, strides) if padding == "SAME"
                    else _valid_out(ins, kernel, strides, dilations))
            pads = _same_pads(ins, outs, kernel, strides, dilations)
            got = _padding(pads, outs, padding, given)
            if got is None:
                continue
            pad_attrs, pad_key = got
            conv = dict(kernel_shape=kernel, strides=strides, dilations=dilations, group=group,
                        **pad_attrs)
            what = (f"TF's Conv2D on NHWC crops, padding {padding}"
                    if layout == "NHWC" else f"TF's Conv2D with data_format NCHW, padding "
                    f"{padding}") + (f", {group} groups" if group != 1 else "")
            if chans is None:
                what += " (the crops' channels unknown: group 1, which onnxruntime checks)"
            readings.append(_Reading(
                what, (layout, group, pad_key),
                _layer(node, base, crops.nhwc, layout, conv, [oihw.name, *node.input[2:]]),
                [oihw]))
    cause = (f"tf2onnx did not finish converting TF's Conv2D after crop_and_resize "
             f"{crops.node!r}: below opset {SHAPED_FROM} the crops have no shape in tf2onnx "
             f"(onnx's Reshape inference gives no rank), its Conv2D conversion raises, and the "
             f"node is left reading the NHWC crops as NCHW with TensorFlow's HWIO kernel, no "
             f"padding and no group")
    return _Suspect(node, crops, cause, _REMEDY_LOOP, readings)


def _stopped_pool(g: GraphIndex, node: onnx.NodeProto, crops: _Crops) -> _Suspect | None:
    """A pool whose conversion tf2onnx stopped (the Loop form below opset 14; only SAME
    padding needs the shape): reads the NHWC crops, kernel_shape and strides only."""
    attrs = given_attrs(node)
    kernel, strides = _ints(attrs, "kernel_shape", 2, 0), _ints(attrs, "strides", 2, 1)
    if set(attrs) != {"kernel_shape", "strides"} or kernel is None or strides is None \
            or len(node.input) != 1 or len(node.output) != 1:
        return None
    base = node.name or node.output[0]
    ones = [1, 1]
    readings = [_Reading(f"an NCHW {node.op_type} with padding VALID, converted (as it is)",
                         ("NCHW", "VALID"))]
    for layout in ("NHWC", "NCHW"):
        ins = [crops.ch, crops.cw] if layout == "NHWC" else [crops.cw, crops.c]
        pads = _same_pads(ins, _same_out(ins, strides), kernel, strides, ones)
        pad_attrs = dict(auto_pad="SAME_UPPER") if pads is None else dict(pads=pads)
        key = ("SAME_UPPER",) if pads is None else tuple(pads)
        if layout == "NCHW" and key == (0, 0, 0, 0):
            continue  # (the node as it is)
        what = (f"TF's {node.op_type} on NHWC crops, padding SAME" if layout == "NHWC"
                else f"TF's {node.op_type} with data_format NCHW, padding SAME")
        readings.append(_Reading(what, (layout, key), _layer(
            node, base, crops.nhwc, layout,
            dict(kernel_shape=kernel, strides=strides, **pad_attrs), [])))
    cause = (f"tf2onnx may not have finished converting TF's pooling after crop_and_resize "
             f"{crops.node!r}: below opset {SHAPED_FROM} the crops have no shape in tf2onnx, "
             f"its SAME padding raises, and the node is left reading the NHWC crops as NCHW "
             f"with no padding (a pool with data_format NCHW and VALID padding converts to "
             f"this same node)")
    return _Suspect(node, crops, cause, _REMEDY_LOOP, readings)


def _misread(g: GraphIndex, node: onnx.NodeProto, crops: _Crops, x: str) -> _Suspect | None:
    """A Conv or pool on the NCHW crops that tf2onnx converted from the contrib form's wrong
    shape (group from the crop height, SAME pads for a crop_width x C input), or a Conv whose
    group does not fit the crops' channels; None where nothing in it is wrong."""
    attrs = given_attrs(node)
    conv = node.op_type == "Conv"
    w = g.const(node.input[1]) if conv and len(node.input) > 1 else None
    if conv and (w is None or w.ndim != 4):
        return None
    kernel = (_ints(attrs, "kernel_shape", 2, 0) if "kernel_shape" in attrs or not conv
              else [int(d) for d in w.shape[2:]])
    strides, dilations = _ints(attrs, "strides", 2, 1), _ints(attrs, "dilations", 2, 1)
    if kernel is None or strides is None or dilations is None or set(attrs) - {
            "kernel_shape", "strides", "dilations", "pads", "group", "auto_pad"}:
        return None
    fixed, base, what = dict(attrs), node.name or node.output[0], []
    if conv:
        cin, group = int(w.shape[1]), attrs.get("group", 1)
        if crops.c is not None and cin * group != crops.c and crops.c % cin == 0:
            fixed["group"] = crops.c // cin
            what.append(f"group {crops.c // cin} (tf2onnx wrote {group}, which does not fit "
                        f"{crops.c} channels and a kernel of {cin})")
    ins, pads = [crops.ch, crops.cw], attrs.get("pads")
    outs = _same_out(ins, strides)
    wrong = _same_pads([crops.cw, crops.c], outs, kernel, strides, dilations)
    right = _same_pads(ins, outs, kernel, strides, dilations)
    ambiguous = (crops.contrib and pads is not None and "auto_pad" not in attrs
                 and wrong == list(pads) and wrong != right)
    if not what and not ambiguous:
        return None
    layer = "convolution" if conv else node.op_type
    cause = (f"tf2onnx converted the {layer} after crop_and_resize {crops.node!r} from a "
             f"wrong shape: it gives com.microsoft::CropAndResize's NCHW output TensorFlow's "
             f"NHWC shape, so the layer's input read as [R, {crops.cw}, {crops.c}, "
             f"{crops.ch}] (its group from the crop height, its SAME pads for a {crops.cw} x "
             f"{crops.c} input)" if crops.contrib else
             f"tf2onnx wrote the {layer} after crop_and_resize {crops.node!r} with group "
             f"{attrs.get('group', 1)}, not knowing the crops' channels")
    readings = []
    for padding in (("SAME", "EXPLICIT") if ambiguous else ("as written",)):
        a = dict(fixed)
        if padding == "SAME":
            a["pads"] = right
        text = ", ".join(what + ([f"padding SAME: pads {right} (tf2onnx wrote {pads}, SAME's "
                                  f"for that wrong input)"] if padding == "SAME" else [])
                         + ([f"padding EXPLICIT {pads} (as written)"]
                            if padding == "EXPLICIT" else []))
        readings.append(_Reading(f"TF's {'convolution' if conv else node.op_type}: {text}",
                                 (a.get("group"), tuple(a.get("pads", ()))),
                                 None if a == attrs else _layer(
                                     node, base, x, "NCHW", a, list(node.input[1:]))))
    return _Suspect(node, crops, cause, _REMEDY_CONTRIB, readings)


_REMEDY_LOOP = f"export at opset {SHAPED_FROM} or higher, where tf2onnx converts it"
_REMEDY_CONTRIB = ("export without extra_opset com.microsoft (the Loop form, at opset "
                   f"{SHAPED_FROM} or higher), where tf2onnx converts it from the right shape")


def _skeleton(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` for shape inference: large initializers become graph inputs of
    their type (their values are not needed); ort_roi's domain imported (convert imports it
    after the passes)."""
    m = onnx.ModelProto(ir_version=model.ir_version)
    m.opset_import.extend(model.opset_import)
    m.functions.extend(model.functions)
    if not any(o.domain == DOMAIN for o in m.opset_import):
        m.opset_import.append(helper.make_opsetid(DOMAIN, OPSET_VERSION))
    src, g = model.graph, m.graph
    g.name = src.name
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    for t in src.initializer:  # (the large ones not copied)
        if int(np.prod(t.dims)) > _SKELETON:
            g.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
        else:
            g.initializer.append(t)
    return m


def _apply(model: onnx.ModelProto, node: onnx.NodeProto, reading: _Reading) -> None:
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
        if n.op_type != "Conv" or n.domain not in ("", "ai.onnx") or len(n.input) < 2:
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


def _channels(model: onnx.ModelProto, crops: list[_Crops]) -> None:
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


def _suspects(model: onnx.ModelProto, crops: list[_Crops]) -> tuple[list[_Suspect], list[str]]:
    """The nodes reading the crops that tf2onnx converted from a shape it lacked or had wrong
    (with their readings), and notes on layers it may have left unconverted that are not
    repaired here."""
    onnx_opset = opset(model) or 1
    g = GraphIndex(model.graph, onnx_opset, EXPORTER)
    found, notes = [], []
    for c in crops:
        for node in g.consumers.get(c.nhwc, []):
            if node.domain not in ("", "ai.onnx") or node.input[:1] != [c.nhwc]:
                continue
            if c.contrib or onnx_opset >= SHAPED_FROM:
                continue  # (the Loop form from opset 14 and the contrib form: shapes known)
            s = (_stopped_conv(g, node, c) if node.op_type == "Conv" else
                 _stopped_pool(g, node, c) if node.op_type in _POOLS else None)
            if s is not None:
                found.append(s)
            elif node.op_type in _LAYOUT_OPS:
                notes.append(f"node {node_label(node)!r} ({node.op_type}) reads crop_and_resize "
                             f"{c.node!r}'s NHWC crops as NCHW: below opset {SHAPED_FROM} "
                             f"tf2onnx converts the layers after the crops without their "
                             f"shape, and a {node.op_type} reading them directly is most likely "
                             f"one whose conversion stopped (a DepthwiseConv2D, a "
                             f"BatchNormalization, ...); not repaired: left as it is; "
                             f"{_REMEDY_LOOP}")
        views = dict.fromkeys([*c.nchw, *(n.output[0] for n in g.consumers.get(c.nhwc, [])
                                          if _transpose(g, n, [0, 3, 1, 2]))])
        for x in views:
            for node in g.consumers.get(x, []):
                if (node.op_type == "Conv" or node.op_type in _POOLS) and node.domain in (
                        "", "ai.onnx") and node.input[:1] == [x]:
                    s = _misread(g, node, c, x)
                    if s is not None:
                        found.append(s)
    return found, notes


#: ONNX ops that read their input NCHW (tf2onnx puts a Transpose before each it converts).
_LAYOUT_OPS = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
                         "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
                         "BatchNormalization", "InstanceNormalization", "LRN", "DepthToSpace",
                         "SpaceToDepth"})


def _readers(model: onnx.ModelProto, crops: list[_Crops]) -> bool:
    """Whether any node may be one ``_suspects`` looks at (before the cost of an inference):
    a layout op on the NHWC crops (the Loop form below opset 14), a Conv or pool on an NCHW
    view of them."""
    g = GraphIndex(model.graph)
    loop = (opset(model) or 1) < SHAPED_FROM
    for c in crops:
        for n in g.consumers.get(c.nhwc, []):
            if (not c.contrib and loop and n.op_type in _LAYOUT_OPS) or n.op_type == "Transpose":
                return True
        if any(n.op_type in ("Conv", *_POOLS) for x in c.nchw for n in g.consumers.get(x, [])):
            return True
    return False


def repair_layers(model: onnx.ModelProto, crops: list[_Crops]
                  ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Rewrite, in place, the layers reading the converted crops that tf2onnx converted from
    a shape it lacked or had wrong (see the section's comment) as TF's layer, where one
    reading of the node is left; the others stay, with a note. Returns (moved, notes)."""
    if not crops or not _readers(model, crops):
        return [], []
    _channels(model, crops)
    suspects, notes = _suspects(model, crops)
    moved = []
    sure = [s for s in suspects if len(s.readings) == 1]
    open_ = [s for s in suspects if len(s.readings) > 1]
    chosen: dict[int, tuple[_Reading, str]] = {
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
