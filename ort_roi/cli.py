"""The ``ort-roi`` command line (also ``python -m ort_roi``): demo, info, validate, convert,
bench; ``--version``."""

from __future__ import annotations

import argparse
import json
import os
import sys
from importlib import resources
from typing import Sequence

import numpy as np


def _demo_cases() -> list[dict]:
    with resources.files("ort_roi").joinpath("data/demo_cases.json").open() as f:
        return json.load(f)


def _fmt(a: np.ndarray) -> str:
    return np.array2string(np.asarray(a).ravel(), precision=4, separator=", ",
                           max_line_width=200, threshold=12)


def cmd_demo(args: argparse.Namespace) -> int:
    """Run every op through a plain onnxruntime session and compare with its framework."""
    import onnxruntime as ort

    import ort_roi
    from ort_roi import builders

    print(f"ort_roi {ort_roi.__version__}: onnxruntime {ort.__version__}, domain "
          f"'{ort_roi.DOMAIN}'\n")
    print("1. Each op in a plain onnxruntime.InferenceSession(model, ort_roi.session_options()),")
    print("   next to the output of its source framework (recorded by tools/make_goldens.py):\n")
    ok = True
    for c in _demo_cases():
        inputs = {k: np.asarray(v["data"], v["dtype"]).reshape(v["shape"])
                  for k, v in c["inputs"].items()}
        arrays = list(inputs.values())
        model = builders.single_op_model(c["op"], arrays[0].dtype,
                                         arrays[2].dtype if len(arrays) > 2 else np.int64,
                                         **c["attrs"])
        sess = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
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
    from . import examples
    print("2. Example detection graphs (models/), run end to end:\n")
    ok &= examples.run_all(verbose=True)
    print("demo: all results match" if ok else "demo: MISMATCH")
    return 0 if ok else 1


def cmd_info(args: argparse.Namespace) -> int:
    """Print every node form ort_roi runs: how, and each op's types, attributes and defaults
    (from the spec table)."""
    import onnxruntime as ort

    from .probe import how_it_runs
    from .specs import DOMAIN, FORMS, TYPES

    print(f"'runs' below is what a plain onnxruntime {ort.__version__} session with "
          f"ort_roi.session_options() did with a one-node graph of each form, as its exporter "
          f"writes it, just now.\n")
    shown: dict = {}
    for f in FORMS:
        s = f.spec
        name = f"{f.domain or 'onnx'}::{f.op_type}"
        how = how_it_runs(f)
        print(f"{name}  ({s.source})\n  written by: {f.writers}\n  runs: {how}\n"
              f"  checked against: {f.oracle}")
        if s in shown or not f.registered:
            print(f"  inputs and attributes: as {shown.get(s, f'{DOMAIN}::{s.name}')}\n")
            continue
        shown[s] = name
        print(f"  {s.doc}")
        for i in s.inputs:
            types = "/".join(t.name for t in TYPES[i.type])
            print(f"  input  {i.name:<10} {i.type}={types:<16} {i.shape:<30} {i.doc}")
        print(f"  output {s.output:<10} T{'':<16} {s.output_shape_doc}")
        for a in s.attrs:
            rng = ""
            if a.choices:
                rng = "one of " + "/".join(map(str, a.choices))
            elif a.min is not None:
                rng = (">" if a.min_exclusive else ">=") + f" {a.min:g}"
            default = "required" if a.required else f"default {a.default!r}"
            print(f"  attr   {a.name:<16} {a.type.__name__:<6} {default:<18} {rng:<14} {a.doc}")
        print()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    from . import __version__

    p = argparse.ArgumentParser(prog="ort-roi", description="RoI ops for onnxruntime")
    p.add_argument("--version", action="version", version=f"ort-roi {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help=cmd_demo.__doc__).set_defaults(fn=cmd_demo)
    sub.add_parser("info", help=cmd_info.__doc__).set_defaults(fn=cmd_info)
    from . import tooling
    tooling.add_commands(sub)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:  # `ort-roi info | head`: the reader left; so do we, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
