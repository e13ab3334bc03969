"""Paddle inference programs to ONNX with Paddle's RoI ops exact: ``paddle_export``.

paddle2onnx (2.1.0, the only exporter) writes ``roi_align`` as an ONNX ``RoiAlign`` that reads
every box from image 0 and drops ``aligned``, and aborts the process on ``roi_pool`` and
``psroi_pool``. ``paddle_export`` runs it anyway, in a child process (``paddle_child.py``, under
``sys.executable`` or the Python you name), on a copy of the program whose RoI ops are stand-ins
it exports (a tagged ``roi_align`` each, ``boxes_num`` fetched as an extra output), then
rewrites each stand-in here into the exact node:

- ``roi_align``: ``ort_roi::RoIAlign``; standard: ``RoiAlign`` with the batch indices computed
  from ``boxes_num`` (opset >= 16: ``half_pixel`` if aligned else ``output_half_pixel``; below
  16 aligned=False only), sampling_ratio -1 as 0 (both: ceil(bin size) samples).
- ``roi_pool``: ``ort_roi::RoIPool``; standard: ``MaxRoiPool`` on rows ``[batch, x1, y1, x2, y2]``.
- ``psroi_pool``: ``ort_roi::PSROIPool``; standard: none (ONNX has no position-sensitive
  pooling: refused).

The default (ort_roi's nodes) runs with ``ort_roi.session_options()``; ``standard=True`` runs in
onnxruntime without ort_roi (C++, C#, mobile). This process imports neither paddle nor
paddle2onnx.
"""

from __future__ import annotations

import heapq
import json
import os
import signal
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from ..errors import RoiOpError
from ..graph import builders, shapes
from ..graph.nodes import opset
from ..graph.paddle import empty_safe_reshapes, fuse_fpn_stages
from ..spec import DOMAIN, OPSET_VERSION

#: The child script (run by path: it needs paddle and paddle2onnx, not ort_roi).
CHILD = Path(__file__).with_name("paddle_child.py")
#: sampling_ratio of the stand-ins: MARK + their index (the child's MARK).
MARK = 1 << 20
#: The Python that runs paddle2onnx when none is named: ``$ORT_ROI_PADDLE_PYTHON`` or this one.
PYTHON_ENV = "ORT_ROI_PADDLE_PYTHON"
INSTALL_HINT = "needs paddle2onnx: pip install 'ort-roi[paddle]'"
_OP = "paddle_export"


def paddle_export(path_prefix: str | os.PathLike, f: str | os.PathLike | None = None,
                  opset_version: int = 17, *, standard: bool = False,
                  python: str | None = None, timeout: float | None = None,
                  fuse: bool = True) -> onnx.ModelProto:
    """Export a saved Paddle inference program to ONNX with its RoI ops exact.

    Args:
        path_prefix: what ``paddle.jit.save`` or PaddleDetection's ``tools/export_model.py``
            wrote, without the suffix: ``PREFIX.json`` (PIR) or ``PREFIX.pdmodel``, with
            ``PREFIX.pdiparams`` when the program has parameters.
        f: where to write the model too (a path), or None.
        opset_version: the default domain's opset asked of paddle2onnx (11-17 tested; it
            raises the opset itself where an op needs more).
        standard: write standard ONNX nodes (``RoiAlign``, ``MaxRoiPool``) that onnxruntime
            runs without ort_roi; psroi_pool has none (RoiOpError), nor aligned roi_align
            below opset 16.
        python: the Python that runs paddle2onnx (it needs paddle and paddle2onnx);
            default ``$ORT_ROI_PADDLE_PYTHON`` or ``sys.executable``.
        timeout: seconds the child may run (None: no limit).
        fuse: write PaddleDetection's FPN RoI stage (distribute_fpn_proposals, roi_align per
            level, concat, gather by restore_index) as one ``ort_roi::DistributeRoIAlign_L{L}``
            (bit for bit the unfused graph; not with ``standard``). A stage that differs in
            any part stays as exported, with a warning naming the node.

    Returns:
        The model, which ``onnxruntime.InferenceSession(model, ort_roi.session_options())``
        runs (a plain session when ``standard``).

    Raises:
        RoiOpError: ops paddle2onnx cannot export (named, with their counts), a program that
            cannot be loaded, the exporter's crash (its signal and last output), or a RoI op
            with no standard form. ImportError: paddle2onnx or paddle missing in ``python``.
    """
    model, answer = run_paddle2onnx(path_prefix, opset_version, python=python, timeout=timeout)
    model = rewrite_stand_ins(model, answer["rois"], answer["outputs"], standard=standard,
                              cuts=answer.get("cuts", ()), n_counts=answer.get("counts", 0))
    empty_safe_reshapes(model)  # paddle2onnx's flatten / reshape([0, -1]): none on 0 rows
    if fuse and not standard:  # PaddleDetection's FPN RoI stage -> one DistributeRoIAlign_L{L}
        for note in fuse_fpn_stages(model)[1]:
            warnings.warn(f"paddle_export: {note}", stacklevel=2)
    shapes.annotate(model)  # as convert(): our nodes' inferred output types
    if f is not None:
        onnx.save(model, os.fspath(f))
    return model


def run_paddle2onnx(path_prefix: str | os.PathLike, opset_version: int = 17, *,
                    python: str | None = None,
                    timeout: float | None = None) -> tuple[onnx.ModelProto, dict]:
    """paddle2onnx's model of the program with its RoI ops as stand-ins (the first half of
    ``paddle_export``, in a child process).

    Args:
        path_prefix, opset_version, python, timeout: as ``paddle_export``'s.

    Returns:
        The model and the child's answer: ``rois`` (a record per RoI op, in stand-in order)
        and ``outputs`` (the program's own outputs), what ``rewrite_stand_ins`` takes.
    """
    prefix = os.fspath(path_prefix)
    for suffix in (".json", ".pdmodel", ".pdiparams"):  # the file itself was given
        if prefix.endswith(suffix) and os.path.exists(prefix):
            prefix = prefix[: -len(suffix)]
    if not any(os.path.exists(prefix + s) for s in (".json", ".pdmodel")):
        raise RoiOpError(_OP, f"program {prefix!r}", f"neither {prefix}.json nor "
                         f"{prefix}.pdmodel exists")
    with tempfile.TemporaryDirectory(prefix="ort_roi_paddle_") as work:
        answer = _run_child(prefix, opset_version, work,
                            python or os.environ.get(PYTHON_ENV) or sys.executable, timeout)
        return onnx.load(os.path.join(work, "exported.onnx")), answer


def _run_child(prefix: str, opset_version: int, work: str, python: str,
               timeout: float | None) -> dict:
    request = os.path.join(work, "request.json")
    with open(request, "w") as fh:
        json.dump({"path_prefix": os.path.abspath(prefix), "opset_version": int(opset_version),
                   "workdir": work}, fh)
    where = f"program {prefix!r}"
    try:
        done = subprocess.run([python, str(CHILD), request], capture_output=True, text=True,
                              timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        raise RoiOpError(_OP, where, f"paddle2onnx ran past {timeout} s") from None
    path = os.path.join(work, "answer.json")
    answer = json.load(open(path)) if os.path.exists(path) else None
    if answer is None or "error" in answer:
        _raise(answer, done, where)
    return answer


def _raise(answer: dict | None, done: subprocess.CompletedProcess, where: str) -> None:
    if answer is not None and answer["error"] == "import":
        raise ImportError(f"{INSTALL_HINT} (in the Python that runs it: {answer['message']})")
    if answer is not None and answer["error"] != "unsupported":
        raise RoiOpError(_OP, where, answer["message"])
    code = done.returncode
    how = (f"signal {signal.Signals(-code).name}" if code < 0 and -code in signal.valid_signals()
           else f"exit status {code}")
    ops = (answer or {}).get("ops")
    if ops:
        names = ", ".join(f"{k} (x{n})" if n > 1 else k for k, n in sorted(ops.items()))
        raise RoiOpError(_OP, where, f"paddle2onnx does not support these ops: {names} (it "
                         f"stopped with {how})")
    tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-8:])
    raise RoiOpError(_OP, where, f"paddle2onnx failed ({how}); its last output:\n{tail}")


def rewrite_stand_ins(model: onnx.ModelProto, rois: list[dict], n_outputs: int, *,
                      standard: bool = False, cuts: Sequence[dict] = (),
                      n_counts: int = 0) -> onnx.ModelProto:
    """Rewrite the child's stand-ins (tagged ONNX RoiAlign nodes) into the exact nodes and
    drop the extra count outputs.

    Args:
        model: paddle2onnx's model of the stand-in program.
        rois: the child's records, one per RoI op: ``op``, ``attrs`` (Paddle's), ``dtype``
            (of the boxes), ``counts`` (index of its count output after the first
            ``n_outputs``, or None without ``boxes_num``).
        n_outputs: the program's own outputs (the count outputs follow, then the inputs of
            the cut ops).
        standard: standard ONNX nodes instead of ort_roi's.
        cuts: the child's records of the ops it cut out (generate_proposals,
            distribute_fpn_proposals, multiclass_nms3, collect_fpn_proposals): ``op``,
            ``attrs``, ``inputs`` (index of each input among the outputs after the counts, a
            list of them for a vector input, or None), ``outputs`` (the
            graph input standing for each result; a list for a vector result; None unused),
            ``ranks`` (of the inputs).
        n_counts: the count outputs (those before the cut ops' inputs).

    Returns:
        The model, rewritten in place.
    """
    graph = model.graph
    counts = [o.name for o in graph.output[n_outputs:]]
    del graph.output[n_outputs:]
    cut_nodes = _join_cuts(graph, cuts, counts[n_counts:], standard)
    onnx_opset = opset(model) or builders.ONNX_OPSET
    producers = {o: n for n in graph.node for o in n.output}
    batches: dict[str, str] = {}  # count tensor -> its int64 batch indices (standard)
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        k = _stand_in(node)
        if k is None:
            nodes.append(node)
            continue
        rec = rois[k]
        x, boxes, y = node.input[0], node.input[1], node.output[0]
        if rec["op"] == "psroi_pool":  # its stand-in pooled x[:, :output_channels]
            x = producers[x].input[0]
        pre = f"paddle_{rec['op']}_{k}"
        if rec["counts"] is None:  # no boxes_num: every box of image 0
            num = pre + "/count"
            nodes += _counts_of_one_image(boxes, num, pre, onnx_opset)
        else:
            num = counts[rec["counts"]]
        if not standard:
            nodes.append(_ours(rec, x, boxes, num, y, pre))
            continue
        if num not in batches:
            batches[num] = pre + "/batch"
            nodes += _batch_indices(num, boxes, batches[num], pre, onnx_opset)
        nodes += _standard(rec, x, boxes, batches[num], y, pre, onnx_opset)
    del graph.node[:]
    graph.node.extend(_topological(nodes + cut_nodes))  # the counts' nodes come last from paddle2onnx
    _prune(graph)
    if not standard and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, OPSET_VERSION))
    return model


def _join_cuts(graph: onnx.GraphProto, cuts: Sequence[dict], fetched: list[str],
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
            raise RoiOpError(_OP, f"op '{cut['op']}'", "has no standard ONNX form; export "
                             "without standard=True and run the model with "
                             "ort_roi.session_options()")
        if cut["op"] == "generate_proposals":
            nodes.append(_generate_proposals(cut["attrs"], ins, outs, pre))
        elif cut["op"] == "distribute_fpn_proposals":
            nodes += _distribute(cut["attrs"], ins, outs, pre)
        elif cut["op"] == "collect_fpn_proposals":
            nodes += _collect(cut["attrs"], ins, outs, pre)
        else:
            nodes += _multiclass_nms3(cut["attrs"], ins, outs, cut["ranks"], pre)
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
        raise RoiOpError(_OP, "op 'distribute_fpn_proposals'", "has no rois_num input "
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
        raise RoiOpError(_OP, "op 'collect_fpn_proposals'", "has no multi_level_rois_num input "
                         "(ort_roi's CollectFpnProposals needs the per-image counts)")
    L = len(rois)
    casts = [helper.make_node("Cast", [n], [f"{pre}/rois_num_{i}"], to=TensorProto.INT32)
             for i, n in enumerate(nums)]
    top = a["post_nms_topn"] if "post_nms_topn" in a else a["post_nms_topN"]
    return casts + [helper.make_node(
        f"CollectFpnProposals_L{L}", list(rois) + list(scores) + [c.output[0] for c in casts],
        _names(outs, pre), name=pre, domain=DOMAIN, post_nms_topN=int(top))]


def _multiclass_nms3(a: dict, ins: list, outs: list, ranks: list,
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
        raise RoiOpError(_OP, where, f"boxes of rank {ranks[0]} and scores of rank {ranks[1]}:"
                         " only the per-class form (boxes [M, C, 4], scores [M, C], one image)"
                         " is written")
    if int(a["nms_top_k"]) > -1 or float(a["nms_eta"]) != 1.0 or not a["normalized"]:
        raise RoiOpError(_OP, where, f"nms_top_k={a['nms_top_k']}, nms_eta={a['nms_eta']}, "
                         f"normalized={a['normalized']}: only nms_top_k=-1, nms_eta=1, "
                         "normalized=True have an exact ONNX form")
    boxes, scores = ins[0], ins[1]
    p = pre
    o_out, o_index, o_num = _names(list(outs) + [None] * (3 - len(outs)), pre)[:3]
    i64 = lambda name, v: _const(name, np.array(v, np.int64))  # noqa: E731
    f32 = lambda name, v: _const(name, np.array(v, np.float32))  # noqa: E731
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


def _stand_in(node: onnx.NodeProto) -> int | None:
    if node.op_type != "RoiAlign" or node.domain not in ("", "ai.onnx"):
        return None
    sr = next((a.i for a in node.attribute if a.name == "sampling_ratio"), 0)
    return sr - MARK if sr >= MARK else None


def _ours(rec: dict, x: str, boxes: str, num: str, y: str, pre: str) -> onnx.NodeProto:
    a = rec["attrs"]
    common = dict(pooled_height=a["pooled_height"], pooled_width=a["pooled_width"],
                  spatial_scale=a["spatial_scale"])
    if rec["op"] == "roi_align":
        return builders.roi_align(x, boxes, num, y, name=pre, sampling_ratio=a["sampling_ratio"],
                                  aligned=int(a["aligned"]), **common)
    if rec["op"] == "roi_pool":
        return builders.roi_pool(x, boxes, num, y, name=pre, **common)
    return builders.psroi_pool(x, boxes, num, y, name=pre,
                               output_channels=a["output_channels"], **common)


def _standard(rec: dict, x: str, boxes: str, batch: str, y: str, pre: str,
              onnx_opset: int) -> list[onnx.NodeProto]:
    a = rec["attrs"]
    if rec["op"] == "psroi_pool":
        raise RoiOpError(_OP, "op 'psroi_pool'", "has no standard ONNX form (ONNX has no "
                         "position-sensitive pooling); export without standard=True and run "
                         "the model with ort_roi.session_options()")
    if rec["op"] == "roi_pool":
        dtype = helper.np_dtype_to_tensor_dtype(np.dtype(rec["dtype"]))
        return [
            _const(pre + "/col", np.array([-1, 1], np.int64)),
            helper.make_node("Reshape", [batch, pre + "/col"], [pre + "/b2"]),
            helper.make_node("Cast", [pre + "/b2"], [pre + "/bf"], to=dtype),
            helper.make_node("Concat", [pre + "/bf", boxes], [pre + "/rows"], axis=1),
            helper.make_node("MaxRoiPool", [x, pre + "/rows"], [y], name=pre,
                             pooled_shape=[a["pooled_height"], a["pooled_width"]],
                             spatial_scale=float(a["spatial_scale"]))]
    attrs = dict(output_height=a["pooled_height"], output_width=a["pooled_width"],
                 spatial_scale=float(a["spatial_scale"]), mode="avg",
                 sampling_ratio=max(int(a["sampling_ratio"]), 0))
    if onnx_opset >= 16:
        attrs["coordinate_transformation_mode"] = ("half_pixel" if a["aligned"]
                                                   else "output_half_pixel")
    elif a["aligned"]:
        raise RoiOpError(_OP, "op 'roi_align'", f"aligned=True has no standard ONNX form at "
                         f"opset {onnx_opset} (RoiAlign's half_pixel mode came in opset 16): "
                         "export at opset_version >= 16, or without standard=True")
    return [helper.make_node("RoiAlign", [x, boxes, batch], [y], name=pre, **attrs)]


def _batch_indices(num: str, boxes: str, out: str, pre: str,
                   onnx_opset: int) -> list[onnx.NodeProto]:
    """Nodes computing ``repeat(arange(N), num)`` (int64, one per box): box r's image is the
    number of images whose boxes end at or before r."""
    p = pre + "/bi"
    nodes = [
        helper.make_node("Cast", [num], [p + "/n"], to=TensorProto.INT64),
        _const(p + "/axis", np.array(0, np.int64)),
        helper.make_node("CumSum", [p + "/n", p + "/axis"], [p + "/ends"]),
        _const(p + "/row", np.array([1, -1], np.int64)),
        helper.make_node("Reshape", [p + "/ends", p + "/row"], [p + "/ends_row"]),
        helper.make_node("Shape", [boxes], [p + "/shape"]),
        helper.make_node("Gather", [p + "/shape", p + "/axis"], [p + "/R"], axis=0),
        _const(p + "/one", np.array(1, np.int64)),
        helper.make_node("Range", [p + "/axis", p + "/R", p + "/one"], [p + "/r"]),
        _const(p + "/col", np.array([-1, 1], np.int64)),
        helper.make_node("Reshape", [p + "/r", p + "/col"], [p + "/r_col"]),
        helper.make_node("Less", [p + "/r_col", p + "/ends_row"], [p + "/before"]),
        helper.make_node("Not", [p + "/before"], [p + "/done"]),
        helper.make_node("Cast", [p + "/done"], [p + "/done64"], to=TensorProto.INT64),
    ]
    if onnx_opset >= 13:
        nodes += [_const(p + "/axes", np.array([1], np.int64)),
                  helper.make_node("ReduceSum", [p + "/done64", p + "/axes"], [out], keepdims=0)]
    else:
        nodes.append(helper.make_node("ReduceSum", [p + "/done64"], [out], axes=[1], keepdims=0))
    return nodes


def _counts_of_one_image(boxes: str, out: str, pre: str,
                         onnx_opset: int) -> list[onnx.NodeProto]:
    """``[R]``: one image holding every box (a roi op without boxes_num)."""
    zero, one = pre + "/c0", pre + "/c1"
    return [helper.make_node("Shape", [boxes], [pre + "/cs"]),
            _const(zero, np.array([0], np.int64)), _const(one, np.array([1], np.int64)),
            helper.make_node("Slice", [pre + "/cs", zero, one], [out])]


def _const(name: str, value: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(value, name))


def _reads(node: onnx.NodeProto) -> set[str]:
    """The tensors a node reads, its subgraphs' outer-scope reads included."""
    names = {i for i in node.input if i}
    for a in node.attribute:
        for g in ([a.g] if a.HasField("g") else []) + list(a.graphs):
            names.update(i for n in g.node for i in _reads(n))
    return names


def _topological(nodes: list[onnx.NodeProto]) -> list[onnx.NodeProto]:
    """The nodes in an order where each comes after its producers, as close to the given
    one as that allows."""
    producer = {o: i for i, n in enumerate(nodes) for o in n.output if o}
    deps = [{producer[x] for x in _reads(n) if x in producer} - {i} for i, n in enumerate(nodes)]
    users: dict[int, list[int]] = {}
    for i, d in enumerate(deps):
        for j in d:
            users.setdefault(j, []).append(i)
    ready = [i for i, d in enumerate(deps) if not d]
    heapq.heapify(ready)
    out = []
    while ready:
        i = heapq.heappop(ready)
        out.append(nodes[i])
        for u in users.get(i, ()):
            deps[u].discard(i)
            if not deps[u]:
                heapq.heappush(ready, u)
    if len(out) != len(nodes):
        raise RoiOpError(_OP, "graph", "the exported graph has a cycle")
    return out


def _prune(graph: onnx.GraphProto) -> None:
    """Drop the nodes, initializers and value infos no output depends on (the stand-ins'
    constant batch indices, psroi_pool's channel slice)."""
    needed = {o.name for o in graph.output}
    keep = []
    for node in reversed(graph.node):
        if any(o in needed for o in node.output) or not node.output:
            keep.append(node)
            needed.update(_reads(node))
    del graph.node[:]
    graph.node.extend(reversed(keep))
    inits = [i for i in graph.initializer if i.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    infos = [v for v in graph.value_info if v.name in needed]
    del graph.value_info[:]
    graph.value_info.extend(infos)
