"""``ort-roi bench``: the standard workloads through onnxruntime, side by side with the peers.

Ours runs as a plain onnxruntime session with ``session_options()``. Peers, in the
same process: onnxruntime's native RoiAlign (opset 16) and MaxRoiPool always; OpenVINO
(ROIAlign, ROIPooling max/bilinear, PSROIPooling), Paddle (roi_align, roi_pool,
psroi_pool) and torchvision (roi_align, roi_pool, on the CPU) when installed. The
CropAndResize rows (W9, W10; bench_crop.py) run onnxruntime on tf2onnx's two graphs of
tf.image.crop_and_resize, and TensorFlow's own op when installed. The
"RoiAlign" rows run ONNX RoiAlign as ``ort-roi convert`` writes it (ort_roi::RoiAlign)
against onnxruntime's own kernel of the same node. Each time is the median of ``--repeat`` runs after a warm-up,
ours and the peers timed in turn within each run; each peer's output is compared with ours.
A ratio is peer time / our time (> 1: we are faster): of the medians, and per round (peer and
ours timed back to back; the JSON holds their min, median and max), which shows how far a
noisy machine moves it.

This module is the command: ``run`` (the rows of ``plan`` timed and logged), its argparse
parser and ``main``. Its parts, each in its own module: bench_workloads (workloads.json, the
inputs, ``plan``), bench_cases (a row's runners), bench_peers (ours, the bridge floor, each
peer's runner), bench_timing (``time_together``, the machine), bench_report (the table, the
plot), bench_crop (the CropAndResize rows) and bench_small (``--small``: calls near the
bridge's floor, and where ort_roi's time goes in them).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys

import numpy as np

from . import bench_crop, bench_small
from .args import POSITIVE_INT
from .bench_cases import cases
from .bench_peers import Ours
from .bench_report import RATIO, markdown, ms, plot
from .bench_timing import describe, machine, round_ratios, time_together
from .bench_workloads import plan, workloads

OURS, FLOOR = "ort_roi", "bridge alone"  # runner names beside the peers'


def run(names: list[str] | None = None, repeat: int = 5, scaling: bool = False,
        log=print) -> dict:
    """Run the benchmark; returns the JSON-able results."""
    todo = plan(names, scaling)
    info = machine()
    results = {**info, "repeat": repeat, "rows": []}
    log(f"ort-roi bench on {describe(info)}")
    log(RATIO.format(repeat=repeat) + "\n")
    skipped = set()  # peers said to be skipped (once)
    for wname, w, op in todo:
        ours, peers = cases(w, op)
        for k in [k for k, fn in peers.items() if fn is None and k in bench_crop.NEEDS]:
            if k not in skipped:
                log(f"{k}: skipped ({bench_crop.NEEDS[k]})")
            skipped.add(k)
        peers = {k: fn for k, fn in peers.items() if fn is not None}
        y = ours()
        floor = {FLOOR: ours.floor(y)} if isinstance(ours, Ours) else {}  # FPN: no stand-in
        times = time_together({OURS: ours, **floor, **peers}, repeat)
        (t_ours, y, rounds), t_floor = times.pop(OURS), times.pop(FLOOR, (None,))[0]
        row = {"workload": wname, "op": op, "ort_roi_s": t_ours, "bridge_floor_s": t_floor,
               "peers": {}}
        line = (f"{wname:<32} {op:<24} ort_roi {ms(t_ours):>9}"
                + (f" (bridge {ms(t_floor)})" if t_floor is not None else ""))
        for pname, (t, yp, peer_rounds) in times.items():
            comparable = yp.shape == y.shape and not pname.endswith("only")
            diff = (float(np.abs(np.nan_to_num(yp) - y).max()) if y.size else 0.0) if comparable \
                else float("nan")
            row["peers"][pname] = {"s": t, "ratio": t / t_ours,
                                   "round_ratios": round_ratios(peer_rounds, rounds),
                                   "max_abs_diff": diff}
            lo, _, hi = row["peers"][pname]["round_ratios"]
            line += f" | {pname} {ms(t)} x{t / t_ours:.2f} ({lo:.2f}-{hi:.2f}, diff {diff:.1e})"
        log(line)
        results["rows"].append(row)
    return results


def main(args: argparse.Namespace) -> int:
    if args.plot and importlib.util.find_spec("matplotlib") is None:  # before the timing
        print("ort-roi bench: --plot needs matplotlib: pip install '.[plot]'",
              file=sys.stderr)
        return 2
    # torch's (and Paddle's) OpenMP threads spin after each of their ops, by default for up
    # to ~200 ms, and take the second core from whatever the round times next (measured:
    # ours on W8f's 6-box P4 row 2.7 ms after torchvision's roi_align, 1.3 ms with this):
    # passive, each runner starts with the cores free. Set before the peers load OpenMP.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if args.small:
        rows = bench_small.run(args.repeat, cpu_time=args.cpu_time)
        print()
        print(bench_small.markdown(rows))
        if args.json:
            with open(args.json, "w") as f:
                json.dump({**machine(), "repeat": args.repeat, "cpu_time": args.cpu_time,
                           "small": rows}, f, indent=1)
        return 0
    try:
        results = run(args.workloads, args.repeat, args.scaling)
    except ValueError as e:  # an unknown workload name
        print(f"ort-roi bench: {e}", file=sys.stderr)
        return 2
    print()
    print(markdown(results))
    print("\n" + RATIO.format(repeat=args.repeat))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    if args.plot:
        plot(results, args.plot)
    return 0


def _workload_line(name: str, w: dict) -> str:
    """One line of ``bench --help`` for a workload of workloads.json: its shape and ops."""
    short = name.split("_")[0]
    if "rows" in w:  # per-level loads: a row per (pooler, level), a stage per pooler
        loads = ", ".join(f"{r['pooler']} P{r['level']} {r['R']}" for r in w["rows"])
        shape = (f"C={w['C']}, {w['image'][0]}x{w['image'][1]} image, boxes per level: "
                 f"{loads}")
    elif bench_crop.OP in w["ops"]:
        shape = bench_crop.shape_line(w)
    elif "strides" in w:
        shape = (f"C={w['C']}, {w['image'][0]}x{w['image'][1]} image, FPN strides "
                 f"{'/'.join(map(str, w['strides']))}, R={w['R']}, {w['pooled']}x{w['pooled']}")
    else:
        shape = (f"N={w['N']} C={w['C']} {w['H']}x{w['W']} map, R={w['R']}, "
                 f"{w['pooled']}x{w['pooled']}")
    return f"  {short:<4} {name}: {shape}; {', '.join(w['ops'])}"


def _epilog() -> str:
    """``bench --help``'s epilog: the workloads (read from workloads.json) and the rows."""
    lines = ["workloads (ort_roi/data/workloads.json; name one by its W number):"]
    lines += [_workload_line(k, v) for k, v in workloads().items()]
    lines += [
        "",
        "ops: RoIAlign is Paddle's roi_align (ort_roi::RoIAlign); RoiAlign the ONNX node as",
        "`ort-roi convert` writes it (ort_roi::RoiAlign) against onnxruntime's own RoiAlign;",
        "ROIPooling.max / .bilinear, PSROIPool: ours against the peers' same op; W7: the",
        "exporters' multi-level nodes, converted. W8 and W8f: one RoiAlign call per",
        "'POOLER Pn (R)' row (a level of torchvision's Mask / Faster R-CNN with R boxes), and",
        "per pooler the 'fused multi-level stage': torchvision's exported MultiScaleRoIAlign",
        "as convert fuses it, against the same graph run natively and converted unfused.",
        "W9 and W10: TensorFlow's crop_and_resize (TF OD API's Faster R-CNN), a row per",
        "'R<boxes> <crop>' pair: ort_roi::CropAndResize as convert writes it against",
        "onnxruntime running tf2onnx's Loop and com.microsoft::CropAndResize graphs, and TF's",
        "own op (pip install '.[tensorflow]'); the tf2onnx graphs differ from TF (and",
        "ort_roi) on boxes ending at 1.0 (the diff column).",
        "",
        "each row: WORKLOAD OP, ort_roi's time (and, in brackets, 'bridge': the same session",
        "with a kernel that hands back a ready output: what onnxruntime-extensions' bridge",
        "costs alone), then per peer: its time, xRATIO = peer time / ort_roi time (> 1:",
        "ort_roi is faster), (LO-HI) the least and largest ratio of a single round, and",
        "diff: the largest absolute difference of its output from ours. Times are medians",
        "of --repeat rounds after a warm-up, every runner timed once per round, in turn.",
        "Peers: onnxruntime always; OpenVINO, Paddle (pip install '.[parity]') and",
        "torchvision (pip install '.[torchvision]') when installed. A table of the",
        "same follows the rows. Measured results: docs/benchmarks.md.",
    ]
    return "\n".join(lines)


def add_command(sub) -> None:
    p = sub.add_parser("bench", help="time the standard workloads against the peers",
                       description="Time the standard workloads: ort_roi's ops in a plain "
                       "onnxruntime session, side by side\nwith onnxruntime's native ops and "
                       "the installed peers, in one process.",
                       epilog=_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*",
                   help="W1 W2 ... (default: all; listed below)")
    p.add_argument("--repeat", type=POSITIVE_INT, default=5,
                   help="timed rounds per row (default 5); each time is their median")
    p.add_argument("--scaling", action="store_true", help="also W2 with R = 100, 1000, 4000")
    p.add_argument("--small", action="store_true",
                   help="instead, small calls (W6 and a few boxes of each op family): "
                   "onnxruntime's native op, the bridge alone and ort_roi, and where "
                   "ort_roi's time goes (checks, geometry, kernel, bridge)")
    p.add_argument("--cpu-time", action="store_true",
                   help="with --small: time the CPU time of the process instead of wall time "
                   "(on a machine shared with other jobs)")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--plot", help="write a PNG bar chart here")
    p.set_defaults(fn=main)
