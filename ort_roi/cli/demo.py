"""``ort-roi demo``: each op in a plain onnxruntime session next to its framework's recorded
output, then the example detection heads of models/ against onnx.reference."""

from __future__ import annotations

import argparse
import json
from importlib import resources

import numpy as np
import onnxruntime as ort

from .. import __version__
from ..graph import builders
from ..graph.examples import EXAMPLES
from ..graph.inputs import generate_inputs
from ..runtime.session import session_options
from ..spec import DOMAIN
from .compare import compare_with_reference


def _demo_cases() -> list[dict]:
    with resources.files("ort_roi").joinpath("data/demo_cases.json").open() as f:
        return json.load(f)


def _fmt(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a).ravel(), precision=4, separator=", ",
                           max_line_width=200, threshold=12)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run every op through a plain onnxruntime session and compare with its framework."""
    print(f"ort_roi {__version__}: onnxruntime {ort.__version__}, domain "
          f"'{DOMAIN}'\n")
    print("1. Each op in a plain onnxruntime.InferenceSession(model, session_options()),")
    print("   next to the output of its source framework (recorded by tools/make_goldens.py):\n")
    ok = True
    for c in _demo_cases():
        inputs = {k: np.asarray(v["data"], v["dtype"]).reshape(v["shape"])
                  for k, v in c["inputs"].items()}
        arrays = list(inputs.values())
        model = builders.single_op_model(c["op"], arrays[0].dtype,
                                         arrays[2].dtype if len(arrays) > 2 else np.int64,
                                         **c["attrs"])
        sess = ort.InferenceSession(model.SerializeToString(), session_options(),
                                    providers=["CPUExecutionProvider"])
        got = sess.run(None, inputs)[0]
        expected = np.asarray(c["expected"]["data"], got.dtype).reshape(c["expected"]["shape"])
        diff = float(np.abs(got - expected).max()) if got.size else 0.0
        exact = c["op"] == "RoIPool" or c["attrs"].get("method") == "max"
        good = got.shape == expected.shape and (diff == 0 if exact else diff <= 1e-4)
        ok &= good
        attrs = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                          for k, v in c["attrs"].items())
        print(f"   {c['name']}\n     {c['op']}({attrs})")
        print(f"     ort_roi   {_fmt(got)}\n     {c['oracle']:<9} {_fmt(expected)}")
        print(f"     max |diff| {diff:.3g}  {'OK' if good else 'MISMATCH'}\n")
    print("2. Example detection graphs (models/), run end to end against onnx.reference running")
    print("   ort_roi's definitions (ort_roi.definitions):\n")
    ok &= run_examples(verbose=True)
    print("demo: all results match" if ok else "demo: MISMATCH")
    return 0 if ok else 1


def run_examples(verbose: bool = False) -> bool:
    """Run every example through onnxruntime and compare with onnx.reference running the
    definitions."""
    ok = True
    for ex in EXAMPLES:
        model = ex.build()
        report = compare_with_reference(model, generate_inputs(model))
        ok &= report.ok
        if verbose:
            print(f"   {ex.file}: {report.summary()}")
    if verbose:
        print()
    return ok
