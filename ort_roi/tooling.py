"""Graph tooling behind the CLI: compare a model's onnxruntime run with onnx.reference."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import numpy as np
import onnx

from .errors import RoiOpError


@dataclass
class Report:
    """The outcome of running a model in onnxruntime and in onnx.reference."""

    ok: bool = True
    problems: list[str] = field(default_factory=list)
    max_diff: float = 0.0
    outputs: dict = field(default_factory=dict)

    def fail(self, msg: str) -> None:
        self.ok = False
        self.problems.append(msg)

    def summary(self) -> str:
        shapes = ", ".join(f"{k} {list(v.shape)}" for k, v in self.outputs.items())
        if self.ok:
            return f"OK  ({shapes}; max |onnxruntime - reference| {self.max_diff:.2g})"
        return "FAILED: " + "; ".join(self.problems)


def compare_with_reference(model: onnx.ModelProto, inputs: dict[str, np.ndarray],
                           rtol: float = 1e-4, atol: float = 1e-4) -> Report:
    """Run ``model`` in onnxruntime (ort_roi front door) and in onnx.reference with
    ort_roi's kernels, and compare every output."""
    from onnx.reference import ReferenceEvaluator

    from . import reference
    from .session import InferenceSession

    rep = Report()
    try:
        sess = InferenceSession(model)
        got = sess.run(None, inputs)
    except RoiOpError as e:
        rep.fail(str(e))
        return rep
    names = [o.name for o in sess.get_outputs()]
    rep.outputs = dict(zip(names, got))
    ref = ReferenceEvaluator(model, new_ops=reference.OPS).run(None, inputs)
    for name, a, b in zip(names, got, ref):
        if a.shape != b.shape:
            rep.fail(f"output {name!r}: shape {list(a.shape)} vs reference {list(b.shape)}")
            continue
        if a.size:
            rep.max_diff = max(rep.max_diff, float(np.nanmax(np.abs(a - b))))
        if not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            rep.fail(f"output {name!r} differs from the reference by {rep.max_diff:.3g}")
    return rep


def add_commands(sub) -> None:
    """Attach the tooling commands (bench) to the ort-roi argument parser."""
    from . import bench

    bench.add_command(sub)
