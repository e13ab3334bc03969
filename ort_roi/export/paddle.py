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
from onnx import TensorProto, helper

from ..errors import RoiOpError
from ..graph import builders, shapes
from ..graph.nodes import opset
from ..graph.paddle import empty_safe_reshapes, fuse_fpn_stages
from ..graph.toolkit import prune, topological
from ..spec import DOMAIN, OPSET_VERSION
from .paddle_cuts import OP as _OP, const, join_cuts

#: The child script (run by path: it needs paddle and paddle2onnx, not ort_roi).
CHILD = Path(__file__).with_name("paddle_child.py")
#: sampling_ratio of the stand-ins: MARK + their index (the child's MARK).
MARK = 1 << 20
#: The Python that runs paddle2onnx when none is named: ``$ORT_ROI_PADDLE_PYTHON`` or this one.
PYTHON_ENV = "ORT_ROI_PADDLE_PYTHON"
INSTALL_HINT = "needs paddle2onnx: pip install '.[paddle]' in ort_roi's source folder"


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
    cut_nodes = join_cuts(graph, cuts, counts[n_counts:], standard)
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
    graph.node.extend(topological(nodes + cut_nodes, _OP))  # the counts' nodes come last from paddle2onnx
    prune(graph)
    if not standard and not any(o.domain == DOMAIN for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(DOMAIN, OPSET_VERSION))
    return model


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
            const(pre + "/col", np.array([-1, 1], np.int64)),
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
        const(p + "/axis", np.array(0, np.int64)),
        helper.make_node("CumSum", [p + "/n", p + "/axis"], [p + "/ends"]),
        const(p + "/row", np.array([1, -1], np.int64)),
        helper.make_node("Reshape", [p + "/ends", p + "/row"], [p + "/ends_row"]),
        helper.make_node("Shape", [boxes], [p + "/shape"]),
        helper.make_node("Gather", [p + "/shape", p + "/axis"], [p + "/R"], axis=0),
        const(p + "/one", np.array(1, np.int64)),
        helper.make_node("Range", [p + "/axis", p + "/R", p + "/one"], [p + "/r"]),
        const(p + "/col", np.array([-1, 1], np.int64)),
        helper.make_node("Reshape", [p + "/r", p + "/col"], [p + "/r_col"]),
        helper.make_node("Less", [p + "/r_col", p + "/ends_row"], [p + "/before"]),
        helper.make_node("Not", [p + "/before"], [p + "/done"]),
        helper.make_node("Cast", [p + "/done"], [p + "/done64"], to=TensorProto.INT64),
    ]
    if onnx_opset >= 13:
        nodes += [const(p + "/axes", np.array([1], np.int64)),
                  helper.make_node("ReduceSum", [p + "/done64", p + "/axes"], [out], keepdims=0)]
    else:
        nodes.append(helper.make_node("ReduceSum", [p + "/done64"], [out], axes=[1], keepdims=0))
    return nodes


def _counts_of_one_image(boxes: str, out: str, pre: str,
                         onnx_opset: int) -> list[onnx.NodeProto]:
    """``[R]``: one image holding every box (a roi op without boxes_num)."""
    zero, one = pre + "/c0", pre + "/c1"
    return [helper.make_node("Shape", [boxes], [pre + "/cs"]),
            const(zero, np.array([0], np.int64)), const(one, np.array([1], np.int64)),
            helper.make_node("Slice", [pre + "/cs", zero, one], [out])]
