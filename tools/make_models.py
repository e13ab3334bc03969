#!/usr/bin/env python3
"""Write the example detection heads of ort_roi.graph.examples to models/ (and check them).

    python -m tools.make_models [--out models]

Each model is built with a fixed seed, so the files are reproducible; tests check that the
committed files equal what this script writes.
"""

from __future__ import annotations

import argparse
import os

import onnx

from ort_roi.graph import examples, inputs
from ort_roi.cli.compare import compare_with_reference

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "models"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for ex in examples.EXAMPLES:
        model = ex.build()
        onnx.checker.check_model(model, full_check=True)
        report = compare_with_reference(model, inputs.generate_inputs(model))
        path = os.path.join(args.out, ex.file)
        onnx.save(model, path)
        print(f"{path}: {os.path.getsize(path)} bytes, {report.summary()}")


if __name__ == "__main__":
    main()
