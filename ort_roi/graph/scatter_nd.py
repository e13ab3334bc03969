"""The ScatterND family of RoI stages, fused: per-level RoiAligns over rows that NonZero
selects, merged into zeros by a chain of ScatterND, become one PyramidRoIAlign_L{n} node.

detectron2's ``ROIPooler`` as torch.onnx writes it (TorchScript exporter, opsets 11 to 17 and
later: ``/roi_heads/box_pooler``, ``/roi_heads/mask_pooler``) is this form: the level L of
each box computed in the graph; per level l, sel = NonZero(Equal(L, l)) as a vector (the rows
of that level, in row order), the rows Gather(rois, sel), optionally Cast, their column 0 the
batch index (Cast to int64) and columns 1..4 the boxes of a RoiAlign on level l's map, the
pooled result (through a Reshape to [len(sel), *zeros.shape[1:]], which changes nothing)
written into the zeros [rows, C, H, W] at Unsqueeze(sel, -1) by ScatterND, the levels chained.
MMDeploy's onnxruntime export of MMDetection's ``SingleRoIExtractor`` is this form with
padding rows, the boxes' offset and a final Slice (``scatter_nd_pad``); MMRotate's
``RotatedSingleRoIExtractor`` (MMDeploy's onnxruntime config) is this form over
``MMCVRoIAlignRotated`` reading the Gathered rows [k, 6] whole: one PyramidRotatedRoIAlign_L{n}.
A chain merging fewer levels than its Clip allows gets a note (``_levels_left_out``).

``fuse`` recognises the computation, not the names: every node on the matched paths is checked
with its whole attribute set (``GraphIndex.made_by``), every constant it reads is checked, and
the rewritten node computes exactly what onnxruntime computes from the subgraph: the graph's
own level of each box (the nodes computing it stay: the assignment is bit-identical, whatever
rule wrote it), rows no level selects stay zero (PyramidRoIAlign writes 0 where the level is
outside 0 .. n-1), each row pooled from its level's map at that level's scale, aligned as the
graph's RoiAligns say (coordinate_transformation_mode half_pixel: aligned=1; output_half_pixel,
the only mode before opset 16: aligned=0). A chain that starts like the family (RoiAlign
results scattered into zeros) but differs is left as it is, with a note naming its first
ScatterND and the part that differed.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from ..errors import node_label
from ..ops import form
from ..ops.pyramid_roi_align import SPECS as PYRAMID_SPECS
from ..ops.pyramid_rotated_roi_align import SPECS as ROTATED_SPECS
from ..spec import DOMAIN, MAX_LEVELS
from . import scatter_nd_pad as pad
from .stages import (fused_name, is_positive_zero, level_roi_align, level_rotated,
                     matched_or_noted, merge_chain, pooled_by_roi_align, selected_level)
from .toolkit import (GraphIndex, NoMatch, anything, check_attrs, declared_attrs, indexed,
                      is_default, splice)

#: How notes and NoMatch messages name the form.
FAMILY = ("the ScatterND family of RoI stages (detectron2's ROIPooler, MMDeploy's "
          "SingleRoIExtractor, MMRotate's RotatedSingleRoIExtractor)")


@dataclass
class NdStage:
    """A matched stage of the ScatterND family."""

    last: onnx.NodeProto  # the last ScatterND (MMDeploy's: the Slice after it): the stage's
    rois: str  # rois [K, 5], before the Cast (if any) every level's rows go through
    cast: int | None  # that Cast's type
    levels: str  # the level of each row (int32 / int64)
    feats: list[str]  # the feature map of each level, level 0 first
    attrs: dict  # PyramidRoIAlign's attributes
    offsets: list | None = None  # each level's constant added to its boxes (MMDeploy's)
    rotated: bool = False  # MMCVRoIAlignRotated per level (MMRotate's extractor)


def _producer(g: GraphIndex, name: str, *ops: str) -> onnx.NodeProto | None:
    n = g.producer.get(name)
    return n if n is not None and n.op_type in ops and is_default(n) else None


def _other_roi(g: GraphIndex, updates: str) -> onnx.NodeProto | None:
    """A RoI node of another form than ONNX RoiAlign whose result (through a Reshape or not) a
    ScatterND writes, else None."""
    n = g.producer.get(updates)
    if n is not None and n.op_type == "Reshape" and is_default(n):
        n = g.producer.get(n.input[0])
    return n if n is not None and form(n.domain, n.op_type) is not None else None


def _other_roi_merge_note(g: GraphIndex, first: onnx.NodeProto,
                          chain: list[onnx.NodeProto]) -> list[str]:
    """A note where a ScatterND chain merges the results of a RoI node of another form than
    ONNX RoiAlign (MMDeploy's PPLNN export: mmcv::MMCVRoiAlign merged the same way), else
    none."""
    other = [n for n in (_other_roi(g, s.input[2]) for s in chain) if n is not None]
    if not other:
        return []
    op = f"{other[0].domain}::{other[0].op_type}"
    return [f"node {node_label(first)!r} (ScatterND) merges the results of {op} "
            f"({node_label(other[0])!r}) as {FAMILY} merges RoiAligns; ort_roi fuses that form "
            f"only over ONNX RoiAlign and MMCVRoIAlignRotated: left node by node (each "
            f"{other[0].op_type} runs on ort_roi's kernel)"]


#: The rotated RoIAlign nodes a level of MMRotate's extractor pools with (their form's spec
#: reads their attributes).
ROTATED = frozenset({("mmdeploy", "MMCVRoIAlignRotated"), ("mmcv", "MMCVRoIAlignRotated")})


def _pooled(g: GraphIndex, name: str) -> tuple[onnx.NodeProto | None, onnx.NodeProto | None]:
    """What a merge of the family writes: (the ONNX RoiAlign or MMCVRoIAlignRotated computing
    ``name``, the Reshape between them or None); (None, None) for anything else."""
    return pooled_by_roi_align(g, name, "Reshape", also=ROTATED)


def find_stages(model: onnx.ModelProto, g: GraphIndex | None = None
                ) -> tuple[list[NdStage], list[str]]:
    """Every stage of the ScatterND family in the main graph, and a note for each chain that
    starts like one (RoiAlign results scattered into zeros by ScatterND) but does not match.
    ``g``: the graph's index as it is (``rewrite``'s), else it is indexed here."""
    g = indexed(model, "torch.onnx", g)
    stages, notes = [], []
    for node in model.graph.node:
        if node.op_type != "ScatterND" or not is_default(node) \
                or _producer(g, node.input[0], "ScatterND") is not None:
            continue  # not the first merge of a chain
        chain = merge_chain(g, node, also=frozenset({"Shape"}))  # the next Reshape's shape
        if not any(_pooled(g, s.input[2])[0] is not None for s in chain):
            notes += _other_roi_merge_note(g, node, chain)
            continue  # a scatter of something else: none of our business
        if _producer(g, node.input[0], "ConstantOfShape") is None \
                and _producer(g, node.input[2], "RoiAlign"):
            continue  # torch.onnx's dynamo form of torchvision's stage: fusion.py's note
        notes += _levels_left_out(g, node, chain)
        op = next(p.op_type for p in (_pooled(g, s.input[2])[0] for s in chain) if p is not None)
        each = ("each RoiAlign still moved" if op == "RoiAlign"
                else f"each {op} runs on ort_roi's kernel")
        matched_or_noted(
            lambda: _match(g, chain), stages, notes,
            lambda why: f"node {node_label(node)!r} (ScatterND) merges {op} results into "
                        f"zeros as {FAMILY} does, but does not match it exactly ({why}); left "
                        f"node by node ({each})")
    return stages, notes


def _levels_left_out(g: GraphIndex, first: onnx.NodeProto, chain: list[onnx.NodeProto]
                     ) -> list[str]:
    """A note where the chain merges into zeros fewer levels than its levels can be
    (Cast(Clip(x, 0, hi)): 0 .. hi): the others' rows come out 0; else none."""
    if _producer(g, first.input[0], "ConstantOfShape") is None:
        return []  # not merged into zeros (a rows left out would not come out 0)
    levels, found = None, []
    for s in chain:
        try:
            sel = _index(g, s.input[1])
            ra = _pooled(g, s.input[2])[0]
            if ra is not None and ra.op_type != "RoiAlign":
                _rotated_rows(g, ra, sel)  # (the rois' rank, as the node reads them)
            level, levels = _level_of(g, sel, levels)
        except NoMatch:
            return []
        found.append(level)
    cast = _producer(g, levels, "Cast")
    clip = _producer(g, cast.input[0] if cast is not None else levels, "Clip")
    lo, hi = ((g.const(clip.input[k]) if len(clip.input) > k and clip.input[k] else None)
              for k in (1, 2)) if clip is not None else (None, None)
    if lo is None or hi is None or lo.size != 1 or hi.size != 1 or lo.ravel()[0] != 0 \
            or not np.isfinite(hi.ravel()[0]):
        return []
    top = int(hi.ravel()[0])
    missing = sorted(set(range(top + 1)) - set(found))
    if not missing or top > MAX_LEVELS:
        return []
    return [f"node {node_label(first)!r} (ScatterND) merges the pooled rows of level(s) "
            f"{sorted(found)} only, while the levels it selects from run 0 .. {top} (Clip "
            f"{node_label(clip)!r}): rows of level(s) {missing} come out 0, as the graph says. "
            f"Such a graph holds only the levels that had rois when it was traced (an "
            f"extractor that pools a level only if it has rois, as MMRotate's "
            f"RotatedSingleRoIExtractor, traced on an input whose rois missed some levels), so "
            f"it pools fewer levels than the model: re-export it with rois on every level "
            f"during the trace (docs/exporters.md, MMRotate)"]


def _rotated_rows(g: GraphIndex, node: onnx.NodeProto, sel: str) -> tuple[str, int | None]:
    """The rows an MMCVRoIAlignRotated of level selection ``sel`` (the vector
    Squeeze(Transpose(NonZero(...)))) reads: [Cast](Gather(rois, sel, axis 0)), whole. It
    refuses any rank but 2, which a Gather of a vector's rows keeps: the rois are a matrix
    wherever the graph runs (``GraphIndex.read_as``). Returns (rois, the Cast's type)."""
    src, cast, rows_sel = _rows(g, node.input[1])
    if rows_sel != sel:
        raise NoMatch(f"MMCVRoIAlignRotated {node_label(node)!r} pools other rows than the "
                      f"ones scattered to its level")
    g.made_by(g.made_by(_vector(g, sel, 1), "Transpose", perm=[1, 0]).input[0], "NonZero")
    g.read_as(src, 2)
    return src, cast


def _vector(g: GraphIndex, name: str, axis: int) -> str:
    """name = Squeeze(Split | Slice(x, 0:1 on ``axis``), [axis]): x's first column (axis 1)
    or row as a vector. Returns x."""
    squeeze = g.operand(name, "Squeeze", "axes", 1, [axis])
    n = g.producer.get(squeeze.input[0])
    if n is not None and n.op_type == "Transpose":  # [k, 1] squeezed itself (MMDeploy's)
        return squeeze.input[0]
    if n is not None and n.op_type == "Slice":
        sl = g.made_by(squeeze.input[0], "Slice")
        for k, want in ((1, [0]), (2, [1]), (3, [axis])):
            g.const_is(sl, k, want)
        if len(sl.input) > 4 and sl.input[4]:
            g.const_is(sl, 4, [1])
        return sl.input[0]
    split = g.operand(squeeze.input[0], "Split", "split", 1, [1], axis=axis)
    if len(split.output) != 1:
        raise NoMatch(f"Split {node_label(split)!r} has {len(split.output)} outputs where "
                      f"torch.onnx writes 1")
    return split.input[0]


def _level_of(g: GraphIndex, sel: str, levels: str | None) -> tuple[int, str]:
    """The level a selection is, as torch.nonzero(levels == l) (detectron2's nonzero_tuple)
    writes it: the one column of Transpose(NonZero(Equal(levels, l))) as a vector, the rows
    of that level in row order. Returns (l, the levels tensor)."""
    nz = g.made_by(g.made_by(_vector(g, sel, 1), "Transpose", perm=[1, 0]).input[0], "NonZero")
    eq = g.made_by(nz.input[0], "Equal")
    for a, b in ((eq.input[0], eq.input[1]), (eq.input[1], eq.input[0])):
        v = g.const(b)
        if v is not None and v.size == 1 and v.dtype in (np.int32, np.int64):
            return selected_level(g, eq, v, a, levels)
    raise NoMatch(f"Equal {node_label(eq)!r} does not compare with a constant int32 / int64 "
                  f"level")


def _index(g: GraphIndex, name: str) -> str:
    """name = Unsqueeze(sel, [-1]) (or [1]): the scatter's index [k, 1]; returns sel."""
    if "axes" in declared_attrs("Unsqueeze", "", g.opset):
        return g.made_by(name, "Unsqueeze", axes=lambda v: list(v) in ([-1], [1])).input[0]
    n = g.made_by(name, "Unsqueeze")
    axes = g.const(n.input[1]) if len(n.input) > 1 else None
    if axes is None or axes.tolist() not in ([-1], [1]):
        raise NoMatch(f"Unsqueeze {node_label(n)!r} does not make the scatter's index [k, 1] "
                      f"(axes {None if axes is None else axes.tolist()})")
    return n.input[0]


def _columns(g: GraphIndex, name: str, cols: list[int]) -> str:
    """name = Gather(rows, cols, axis 1): rows."""
    pick = g.made_by(name, "Gather", axis=1)
    g.const_is(pick, 1, cols)
    return pick.input[0]


def _rows(g: GraphIndex, name: str) -> tuple[str, int | None, str]:
    """name = [Cast(to)](Gather(rois, sel, axis 0)): (rois, to or None, sel)."""
    cast = _producer(g, name, "Cast")
    to = None
    if cast is not None:
        to = check_attrs(cast, g.opset, g.exporter, to=anything)["to"]
        name = cast.input[0]
    rows = g.made_by(name, "Gather", axis=0)
    return rows.input[0], to, rows.input[1]


def _pooled_rows(g: GraphIndex, ra: onnx.NodeProto) -> tuple[str, int | None, str, object]:
    """The rows a RoiAlign pools: boxes columns 1..4 (plus a constant: MMDeploy's offset) and
    batch indices Cast(int64) of Squeeze(column [0], [1]) of the same selected rows. Returns
    (rois, cast, sel, the offset or None)."""
    boxes, shift = pad.boxes_plus_offset(g, ra.input[1])
    rows = _columns(g, boxes, [1, 2, 3, 4])
    batch = g.made_by(ra.input[2], "Cast", to=onnx.TensorProto.INT64)
    squeeze = g.operand(batch.input[0], "Squeeze", "axes", 1, [1])
    if _columns(g, squeeze.input[0], [0]) != rows:
        raise NoMatch(f"RoiAlign {node_label(ra)!r} reads its batch indices from other rows "
                      f"than its boxes")
    return (*_rows(g, rows), shift)


def _is_shape_of(g: GraphIndex, name: str, k: int, of: set[str]) -> str:
    """name = Unsqueeze(Gather(Shape(x), k), [0]) with x in ``of`` (for k = 0 also a tensor
    of their rows, ``GraphIndex.same_rows``: Double-Head's second call sizes its zeros by the
    rois its levels are computed from): x."""
    gather = g.made_by(g.operand(name, "Unsqueeze", "axes", 1, [0]).input[0], "Gather", axis=0)
    g.const_is(gather, 1, k)
    x = g.made_by(gather.input[0], "Shape").input[0]
    if x not in of and not (k == 0 and any(g.same_rows(x) & g.same_rows(t) for t in of)):
        raise NoMatch(f"the zeros' dimension {k} is that of {x!r}, not of {sorted(of)}")
    return x


def _channels(g: GraphIndex, feat: str) -> int | None:
    """A feature map's channel count where the graph says it: its declared type, or the
    weights of the Conv computing it; else None."""
    for vi in list(g.graph.input) + list(g.graph.value_info) + list(g.graph.output):
        if vi.name == feat:
            dims = vi.type.tensor_type.shape.dim
            if len(dims) == 4 and dims[1].HasField("dim_value"):
                return dims[1].dim_value
    conv = _producer(g, feat, "Conv")
    w = g.const(conv.input[1]) if conv is not None else None
    return int(w.shape[0]) if w is not None and w.ndim == 4 else None


def _check_zeros(g: GraphIndex, name: str, rows: set[str], pooled: set[str], attrs: dict,
           feats: list[str]) -> None:
    """name = zeros [rows, C, H, W] of float 0: ConstantOfShape(Concat(dims)), dim 0 that of
    the rois or the levels, the others those of a pooled result or constants equal to them
    (C: the maps' channels, as the graph declares them)."""
    cos = g.made_by(name, "ConstantOfShape", value=is_positive_zero)
    concat = g.made_by(cos.input[0], "Concat", axis=0)
    if len(concat.input) != 4:
        raise NoMatch(f"Concat {node_label(concat)!r} makes a shape of {len(concat.input)} "
                      f"dimensions, not [rows, C, H, W]")
    _is_shape_of(g, concat.input[0], 0, rows)
    channels = {_channels(g, f) for f in feats}
    for k, (dim, want) in enumerate(zip(concat.input[1:], (
            channels.pop() if len(channels) == 1 else None, attrs["output_height"],
            attrs["output_width"])), 1):
        v = g.const(dim)
        if v is None:
            _is_shape_of(g, dim, k, pooled)
        elif v.shape != (1,) or want is None or int(v[0]) != want:
            role = ("the maps' channels", "output_height", "output_width")[k - 1]
            what = (f"{role} (which the graph does not declare)" if want is None
                    else f"{want} ({role})")
            raise NoMatch(f"the zeros' dimension {k} is the constant {v.tolist()}, not {what}")


def _reshape_is_identity(g: GraphIndex, reshape: onnx.NodeProto, sel: str,
                         merged: set[str]) -> None:
    """The Reshape of a level's pooled result to Concat(Shape(sel), Shape(x)[1:]), x the zeros
    or a merge before (all [rows, C, H, W]): [len(sel), C, H, W], the pooled shape itself once
    the zeros' dimensions are checked."""
    check_attrs(reshape, g.opset, g.exporter, allowzero=0)
    concat = g.made_by(reshape.input[1], "Concat", axis=0)
    if len(concat.input) != 2:
        raise NoMatch(f"Concat {node_label(concat)!r} joins {len(concat.input)} parts of the "
                      f"pooled shape where torch.onnx writes 2")
    if g.made_by(concat.input[0], "Shape").input[0] != sel:
        raise NoMatch(f"Reshape {node_label(reshape)!r} reshapes to another count of rows "
                      f"than its level selects")
    sl = g.made_by(concat.input[1], "Slice")
    g.const_is(sl, 1, [1])
    end, axes = g.const(sl.input[2]), g.const(sl.input[3]) if len(sl.input) > 3 else None
    if end is None or end.shape != (1,) or int(end[0]) < 4 or (axes is not None
                                                               and axes.tolist() != [0]):
        raise NoMatch(f"Slice {node_label(sl)!r} does not take dimensions 1: of a shape")
    if len(sl.input) > 4 and sl.input[4]:
        g.const_is(sl, 4, [1])
    if g.made_by(sl.input[0], "Shape").input[0] not in merged:
        raise NoMatch(f"Reshape {node_label(reshape)!r} reshapes to the shape of another "
                      f"tensor than the merge's")


def _match(g: GraphIndex, chain: list[onnx.NodeProto]) -> NdStage:
    if not 1 < len(chain) <= MAX_LEVELS:
        raise NoMatch(f"{len(chain)} levels merged: ort_roi fuses 2 to {MAX_LEVELS}")
    levels = rois = None
    found, attrs, casts, pooled, offsets, kinds = {}, None, set(), set(), {}, {}
    merged = {chain[0].input[0]}
    for s in chain:
        check_attrs(s, g.opset, g.exporter, reduction="none")
        ra, reshape = _pooled(g, s.input[2])
        if ra is None:
            raise NoMatch(f"ScatterND {node_label(s)!r} scatters {s.input[2]!r}, not a "
                          f"RoiAlign's result")
        if kinds.setdefault("rotated", ra.op_type != "RoiAlign") != (ra.op_type != "RoiAlign"):
            raise NoMatch(f"{ra.op_type} {node_label(ra)!r} pools one level, another kind of "
                          f"node the others")
        if kinds["rotated"]:
            attrs, scale = level_rotated(g, ra, attrs)
        else:
            attrs, scale = level_roi_align(g, ra, attrs)
        sel = _index(g, s.input[1])
        if kinds["rotated"]:  # whole rows [k, 6]: Gather(rois, sel)
            (src, cast), sel2, shift = _rotated_rows(g, ra, sel), sel, None
        else:
            src, cast, sel2, shift = _pooled_rows(g, ra)
        level, levels = _level_of(g, sel, levels)
        offsets[level] = shift
        if rois is not None and src != rois:
            raise NoMatch(f"RoiAlign {node_label(ra)!r} pools rows of {src!r}, another level "
                          f"rows of {rois!r}")
        rois = src
        casts.add(cast)
        if sel2 != sel:
            raise NoMatch(f"RoiAlign {node_label(ra)!r} pools other rows than the ones "
                          f"scattered to level {level}")
        if reshape is not None:
            _reshape_is_identity(g, reshape, sel, merged)
        if level in found:
            raise NoMatch(f"level {level} is merged twice")
        found[level] = (ra.input[0], scale)
        pooled.add(ra.output[0])
        merged.add(s.output[0])
    if sorted(found) != list(range(len(chain))):
        raise NoMatch(f"levels {sorted(found)} are not 0 .. {len(chain) - 1}")
    if len(casts) != 1:
        raise NoMatch(f"the levels' rows are cast differently ({sorted(casts, key=str)})")
    feats = [found[i][0] for i in range(len(chain))]
    zeros, out = chain[0].input[0], chain[-1]
    unpadded = pad.unpad(g, zeros, rois, levels, out, is_positive_zero)
    if unpadded is not None:
        zeros, rois, levels, out = unpadded
    _check_zeros(g, zeros, {rois, levels}, pooled, attrs, feats)
    g.rows_agree(levels, rois)
    attrs.update({f"spatial_scale_{i}": found[i][1] for i in range(len(chain))})
    shifts = [offsets[i] for i in range(len(chain))]
    return NdStage(out, rois, casts.pop(), levels, feats, attrs,
                   shifts if any(c is not None for c in shifts) else None, kinds["rotated"])


def fuse(model: onnx.ModelProto, g: GraphIndex | None = None
         ) -> tuple[list[tuple[str, int]], list[str]]:
    """Replace every stage of the ScatterND family in the main graph, in place, with one
    PyramidRoIAlign_L{n} node (the rows' Cast, if any, kept once on the rois); returns
    ([(the new node's name, the nodes it replaced)], notes). ``g``: the graph's index as it
    is (``rewrite``'s), else it is indexed here."""
    stages, notes = find_stages(model, g)
    done = []
    for st in stages:
        spec = (ROTATED_SPECS if st.rotated else PYRAMID_SPECS)[len(st.feats)]
        name = fused_name(st.last, spec.name)
        new, rois = ([], st.rois) if st.rotated else indexed(  # (rotated: whole rows, as read)
            model, "torch.onnx", g).first_columns(st.rois, 5, name)
        if st.cast is not None:  # Cast(Gather(rois, sel)) = Gather(Cast(rois), sel)
            new.append(helper.make_node("Cast", [rois], [f"{name}/rois"], name=f"{name}/Cast",
                                        to=st.cast))
            rois = f"{name}/rois"
        if st.offsets is not None:  # each row's boxes plus its level's offset
            new += pad.shifted(f"{name}/shifted", rois, st.levels, st.offsets)
            rois = f"{name}/shifted"
        inputs = [rois, st.levels, *st.feats]
        new.append(helper.make_node(spec.name, inputs, [st.last.output[0]], name=name,
                                    domain=DOMAIN, **{k: st.attrs[k] for k in sorted(st.attrs)}))
        done.append((name, splice(model, st.last, new, [st.rois, st.levels, *st.feats])))
    return done, notes
