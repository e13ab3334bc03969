"""``ort-roi info``: every node form ort_roi runs, from the spec table, and what a plain
session does with it (tried, runtime/probe.py); ``ort-roi info MODEL``: a model's RoI nodes,
what runs each, what convert would do, and what the model needs."""

from __future__ import annotations

import argparse
import sys
import warnings

import onnxruntime as ort

from ..errors import RoiOpError, first_line
from ..graph.files import ModelFileError, read_model
from ..graph.nodes import copy_model, iter_nodes
from ..ops import FORMS, form
from ..runtime.probe import how_it_runs, onnxruntime_kernel, unprovided
from ..spec import DOMAIN, TYPES
from .tried import tried_run
from .verdicts import PLAIN

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
    """Print ``path``'s RoI nodes (each a line: node, op, what runs it), whether a plain
    session with ort_roi's ops runs the model (tried, not assumed: our attribute rules, the
    declared shapes of ort_roi's nodes, one run on generated inputs; "loads; not run" where
    none could be generated), what ``ort_roi.convert``
    would do with it (and whether a plain session runs that, tried), and what the model needs:
    ort_roi's ops, the onnxruntime, and every node no runtime here provides.
    Returns 0, or 1 when the file cannot be read as a model."""
    from ..graph.rewrite import rewrite

    try:
        model = read_model(path)
    except ModelFileError as e:
        print(f"ort-roi info: {e}", file=sys.stderr)
        return 1
    opsets = {(o.domain or "ai.onnx"): o.version for o in model.opset_import}
    print(f"{path}: producer {model.producer_name or '?'} {model.producer_version}, "
          f"ir_version {model.ir_version}, opsets "
          + ", ".join(f"{d} {v}" for d, v in sorted(opsets.items())))
    ours = [(n, form(n.domain, n.op_type)) for n in iter_nodes(model.graph)]
    ours = [(n, f) for n, f in ours if f is not None]
    for n, f in ours:
        if f.registered:
            how = "ort_roi's kernel"
        elif onnxruntime_kernel(n.domain, n.op_type):
            how = (f"onnxruntime's own kernel; convert / the front door rewrite it to "
                   f"{DOMAIN}::{f.spec.name}")
        else:
            how = (f"no runtime here runs it as written (onnxruntime has no kernel for it); "
                   f"convert / the front door rewrite it to {DOMAIN}::{f.spec.name}")
        print(f"  node {n.name or '(unnamed)'!r}: {n.domain or 'onnx'}::{n.op_type} "
              f"({f.spec.source}): {how}")
    ran, said = tried_run(model)
    why = None if ran is not False else said
    if ran:
        print(f"  {PLAIN} runs it as it is (tried: {said})"
              + ("" if ours else "; it holds no RoI node ort_roi runs"))
    elif ran is None:
        print(f"  {PLAIN}: {said}")
    else:
        print(f"  {PLAIN} cannot run it as it is: {said}")
    converted = copy_model(model)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            done = rewrite(converted, "ort_roi")
    except (ValueError, RoiOpError) as e:
        print(f"  convert would refuse it: {first_line(e)}")
        done = None
    if done is not None:
        print(f"  convert would: {done.summary()}")
        for line in done.repairs:
            print(f"    changes what it computes: {line} (`ort-roi validate` measures by how "
                  f"much)")
        for note in done.notes:
            print(f"    note: {note}")
        if done.moved and why is not None:
            ran, said = tried_run(converted)
            print("    after convert, " + (f"{PLAIN} runs it (tried: {said})" if ran else
                                          f"{PLAIN}: {said}" if ran is None else
                                          f"{PLAIN} still cannot run it: {said}"))
    if any(f.registered for _, f in ours) or (done is not None and done.moved):
        after = "" if any(f.registered for _, f in ours) else "after convert, "
        print(f"  needs: {after}ort_roi's ops (ort_roi.session_options() or ort_roi.InferenceSession) "
              f"and onnxruntime >= {ORT_FLOOR} (here {ort.__version__})")
    missing = unprovided(model)
    if missing:
        print("  needs what no runtime here provides (neither onnxruntime nor ort_roi runs "
              "these nodes, before or after convert): "
              + ", ".join(f"{k} ({n} node{'s' * (n > 1)})" for k, n in missing.items()))
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
