"""``ort-roi info``: every node form ort_roi runs, from the spec table, and what a plain
session does with it (tried, runtime/probe.py)."""

from __future__ import annotations

import argparse

import onnxruntime as ort

from ..runtime.probe import how_it_runs
from ..ops import FORMS
from ..spec import DOMAIN, TYPES


def cmd_info(args: argparse.Namespace) -> int:
    """Print every node form ort_roi runs: how, and each op's types, attributes and defaults
    (from the spec table)."""
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
        for o in s.outputs:
            print(f"  output {o.name:<10} {o.type:<17} {o.shape}")
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
