#!/usr/bin/env python3
"""Measure what ort_roi's invocation hook saves: the same RoIAlign run through
onnxruntime-extensions' stock handler (outputs as Python lists) and through ours (arrays).

    python tools/hook_effect.py [--rois 1000 --channels 256 --pooled 7]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import onnxruntime as ort

import ort_roi
from ort_roi import builders
from ort_roi.runtime import bridge as _bridge


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[1])
    ap.add_argument("--rois", type=int, default=1000)
    ap.add_argument("--channels", type=int, default=256)
    ap.add_argument("--pooled", type=int, default=7)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((1, a.channels, 50, 68)).astype(np.float32)
    b = rng.uniform(0, 700, (a.rois, 4)).astype(np.float32)
    b[:, 2:] = b[:, :2] + rng.uniform(16, 300, (a.rois, 2))
    feed = {"X": X, "boxes": b, "boxes_num": np.array([a.rois], np.int32)}
    m = builders.single_op_model("RoIAlign", pooled_height=a.pooled, pooled_width=a.pooled,
                                 spatial_scale=1 / 16, sampling_ratio=2)
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options())
    from onnxruntime_extensions import _ocos

    def stock_path(k_id, feed, attrs):  # what the stock handler does with our output
        r = _bridge._run(k_id, feed, attrs)
        return (k_id, r[1], r[2].flatten().tolist())

    times = {}
    for name, hook in (("stock (lists)", stock_path), ("ort_roi (arrays)", _bridge._hook)):
        _ocos.PyCustomOpDef.install_hooker(hook)
        ys, ts = [], []
        for _ in range(a.repeat + 1):
            t = time.perf_counter()
            ys.append(sess.run(None, feed)[0])
            ts.append(time.perf_counter() - t)
        times[name] = statistics.median(ts[1:])
        print(f"{name:<18} {times[name]:.3f} s per run (output {list(ys[0].shape)})")
    _bridge.install_hook()
    s, o = times["stock (lists)"], times["ort_roi (arrays)"]
    print(f"the hook saves {s - o:.3f} s per run ({s / o:.1f}x faster end to end)")


if __name__ == "__main__":
    main()
