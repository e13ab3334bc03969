"""tf2onnx's crop_and_resize forms (``forms.py``) replaced by one ort_roi::CropAndResize
node each (TensorFlow's float32 arithmetic, exactly): ``fuse_crop_and_resize``, the pass
``graph/exporters.py`` runs on tf2onnx's graphs, and ``find_crop_and_resize``, what it would
replace.

Either form becomes one ort_roi::CropAndResize node reading the NHWC image (the input of
tf2onnx's Transpose to NCHW where there is one; else a Transpose back to NHWC is inserted, a
layout copy), the boxes and the box indices, and the contrib op's Transpose back to NHWC
goes (a Transpose to NCHW is inserted where its NCHW output is read otherwise). What reads
like one but does not match exactly is left as it is, with a note naming the node and the
first difference. The layers after the crops that tf2onnx converted from a shape it lacked
or had wrong are then repaired (``repair.py``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from ...errors import node_label
from ...ops.crop_and_resize import SPEC
from ...spec import DOMAIN
from ..toolkit import GraphIndex, NoMatch, indexed, is_default, splice
from .forms import EXPORTER, is_transpose, match_contrib, match_loop, reads_like_loop
from .layers import Crops
from .repair import repair_layers


def _nhwc(g: GraphIndex, base: str, nchw: str) -> tuple[str, list[onnx.NodeProto], str]:
    """The NHWC image behind an NCHW map: (its name, the nodes computing it, the tensor they
    read). The input of tf2onnx's Transpose(perm=[0, 3, 1, 2]) where that computes the map;
    else a Transpose(perm=[0, 2, 3, 1]) of it (a layout copy)."""
    pre = g.producer.get(nchw)
    if is_transpose(g, pre, [0, 3, 1, 2]):
        return pre.input[0], [], pre.input[0]
    name = f"{base}/nhwc"
    return name, [helper.make_node("Transpose", [nchw], [name], name=f"{base}/ToNHWC",
                                   perm=[0, 2, 3, 1])], nchw


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
            and ((n.op_type == "Loop" and is_default(n) and reads_like_loop(n))
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
        crops.append(Crops(name, out, node.output[0] if contrib and post is None else None,
                            attrs, contrib))
        if contrib:  # (tf2onnx gives the contrib op's NCHW output TF's NHWC shape)
            for v in [v for v in model.graph.value_info if v.name == node.output[0]]:
                model.graph.value_info.remove(v)
    moved, more = repair_layers(model, crops)  # the layers after them tf2onnx got wrong
    return done + moved, notes + more
