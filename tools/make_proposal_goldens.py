#!/usr/bin/env python3
"""Generate tests/goldens/proposals.npz from Paddle's generate_proposals and
distribute_fpn_proposals (paddle.vision.ops, CPU), and tests/goldens/collect_fpn_proposals.npz
from its collect_fpn_proposals (``paddle._C_ops``: Paddle 3 has no Python API for it).

    python -m tools.make_proposal_goldens [proposals|collect] [--out tests/goldens]

Needs paddle (pip install '.[parity]': paddlepaddle 3.3.1). Each case of
tests/proposal_cases.py (its collect_cases() for the second file) runs through Paddle's CPU
kernels; the file holds, per case, its inputs ("name:scores", ...), the op, attributes and
Paddle's version (JSON, "name:meta") and Paddle's outputs in the order of the ort_roi node's
outputs ("name:out0", "name:out1", ...), so tests/test_proposals.py and
tests/test_collect_fpn_proposals.py check ort_roi against Paddle without it.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from tests import proposal_cases
from tests.oracles import paddle_proposals

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("suite", nargs="*", choices=sorted(SUITES), default=sorted(SUITES),
                    help="which file(s) to write (default: both)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "goldens"))
    args = ap.parse_args()
    for suite in args.suite:
        write(suite, *SUITES[suite], args.out)


#: suite -> (file name, its cases)
SUITES = {"proposals": ("proposals.npz", proposal_cases.cases),
          "collect": ("collect_fpn_proposals.npz", proposal_cases.collect_cases)}


def write(suite: str, filename: str, make_cases, out: str) -> None:
    import paddle

    arrays = {}
    cases = make_cases()
    bad = [c["name"] for c in cases if suite == "collect" and not proposal_cases.paddle_defined(c)]
    if bad:  # Paddle's kernel does not answer these as written: no golden of them
        raise SystemExit(f"cases Paddle's collect_fpn_proposals does not answer: {bad}")
    for case in cases:
        n = case["name"]
        outs = paddle_proposals(case)
        for k, v in case["inputs"].items():
            arrays[f"{n}:{k}"] = v
        for i, o in enumerate(outs):
            arrays[f"{n}:out{i}"] = o
        arrays[f"{n}:meta"] = np.array(json.dumps(dict(
            op=case["op"], attrs=case["attrs"], inputs=list(case["inputs"]), outputs=len(outs),
            paddle=paddle.__version__)))
    path = os.path.join(out, filename)
    np.savez_compressed(path, **arrays)
    print(f"{path}: {len(cases)} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
