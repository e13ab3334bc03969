"""A graph's run in onnxruntime beside onnx.reference running ort_roi's definitions: what
``ort-roi validate`` and the demo report."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnxruntime as ort
from onnx.reference import ReferenceEvaluator

from ..errors import RoiOpError
from ..graph import reference
from ..runtime.session import InferenceSession, session_options


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
                           rtol: float = 1e-4, atol: float = 1e-4, plain: bool = False) -> Report:
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


class _Errors(logging.Handler):
    """Collects the errors ort_roi's ops log in a plain session."""

    def __init__(self):
        super().__init__(logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def run_plain(model: onnx.ModelProto, inputs: dict) -> tuple:
    """Run ``model`` once in a plain onnxruntime session with ort_roi.session_options()
    (onnxruntime's own warnings off: its errors still raise).

    Args:
        model: the graph.
        inputs: graph input name -> array.

    Returns:
        (the session, its outputs, the errors ort_roi's ops logged: their outputs are NaN).
    """
    so = session_options()
    so.log_severity_level = 3  # a Loop's "expected shape" warnings, one per iteration
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    handler, logger = _Errors(), logging.getLogger("ort_roi")
    logger.addHandler(handler)
    try:
        got = sess.run(None, inputs)
    finally:
        logger.removeHandler(handler)
    return sess, got, handler.messages
