"""The nodes that compute the ops ``paddle_export``'s child cut out of Paddle's program
(paddle2onnx cannot export them): ``ort_roi::GenerateProposals``,
``DistributeFpnProposals_L{L}``, ``CollectFpnProposals_L{L}``, and ``multiclass_nms3`` as
standard ONNX nodes (NonMaxSuppression, exact to Paddle's). ``join_cuts`` splices them where
the child left graph inputs standing for their results."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import RoiOpError
from ..spec import DOMAIN

OP = "paddle_export"


def join_cuts(graph: onnx.GraphProto, cuts: Sequence[dict], fetched: list[str],
               standard: bool) -> list[onnx.NodeProto]:
    """The nodes computing each cut op's results (graph inputs until now, dropped) from its
    inputs (fetched as graph outputs, already dropped)."""
    nodes: list[onnx.NodeProto] = []
    joined: set[str] = set()
    for k, cut in enumerate(cuts):
        ins = [None if i is None else [fetched[j] for j in i] if isinstance(i, list)
               else fetched[i] for i in cut["inputs"]]  # a list: a vector input's elements
        outs = cut["outputs"]
        pre = f"paddle_{cut['op']}_{k}"
        if standard and cut["op"] != "multiclass_nms3":
            raise RoiOpError(OP, f"op '{cut['op']}'", "has no standard ONNX form; export "
                             "without standard=True and run the model with "
                             "ort_roi.session_options()")
        if cut["op"] == "generate_proposals":
            nodes.append(_generate_proposals(cut["attrs"], ins, outs, pre))
        elif cut["op"] == "distribute_fpn_proposals":
            nodes += _distribute(cut["attrs"], ins, outs, pre)
        elif cut["op"] == "collect_fpn_proposals":
            nodes += _collect(cut["attrs"], ins, outs, pre)
        else:
            nodes += multiclass_nms3(cut["attrs"], ins, outs, cut["ranks"], pre)
        joined.update(n for o in outs for n in (o if isinstance(o, list) else [o]) if n)
    kept = [i for i in graph.input if i.name not in joined]
    del graph.input[:]
    graph.input.extend(kept)
    return nodes


def _names(outs: list, pre: str) -> list[str]:
    """Node output names: the cut's names, unused results given throwaway names."""
    return [o or f"{pre}/unused_{j}" for j, o in enumerate(outs)]


def _generate_proposals(a: dict, ins: list, outs: list, pre: str) -> onnx.NodeProto:
    """``ort_roi::GenerateProposals``: inputs scores, bbox_deltas, im_shape, anchors,
    variances; outputs rpn_rois [R, 4], rpn_roi_probs [R, 1], rpn_rois_num [N] int32."""
    return helper.make_node(
        "GenerateProposals", ins, _names(outs, pre), name=pre, domain=DOMAIN,
        pre_nms_top_n=int(a["pre_nms_top_n"]), post_nms_top_n=int(a["post_nms_top_n"]),
        nms_thresh=float(a["nms_thresh"]), min_size=float(a["min_size"]),
        eta=float(a["eta"]), pixel_offset=int(a["pixel_offset"]))


def _distribute(a: dict, ins: list, outs: list, pre: str) -> list[onnx.NodeProto]:
    """``ort_roi::DistributeFpnProposals_L{L}``: inputs fpn_rois, rois_num (int32: Paddle's
    program may hold it as int64, a shape); outputs the L levels' rois, their L counts [N]
    int32, restore_index [R, 1] int32."""
    L = int(a["max_level"]) - int(a["min_level"]) + 1
    if ins[1] is None:
        raise RoiOpError(OP, "op 'distribute_fpn_proposals'", "has no rois_num input "
                         "(ort_roi's DistributeFpnProposals needs the per-image counts)")
    rois = outs[0] if outs[0] is not None else [None] * L
    nums = outs[1] if outs[1] is not None else [None] * L
    names = _names(list(rois) + list(nums) + [outs[2]], pre)
    return [helper.make_node("Cast", [ins[1]], [pre + "/rois_num"], to=TensorProto.INT32),
            helper.make_node(
                f"DistributeFpnProposals_L{L}", [ins[0], pre + "/rois_num"], names, name=pre,
                domain=DOMAIN, min_level=int(a["min_level"]), max_level=int(a["max_level"]),
                refer_level=int(a["refer_level"]), refer_scale=int(a["refer_scale"]),
                pixel_offset=int(a["pixel_offset"]))]


def _collect(a: dict, ins: list, outs: list, pre: str) -> list[onnx.NodeProto]:
    """``ort_roi::CollectFpnProposals_L{L}``: inputs the L levels' rois, their scores, their
    counts per image (int32, as Paddle's kernel reads them); outputs fpn_rois [K, 4],
    rois_num [N] int32."""
    rois, scores, nums = ins
    if nums is None:
        raise RoiOpError(OP, "op 'collect_fpn_proposals'", "has no multi_level_rois_num input "
                         "(ort_roi's CollectFpnProposals needs the per-image counts)")
    L = len(rois)
    casts = [helper.make_node("Cast", [n], [f"{pre}/rois_num_{i}"], to=TensorProto.INT32)
             for i, n in enumerate(nums)]
    top = a["post_nms_topn"] if "post_nms_topn" in a else a["post_nms_topN"]
    return casts + [helper.make_node(
        f"CollectFpnProposals_L{L}", list(rois) + list(scores) + [c.output[0] for c in casts],
        _names(outs, pre), name=pre, domain=DOMAIN, post_nms_topN=int(top))]


def multiclass_nms3(a: dict, ins: list, outs: list, ranks: list,
                     pre: str) -> list[onnx.NodeProto]:
    """Paddle's multiclass_nms3 on [M, C, 4] boxes and [M, C] scores of one image as standard
    nodes: ONNX NonMaxSuppression with each class a batch (its greedy pass, strict
    thresholds, IoU arithmetic and ties broken by index are Paddle's), the best keep_top_k of
    what it keeps (ties: the lower label, then box), in Paddle's order (label, then box
    index). Outputs out [K, 6] (label, score, x1, y1, x2, y2), index [K, 1] int32
    (box * C + label, Paddle's), nms_rois_num [1] int32.

    Boxes of zero area are Paddle's too: its IoU of two such boxes that touch (closed
    intervals) is 0 / 0, NaN, and ``NaN <= threshold`` is false, so the later one is
    suppressed; ONNX's IoU of a zero-area box is 0 (kept). A zero-area box never suppresses
    nor is suppressed by one of positive area in either (their IoU is 0), so they run as a
    second NonMaxSuppression, on the zero-area candidates only, with IoU threshold 0 and
    each coordinate replaced by its dense rank among the boxes' coordinates on its axis
    (Unique: order and equality kept; exact in float32 below 2**22 distinct values) widened
    by 1/4: two boxes then overlap (IoU > 0) exactly where the originals touch. (Large box
    deltas make many such boxes: a random-weight R50-FPN had 294 zero-area candidates; the
    single pass kept 42 of them where Paddle keeps 6.) Exact for boxes with x1 <= x2 and
    y1 <= y2 (decoded boxes are); differs from Paddle with no detection at all (Paddle
    [1, 1] of -1 when the index output is not asked for)."""
    where = "op 'multiclass_nms3'"
    if ranks[0] != 3 or ranks[1] != 2:
        raise RoiOpError(OP, where, f"boxes of rank {ranks[0]} and scores of rank {ranks[1]}:"
                         " only the per-class form (boxes [M, C, 4], scores [M, C], one image)"
                         " is written")
    if int(a["nms_top_k"]) > -1 or float(a["nms_eta"]) != 1.0 or not a["normalized"]:
        raise RoiOpError(OP, where, f"nms_top_k={a['nms_top_k']}, nms_eta={a['nms_eta']}, "
                         f"normalized={a['normalized']}: only nms_top_k=-1, nms_eta=1, "
                         "normalized=True have an exact ONNX form")
    boxes, scores = ins[0], ins[1]
    p = pre
    o_out, o_index, o_num = _names(list(outs) + [None] * (3 - len(outs)), pre)[:3]
    i64 = lambda name, v: const(name, np.array(v, np.int64))  # noqa: E731
    f32 = lambda name, v: const(name, np.array(v, np.float32))  # noqa: E731
    nodes = [
        i64(p + "/one", 1), i64(p + "/ax1", [1]), i64(p + "/ax0", 0), i64(p + "/zero_i", [0]),
        helper.make_node("Transpose", [boxes], [p + "/boxes_cm"], perm=[1, 0, 2]),
        helper.make_node("Transpose", [scores], [p + "/scores_cm"], perm=[1, 0]),
        helper.make_node("Unsqueeze", [p + "/scores_cm", p + "/ax1"], [p + "/scores_c1m"]),
        helper.make_node("Shape", [scores], [p + "/sshape"]),
        helper.make_node("Gather", [p + "/sshape", p + "/ax0"], [p + "/M"], axis=0),
        helper.make_node("Gather", [p + "/sshape", p + "/one"], [p + "/C"], axis=0),
    ]
    s_in = p + "/scores_c1m"
    bg = int(a["background_label"])
    if bg >= 0:  # Paddle skips that label: its scores are set below any threshold
        nodes += [
            i64(p + "/zero", 0),
            helper.make_node("Range", [p + "/zero", p + "/C", p + "/one"], [p + "/labels"]),
            i64(p + "/bg", bg),
            helper.make_node("Equal", [p + "/labels", p + "/bg"], [p + "/isbg"]),
            i64(p + "/c11", [-1, 1, 1]),
            helper.make_node("Reshape", [p + "/isbg", p + "/c11"], [p + "/isbg3"]),
            f32(p + "/ninf", -np.inf),
            helper.make_node("Where", [p + "/isbg3", p + "/ninf", s_in], [p + "/scores_nobg"]),
        ]
        s_in = p + "/scores_nobg"
    # zero-area boxes apart (Paddle: two that touch have IoU NaN, the later suppressed)
    b = p + "/boxes_cm"
    nodes += [
        i64(p + "/cx", [0, 2]), i64(p + "/cy", [1, 3]),
        helper.make_node("Gather", [b, p + "/cx"], [p + "/xs"], axis=2),  # [C, M, 2]
        helper.make_node("Gather", [b, p + "/cy"], [p + "/ys"], axis=2),
        i64(p + "/c0", [0]), i64(p + "/c2", [2]), i64(p + "/ax2", [2]),
        helper.make_node("Slice", [p + "/xs", p + "/ax1", p + "/c2", p + "/ax2"], [p + "/x2"]),
        helper.make_node("Slice", [p + "/xs", p + "/c0", p + "/ax1", p + "/ax2"], [p + "/x1"]),
        helper.make_node("Slice", [p + "/ys", p + "/ax1", p + "/c2", p + "/ax2"], [p + "/y2"]),
        helper.make_node("Slice", [p + "/ys", p + "/c0", p + "/ax1", p + "/ax2"], [p + "/y1"]),
        helper.make_node("Sub", [p + "/x2", p + "/x1"], [p + "/w"]),
        helper.make_node("Sub", [p + "/y2", p + "/y1"], [p + "/h"]),
        helper.make_node("Mul", [p + "/w", p + "/h"], [p + "/area"]),  # [C, M, 1]
        f32(p + "/fzero", 0.0),
        helper.make_node("Greater", [p + "/area", p + "/fzero"], [p + "/pos"]),
        helper.make_node("Transpose", [p + "/pos"], [p + "/pos_c1m"], perm=[0, 2, 1]),
        f32(p + "/ninf_z", -np.inf),
        helper.make_node("Where", [p + "/pos_c1m", s_in, p + "/ninf_z"], [p + "/s_pos"]),
        helper.make_node("Where", [p + "/pos_c1m", p + "/ninf_z", s_in], [p + "/s_zero"]),
        f32(p + "/sthr0", float(a["score_threshold"])),
        # the zero-area candidates' coordinates as their dense ranks on their axis (Unique
        # on those alone: a leading 0 keeps it from being empty), widened by 1/4; the other
        # boxes' coordinates 0 (their scores are -inf there)
        helper.make_node("Greater", [p + "/s_zero", p + "/sthr0"], [p + "/zc"]),
        i64(p + "/flat1", [-1]),
        helper.make_node("Reshape", [p + "/zc", p + "/flat1"], [p + "/zc_f"]),
        helper.make_node("NonZero", [p + "/zc_f"], [p + "/zi_1k"]),
        i64(p + "/col1", [-1, 1]),
        helper.make_node("Reshape", [p + "/zi_1k", p + "/col1"], [p + "/zi"]),  # [K, 1]
        i64(p + "/rows2", [-1, 2]),
        helper.make_node("Reshape", [p + "/xs", p + "/rows2"], [p + "/xs_r"]),  # [C*M, 2]
        helper.make_node("Reshape", [p + "/ys", p + "/rows2"], [p + "/ys_r"]),
        helper.make_node("GatherND", [p + "/xs_r", p + "/zi"], [p + "/zx"]),  # [K, 2]
        helper.make_node("GatherND", [p + "/ys_r", p + "/zi"], [p + "/zy"]),
        f32(p + "/lead", [0.0]),
        helper.make_node("Reshape", [p + "/zx", p + "/flat1"], [p + "/zx_f"]),
        helper.make_node("Reshape", [p + "/zy", p + "/flat1"], [p + "/zy_f"]),
        helper.make_node("Concat", [p + "/lead", p + "/zx_f"], [p + "/zx_l"], axis=0),
        helper.make_node("Concat", [p + "/lead", p + "/zy_f"], [p + "/zy_l"], axis=0),
        helper.make_node("Unique", [p + "/zx_l"], [p + "/ux", "", p + "/rx_l", ""], sorted=1),
        helper.make_node("Unique", [p + "/zy_l"], [p + "/uy", "", p + "/ry_l", ""], sorted=1),
        i64(p + "/big", [1 << 62]),
        helper.make_node("Slice", [p + "/rx_l", p + "/ax1", p + "/big"], [p + "/rx"]),
        helper.make_node("Slice", [p + "/ry_l", p + "/ax1", p + "/big"], [p + "/ry"]),
        helper.make_node("Reshape", [p + "/rx", p + "/rows2"], [p + "/rx2"]),
        helper.make_node("Reshape", [p + "/ry", p + "/rows2"], [p + "/ry2"]),
        helper.make_node("Cast", [p + "/rx2"], [p + "/rxf"], to=TensorProto.FLOAT),
        helper.make_node("Cast", [p + "/ry2"], [p + "/ryf"], to=TensorProto.FLOAT),
        f32(p + "/widen", [-0.25, 0.25]),
        helper.make_node("Add", [p + "/rxf", p + "/widen"], [p + "/rxw"]),
        helper.make_node("Add", [p + "/ryf", p + "/widen"], [p + "/ryw"]),
        helper.make_node("Concat", [p + "/rxw", p + "/ryw"], [p + "/zxy"], axis=1),  # [K, 4]
        helper.make_node("Shape", [p + "/xs_r"], [p + "/rows_shape"]),
        i64(p + "/c4", [4]),
        helper.make_node("Slice", [p + "/rows_shape", p + "/c0", p + "/ax1"], [p + "/CM"]),
        helper.make_node("Concat", [p + "/CM", p + "/c4"], [p + "/cm4"], axis=0),
        helper.make_node("ConstantOfShape", [p + "/cm4"], [p + "/zeros4"],
                         value=numpy_helper.from_array(np.zeros(1, np.float32))),
        helper.make_node("ScatterND", [p + "/zeros4", p + "/zi", p + "/zxy"], [p + "/rxy_f"]),
        helper.make_node("Shape", [b], [p + "/b_shape"]),
        helper.make_node("Reshape", [p + "/rxy_f", p + "/b_shape"], [p + "/rxy"]),
        i64(p + "/xyxy", [0, 2, 1, 3]),  # [x1, x2, y1, y2] -> [x1, y1, x2, y2]
        helper.make_node("Gather", [p + "/rxy", p + "/xyxy"], [p + "/boxes_rank"], axis=2),
    ]
    nodes += [
        helper.make_node("Reshape", [p + "/M", p + "/ax1"], [p + "/max_out"]),  # all of them
        f32(p + "/iou", [float(a["nms_threshold"])]),
        f32(p + "/sthr", [float(a["score_threshold"])]),
        f32(p + "/iou0", [0.0]),
        helper.make_node("NonMaxSuppression", [b, p + "/s_pos", p + "/max_out",
                                               p + "/iou", p + "/sthr"], [p + "/sel_pos"],
                         name=pre, center_point_box=0),
        helper.make_node("NonMaxSuppression", [p + "/boxes_rank", p + "/s_zero",
                                               p + "/max_out", p + "/iou0", p + "/sthr"],
                         [p + "/sel_zero"], name=pre + "/zero_area", center_point_box=0),
        helper.make_node("Concat", [p + "/sel_pos", p + "/sel_zero"], [p + "/sel"], axis=0),
        i64(p + "/col0", [0]), i64(p + "/col2", [2]),
        helper.make_node("Gather", [p + "/sel", p + "/col0"], [p + "/cls2"], axis=1),
        helper.make_node("Gather", [p + "/sel", p + "/col2"], [p + "/box2"], axis=1),
        helper.make_node("Concat", [p + "/box2", p + "/cls2"], [p + "/bc_nms"], axis=1),
        # Paddle's order: by label, then by box (it sorts each label's kept boxes)
        helper.make_node("Mul", [p + "/cls2", p + "/max_out"], [p + "/key_c"]),
        helper.make_node("Add", [p + "/key_c", p + "/box2"], [p + "/key2"]),
        i64(p + "/flat", [-1]),
        helper.make_node("Reshape", [p + "/key2", p + "/flat"], [p + "/key"]),
        helper.make_node("Shape", [p + "/key"], [p + "/K"]),
        helper.make_node("TopK", [p + "/key", p + "/K"], [p + "/key_s", p + "/order"],
                         largest=0, sorted=1),
        helper.make_node("Gather", [p + "/bc_nms", p + "/order"], [p + "/bc"], axis=0),
        helper.make_node("GatherND", [scores, p + "/bc"], [p + "/sc_all"]),
        helper.make_node("GatherND", [boxes, p + "/bc"], [p + "/bx_all"]),
    ]
    keep = int(a["keep_top_k"])
    if keep > -1:  # the best keep_top_k by score (ties: the earlier row, as Paddle's stable
        # sort of (label, box) pairs), back in row order
        nodes += [
            i64(p + "/keep", [keep]),
            helper.make_node("Min", [p + "/K", p + "/keep"], [p + "/k"]),
            helper.make_node("TopK", [p + "/sc_all", p + "/k"], [p + "/top_v", p + "/top_i"],
                             largest=1, sorted=1),
            helper.make_node("TopK", [p + "/top_i", p + "/k"], [p + "/rows", p + "/rows_i"],
                             largest=0, sorted=1),
        ]
    else:
        nodes += [i64(p + "/zero_r", 0),
                  helper.make_node("Squeeze", [p + "/K"], [p + "/Ks"]),
                  helper.make_node("Range", [p + "/zero_r", p + "/Ks", p + "/one"],
                                   [p + "/rows"])]
    nodes += [
        helper.make_node("Gather", [p + "/bc", p + "/rows"], [p + "/bc_k"], axis=0),
        helper.make_node("Gather", [p + "/sc_all", p + "/rows"], [p + "/sc_k"], axis=0),
        helper.make_node("Gather", [p + "/bx_all", p + "/rows"], [p + "/bx_k"], axis=0),
        helper.make_node("Gather", [p + "/bc_k", p + "/ax1"], [p + "/cls_k"], axis=1),
        helper.make_node("Gather", [p + "/bc_k", p + "/zero_i"], [p + "/box_k"], axis=1),
        helper.make_node("Cast", [p + "/cls_k"], [p + "/label"], to=TensorProto.FLOAT),
        helper.make_node("Unsqueeze", [p + "/sc_k", p + "/ax1"], [p + "/score"]),
        helper.make_node("Concat", [p + "/label", p + "/score", p + "/bx_k"], [o_out], axis=1),
        helper.make_node("Mul", [p + "/box_k", p + "/C"], [p + "/idx_c"]),  # box * C + label
        helper.make_node("Add", [p + "/idx_c", p + "/cls_k"], [p + "/idx"]),
        helper.make_node("Cast", [p + "/idx"], [o_index], to=TensorProto.INT32),
        helper.make_node("Shape", [o_out], [p + "/oshape"]),
        helper.make_node("Slice", [p + "/oshape", p + "/zero_i", p + "/ax1"], [p + "/n64"]),
        helper.make_node("Cast", [p + "/n64"], [o_num], to=TensorProto.INT32),
    ]
    return nodes


def const(name: str, value: np.ndarray) -> onnx.NodeProto:
    """A Constant node ``name`` holding ``value``."""
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))
