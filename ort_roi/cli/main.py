"""The ``ort-roi`` command line (also ``python -m ort_roi``): demo, info, validate, convert,
bench, export-paddle; ``--version``."""

from __future__ import annotations

import os
import sys
from typing import Sequence

from .. import __version__
from . import bench, convert, export_paddle, info, validate
from .args import Parser
from .demo import cmd_demo


def main(argv: Sequence[str] | None = None) -> int:
    p = Parser(prog="ort-roi", description="RoI ops for onnxruntime")
    p.add_argument("--version", action="version", version=f"ort-roi {__version__}")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("demo", help=cmd_demo.__doc__).set_defaults(fn=cmd_demo)
    info.add_command(sub)
    validate.add_command(sub)
    convert.add_command(sub)
    bench.add_command(sub)
    export_paddle.add_command(sub)
    args = p.parse_args(argv)
    try:
        return args.fn(args)
    except BrokenPipeError:  # `ort-roi info | head`: the reader left; so do we, quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    sys.exit(main())
