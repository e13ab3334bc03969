"""onnxruntime's outputs beside ort_roi's definitions, within RTOL / ATOL: a graph's run in
onnxruntime beside onnx.reference running the definitions (``compare_with_reference``, what
the demo reports), and one RoI node's outputs captured in a run beside its definition on the
inputs the run fed it (``compare_node``, what ``ort-roi validate`` reports); ``run_plain``,
a run in a plain session with ort_roi.session_options(), and ``run_exposing``, one that
also reads tensors inside the graph."""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper
from onnx.reference import ReferenceEvaluator

from ..errors import RoiOpError, node_label
from ..graph import reference
from ..graph.nodes import copy_model
from ..ops import form
from ..runtime.session import InferenceSession, session_options
from ..spec import OpSpec

#: An output equals its definition's where |diff| <= ATOL + RTOL * |definition|.
RTOL = ATOL = 1e-4
WITHIN = f"(within {ATOL:g} + {RTOL:g} x |value|)"


@dataclass
class Report:
    """The outcome of running a model in onnxruntime and in onnx.reference."""

    ok: bool = True
    problems: list[str] = field(default_factory=list)
    max_diff: float = 0.0
    outputs: dict = field(default_factory=dict)
    inputs: dict = field(default_factory=dict)

    def fail(self, msg: str) -> None:
        self.ok = False
        self.problems.append(msg)

    def summary(self) -> str:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in self.outputs.items())
        if self.ok:
            return f"OK  ({shapes}; max |onnxruntime - reference| {self.max_diff:.2g})"
        return "FAILED: " + "; ".join(self.problems)


def compare_with_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
                           rtol: float = RTOL, atol: float = ATOL, plain: bool = False) -> Report:
    """Run ``model`` in onnxruntime (the ort_roi front door, or with ``plain`` a plain
    session with ort_roi.session_options(), whose ops' errors are caught from the log) and
    in onnx.reference with ort_roi's definitions (ort_roi.definitions), and compare every
    output."""
    rep = Report(inputs={k: np.asarray(v) for k, v in inputs.items()})
    try:
        if plain:
            sess, got, errors = run_plain(model, inputs)
            for msg in errors:
                rep.fail(msg)
            if errors:
                return rep
        else:
            sess = InferenceSession(model)
            got = sess.run(None, inputs)
    except RoiOpError as e:
        rep.fail(str(e))
        return rep
    names = [o.name for o in sess.get_outputs()]
    rep.outputs = dict(zip(names, got))
    ref = ReferenceEvaluator(model, new_ops=reference.ops_for(model)).run(None, inputs)
    for name, a, b in zip(names, got, ref):
        if a.shape != b.shape:
            rep.fail(f"output {name!r}: shape {list(a.shape)} vs reference {list(b.shape)}")
            continue
        if a.size:
            rep.max_diff = max(rep.max_diff, float(np.nanmax(np.abs(a - b))))
        if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            rep.fail(f"output {name!r} differs from the reference by {rep.max_diff:.3g}")
    return rep


class OpErrors(logging.Handler):
    """Collects the errors ort_roi's ops log in a plain session."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def plain_session(model: onnx.ModelProto) -> ort.InferenceSession:
    """A plain onnxruntime session (CPU) with ort_roi.session_options() for ``model``,
    onnxruntime's own warnings off (its errors still raise)."""
    so = session_options()
    so.log_severity_level = 3  # a Loop's "expected shape" warnings, one per iteration
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def run_plain(model: onnx.ModelProto, inputs: dict) -> tuple:
    """Run ``model`` once in a plain onnxruntime session with ort_roi.session_options()
    (onnxruntime's own warnings off: its errors still raise).

    Args:
        model: the graph.
        inputs: graph input name -> array.

    Returns:
        (the session, its outputs, the errors ort_roi's ops logged: their outputs are NaN).
    """
    sess = plain_session(model)
    handler, logger = OpErrors(), logging.getLogger("ort_roi")
    logger.addHandler(handler)
    try:
        got = sess.run(None, inputs)
    finally:
        logger.removeHandler(handler)
    return sess, got, handler.messages


def run_exposing(model: onnx.ModelProto, names: list[str],
                 feed: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], list[str]]:
    """One run of ``model`` in a plain session with the tensors ``names`` added to a copy's
    graph outputs.

    Args:
        model: the graph.
        names: the tensors to read (graph inputs and initializers are taken from ``feed``
            and the model).
        feed: graph input name -> array.

    Returns:
        (tensor name -> array: the feed, the initializers named and every graph output, the
        errors ort_roi's ops logged).
    """
    seen: dict[str, np.ndarray] = dict(feed)
    weights = {i.name: i for i in model.graph.initializer}
    outputs = {o.name for o in model.graph.output}
    c = copy_model(model)
    for x in names:
        if x in weights and x not in seen:
            seen[x] = numpy_helper.to_array(weights[x])
        elif x not in seen and x not in outputs:
            c.graph.output.append(onnx.ValueInfoProto(name=x))
    sess, got, errors = run_plain(c, feed)
    seen.update(zip((o.name for o in sess.get_outputs()), got))
    return seen, errors


def compare_node(node: onnx.NodeProto, seen: dict[str, np.ndarray], onnx_opset: int,
                  rows: int, seconds: float) -> tuple[bool | None, str]:
    """Compare a node's captured outputs with its definition on at most ``rows`` of its boxes
    (evenly spaced), in chunks until ``seconds`` have passed.

    Args:
        node: the RoI node.
        seen: tensor name -> its value in the run (the node's inputs and outputs).
        onnx_opset: the graph's default opset.
        rows: the most rows compared.
        seconds: the time the comparison may take (checked between chunks).

    Returns:
        (True: equal, False: differs or its definition fails, None: not exercised (the run
        gave it no boxes) or no row compared; the node's line).
    """
    f = form(node.domain, node.op_type)
    kernel = "" if f.registered else " on onnxruntime's kernel"
    what = f"node {node_label(node)!r} ({f.domain or 'onnx'}::{f.op_type}{kernel})"
    try:
        spec, attrs = reference.node_definition(node, onnx_opset)
        inputs = [seen[x] for x in node.input]
    except (RoiOpError, ValueError, KeyError) as e:
        return False, f"{what}: its definition cannot be set up: {e}"
    defined = "its definition" + ("" if spec.key == f.key else f" ({spec.domain}::{spec.name})")
    if not spec.rowwise:
        return _compare_whole(node, spec, attrs, inputs, seen, what, defined)
    n = len(inputs[spec.boxes_input])
    if n == 0:  # nothing to compare: not exercised, not OK
        return None, f"{what}: not exercised: the run gave it no boxes"
    if rows < 1:
        return None, f"{what}: not compared (rows {rows})"
    picked = np.unique(np.linspace(0, n - 1, min(rows, n)).round().astype(np.int64))
    k = max(1, math.ceil(len(picked) / 8))
    chunks = [picked[i::k] for i in range(k)]  # each spread over the rows, so a stop is too
    start, done, worst = time.perf_counter(), 0, 0.0
    for chunk in chunks:
        try:
            want = reference.run_definition(spec, attrs,
                                            reference.select_rows(spec, inputs, chunk))
        except Exception as e:  # noqa: BLE001 - a definition's refusal is the finding
            return False, f"{what}: {defined} raised {type(e).__name__}: {e}"
        for name, w in zip(node.output, want):
            if not name:
                continue
            got = seen[name]
            if got.shape[1:] != w.shape[1:] or len(got) != n:
                return False, (f"{what}: output {name!r} has shape {list(got.shape)}; "
                               f"{defined} gives rows of shape {list(w.shape[1:])} for "
                               f"{n} boxes")
            diff, at, by = _difference(got[chunk], w)
            worst = max(worst, diff)
            if at is not None:
                return False, (f"{what}: output {name!r} differs from {defined} at row "
                               f"{int(chunk[at[0]])} (index {at[1:]}): {by} ({done + len(chunk)}"
                               f" of {n} rows compared)")
        done += len(chunk)
        if time.perf_counter() - start > seconds and done < len(picked):
            break
    which = ((f"all {n} rows equal" if n > 1 else "its one row equals") if done == n else
             f"{done} of {n} rows (evenly spaced; at most --rows {rows}")
    if done < n:
        which += (f", stopped after {seconds:g} s by --node-seconds" if done < len(picked)
                  else "") + ") equal"
    return True, f"{what}: OK: {which} {defined} {WITHIN}, max |diff| {worst:.2g}"


def _compare_whole(node: onnx.NodeProto, spec: OpSpec, attrs: dict, inputs: list[np.ndarray],
                   seen: dict[str, np.ndarray], what: str, defined: str) -> tuple[bool, str]:
    """Compare every output of a node whose rows are not its boxes' own (a proposal stage
    selects and reorders them) with its definition run on all of its inputs (whole: not
    bounded by --node-seconds; GenerateProposals' literal definition takes seconds on a
    C4 RPN of 6000 anchors per image)."""
    try:
        want = reference.run_definition(spec, attrs, inputs)
    except Exception as e:  # noqa: BLE001 - a definition's refusal is the finding
        return False, f"{what}: {defined} raised {type(e).__name__}: {e}"
    worst = 0.0
    for name, w in zip(node.output, want):
        if not name:
            continue
        got = seen[name]
        if got.shape != w.shape:
            return False, (f"{what}: output {name!r} has shape {list(got.shape)}; {defined} "
                           f"gives {list(w.shape)}")
        diff, at, by = _difference(got, w)
        worst = max(worst, diff)
        if at is not None:
            return False, f"{what}: output {name!r} differs from {defined} at {at}: {by}"
    return True, (f"{what}: OK: all its outputs equal {defined} (whole) {WITHIN}, "
                  f"max |diff| {worst:.2g}")


def _difference(got: np.ndarray, want: np.ndarray) -> tuple[float, tuple | None, str]:
    """The largest |got - want| and, where they differ by more than ATOL + RTOL x |want|, the
    index of the first such element and the words saying by how much."""
    a, b = got.astype(np.float64), want.astype(np.float64)
    if not a.size:
        return 0.0, None, ""
    diff = np.abs(a - b)
    worst = float(np.nanmax(diff, initial=0.0))
    bad = ~(np.isclose(a, b, rtol=RTOL, atol=ATOL, equal_nan=True))
    if not bad.any():
        return worst, None, ""
    at = tuple(int(i) for i in np.argwhere(bad)[0])
    return worst, at, (f"{a[at]:.6g} vs {b[at]:.6g}, |diff| {diff[at]:.3g} > {ATOL:g} + "
                       f"{RTOL:g} x |definition|")
