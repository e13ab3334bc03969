"""Every standard workload on the GPU (CuPy) backend, or on NumPy to check the tool on a CPU.

    python -m tools.gpu_bench [W1 W2 ...] [--backend cupy|numpy] [--repeat 20] [--dry-run]
                              [--out results.json] [--md results.md]

The rows are ``ort-roi bench``'s (``ort_roi.cli.bench_workloads.plan``: every workload of
ort_roi/data/workloads.json, the per-level and CropAndResize workloads expanded as it expands
them) and their inputs are the ones it builds (``bench_cases.cases``, same seeds). For each row:

1. **kernel**: the op's public kernel (``ort_roi.ops.kernel``) on the row's inputs, the feature
   maps on the device (``--backend cupy``; as the bridge hands them over), median CUDA-event
   time after a warm-up; its output against the NumPy kernel's; with torch on CUDA,
   torchvision's same op (roi_align, roi_pool, ps_roi_pool; MultiScaleRoIAlign for W7) on the
   same device arrays. W7's rows run the multi-level kernels. A row that is a graph of several
   nodes (W8's fused stage) has no kernel row: it is timed through onnxruntime only (said in
   the skipped list).
2. **session**: the row's graph in a plain onnxruntime session with ``session_options()`` (what
   ``ort-roi bench`` times as "ort_roi"), on the ``cupy`` backend (inputs copied to the GPU and
   the outputs back, per call) against the ``numpy`` backend; "copies" is the H2D copy of the
   feature maps plus the D2H copy of the output alone.

``--backend numpy`` runs the same rows with NumPy kernels (wall-clock medians) and no GPU
peer: the tool itself, on any machine (tests/test_gpu_bench.py runs it with ``--dry-run``: one
timed call per row). A row that fails is reported (errors) and the others still run; the
JSON and markdown are rewritten after every row, so a run cut short keeps what it did. Exit
status: 0, 1 if a row failed, 2 on bad arguments or a backend that cannot run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import traceback
from typing import Callable

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: The row that has no single kernel (a graph of several nodes), and why.
GRAPH_ONLY = "a graph of several nodes (the level rule, PyramidRoIAlign): timed through " \
             "onnxruntime only"


class Backend:
    """Where the kernel rows compute: ``cupy`` (device arrays, CUDA-event times) or ``numpy``
    (host arrays, wall-clock times)."""

    def __init__(self, name: str):
        self.name = name
        if name == "cupy":
            import cupy

            self.xp = cupy
            props = cupy.cuda.runtime.getDeviceProperties(0)
            self.device = (f"{props['name'].decode()}, CUDA runtime "
                           f"{cupy.cuda.runtime.runtimeGetVersion()}, CuPy {cupy.__version__}")
        else:
            self.xp = np
            self.device = "CPU (NumPy)"

    def to_device(self, a: np.ndarray):
        return self.xp.asarray(a)

    def to_host(self, a) -> np.ndarray:
        return self.xp.asnumpy(a) if self.name == "cupy" else np.asarray(a)

    def time(self, fn: Callable, repeat: int, warmup: bool = True):
        """(median seconds of ``fn`` after a warm-up, CUDA events on the GPU; its last
        output)."""
        if self.name != "cupy":
            return wall_time(fn, repeat, warmup)
        cupy = self.xp
        if warmup:
            fn()
        cupy.cuda.Device().synchronize()
        times = []
        for _ in range(repeat):
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            y = fn()
            stop.record()
            stop.synchronize()
            times.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3)
        return statistics.median(times), y


def wall_time(fn: Callable, repeat: int, warmup: bool = True):
    """(median wall-clock seconds of ``fn``, which returns host data, after a warm-up; its
    last output): ``ort_roi.cli.bench_timing.time_together``, one call per sample."""
    from ort_roi.cli.bench_timing import time_together

    median, y, _ = time_together({"fn": fn}, repeat, min_sample_s=0, warmup=warmup)["fn"]
    return median, y


def _torch_cuda():
    """(torch, torchvision.ops) when torch sees a CUDA device, else (None, why)."""
    try:
        import torch
        import torchvision.ops as tv
    except ImportError as e:
        return None, f"torchvision is not installed ({e})"
    if not torch.cuda.is_available():
        return None, "torch sees no CUDA device"
    return torch, tv


def _first(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _rois5(boxes: np.ndarray, batch: np.ndarray) -> np.ndarray:
    return np.concatenate([batch[:, None].astype(boxes.dtype), boxes], 1)


def tv_peer(op: str, feed: dict, attrs: dict, tv):
    """torchvision's op computing ``op`` (a single-op row's spec name), as (name, rois [R, 5]
    on the host, fn(x, rois) on torch tensors), or None where torchvision has none."""
    if op == "RoIAlign":
        rois = _rois5(feed["boxes"], np.repeat(np.arange(len(feed["boxes_num"])),
                                               feed["boxes_num"]))
        a = attrs
        return ("torchvision roi_align", rois, lambda x, r: tv.roi_align(
            x, r, (a["pooled_height"], a["pooled_width"]), a["spatial_scale"],
            a["sampling_ratio"], aligned=bool(a["aligned"])))
    if op == "RoiAlign" and attrs.get("mode", "avg") == "avg":
        a = attrs
        rois = _rois5(feed["rois"], feed["batch_indices"])
        aligned = a.get("coordinate_transformation_mode", "half_pixel") == "half_pixel"
        return ("torchvision roi_align", rois, lambda x, r: tv.roi_align(
            x, r, (a["output_height"], a["output_width"]), a["spatial_scale"],
            a["sampling_ratio"], aligned=aligned))
    if op == "ROIPooling" and attrs.get("method") == "max":
        a = attrs
        return ("torchvision roi_pool", feed["rois"], lambda x, r: tv.roi_pool(
            x, r, (a["pooled_h"], a["pooled_w"]), a["spatial_scale"]))
    if op == "PSROIPool":
        a = attrs
        rois = _rois5(feed["rois"], np.repeat(np.arange(len(feed["rois_num"])),
                                              feed["rois_num"]))
        return ("torchvision ps_roi_pool", rois, lambda x, r: tv.ps_roi_pool(
            x, r, (a["pooled_height"], a["pooled_width"]), a["spatial_scale"]))
    return None


def fpn_kernels(w: dict, op: str):
    """W7 (FPN, 4 levels): (inputs [boxes or rois, *levels], features, kernel(*inputs), and
    torchvision's MultiScaleRoIAlign as fn(feats on torch) or None), the inputs
    ``bench_workloads.make_fpn_inputs`` makes (those of ``bench_cases.cases``)."""
    from ort_roi import ops
    from ort_roi.cli.bench_workloads import make_fpn_inputs

    feats, boxes = make_fpn_inputs(w)
    P, sr, strides = w["pooled"], w["sampling_ratio"], w["strides"]
    L = len(feats)
    if op == "ExperimentalDetectronROIFeatureExtractor":
        inputs = [boxes, *feats]
        fn = lambda b, *f: ops.roi_feature_extractor(  # noqa: E731
            b, *f, output_size=P, sampling_ratio=sr, aligned=w["aligned"],
            pyramid_scales=strides)[0]
    else:
        inputs = [np.concatenate([np.zeros((len(boxes), 1), np.float32), boxes], 1), *feats]
        fn = lambda r, *f: ops.multi_level_roi_align(  # noqa: E731
            r, *f, output_height=P, output_width=P, sampling_ratio=sr, aligned=w["aligned"],
            featmap_strides=[float(s) for s in strides])
    return inputs, tuple(range(1, L + 1)), fn, boxes


def kernel_row(w: dict, op: str, ours, backend: Backend, repeat: int, row: dict,
               skipped: list, warmup: bool = True) -> None:
    """The kernel half of a row (see the module doc), into ``row['kernel']``."""
    from ort_roi import ops
    from ort_roi.spec import DOMAIN

    torch, tv = _torch_cuda() if backend.name == "cupy" else (None, "backend numpy")
    peer = None
    if hasattr(ours, "feed"):  # one registered op (bench_peers.Ours): its own kernel and inputs
        spec = ops.spec(ours.op)
        fn = ops.kernel((DOMAIN, ours.op))
        inputs = [ours.feed[i.name] for i in spec.inputs]
        features = spec.features
        attrs = dict(ours.attrs)
        call = lambda *xs: fn(*xs, **attrs)  # noqa: E731
        if torch is not None:
            peer = tv_peer(ours.op, ours.feed, attrs, tv)
    elif "strides" in w:  # W7: the multi-level kernels
        inputs, features, call, boxes = fpn_kernels(w, op)
        if torch is not None:
            from collections import OrderedDict

            H, W = w["image"]
            pool = tv.MultiScaleRoIAlign([f"p{i}" for i in range(len(features))], w["pooled"],
                                         w["sampling_ratio"])
            peer = ("torchvision MultiScaleRoIAlign (its own level rule)", boxes,
                    lambda fs, b: pool(OrderedDict((f"p{i}", f) for i, f in enumerate(fs)),
                                       [b], [(H, W)]))
    else:
        skipped.append(dict(workload=row["workload"], op=op, what="kernel", why=GRAPH_ONLY))
        return
    dev = [backend.to_device(x) if i in features else x for i, x in enumerate(inputs)]
    t, y = backend.time(lambda: call(*dev), repeat, warmup)
    k = dict(backend=backend.name, s=t)
    y = backend.to_host(_first(y))
    host_y = np.asarray(_first(call(*inputs))) if backend.name == "cupy" else y
    k["vs_numpy_max_abs_diff"] = float(np.abs(y - host_y).max()) if y.size else 0.0
    if peer is None and backend.name == "cupy" and torch is not None:
        skipped.append(dict(workload=row["workload"], op=op, what="GPU peer",
                            why="torchvision has no such op"))
    if peer is not None:
        name, rois, pfn = peer
        rt = torch.as_tensor(backend.xp.asarray(rois), device="cuda")
        if "strides" in w:
            ft = [torch.as_tensor(dev[i], device="cuda") for i in features]
            run = lambda: pfn(ft, rt)  # noqa: E731
        else:
            xt = torch.as_tensor(dev[features[0]], device="cuda")
            run = lambda: pfn(xt, rt)  # noqa: E731
        t, yp = backend.time(run, repeat, warmup)
        k.update(peer=name, peer_s=t, ratio=t / k["s"])
        yp = yp.cpu().numpy()
        k["peer_max_abs_diff"] = (float(np.abs(yp - y).max()) if yp.shape == y.shape and y.size
                                  and "strides" not in w else None)
        if "strides" not in w:  # the same op on host tensors, the copies included
            x_host, r_host = inputs[features[0]], rois

            def host():
                return pfn(torch.from_numpy(x_host).cuda(),
                           torch.from_numpy(r_host).cuda()).cpu().numpy()
            k["peer_host_s"] = wall_time(host, repeat, warmup)[0]
    row["kernel"] = k


def session_row(ours, backend: Backend, repeat: int, row: dict, warmup: bool = True) -> None:
    """The session half of a row: ``ours`` (bench_cases.cases' runner of the row's graph in a plain
    onnxruntime session) on the numpy backend and, with cupy, on the cupy backend."""
    import ort_roi

    s = {}
    ort_roi.set_backend("numpy")
    s["numpy_s"], y_np = wall_time(ours, repeat, warmup)
    if backend.name == "cupy":
        from ort_roi.kernels import device

        try:
            assert ort_roi.set_backend("cupy") == "cupy"
            s["cupy_s"], y = wall_time(ours, repeat, warmup)
            # auto: its measuring calls first (device.PROBES), then timed
            assert ort_roi.set_backend("auto") == "auto"
            device._timings.clear()
            for _ in device.PROBES:
                ours()
            s["auto_s"], y_auto = wall_time(ours, repeat, warmup=False)
            s["auto_chose"] = sorted({min(t.seconds, key=t.seconds.get)
                                      for t in device._timings.values()})
            s["auto_vs_numpy_max_abs_diff"] = (float(np.abs(y_auto - y_np).max())
                                               if y_auto.size else 0.0)
        finally:
            ort_roi.set_backend("numpy")
        s["cupy_vs_numpy_max_abs_diff"] = float(np.abs(y - y_np).max()) if y.size else 0.0
        if hasattr(ours, "feed"):
            from ort_roi import ops

            spec = ops.spec(ours.op)
            xs = [ours.feed[spec.inputs[i].name] for i in spec.features]
            cupy = backend.xp

            def copies():
                for x in xs:
                    cupy.asarray(x)
                cupy.asnumpy(cupy.empty(y.shape, y.dtype))
            s["copies_s"] = wall_time(copies, repeat, warmup)[0]
    row["session"] = s


def _ms(s) -> str:
    return "-" if s is None else f"{s * 1e3:.3f} ms"


def _x(r) -> str:
    return "-" if r is None else f"{r:.2f}x"


def _e(d) -> str:
    return "-" if d is None else f"{d:.1e}"


def markdown(results: dict) -> str:
    """The results as markdown tables (kernel, session, skipped, errors)."""
    dev, b = results["device"], results["backend"]
    out = [f"Kernel time ({dev}; backend {b}, feature maps on the device; median of "
           f"{results['repeat']} after a warm-up; peer / ort_roi > 1: ort_roi faster)", "",
           "| workload | op | ort_roi | vs NumPy kernel | peer | peer time | peer / ort_roi "
           "| peer max abs diff | peer, host tensors |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        k = r.get("kernel")
        if k:
            out.append(f"| {r['workload']} | {r['op']} | {_ms(k['s'])} | "
                       f"{_e(k['vs_numpy_max_abs_diff'])} | {k.get('peer', '-')} | "
                       f"{_ms(k.get('peer_s'))} | {_x(k.get('ratio'))} | "
                       f"{_e(k.get('peer_max_abs_diff'))} | {_ms(k.get('peer_host_s'))} |")
    out += ["", f"Through onnxruntime ({dev}; host arrays in and out, session_options())", "",
            "| workload | op | numpy backend | cupy backend | numpy / cupy | cupy vs numpy "
            "| copies alone | auto backend | numpy / auto |", "|---|---|---|---|---|---|---|---|---|"]
    for r in results["rows"]:
        s = r.get("session")
        if s:
            c = s.get("cupy_s")
            out.append(f"| {r['workload']} | {r['op']} | {_ms(s['numpy_s'])} | {_ms(c)} | "
                       f"{_x(s['numpy_s'] / c if c else None)} | "
                       f"{_e(s.get('cupy_vs_numpy_max_abs_diff'))} | {_ms(s.get('copies_s'))} | "
                       f"{_ms(s.get('auto_s'))} | "
                       f"{_x(s['numpy_s'] / s['auto_s'] if s.get('auto_s') else None)} |")
    if results["skipped"]:
        out += ["", "Skipped", "", "| workload | op | what | why |", "|---|---|---|---|"]
        out += [f"| {s['workload']} | {s['op']} | {s['what']} | {s['why']} |"
                for s in results["skipped"]]
    if results["errors"]:
        out += ["", "Errors", "", "| workload | op | error |", "|---|---|---|"]
        out += [f"| {e['workload']} | {e['op']} | {e['error']} |" for e in results["errors"]]
    return "\n".join(out) + "\n"


def _write(results: dict, json_path: str | None, md_path: str | None) -> None:
    for p in (json_path, md_path):
        if p and os.path.dirname(p):
            os.makedirs(os.path.dirname(p), exist_ok=True)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1)
    if md_path:
        with open(md_path, "w") as f:
            f.write(markdown(results))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("workloads", nargs="*", help="W1 W2 ... (default: all)")
    ap.add_argument("--backend", choices=("cupy", "numpy"), default="cupy",
                    help="cupy (the GPU, the default) or numpy (the tool on a CPU)")
    ap.add_argument("--repeat", type=int, default=20, help="timed calls per time (median)")
    ap.add_argument("--dry-run", action="store_true",
                    help="every row once: one call each, no warm-up (checks the tool)")
    ap.add_argument("--out", "--json", dest="out",
                    help="write the results here as JSON (and as markdown beside it, .md)")
    ap.add_argument("--md", help="write the markdown tables here (default: --out with .md)")
    args = ap.parse_args(argv)
    repeat, warmup = (1, False) if args.dry_run else (args.repeat, True)
    md = args.md or (os.path.splitext(args.out)[0] + ".md" if args.out else None)

    from ort_roi.cli.bench_cases import cases
    from ort_roi.cli.bench_timing import describe, machine
    from ort_roi.cli.bench_workloads import plan

    try:
        todo = plan(args.workloads)
    except ValueError as e:
        print(f"gpu_bench: {e}", file=sys.stderr)
        return 2
    if args.backend == "cupy":
        from ort_roi.kernels.device import gpu_available

        ok, why = gpu_available()
        if not ok:
            print(f"gpu_bench: the cupy backend cannot run here ({why}); --backend numpy "
                  f"runs the tool on the CPU", file=sys.stderr)
            return 2
    backend = Backend(args.backend)
    results = dict(device=backend.device, backend=backend.name, repeat=repeat,
                   machine=machine(), rows=[], skipped=[], errors=[])
    if backend.name == "cupy":
        torch, why = _torch_cuda()
        results["machine"]["torch"] = torch.__version__ if torch else why
        if torch is None:
            results["skipped"].append(dict(workload="*", op="*", what="GPU peers", why=why))
    print(f"gpu_bench: {len(todo)} rows on {backend.device}; {describe(results['machine'])}",
          flush=True)
    for wname, w, op in todo:
        row = dict(workload=wname, op=op)
        t0 = time.perf_counter()
        try:
            ours, _ = cases(w, op)  # the bench's inputs and graph (its CPU peers unused)
            kernel_row(w, op, ours, backend, repeat, row, results["skipped"], warmup)
            session_row(ours, backend, max(1, repeat // 2), row, warmup)
        except Exception as e:  # noqa: BLE001 - one row's failure: reported, the rest run
            results["errors"].append(dict(workload=wname, op=op,
                                          error=f"{type(e).__name__}: {e}".replace("\n", " ")))
            traceback.print_exc()
        for part in ("kernel", "session"):  # a NaN difference: an output the bridge filled
            for key in ("vs_numpy_max_abs_diff", "cupy_vs_numpy_max_abs_diff"):
                d = row.get(part, {}).get(key)
                if d is not None and not np.isfinite(d):
                    results["errors"].append(dict(workload=wname, op=op, error=(
                        f"{part}: {key} = {d} (an op failed: see the log's ort_roi errors)")))
        row["wall_s"] = round(time.perf_counter() - t0, 3)
        results["rows"].append(row)
        print(json.dumps(row), flush=True)
        _write(results, args.out, md)
    print()
    print(markdown(results))
    _write(results, args.out, md)
    return 1 if results["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
