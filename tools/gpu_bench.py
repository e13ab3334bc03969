"""GPU check and bench (needs CuPy and an NVIDIA GPU; torchvision optional).

    python tools/gpu_bench.py [--repeat 20] [--json out.json] [--skip-tests] [W1 W2 ...]

1. runs the GPU tests (``pytest -m gpu tests/``);
2. kernel time: ort_roi's CuPy kernels on the standard workloads (ort_roi/data/workloads.json)
   side by side with torchvision.ops (roi_align aligned=True, roi_pool, ps_roi_pool), arrays
   already on the device, medians of CUDA-event times after a warm-up; checks that outputs
   agree;
3. through onnxruntime: a plain onnxruntime session of our op with the ``cupy`` backend
   (X copied to the GPU, the output copied back, the bridge's own copies) against the same
   session on the NumPy backend and torchvision called on host tensors (copies to and from
   the GPU included); "copies" is the H2D copy of X plus the D2H copy of the output alone.

Prints markdown tables; ratios are peer / ort_roi (> 1: ort_roi is faster).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def gpu_time(fn, repeat: int) -> float:
    """Median seconds of ``fn`` on the GPU (CUDA events), after a warm-up."""
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


def wall_time(fn, repeat: int) -> float:
    """Median wall-clock seconds of ``fn`` (which returns host data), after a warm-up."""
    fn()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


#: The workload ops timed here (the RoiAlign rows of ort-roi bench are RoIAlign's kernel).
GPU_OPS = ("RoIAlign", "ROIPooling.max", "PSROIPool", "ROIPooling.bilinear")


def _torchvision():
    try:
        import torch
        import torchvision.ops as tv
    except ImportError:
        return None, None
    return torch, tv


def _ours_and_peer(w: dict, op: str, X, boxes, counts, rois):
    """(our kernel, torchvision's or None): functions of (X, boxes, rois) on one device."""
    from ort_roi import ops as kernels

    torch, tv = _torchvision()
    p, s = w["pooled"], w["spatial_scale"]
    if op == "RoIAlign":
        sr = w.get("sampling_ratio", -1)
        a = dict(pooled_height=p, pooled_width=p, spatial_scale=s, sampling_ratio=sr)
        return (lambda x, b, r: kernels.roi_align(x, b, counts, **a),
                tv and ("torchvision roi_align",
                        lambda x, r: tv.roi_align(x, r, p, s, sr, aligned=True)))
    if op == "ROIPooling.max":
        a = dict(pooled_height=p, pooled_width=p, spatial_scale=s)
        return (lambda x, b, r: kernels.roi_pool(x, b, counts, **a),
                tv and ("torchvision roi_pool", lambda x, r: tv.roi_pool(x, r, p, s)))
    if op == "PSROIPool":
        a = dict(output_channels=w["output_channels"], pooled_height=p, pooled_width=p,
                 spatial_scale=s)
        return (lambda x, b, r: kernels.psroi_pool(x, b, counts, **a),
                tv and ("torchvision ps_roi_pool", lambda x, r: tv.ps_roi_pool(x, r, p, s)))
    a = dict(pooled_h=p, pooled_w=p, spatial_scale=s, method="bilinear")  # no GPU peer
    return lambda x, b, r: kernels.roi_pooling(x, r, **a), None


def kernel_rows(names, repeat: int):
    import cupy

    from ort_roi.cli import bench

    torch, _ = _torchvision()
    rows = []
    for name, w in bench.workloads().items():
        if names and not any(n in (name, name.split("_")[0]) for n in names):
            continue
        for op in w.get("ops", []) if "strides" not in w else []:
            if op not in GPU_OPS:
                continue
            X, boxes, counts = bench.make_inputs(w, normalized=op == "ROIPooling.bilinear")
            batch = np.repeat(np.arange(w["N"]), counts).astype(np.float32)
            rois = np.concatenate([batch[:, None], boxes], 1)
            Xg, bg, rg = cupy.asarray(X), cupy.asarray(boxes), cupy.asarray(rois)
            ours, peer = _ours_and_peer(w, op, X, boxes, counts, rois)
            row = dict(workload=name, op=op, ours_s=gpu_time(lambda: ours(Xg, bg, rg), repeat))
            y = cupy.asnumpy(ours(Xg, bg, rg))
            row["vs_numpy_max_abs_diff"] = float(np.abs(y - ours(X, boxes, rois)).max())
            if peer is not None:
                xt, rt = torch.as_tensor(Xg, device="cuda"), torch.as_tensor(rg, device="cuda")
                tp = gpu_time(lambda: peer[1](xt, rt), repeat)
                diff = float(np.abs(y - peer[1](xt, rt).cpu().numpy()).max())
                row.update(peer=peer[0], peer_s=tp, ratio=tp / row["ours_s"], max_abs_diff=diff)
            rows.append(row)
            print(row, flush=True)
    return rows


def fpn_rows(names, repeat: int):
    """W7 (FPN, 4 levels, 1000 boxes): both multi-level kernels with the maps on the device,
    our RoIAlign on the finest level alone with the same boxes (the per-box reference) and
    torchvision's MultiScaleRoIAlign (its own level rule, the same amount of work)."""
    import cupy

    from ort_roi import ops as kernels
    from ort_roi.cli import bench

    torch, tv = _torchvision()
    rows = []
    for name, w in bench.workloads().items():
        if "strides" not in w or (names and not any(n in (name, name.split("_")[0])
                                                    for n in names)):
            continue
        feats, boxes = bench.make_fpn_inputs(w)
        fg = [cupy.asarray(f) for f in feats]
        P, sr, strides = w["pooled"], w["sampling_ratio"], w["strides"]
        rois = np.concatenate([np.zeros((len(boxes), 1), np.float32), boxes], 1)
        runs = {
            "ExperimentalDetectronROIFeatureExtractor": lambda: kernels.roi_feature_extractor(
                boxes, *fg, output_size=P, sampling_ratio=sr, aligned=1,
                pyramid_scales=strides)[0],
            "MMCVMultiLevelRoiAlign": lambda: kernels.multi_level_roi_align(
                rois, *fg, output_height=P, output_width=P, sampling_ratio=sr, aligned=1,
                featmap_strides=[float(s) for s in strides]),
            "RoIAlign, level 0 only": lambda: kernels.roi_align(
                fg[0], boxes, np.array([len(boxes)]), pooled_height=P, pooled_width=P,
                spatial_scale=1 / strides[0], sampling_ratio=sr),
        }
        if tv is not None:
            from collections import OrderedDict

            pool = tv.MultiScaleRoIAlign([f"p{i}" for i in range(len(fg))], P, sr)
            fmap = OrderedDict((f"p{i}", torch.as_tensor(f, device="cuda"))
                               for i, f in enumerate(fg))
            tb = [torch.as_tensor(boxes, device="cuda")]
            H, W = w["image"]
            runs["torchvision MultiScaleRoIAlign"] = lambda: pool(fmap, tb, [(H, W)])
        for op, fn in runs.items():
            row = dict(workload=name, op=op, s=gpu_time(fn, repeat), R=len(boxes))
            rows.append(row)
            print(row, flush=True)
    return rows


def session_rows(names, repeat: int):
    """Through onnxruntime: the cupy backend, the numpy backend, torchvision with copies."""
    import cupy

    import ort_roi
    from ort_roi.cli import bench

    torch, _ = _torchvision()
    rows = []
    for name, w in bench.workloads().items():
        if names and not any(n in (name, name.split("_")[0]) for n in names):
            continue
        for op in w["ops"] if "strides" not in w else []:
            if name.startswith("W6") or op not in GPU_OPS:
                continue
            ours_sess, _ = bench.cases(w, op)
            X, boxes, counts = bench.make_inputs(w, normalized=op == "ROIPooling.bilinear")
            batch = np.repeat(np.arange(w["N"]), counts).astype(np.float32)
            rois = np.concatenate([batch[:, None], boxes], 1)
            row = dict(workload=name, op=op)
            try:
                assert ort_roi.set_backend("cupy") == "cupy"
                row["ort_cupy_s"] = wall_time(ours_sess, repeat)
                y = ours_sess()
            finally:
                ort_roi.set_backend("numpy")
            row["ort_numpy_s"] = wall_time(ours_sess, max(3, repeat // 4))
            y_np = ours_sess()
            row["cupy_vs_numpy_max_abs_diff"] = float(np.abs(y - y_np).max())

            def copies():
                cupy.asarray(X)
                cupy.asnumpy(cupy.empty(y.shape, y.dtype))
            row["copies_s"] = wall_time(copies, repeat)
            _, peer = _ours_and_peer(w, op, X, boxes, counts, rois)
            if peer is not None:
                def tv_host():
                    out = peer[1](torch.from_numpy(X).cuda(), torch.from_numpy(rois).cuda())
                    return out.cpu().numpy()
                row.update(peer=peer[0], peer_host_s=wall_time(tv_host, repeat))
            rows.append(row)
            print(row, flush=True)
    return rows


def _ms(s) -> str:
    return "-" if s is None else f"{s * 1e3:.3f} ms"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="*")
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--json")
    ap.add_argument("--skip-tests", action="store_true")
    args = ap.parse_args()
    if not args.skip_tests:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-m", "gpu",
                            os.path.join(ROOT, "tests")])
        if r.returncode:
            return r.returncode
    import cupy

    dev = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    print(f"device: {dev}, CUDA runtime {cupy.cuda.runtime.runtimeGetVersion()}, "
          f"CuPy {cupy.__version__}")
    krows = kernel_rows(args.workloads, args.repeat)
    frows = fpn_rows(args.workloads, args.repeat)
    srows = session_rows(args.workloads, max(5, args.repeat // 2))
    print(f"\nKernel time ({dev}; arrays on the device)\n")
    print("| workload | op | ort_roi (CuPy) | peer | peer time | peer / ort_roi | max abs diff |")
    print("|---|---|---|---|---|---|---|")
    for r in krows:
        print(f"| {r['workload']} | {r['op']} | {_ms(r['ours_s'])} | {r.get('peer', '-')} "
              f"| {_ms(r.get('peer_s'))} | {r.get('ratio', float('nan')):.2f}x "
              f"| {r.get('max_abs_diff', float('nan')):.1e} |")
    if frows:
        print(f"\nFPN (W7, kernel time, {dev})\n")
        print("| op | time | per box |")
        print("|---|---|---|")
        for r in frows:
            print(f"| {r['op']} | {_ms(r['s'])} | {r['s'] / r['R'] * 1e6:.2f} us |")
    print(f"\nThrough onnxruntime ({dev}; host arrays in and out)\n")
    print("| workload | op | ort_roi cupy | ort_roi numpy | copies alone | torchvision (copies "
          "incl.) | torchvision / ort_roi cupy |")
    print("|---|---|---|---|---|---|---|")
    for r in srows:
        p = r.get("peer_host_s")
        print(f"| {r['workload']} | {r['op']} | {_ms(r['ort_cupy_s'])} | {_ms(r['ort_numpy_s'])} "
              f"| {_ms(r['copies_s'])} | {_ms(p)} | "
              f"{(p / r['ort_cupy_s']) if p else float('nan'):.2f}x |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(device=dev, kernel=krows, fpn=frows, session=srows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
