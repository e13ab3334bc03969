"""The layers that read the crops: what tf2onnx wrote from a shape it lacked or had wrong,
and what TF's layer may have been (the readings ``repair.py`` chooses from).

tf2onnx converts a TF layer from the shape it holds for the layer's input. Two of its forms
give the layers after crop_and_resize a bad one:

- the Loop (opsets 11-13): the Reshape it writes after the Loop gets its shape from onnx's
  shape inference, and Reshape before opset 14 infers no rank from a shape input of unknown
  values, so the crops have no shape. tf2onnx's Conv2D conversion (``ConvOp.any_version``)
  then raises in ``add_padding`` (``len(None)``; with VALID padding at the group: ``None[-1]``)
  after turning the node into an ONNX Conv and setting kernel_shape, strides, dilations (and,
  for EXPLICIT padding, pads), and tf2onnx logs the error and goes on: the node reads the NHWC
  crops as NCHW, holds TF's HWIO kernel as OIHW, and has no padding, no group and no
  Transposes. Its pools stop the same way where padding is SAME (VALID needs no shape). From
  opset 14 Reshape infers the rank, tf2onnx falls back to auto_pad SAME_UPPER, and the layers
  convert.
- the contrib form (every opset): tf2onnx gives com.microsoft::CropAndResize's NCHW output
  TF's NHWC shape [R, crop_height, crop_width, C], so the layer after it reads its input as
  [R, crop_width, C, crop_height]: a Conv gets group = crop_height // C_in (0 where C_in >
  crop_height: onnxruntime refuses it) and SAME pads computed for an input crop_width x C
  (wrong, silently, where crop_height != crop_width or C != crop_width).

``find_suspects`` finds those nodes by what tf2onnx's code leaves and lists each one's
readings (what TF's layer may have been: layout, padding, as tf2onnx's code would have left it
from each); ``repair.repair_layers`` rewrites the node as TF's layer only where one reading is
left: one by construction, or one whose graph is consistent with the shapes the rest of the
graph declares (tf2onnx declares the graph outputs with TF's shapes) and implies (onnx's
strict shape inference, and each Conv's input channels against its kernel). Else the node
stays, with a note naming it, the cause and its readings.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ...errors import node_label
from ..nodes import given_attrs, opset
from ..toolkit import GraphIndex, is_default
from .forms import EXPORTER, is_transpose

#: ONNX opset from which tf2onnx's Loop form gives the crops a shape (Reshape-14 infers a rank).
SHAPED_FROM = 14
_POOLS = ("MaxPool", "AveragePool")


class Crops:
    """One converted crop: its node, its NHWC output [R, ch, cw, C] (C None: unknown), the
    tensors holding it NCHW, the form it came from."""

    def __init__(self, node: str, nhwc: str, nchw: str | None, attrs: dict, contrib: bool):
        self.node, self.nhwc, self.contrib = node, nhwc, contrib
        self.nchw = [nchw] if nchw else []
        self.ch, self.cw = attrs["crop_height"], attrs["crop_width"]
        self.c: int | None = None


class Reading:
    """One reading of a node: what TF's layer was (``what``), what the graph then computes
    (``key``: readings with equal keys compute the same), the nodes computing it in the node's
    place and the initializers they add (``nodes`` None: the node as it is)."""

    def __init__(self, what: str, key: tuple, nodes: list | None = None,
                 inits: list | None = None):
        self.what, self.key, self.nodes, self.inits = what, key, nodes, inits or []


class Suspect:
    """A node reading the crops that tf2onnx converted from a shape it lacked or had wrong:
    why (``cause``), what to do instead (``remedy``), and its readings, one per computation."""

    def __init__(self, node: onnx.NodeProto, crops: Crops, cause: str, remedy: str,
                 readings: list[Reading]):
        self.node, self.crops, self.cause, self.remedy = node, crops, cause, remedy
        unique: dict[tuple, Reading] = {}
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


def _tf_layer(op: str, layout: str, padding: str) -> str:
    """What a reading takes TF's layer ``op`` to have been: on the NHWC crops, or with
    data_format NCHW, and its padding."""
    return (f"TF's {op} on NHWC crops, padding {padding}" if layout == "NHWC"
            else f"TF's {op} with data_format NCHW, padding {padding}")


def _half_converted(node: onnx.NodeProto, crops: Crops, readings: list[Reading], *, did: str,
                    raises: str, left: str) -> Suspect:
    """A layer after the Loop form's crops whose conversion tf2onnx stopped (below opset 14):
    what tf2onnx ``did``, what then ``raises``, and what the node is ``left`` with."""
    cause = (f"tf2onnx {did} after crop_and_resize {crops.node!r}: below opset {SHAPED_FROM} "
             f"the crops have no shape in tf2onnx{raises}, and the node is left reading the "
             f"NHWC crops as NCHW {left}")
    return Suspect(node, crops, cause, _REMEDY_LOOP, readings)


def _stopped_conv(g: GraphIndex, node: onnx.NodeProto, crops: Crops) -> Suspect | None:
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
            what = _tf_layer("Conv2D", layout, padding)
            if group != 1:
                what += f", {group} groups"
            if chans is None:
                what += " (the crops' channels unknown: group 1, which onnxruntime checks)"
            readings.append(Reading(
                what, (layout, group, pad_key),
                _layer(node, base, crops.nhwc, layout, conv, [oihw.name, *node.input[2:]]),
                [oihw]))
    return _half_converted(
        node, crops, readings, did="did not finish converting TF's Conv2D",
        raises=" (onnx's Reshape inference gives no rank), its Conv2D conversion raises",
        left="with TensorFlow's HWIO kernel, no padding and no group")


def _stopped_pool(g: GraphIndex, node: onnx.NodeProto, crops: Crops) -> Suspect | None:
    """A pool whose conversion tf2onnx stopped (the Loop form below opset 14; only SAME
    padding needs the shape): reads the NHWC crops, kernel_shape and strides only."""
    attrs = given_attrs(node)
    kernel, strides = _ints(attrs, "kernel_shape", 2, 0), _ints(attrs, "strides", 2, 1)
    if set(attrs) != {"kernel_shape", "strides"} or kernel is None or strides is None \
            or len(node.input) != 1 or len(node.output) != 1:
        return None
    base = node.name or node.output[0]
    ones = [1, 1]
    readings = [Reading(f"an NCHW {node.op_type} with padding VALID, converted (as it is)",
                         ("NCHW", "VALID"))]
    for layout in ("NHWC", "NCHW"):
        ins = [crops.ch, crops.cw] if layout == "NHWC" else [crops.cw, crops.c]
        pads = _same_pads(ins, _same_out(ins, strides), kernel, strides, ones)
        pad_attrs = dict(auto_pad="SAME_UPPER") if pads is None else dict(pads=pads)
        key = ("SAME_UPPER",) if pads is None else tuple(pads)
        if layout == "NCHW" and key == (0, 0, 0, 0):
            continue  # (the node as it is)
        readings.append(Reading(_tf_layer(node.op_type, layout, "SAME"), (layout, key), _layer(
            node, base, crops.nhwc, layout,
            dict(kernel_shape=kernel, strides=strides, **pad_attrs), [])))
    return _half_converted(
        node, crops, readings, did="may not have finished converting TF's pooling",
        raises=", its SAME padding raises",
        left="with no padding (a pool with data_format NCHW and VALID padding converts to this "
             "same node)")


def _misread(g: GraphIndex, node: onnx.NodeProto, crops: Crops, x: str) -> Suspect | None:
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
        readings.append(Reading(f"TF's {'convolution' if conv else node.op_type}: {text}",
                                 (a.get("group"), tuple(a.get("pads", ()))),
                                 None if a == attrs else _layer(
                                     node, base, x, "NCHW", a, list(node.input[1:]))))
    return Suspect(node, crops, cause, _REMEDY_CONTRIB, readings)


_REMEDY_LOOP = f"export at opset {SHAPED_FROM} or higher, where tf2onnx converts it"
_REMEDY_CONTRIB = ("export without extra_opset com.microsoft (the Loop form, at opset "
                   f"{SHAPED_FROM} or higher), where tf2onnx converts it from the right shape")


def find_suspects(model: onnx.ModelProto, crops: list[Crops]
                  ) -> tuple[list[Suspect], list[str]]:
    """The nodes reading the crops that tf2onnx converted from a shape it lacked or had wrong
    (with their readings), and notes on layers it may have left unconverted that are not
    repaired here."""
    onnx_opset = opset(model) or 1
    g = GraphIndex(model.graph, onnx_opset, EXPORTER)
    found, notes = [], []
    for c in crops:
        for node in g.consumers.get(c.nhwc, []):
            if not is_default(node) or node.input[:1] != [c.nhwc]:
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
                                          if is_transpose(g, n, [0, 3, 1, 2]))])
        for x in views:
            for node in g.consumers.get(x, []):
                if (node.op_type == "Conv" or node.op_type in _POOLS) and is_default(
                        node) and node.input[:1] == [x]:
                    s = _misread(g, node, c, x)
                    if s is not None:
                        found.append(s)
    return found, notes


#: ONNX ops that read their input NCHW (tf2onnx puts a Transpose before each it converts).
_LAYOUT_OPS = frozenset({"Conv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool",
                         "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool",
                         "BatchNormalization", "InstanceNormalization", "LRN", "DepthToSpace",
                         "SpaceToDepth"})


def may_have_suspects(model: onnx.ModelProto, crops: list[Crops]) -> bool:
    """Whether any node may be one ``find_suspects`` looks at (before the cost of an
    inference): a layout op on the NHWC crops (the Loop form below opset 14), a Conv or pool
    on an NCHW view of them."""
    g = GraphIndex(model.graph)
    loop = (opset(model) or 1) < SHAPED_FROM
    for c in crops:
        for n in g.consumers.get(c.nhwc, []):
            if (not c.contrib and loop and n.op_type in _LAYOUT_OPS) or n.op_type == "Transpose":
                return True
        if any(n.op_type in ("Conv", *_POOLS) for x in c.nchw for n in g.consumers.get(x, [])):
            return True
    return False
