#!/usr/bin/env python3
"""Generate tests/goldens/crop_and_resize.npz from TensorFlow's tf.image.crop_and_resize.

    python -m tools.make_tf_goldens [--out tests/goldens]

Needs tensorflow (pip install '.[tensorflow]': tensorflow-cpu 2.20). Each case of
tests/crop_cases.py runs through TensorFlow's CPU kernel; the file holds, per case, its
inputs ("name:image", "name:boxes", "name:box_indices"), the attributes (JSON, "name:meta")
and TensorFlow's output ("name:expected"), so tests/test_crop_and_resize.py checks ort_roi
against TensorFlow without it.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np

from tests import crop_cases
from tests.oracles import tf_crop_and_resize

HERE = os.path.dirname(os.path.abspath(__file__))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--out", default=os.path.join(HERE, "..", "tests", "goldens"))
    args = ap.parse_args()
    import tensorflow as tf

    arrays = {}
    for case in crop_cases.cases():
        n = case["name"]
        expected = tf_crop_and_resize(*case["inputs"].values(), **case["attrs"])
        for k, v in case["inputs"].items():
            arrays[f"{n}:{k}"] = v
        arrays[f"{n}:expected"] = expected
        arrays[f"{n}:meta"] = np.array(json.dumps(dict(attrs=case["attrs"],
                                                       tensorflow=tf.__version__)))
    path = os.path.join(args.out, "crop_and_resize.npz")
    np.savez_compressed(path, **arrays)
    print(f"{path}: {len(crop_cases.cases())} cases, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
