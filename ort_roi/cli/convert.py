"""``ort-roi convert``: the rewrite pass (graph/rewrite.py) on a model file, written to
another with ort_roi's nodes' inferred output types."""

from __future__ import annotations

import argparse
import sys

from ..graph import exporters, shapes
from ..graph.files import read_model, write_model
from ..graph.rewrite import rewrite
from ..graph.shapes import declared_shape_errors


def cmd_convert(args: argparse.Namespace) -> int:
    """Rewrite a graph so that a plain onnxruntime session with ort_roi runs it: ONNX
    RoiAlign / MaxRoiPool into ort_roi, torchvision's exported MultiScaleRoIAlign stages
    into one PyramidRoIAlign node each, exporters' nodes with every attribute (--to onnx: ort_roi
    RoiAlign / ROIPooling max and the fused stages back to standard ONNX)."""
    try:
        m = read_model(args.input)
        done = rewrite(m, to=args.to, roialign_max=args.roialign_max, fuse=args.fuse,
                       exporter=args.exporter)
        shapes.annotate(m)  # as convert(): our nodes' inferred output types
        bad = declared_shape_errors(m)
        if bad:  # what validate's checker and info say of it: no session would run it
            print(f"ort-roi convert: {args.input}: {bad[0]}: no session runs it, before or "
                  f"after convert (nothing written; `ort-roi validate {args.input}` says "
                  f"more)", file=sys.stderr)
            return 1
        write_model(m, args.output)
    except (ValueError, OSError) as e:
        print(f"ort-roi convert: {e}", file=sys.stderr)
        return 1
    except Exception as e:  # noqa: BLE001 - a defect of ours: still a message, not a traceback
        print(f"ort-roi convert: internal error {type(e).__name__}: {e} (please report it)",
              file=sys.stderr)
        return 1
    print(f"{args.input} -> {args.output}: {moved_count(done.moved)} "
          f"({done.summary()}); every node of ort_roi or another exporter has its attributes "
          f"explicit")
    for note in done.notes:
        print(f"  note: {note}")
    return 0


def moved_count(moved: list) -> str:
    """What convert rewrote, counted as what it is: nodes, fused stages (a torchvision,
    PaddleDetection or GluonCV RoI stage of many nodes become one) and fused Loops."""
    stages = sum(" stage" in a for _, a, _ in moved)
    loops = sum("Loop" in a and " stage" not in a for _, a, _ in moved)
    nodes = len(moved) - stages - loops
    parts = [f"{nodes} node(s) rewritten"] if nodes or not (stages or loops) else []
    if stages:
        parts.append(f"{stages} stage(s) fused into one node each")
    if loops:
        parts.append(f"{loops} Loop(s) fused into one node each")
    return ", ".join(parts)


def add_command(sub) -> None:
    """Attach convert to the ort-roi parser."""
    p = sub.add_parser("convert", help=cmd_convert.__doc__, description=cmd_convert.__doc__)
    p.add_argument("input", metavar="IN", help="the ONNX model to convert (not changed)")
    p.add_argument("output", metavar="OUT", help="where to write the converted model")
    p.add_argument("--to", choices=("ort_roi", "onnx"), default="ort_roi",
                   help="ort_roi: RoiAlign / MaxRoiPool -> ort_roi (default); onnx: the reverse")
    p.add_argument("--roialign-max", choices=("sample", "onnx"), default="sample",
                   help="ONNX RoiAlign mode=max as the largest bilinear sample (sample, the "
                        "default: mmcv, OpenVINO) or as onnxruntime computes it (onnx)")
    p.add_argument("--no-fuse", dest="fuse", action="store_false",
                   help="leave torchvision's MultiScaleRoIAlign stages node by node (each "
                        "RoiAlign still moved) instead of one PyramidRoIAlign node")
    p.add_argument("--exporter", choices=exporters.NAMES, default=None,
                   help="who wrote the model (default: told from its producer_name and graph "
                        "name): that exporter's repairs apply (mx2onnx's RoiAlign and Splits, "
                        "tf2onnx's crop_and_resize); none: no exporter's")
    p.set_defaults(fn=cmd_convert)
