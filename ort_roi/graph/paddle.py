"""PaddleDetection's FPN RoI stage, fused: what export-paddle writes for ppdet's ``RoIAlign``
extractor (``ppdet/modeling/heads/roi_extractor.py``: distribute_fpn_proposals, roi_align per
level, concat, gather by restore_index) becomes one ``ort_roi::DistributeRoIAlign_L{L}``.

export-paddle writes the stage as ``DistributeFpnProposals_L{L}(fpn_rois, rois_num)`` whose
outputs (rois_l, rois_num_l, restore_index) pass through paddle2onnx's no-op chains for
Paddle's ``assign`` (Unsqueeze(axes [0]) -> Add(a zero constant) -> Squeeze(axes [0]), once or
more, and Identity nodes) into one ``ort_roi::RoIAlign(feat_l, rois_l, rois_num_l)`` per level;
the L results (through Identity nodes) are concatenated on axis 0 and gathered on axis 0 by
restore_index ([R, 1]: the Gather's output is [R, 1, C, PH, PW]). The levels' concatenation
and the gather copy every pooled value twice (measured: docs/benchmarks.md, "Measurements
behind design choices"); the fused op pools each roi once at its level straight into
its row. ``fuse_fpn_stages`` finds each Gather that restore_index reaches, checks the stage
exactly (every node on the paths the op export-paddle / paddle2onnx writes, with its whole
attribute set; the assign chains' axes and zero constants; level l's RoIAlign reading rois_l
and rois_num_l of the same Distribute; one pooling size, sampling ratio and aligned on every
level; results read by nothing else) and replaces the Gather with the fused node and an
Unsqueeze(axes [1]) giving the Gather's [R, 1, C, PH, PW]; the nodes only the stage read go.
Anything that starts like the stage but does not match stays, with a note naming the node and
the first difference.

The Add of zero maps -0.0 to +0.0 in the rois RoIAlign reads; RoIAlign computes the same from
either (x * scale - offset is -offset for both, and a sample at -0.0 reads what one at 0.0
does), so the fused op, which reads the rois before the chain, is bit for bit the stage.

``empty_safe_reshapes``: paddle2onnx writes Paddle's ``flatten`` and ``reshape(x, [0, -1])``
as a Reshape whose -1 onnxruntime cannot infer when x has no rows (a RoI head on an image
without boxes); export-paddle computes that dimension from x's Shape (or writes
``Flatten(axis=1)``) and marks the node (``REPAIRED``).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

from ..errors import node_label
from ..ops import spec as spec_of
from ..spec import DOMAIN, MAX_LEVELS
from .builders import make_node
from .nodes import given_attrs, node_attrs, opset
from .toolkit import GraphIndex, NoMatch, check_attrs, indexed, is_default, splice

EXPORTER = "export-paddle"
DISTRIBUTE = "DistributeFpnProposals_L"
#: the nodes paddle2onnx writes for Paddle's assign (and its Identity)
_CHAIN_OPS = ("Identity", "Unsqueeze", "Add", "Squeeze")
#: the attributes every level's RoIAlign must share (the fused op has one of each)
_SHARED = ("pooled_height", "pooled_width", "sampling_ratio", "aligned")


def _levels(node: onnx.NodeProto) -> int | None:
    """L of a DistributeFpnProposals_L{L} node of ours, else None."""
    if node.domain != DOMAIN or not node.op_type.startswith(DISTRIBUTE):
        return None
    tail = node.op_type[len(DISTRIBUTE):]
    return int(tail) if tail.isdigit() and 1 <= int(tail) <= MAX_LEVELS else None


def through_assigns(g: GraphIndex, name: str, walked: list | None = None) -> str:
    """The tensor ``name`` is a copy of: back through Identity nodes and paddle2onnx's assign
    chains (Squeeze(axes [0]) of Add(Unsqueeze(x, axes [0]), zero)), each checked exactly
    (NoMatch naming the node otherwise). The nodes walked are appended to ``walked``."""
    while True:
        n = g.producer.get(name)
        if n is None or not is_default(n) or n.op_type not in ("Identity", "Squeeze"):
            return name
        if n.op_type == "Identity":
            check_attrs(n, g.opset, EXPORTER)
            chain = [n]
        else:
            squeeze = g.operand(name, "Squeeze", "axes", 1, [0])
            add = g.made_by(squeeze.input[0], "Add")
            zero = g.const(add.input[1]) if len(add.input) == 2 else None
            if zero is None or zero.size != 1 or zero.ndim > 1 or zero.ravel()[0] != 0:
                shown = "not a constant" if zero is None else repr(zero.tolist())
                raise NoMatch(f"Add {node_label(add)!r} adds {shown} where paddle2onnx's "
                              f"assign adds a zero of one element")
            unsqueeze = g.operand(add.input[0], "Unsqueeze", "axes", 1, [0])
            chain = [squeeze, add, unsqueeze]
        if walked is not None:
            walked += chain
        name = chain[-1].input[0]


def _gathers(g: GraphIndex, restore: str) -> list[onnx.NodeProto]:
    """The Gather nodes whose indices restore_index reaches through nodes of the assign
    chains' kinds (checked later, backwards)."""
    found, seen, todo = [], set(), [restore]
    while todo:
        name = todo.pop()
        for n in g.consumers.get(name, []):
            if not is_default(n) or id(n) in seen:
                continue
            seen.add(id(n))
            if n.op_type == "Gather" and len(n.input) == 2 and n.input[1] == name:
                found.append(n)
            elif n.op_type in _CHAIN_OPS and n.input and n.input[0] == name:
                todo += [o for o in n.output if o]
    return found


def match_stage(g: GraphIndex, gather: onnx.NodeProto, dist: onnx.NodeProto) -> dict:
    """The stage ending in ``gather`` whose levels ``dist`` (a DistributeFpnProposals_L{L})
    gives: its feature maps (level order), the RoIAlign attributes they share, their scales;
    NoMatch saying why not."""
    L = _levels(dist)
    check_attrs(gather, g.opset, EXPORTER, axis=0)
    label = f"Gather {node_label(gather)!r}"
    private: list[onnx.NodeProto] = []  # nodes whose results only the stage may read
    if len(dist.output) != 2 * L + 1 or through_assigns(g, gather.input[1]) != dist.output[2 * L]:
        raise NoMatch(f"{label}'s indices are not restore_index of {node_label(dist)!r}")
    concat = g.made_by(through_assigns(g, gather.input[0], private), "Concat", axis=0)
    private.append(concat)
    if len(concat.input) != L:
        raise NoMatch(f"Concat {node_label(concat)!r} joins {len(concat.input)} tensors where "
                      f"{node_label(dist)!r} gives {L} levels")
    align_spec = spec_of("RoIAlign")
    feats, scales, shared = [], [], None
    for k, name in enumerate(concat.input):
        ra = g.producer.get(through_assigns(g, name, private))
        if ra is None or ra.domain != DOMAIN or ra.op_type != "RoIAlign":
            got = "a graph input" if ra is None else f"{ra.op_type} {node_label(ra)!r}"
            raise NoMatch(f"Concat {node_label(concat)!r}'s input {k} comes from {got}, not an "
                          f"{DOMAIN}::RoIAlign")
        private.append(ra)
        what = f"RoIAlign {node_label(ra)!r} (level {k})"
        if len(ra.input) != 3 or len(ra.output) != 1:
            raise NoMatch(f"{what} has {len(ra.input)} inputs and {len(ra.output)} outputs")
        for i, want, called in ((1, dist.output[k], f"rois_{k}"),
                                (2, dist.output[L + k], f"rois_num_{k}")):
            src = through_assigns(g, ra.input[i])
            if src != want:
                raise NoMatch(f"{what} reads {ra.input[i]!r} (a copy of {src!r}), not "
                              f"{called} of {node_label(dist)!r} ({want!r})")
        a = node_attrs(ra, align_spec)
        these = {key: a[key] for key in _SHARED}
        if shared is not None and these != shared:
            raise NoMatch(f"{what} pools with {these}, level 0 with {shared}: the fused op "
                          f"has one of each")
        shared = these
        feats.append(ra.input[0])
        scales.append(a["spatial_scale"])
    inside = {id(n) for n in private} | {id(gather)}
    for n in private:  # nothing else may read the levels' results on their way
        for o in n.output:
            readers = [r for r in g.consumers.get(o, []) if id(r) not in inside]
            if readers or o in g.outputs:
                who = "a graph output" if o in g.outputs else f"{readers[0].op_type} " \
                    f"{node_label(readers[0])!r}"
                raise NoMatch(f"{o!r} ({n.op_type} {node_label(n)!r}) is read by {who} too")
    return dict(feats=feats, scales=scales, attrs=shared, nodes=len(private))


def _fused_nodes(model: onnx.ModelProto, g: GraphIndex, gather: onnx.NodeProto,
                 dist: onnx.NodeProto, m: dict) -> list[onnx.NodeProto]:
    """DistributeRoIAlign_L{L} (Distribute's inputs, the maps) and Unsqueeze(axes [1]) into
    the Gather's output."""
    L = len(m["feats"])
    spec = spec_of(f"DistributeRoIAlign_L{L}")
    d = node_attrs(dist, spec_of(dist.op_type))
    base = f"{dist.name or dist.output[0]}/{gather.name or gather.output[0]}"  # one per stage
    pooled = f"{base}/{spec.name}_output"
    fused = make_node(spec, [dist.input[0], dist.input[1], *m["feats"]], [pooled],
                      name=f"{base}/{spec.name}", **d, **m["attrs"],
                      **{f"spatial_scale_{i}": s for i, s in enumerate(m["scales"])})
    name = f"{base}/{spec.name}/Unsqueeze"
    if (g.opset or 1) >= 13:
        axes = numpy_helper.from_array(np.array([1], np.int64), f"{name}/axes")
        model.graph.initializer.append(axes)
        unsqueeze = helper.make_node("Unsqueeze", [pooled, axes.name], [gather.output[0]],
                                     name=name)
    else:
        unsqueeze = helper.make_node("Unsqueeze", [pooled], [gather.output[0]], name=name,
                                     axes=[1])
    return [fused, unsqueeze]


def fuse_fpn_stages(model: onnx.ModelProto, g: GraphIndex | None = None
                    ) -> tuple[list[tuple[str, str, str]], list[str]]:
    """Every PaddleDetection FPN RoI stage of the main graph as export-paddle writes it
    (``match_stage``), replaced in place by one DistributeRoIAlign_L{L} (and an Unsqueeze).

    Args:
        model: the model, changed in place.
        g: the graph's index as it is (``rewrite``'s), else it is indexed here (and again
            after each stage fused).

    Returns:
        (moved, notes): moved (the new node, what it replaced, ``ort_roi::DistributeRoIAlign``)
        per fused stage; a note for each Gather that restore_index reaches but that does not
        end the stage exactly, naming the node and why (the stage stays as it was).
    """
    moved, notes = [], []
    names = [n.output[0] for n in model.graph.node if _levels(n) and n.output]
    for first in names:
        tried: set[str] = set()  # the Gathers of this Distribute matched (or not) so far
        while True:  # each Gather reading its restore_index: a stage (Mask R-CNN has two)
            g = indexed(model, EXPORTER, g)
            dist = g.producer.get(first)
            if dist is None:
                break
            L = _levels(dist)
            if len(dist.output) != 2 * L + 1 or not dist.output[2 * L]:
                break
            for gather in _gathers(g, dist.output[2 * L]):
                if gather.output[0] in tried:
                    continue
                tried.add(gather.output[0])
                try:
                    m = match_stage(g, gather, dist)
                except NoMatch as e:
                    notes.append(f"node {node_label(gather)!r} (Gather) reads restore_index of "
                                 f"{node_label(dist)!r} like PaddleDetection's FPN RoI stage as "
                                 f"{EXPORTER} writes it but does not match it exactly ({e}); "
                                 f"left unfused")
                    continue
                new = _fused_nodes(model, g, gather, dist, m)
                n = splice(model, gather, new, [i for k in new for i in k.input])
                g = None  # the graph changed: index it afresh
                moved.append((new[0].name, f"PaddleDetection FPN RoI stage ({n} nodes)",
                              f"{DOMAIN}::DistributeRoIAlign"))
                break  # the graph changed: index it afresh
            else:
                break  # no Gather of this Distribute left to fuse
    return moved, notes


#: The mark export-paddle leaves on a node it wrote in place of one of paddle2onnx's that
#: breaks (the node's doc_string starts with it; the export's summary counts them).
REPAIRED = "ort_roi export-paddle repaired: "
_BIG = (1 << 63) - 1  # a Slice's "to the end"
_ZERO_ROWS = ("paddle2onnx's Reshape to a shape with 0 / x's dims and -1 (flatten, "
              "reshape([0, -1])), which onnxruntime refuses on 0 rows")


def _through_casts(g: GraphIndex, name: str) -> str:
    """Back through Identity nodes and Casts to int64 (paddle2onnx's ``auto.cast``)."""
    while True:
        n = g.producer.get(name)
        if n is None or not is_default(n) or n.op_type not in ("Identity", "Cast"):
            return name
        if n.op_type == "Cast" and given_attrs(n).get("to") != onnx.TensorProto.INT64:
            return name
        name = n.input[0]


def _shape_slice(g: GraphIndex, name: str, x: str) -> tuple[int, int | None] | None:
    """(start, end) of a ``Slice(Shape(x), [start], [end])`` (end None: to the end) or of
    ``Shape(x)`` itself, x's dims start..end; else None."""
    n = g.producer.get(_through_casts(g, name))
    if n is None or not is_default(n):
        return None
    if n.op_type == "Shape":
        return (0, None) if n.input[0] == x and not n.attribute else None
    if n.op_type != "Slice" or n.attribute or len(n.input) < 3:
        return None
    src = g.producer.get(_through_casts(g, n.input[0]))
    if src is None or src.op_type != "Shape" or src.input[0] != x or src.attribute:
        return None
    vals = [g.const(i) if i else None for i in n.input[1:]]
    if any(v is None or v.size != 1 for v in vals):
        return None
    start, end = int(vals[0].ravel()[0]), int(vals[1].ravel()[0])
    if len(vals) > 2 and int(vals[2].ravel()[0]) not in (0, -1):  # axes
        return None
    if len(vals) > 3 and int(vals[3].ravel()[0]) != 1:  # steps
        return None
    if start < 0 or end < start:
        return None
    return start, (None if end >= (1 << 31) - 1 else end)


def _shape_entries(g: GraphIndex, name: str, x: str) -> list[tuple] | None:
    """A Reshape's shape input as entries: ("c", v) a constant, ("d", i) x's dim i, ("tail",
    i) x's dims i.. (last only); None when it is not made of constants and slices of
    Shape(x) concatenated."""
    name = _through_casts(g, name)
    n = g.producer.get(name)
    if n is not None and is_default(n) and n.op_type == "Concat":
        parts = list(n.input)
    else:
        parts = [name]
    out: list[tuple] = []
    for p in parts:
        if out and out[-1][0] == "tail":
            return None
        c = g.const(_through_casts(g, p))
        if c is not None:
            if c.ndim > 1 or c.dtype.kind not in "iu":
                return None
            out += [("c", int(v)) for v in c.ravel()]
            continue
        s = _shape_slice(g, p, x)
        if s is None:
            return None
        out += [("tail", s[0])] if s[1] is None else [("d", i) for i in range(*s)]
    return out


def _empty_safe(g: GraphIndex, node: onnx.NodeProto,
                onnx_opset: int) -> list[onnx.NodeProto] | None:
    """The nodes to put in place of a Reshape whose shape holds a -1 beside dims copied from
    its input x (0s, or x's own dims from its Shape), which can be 0: onnxruntime cannot
    infer a -1 when the other dims' product is 0 and refuses it. The -1 is computed from x's
    Shape instead: the product of the dims nothing copies, divided by the constants, equal
    to onnxruntime's -1 wherever that is defined; the shape x's first dim and a -1 becomes
    Flatten(axis=1). None: not such a Reshape."""
    if len(node.input) != 2 or given_attrs(node).get("allowzero", 0) or onnx_opset < 10:
        return None
    x = node.input[0]
    entries = _shape_entries(g, node.input[1], x)
    if entries is None or entries.count(("c", -1)) != 1:
        return None
    k = entries.index(("c", -1))
    lead = [("d", i) if e == ("c", 0) else e for i, e in enumerate(entries[:k])]
    after = entries[k + 1:]
    if any(e != ("d", i) and not (e[0] == "c" and e[1] > 0) for i, e in enumerate(lead)):
        return None  # before the -1: x's dims where they stand, and positive constants
    if all(e[0] == "c" for e in after):
        if any(v <= 0 for _, v in after):
            return None
        j = end = None  # the -1 stands for x's dims from k on
    elif after[0][1] < k or any(e[0] == "c" or e[1] != after[0][1] + m or
                                (e[0] == "tail" and m < len(after) - 1)
                                for m, e in enumerate(after)):
        return None  # after the -1: neither constants nor one run of x's dims
    else:
        j = after[0][1]
        end = None if after[-1][0] == "tail" else after[-1][1] + 1
    if all(e[0] == "c" for e in lead + after):
        return None  # nothing copied: the other dims' product is never 0
    pre = f"{node.name or node.output[0]}/empty_safe"
    doc = REPAIRED + _ZERO_ROWS
    if lead == [("d", 0)] and not after:
        return [helper.make_node("Flatten", [x], list(node.output), name=pre + "/Flatten",
                                 axis=1, doc_string=doc)]
    inits: list[onnx.TensorProto] = []
    shape = pre + "/shape"
    nodes = [helper.make_node("Shape", [x], [shape], name=shape)]

    def const(values: list[int]) -> str:
        t = numpy_helper.from_array(np.array(values, np.int64), f"{pre}/c{len(inits)}")
        inits.append(t)
        return t.name

    def dims(start: int, stop: int | None) -> str:
        out = f"{pre}/dims_{start}_{'end' if stop is None else stop}"
        nodes.append(helper.make_node("Slice", [shape, const([start]),
                                                const([_BIG if stop is None else stop])],
                                      [out], name=out))
        return out

    def concat(parts: list[str], tag: str) -> str:
        if len(parts) == 1:
            return parts[0]
        nodes.append(helper.make_node("Concat", parts, [f"{pre}/{tag}"], name=f"{pre}/{tag}",
                                      axis=0))
        return f"{pre}/{tag}"

    # the dims nothing copies: where the lead has constants, k.. (up to the run after the
    # -1, and beyond its end)
    free = [dims(i, i + 1) for i, e in enumerate(lead) if e[0] == "c"] + [dims(k, j)]
    if end is not None:
        free.append(dims(end, None))
    nodes.append(helper.make_node("ReduceProd", [concat(free, "free")], [pre + "/prod"],
                                  name=pre + "/prod", keepdims=1))
    inferred = pre + "/prod"
    divisor = int(np.prod([v for kind, v in lead + after if kind == "c"]))
    if divisor != 1:
        nodes.append(helper.make_node("Div", [inferred, const([divisor])], [pre + "/inferred"],
                                      name=pre + "/inferred"))
        inferred = pre + "/inferred"
    parts: list[str] = []
    for i, e in enumerate(lead):  # x's dims where they stand, the constants as they are
        parts.append(dims(i, i + 1) if e[0] == "d" else const([e[1]]))
    parts.append(inferred)
    if after:
        parts.append(const([v for _, v in after]) if j is None else dims(j, end))
    new_shape = concat(parts, "new_shape")
    extra = {"allowzero": 1} if onnx_opset >= 14 else {}  # every dim literal (a 0 is a 0)
    data = x if onnx_opset >= 14 else _zeros_copy_zeros(nodes, x, new_shape, pre, const)
    nodes.append(helper.make_node("Reshape", [data, new_shape], list(node.output),
                                  name=pre + "/Reshape", doc_string=doc, **extra))
    g.graph.initializer.extend(inits)
    return nodes


def _zeros_copy_zeros(nodes: list, x: str, new_shape: str, pre: str, const) -> str:
    """Below opset 14 (no allowzero) a 0 in Reshape's shape copies the input's dim there, so a
    computed 0 (the -1 of [0, 2, -1] on [3, 0, 5]) would copy x's dim: the Reshape reads x as
    [n, 1, ..., 1] of new_shape's rank r (n = x's size), [0, 0, ..., 0] when n is 0, so that
    a 0 copies a 0 (and no dim of new_shape is 0 when n > 0). Appends the nodes; returns
    what the Reshape reads."""
    def add(op: str, inputs: list[str], tag: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [f"{pre}/{tag}"], name=f"{pre}/{tag}",
                                      **attrs))
        return f"{pre}/{tag}"

    rest = add("Sub", [add("Shape", [new_shape], "rank"), const([1])], "rest")  # [r - 1]
    column = add("Reshape", [x, add("Concat", [const([-1]), add(
        "Expand", [const([1]), rest], "ones")], "column_shape", axis=0)], "column")
    some = add("Cast", [add("Greater", [add("Size", [x], "size"), const([0])], "nonempty")],
               "some", to=onnx.TensorProto.INT64)  # [1] where x has elements, else [0]
    return add("Expand", [column, add("Concat", [const([1]), add("Expand", [some, rest],
                                                                   "somes")],
                                      "broadcast", axis=0)], "zeros_copy_zeros")


def empty_safe_reshapes(model: onnx.ModelProto) -> int:
    """Rewrite, in place, the main graph's Reshapes that paddle2onnx writes for Paddle's
    ``flatten(start, stop)`` (``Concat(Shape(x)[:start], [-1], Shape(x)[stop + 1:])``) and
    ``reshape(x, [0, ..., -1, ...])`` (a constant shape with 0s before a -1), which
    onnxruntime refuses on a tensor with no rows (``Input shape:{0,8,7,7}, requested
    shape:{0,-1}``: a RoI head on an image without boxes), where Paddle returns [0, C*h*w]:
    the -1 is computed from x's Shape (``_empty_safe``; from opset 14 with allowzero=1, so
    that a 0 is a 0; below it the Reshape reads x with dims that a 0 copies as 0,
    ``_zeros_copy_zeros``), or the Reshape becomes ``Flatten(axis=1)``. Each new Reshape or
    Flatten carries ``REPAIRED`` in its doc_string. Bit for bit the same values wherever
    onnxruntime ran the Reshape before.

    Returns:
        How many Reshapes were rewritten.
    """
    onnx_opset = opset(model) or 1
    count = 0
    for node in [n for n in model.graph.node if n.op_type == "Reshape" and is_default(n)]:
        g = GraphIndex(model.graph, onnx_opset, EXPORTER)
        new = _empty_safe(g, node, onnx_opset)
        if new is None:
            continue
        splice(model, node, new, [i for n in new for i in n.input])
        count += 1
    return count
