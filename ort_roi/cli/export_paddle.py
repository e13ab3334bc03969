"""``ort-roi export-paddle PATH_PREFIX OUT.onnx``: a saved Paddle inference program to ONNX
with roi_align / roi_pool / psroi_pool exact (ort_roi.export.paddle)."""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from ..export.paddle import PYTHON_ENV, paddle_export
from ..graph.paddle import REPAIRED


def cmd_export_paddle(args: argparse.Namespace) -> int:
    """Export a saved Paddle inference program (PREFIX.json or PREFIX.pdmodel, with
    PREFIX.pdiparams) to ONNX through paddle2onnx, run in a child process, with its RoI ops
    (roi_align, roi_pool, psroi_pool) rewritten into exact nodes: ort_roi's (run with
    ort_roi.session_options()) or, with --standard-onnx, standard RoiAlign / MaxRoiPool."""
    try:
        model = paddle_export(args.path_prefix, args.output, args.opset,
                              standard=args.standard_onnx, python=args.python,
                              timeout=args.timeout, fuse=not args.no_fuse)
    except (ValueError, ImportError, OSError) as e:  # RoiOpError is a ValueError
        print(f"ort-roi export-paddle: {e}", file=sys.stderr)
        return 1
    ops = Counter(f"{n.domain or 'onnx'}::{n.op_type}" for n in model.graph.node
                  if n.domain == "ort_roi" or n.op_type in ("RoiAlign", "MaxRoiPool"))
    repaired = Counter(n.doc_string[len(REPAIRED):] for n in model.graph.node
                       if n.doc_string.startswith(REPAIRED))
    print(f"{args.path_prefix} -> {args.output}: {len(model.graph.node)} nodes, RoI nodes: "
          + (", ".join(f"{k} x{v}" for k, v in sorted(ops.items())) or "none")
          + "".join(f"; repaired: {k} x{v}" for k, v in sorted(repaired.items())))
    return 0


def add_command(sub) -> None:
    """Attach export-paddle to the ort-roi parser."""
    p = sub.add_parser("export-paddle", help="a saved Paddle program to ONNX, RoI ops exact",
                       description=cmd_export_paddle.__doc__)
    p.add_argument("path_prefix", metavar="PATH_PREFIX",
                   help="what paddle.jit.save / PaddleDetection's export_model.py wrote, "
                        "without .json / .pdmodel")
    p.add_argument("output", metavar="OUT.onnx")
    p.add_argument("--opset", type=int, default=17, help="ONNX opset (default 17)")
    p.add_argument("--standard-onnx", action="store_true",
                   help="standard RoiAlign / MaxRoiPool (onnxruntime without ort_roi); "
                        "psroi_pool has none, nor aligned roi_align below opset 16")
    p.add_argument("--python", help=f"the Python that runs paddle2onnx (default ${PYTHON_ENV} "
                                    "or this one)")
    p.add_argument("--timeout", type=float, help="seconds paddle2onnx may run")
    p.add_argument("--no-fuse", action="store_true",
                   help="keep PaddleDetection's FPN RoI stage as exported (one RoIAlign per "
                        "level) instead of one DistributeRoIAlign node")
    p.set_defaults(fn=cmd_export_paddle)
