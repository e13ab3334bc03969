"""``ort-roi info``: every node form ort_roi runs, from the spec table, and what a plain
session does with it (tried, runtime/probe.py); ``ort-roi info MODEL``: a model's RoI nodes,
what runs each, what convert would do, and what the model needs."""

from __future__ import annotations

import argparse
import sys
import warnings

import onnx
import onnxruntime as ort

from ..errors import RoiOpError
from ..graph.nodes import iter_nodes
from ..ops import FORMS, form
from ..runtime.probe import how_it_runs
from ..spec import DOMAIN, TYPES

#: The oldest onnxruntime ort_roi supports (pyproject.toml's floor).
ORT_FLOOR = "1.17"


def cmd_info(args: argparse.Namespace) -> int:
    """Without MODEL: every node form ort_roi runs, one line each (--full: with each op's
    types, attributes and defaults, and what a plain session does with it, tried). With
    MODEL: its RoI nodes, what runs each, what convert would do, and what it needs."""
    if args.models:
        from .validate import model_files

        paths = model_files(args.models)
        if not paths:
            print(f"ort-roi info: no .onnx file in {', '.join(args.models)}", file=sys.stderr)
            return 1
        return max(model_info(m) for m in paths)
    if not args.full:
        for f in FORMS:
            name = f"{f.domain or 'onnx'}::{f.op_type}"
            how = (f"runs as it is ({DOMAIN}'s kernel)" if f.registered
                   else f"convert / the front door rewrite it to {DOMAIN}::{f.spec.name}")
            print(f"{name:<58} {how}")
        print(f"\n{len(FORMS)} node forms. `ort-roi info --full` adds each op's inputs, "
              f"attributes and defaults and what a plain session does with it (tried); "
              f"`ort-roi info MODEL` looks at a model.")
        return 0
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


def model_info(path: str) -> int:
    """Print ``path``'s RoI nodes (each a line: node, op, what runs it), what
    ``ort_roi.convert`` would do with the model, and the opsets and onnxruntime it needs.
    Returns 0, or 1 when the file cannot be read as a model."""
    from ..graph.rewrite import convert

    try:
        model = onnx.load(path, load_external_data=False)
        if not model.HasField("graph"):
            raise ValueError("it holds no graph")
    except Exception as e:  # noqa: BLE001 - a missing file, a directory, not a model
        print(f"ort-roi info: cannot read {path} as an ONNX model: "
              f"{str(e).splitlines()[0] if str(e) else type(e).__name__}", file=sys.stderr)
        return 1
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    print(f"{path}: producer {model.producer_name or '?'} {model.producer_version}, "
          f"ir_version {model.ir_version}, opsets "
          + ", ".join(f"{d} {v}" for d, v in sorted(opsets.items())))
    ours = [(n, form(n.domain, n.op_type)) for n in iter_nodes(model.graph)]
    ours = [(n, f) for n, f in ours if f is not None]
    if not ours:
        print("  no RoI node ort_roi knows: onnxruntime runs this model without ort_roi")
    for n, f in ours:
        if f.registered:
            how = "a plain session with ort_roi.session_options() runs it as it is"
        else:
            how = (f"onnxruntime runs it natively; convert / the front door rewrite it to "
                   f"{DOMAIN}::{f.spec.name}")
        print(f"  node {n.name or '(unnamed)'!r}: {n.domain or 'onnx'}::{n.op_type} "
              f"({f.spec.source}): {how}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, done = convert(model, report=True)
        print(f"  convert would: {done.summary()}")
        for note in done.notes:
            print(f"    note: {note}")
    except (ValueError, RoiOpError) as e:
        print(f"  convert would refuse it: {str(e).splitlines()[0]}")
    regs = [f for _, f in ours if f.registered] or [f for _, f in ours]
    if regs:
        print(f"  needs: ort_roi's ops (ort_roi.session_options() or ort_roi.InferenceSession) "
              f"and onnxruntime >= {ORT_FLOOR} (here {ort.__version__})")
    return 0


def add_command(sub) -> None:
    """Attach info to the ort-roi parser."""
    p = sub.add_parser("info", help=cmd_info.__doc__, description=cmd_info.__doc__)
    p.add_argument("models", nargs="*", metavar="MODEL",
                   help="ONNX files to look at (none: the catalogue of node forms)")
    p.add_argument("--full", action="store_true",
                   help="the catalogue with each op's inputs, attributes and defaults, and "
                        "what a plain session does with each form (tried)")
    p.set_defaults(fn=cmd_info)
