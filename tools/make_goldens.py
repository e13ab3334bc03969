#!/usr/bin/env python3
"""Generate the golden files tests/goldens/*.npz from the real frameworks.

    python -m tools.make_goldens --mxnet-python /path/to/mxnet-venv/bin/python
    python -m tools.make_goldens mmcv_roi_align_rotated     # one suite (no MXNet needed)

Needs paddlepaddle and openvino in this interpreter (pip install '.[parity]') and MXNet
1.9.1 in a venv of its own (it needs numpy==1.23.5):
    python -m venv mxvenv && mxvenv/bin/pip install mxnet==1.9.1 numpy==1.23.5

Each case of tests/cases.py is run through its oracle (MXNet for ROIPooling max, OpenVINO
for ROIPooling bilinear and, reading exported ONNX nodes, MMCVRoIAlignRotated and
ExperimentalDetectronROIFeatureExtractor; Paddle for RoIPool, PSROIPool and RoIAlign;
torchvision (pip install '.[torchvision]') for its ps_roi_align, ps_roi_pool and the
MultiScaleRoIAlign stage, PyramidRoIAlign); ROIPooling max also
records OpenVINO's output. One file per suite holds, per case, the inputs, the attributes
(JSON), the oracle's output ("expected") and the flags.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from tests import cases as C
from tests import oracles as O

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--mxnet-python", help="python of a venv with mxnet 1.9.1 (needed for "
                    "the MXNet suites and the demo cases)")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "goldens"))
    ap.add_argument("suites", nargs="*", help=f"suites to write (default all: "
                    f"{', '.join(C.SUITES)})")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    todo = args.suites or list(C.SUITES)
    if not args.mxnet_python and (not args.suites or any(C.SUITES[s][0] == "mxnet" for s in todo)):
        ap.error("--mxnet-python is needed for the MXNet suites and the demo cases")
    for suite in todo:
        oracle, make = C.SUITES[suite]
        cases = make()
        if oracle == "mxnet":
            mx = O.mxnet_roi_pooling(cases, args.mxnet_python)
        arrays = {}
        for c in cases:
            n = c["name"]
            if oracle == "mxnet":
                expected = mx[n]
                arrays[f"{n}:openvino"] = O.openvino_roi_pooling(c)
            elif oracle == "openvino":
                expected = (O.openvino_rotated(c) if c["op"] == "MMCVRoIAlignRotated"
                            else O.openvino_extractor(c) if c["op"].startswith("ROIFeature")
                            else O.openvino_roi_pooling(c))
            elif oracle == "torchvision":
                expected = O.torchvision(c)
            else:
                expected = O.paddle(c)
            arrays[f"{n}:expected"] = expected
            for k, v in c["inputs"].items():
                arrays[f"{n}:{k}"] = v
            meta = dict(op=c["op"], attrs=c["attrs"], oracle=oracle,
                        tie=bool(c.get("tie")), nan_to_zero=bool(c.get("nan_to_zero")))
            arrays[f"{n}:meta"] = np.array(json.dumps(meta))
        path = os.path.join(args.out, f"{suite}.npz")
        np.savez_compressed(path, **arrays)
        print(f"{path}: {len(cases)} cases from {oracle}, {os.path.getsize(path)} bytes")
    if not args.suites:
        write_demo_cases(args.mxnet_python)


def write_demo_cases(mxnet_python: str) -> None:
    """The built-in example of `ort-roi demo`: tiny inputs with the frameworks' outputs."""
    demo = []
    for c in C.demo_cases():
        if c["oracle"] == "mxnet":
            expected = O.mxnet_roi_pooling([c], mxnet_python)[c["name"]]
        elif c["oracle"] == "openvino":
            expected = O.openvino_roi_pooling(c)
        else:
            expected = O.paddle(c)
        demo.append(dict(name=c["name"], op=c["op"], oracle=c["oracle"], attrs=c["attrs"],
                         inputs={k: dict(dtype=v.dtype.name, shape=list(v.shape),
                                         data=v.ravel().tolist())
                                 for k, v in c["inputs"].items()},
                         expected=dict(shape=list(expected.shape),
                                       data=expected.ravel().tolist())))
    path = os.path.join(HERE, "..", "ort_roi", "data", "demo_cases.json")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(demo, f, indent=1)
    print(f"{path}: {len(demo)} demo cases")


if __name__ == "__main__":
    main()
