"""GPU check and bench (needs CuPy and an NVIDIA GPU; torchvision optional).

    python tools/gpu_bench.py [--repeat 20] [--json out.json]

1. runs the GPU tests (``pytest -m gpu tests/test_cupy.py``);
2. times ort_roi's CuPy kernels on the standard workloads (ort_roi/data/workloads.json) side
   by side with torchvision.ops (roi_align aligned=True, roi_pool, ps_roi_pool) and, when
   onnxruntime-gpu is installed, its CUDA RoiAlign; prints a markdown table of medians (CUDA
   events, after a warm-up) and ratios (peer / ort_roi, > 1: ort_roi is faster) and checks that
   outputs agree. Arrays are on the device already: host-device copies are not timed.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def gpu_time(fn, repeat: int) -> float:
    import cupy

    fn()
    cupy.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
    return statistics.median(times)


def cases(repeat: int):
    import cupy

    from ort_roi import bench, kernels

    try:
        import torch
        import torchvision.ops as tv
    except ImportError:
        torch = tv = None
    rows = []
    for name, w in bench.workloads().items():
        X, boxes, counts = bench.make_inputs(w, normalized="ROIPooling.bilinear" in w["ops"])
        Xg, bg = cupy.asarray(X), cupy.asarray(boxes)
        p, s = w["pooled"], w["spatial_scale"]
        batch = np.repeat(np.arange(w["N"]), counts).astype(np.float32)
        rois = np.concatenate([batch[:, None], boxes], 1)
        for op in w["ops"]:
            if op == "RoIAlign":
                sr = w.get("sampling_ratio", -1)
                a = dict(pooled_height=p, pooled_width=p, spatial_scale=s, sampling_ratio=sr)
                ours = lambda: kernels.roi_align(Xg, bg, counts, **a)  # noqa: E731
                peer = None if tv is None else (
                    "torchvision roi_align",
                    lambda: tv.roi_align(torch.as_tensor(Xg, device="cuda"),
                                         torch.as_tensor(cupy.asarray(rois), device="cuda"),
                                         p, s, sr, aligned=True))
            elif op == "ROIPooling.max":
                a = dict(pooled_height=p, pooled_width=p, spatial_scale=s)
                ours = lambda: kernels.roi_pool(Xg, bg, counts, **a)  # noqa: E731
                peer = None if tv is None else (
                    "torchvision roi_pool",
                    lambda: tv.roi_pool(torch.as_tensor(Xg, device="cuda"),
                                        torch.as_tensor(cupy.asarray(rois), device="cuda"), p, s))
            elif op == "PSROIPool":
                a = dict(output_channels=w["output_channels"], pooled_height=p, pooled_width=p,
                         spatial_scale=s)
                ours = lambda: kernels.psroi_pool(Xg, bg, counts, **a)  # noqa: E731
                peer = None if tv is None else (
                    "torchvision ps_roi_pool",
                    lambda: tv.ps_roi_pool(torch.as_tensor(Xg, device="cuda"),
                                           torch.as_tensor(cupy.asarray(rois), device="cuda"),
                                           p, s))
            else:  # ROIPooling.bilinear: no GPU peer
                a = dict(pooled_h=p, pooled_w=p, spatial_scale=s, method="bilinear")
                ours = lambda: kernels.roi_pooling(Xg, cupy.asarray(rois), **a)  # noqa: E731
                peer = None
            t = gpu_time(ours, repeat)
            row = dict(workload=name, op=op, ours_s=t)
            if peer is not None:
                tp = gpu_time(peer[1], repeat)
                diff = float(np.abs(cupy.asnumpy(ours()) - peer[1]().cpu().numpy()).max())
                row.update(peer=peer[0], peer_s=tp, ratio=tp / t, max_abs_diff=diff)
            rows.append(row)
            print(row, flush=True)
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args()
    if not args.skip_tests:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu",
                            os.path.join(ROOT, "tests", "test_cupy.py")])
        if r.returncode:
            return r.returncode
    rows = cases(args.repeat)
    print("\n| workload | op | ort_roi (CuPy) | peer | peer time | peer / ort_roi | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['workload']} | {r['op']} | {r['ours_s'] * 1e3:.3f} ms | {r.get('peer', '-')} "
              f"| {r.get('peer_s', float('nan')) * 1e3:.3f} ms | {r.get('ratio', float('nan')):.2f}x "
              f"| {r.get('max_abs_diff', float('nan')):.1e} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
