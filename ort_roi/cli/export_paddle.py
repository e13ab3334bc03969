"""``ort-roi export-paddle PATH_PREFIX OUT.onnx``: a saved Paddle inference program to ONNX
with roi_align / roi_pool / psroi_pool exact (ort_roi.export.paddle)."""

from __future__ import annotations

import argparse
import os
import sys
from collections import Counter

from ..export.paddle import PYTHON_ENV, paddle_export
from ..graph.files import write_model
from ..graph.nodes import opset
from ..graph.paddle import REPAIRED
from .args import SECONDS


def cmd_export_paddle(args: argparse.Namespace) -> int:
    """Export a saved Paddle inference program (PREFIX.json or PREFIX.pdmodel, with
    PREFIX.pdiparams) to ONNX through paddle2onnx, run in a child process, with its RoI ops
    (roi_align, roi_pool, psroi_pool) rewritten into exact nodes: ort_roi's (run with
    ort_roi.session_options()) or, with --standard-onnx, standard RoiAlign / MaxRoiPool."""
    why = unwritable(args.output)
    if why is not None:  # before paddle2onnx runs: convert's words
        print(f"ort-roi export-paddle: {why}", file=sys.stderr)
        return 1
    try:
        model = paddle_export(args.path_prefix, None, args.opset,
                              standard=args.standard_onnx, python=args.python,
                              timeout=args.timeout, fuse=not args.no_fuse)
        write_model(model, args.output)
    except (ValueError, ImportError, OSError) as e:  # RoiOpError, ModelFileError: ValueErrors
        print(f"ort-roi export-paddle: {e}", file=sys.stderr)
        return 1
    wrote = opset(model)
    if wrote is not None and wrote != args.opset:
        print(f"  note: --opset {args.opset} asked; paddle2onnx wrote opset {wrote} (an op of "
              f"this program needs it)")
    ops = Counter(f"{n.domain or 'onnx'}::{n.op_type}" for n in model.graph.node
                  if n.domain == "ort_roi" or n.op_type in ("RoiAlign", "MaxRoiPool"))
    repaired = Counter(n.doc_string[len(REPAIRED):] for n in model.graph.node
                       if n.doc_string.startswith(REPAIRED))
    print(f"{args.path_prefix} -> {args.output}: {len(model.graph.node)} nodes, RoI nodes: "
          + (", ".join(f"{k} x{v}" for k, v in sorted(ops.items())) or "none")
          + "".join(f"; repaired: {k} x{v}" for k, v in sorted(repaired.items())))
    return 0


#: The opsets export-paddle asks of paddle2onnx: it writes 7-21 (its ir_version table) and
#: raises any below 10 to 10 for the RoI ops (roi_align needs 10) without a word.
OPSETS = (10, 21)


def unwritable(path: str) -> str | None:
    """Why ``path`` cannot be written as an output, in ``ort-roi convert``'s words (its
    folder is missing or a file, it is a folder); None where it can be tried.

    Args:
        path: the output file.

    Returns:
        the words, or None.
    """
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"cannot write the output {path}: it is a folder"
    if not os.path.isdir(folder):
        what = "is a file, not a folder" if os.path.exists(folder) else "does not exist"
        return f"cannot write the output {path}: its folder {folder} {what}"
    return None


def _opset(text: str) -> int:
    """--opset's type: an integer in OPSETS."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not OPSETS[0] <= value <= OPSETS[1]:
        raise argparse.ArgumentTypeError(
            f"{value} is out of range: paddle2onnx writes opsets {OPSETS[0]}-{OPSETS[1]} for "
            f"a program with RoI ops (below {OPSETS[0]} it raises the opset itself)")
    return value


def add_command(sub) -> None:
    """Attach export-paddle to the ort-roi parser."""
    p = sub.add_parser("export-paddle", help="a saved Paddle program to ONNX, RoI ops exact",
                       description=cmd_export_paddle.__doc__)
    p.add_argument("path_prefix", metavar="PATH_PREFIX",
                   help="what paddle.jit.save / PaddleDetection's export_model.py wrote, "
                        "without .json / .pdmodel")
    p.add_argument("output", metavar="OUT.onnx")
    p.add_argument("--opset", type=_opset, default=17,
                   help=f"ONNX opset, {OPSETS[0]}-{OPSETS[1]} (default 17; 11-17 tested)")
    p.add_argument("--standard-onnx", action="store_true",
                   help="standard RoiAlign / MaxRoiPool (onnxruntime without ort_roi); "
                        "psroi_pool has none, nor aligned roi_align below opset 16")
    p.add_argument("--python", help=f"the Python that runs paddle2onnx (default ${PYTHON_ENV} "
                                    "or this one)")
    p.add_argument("--timeout", type=SECONDS, help="seconds paddle2onnx may run")
    p.add_argument("--no-fuse", action="store_true",
                   help="keep PaddleDetection's FPN RoI stage as exported (one RoIAlign per "
                        "level) instead of one DistributeRoIAlign node")
    p.set_defaults(fn=cmd_export_paddle)
