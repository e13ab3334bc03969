"""``ort-roi bench --small``: calls near the bridge's floor (issue 63). W6's RoIAlign and
ROIPooling and a few-box call of each op family, each timed in one process, round by round,
three ways: onnxruntime's native op where one exists, the bridge alone (our session with a
kernel that hands back its output at once: ``bench_peers.bridge_floor``) and ort_roi; then
where ort_roi's time goes (``breakdown``: a profile of its calls, each function's time
charged to checks, geometry, kernel or the bridge by the module it is in)."""

from __future__ import annotations

import cProfile
import pstats
import time
from typing import Callable

import numpy as np
from onnx import helper

from .bench_peers import Ours, ort_native
from .bench_report import ms
from .bench_timing import Runner, round_ratios, time_together
from .bench_workloads import make_inputs, workloads

#: Where a profiled function's time is charged, by the module it is in (bench_small.category).
PARTS = ("checks", "geometry", "kernel", "bridge")


def cases() -> list[tuple[str, Ours, Runner | None]]:
    """The rows: (label, our runner, onnxruntime's native op or None). W6's map
    ([1, 1, 4, 4]) and its two boxes (ort_roi/data/workloads.json) for every op that reads
    boxes on a map; more channels where the op needs them (position-sensitive ops)."""
    w = workloads()["W6_tiny"]
    X, boxes, counts = make_inputs(w, 0)
    Xn, normalized, _ = make_inputs(w, 0, normalized=True)
    R = len(boxes)
    batch = np.zeros(R, np.int64)
    rois = np.concatenate([batch[:, None].astype(np.float32), boxes], 1)
    sr, s = w["sampling_ratio"], w["spatial_scale"]
    rng = np.random.default_rng(0)
    rows: list[tuple[str, Ours, Runner | None]] = []

    def row(label: str, op: str, feed: dict, native=None, **attrs) -> None:
        rows.append((label, Ours(op, feed, **attrs), native))

    align = helper.make_node("RoiAlign", ["X", "rois", "batch_indices"], ["Y"],
                             output_height=1, output_width=1, sampling_ratio=sr,
                             spatial_scale=s, coordinate_transformation_mode="half_pixel")
    native_align = ort_native(align, dict(X=X, rois=boxes, batch_indices=batch))
    max_pool = helper.make_node("MaxRoiPool", ["X", "rois"], ["Y"], pooled_shape=[1, 1],
                                spatial_scale=s)
    native_pool = ort_native(max_pool, dict(X=X, rois=rois))
    row("W6 RoIAlign", "RoIAlign", dict(X=X, boxes=boxes, boxes_num=counts), native_align,
        pooled_height=1, pooled_width=1, spatial_scale=s, sampling_ratio=sr, aligned=1)
    row("W6 ROIPooling.max", "ROIPooling", dict(X=X, rois=rois), native_pool, pooled_h=1,
        pooled_w=1, spatial_scale=s, method="max")
    row("W6 RoiAlign (ONNX, converted)", "RoiAlign",
        dict(X=X, rois=boxes, batch_indices=batch.astype(np.int32)), native_align,
        output_height=1, output_width=1, sampling_ratio=sr, spatial_scale=s,
        coordinate_transformation_mode="half_pixel", mode="avg")
    row("W6 RoIPool", "RoIPool", dict(X=X, boxes=boxes, boxes_num=counts), native_pool,
        pooled_height=1, pooled_width=1, spatial_scale=s)
    row("W6 ROIPooling.bilinear", "ROIPooling", dict(X=Xn, rois=np.concatenate(
        [batch[:, None].astype(np.float32), normalized], 1)), None, pooled_h=1, pooled_w=1,
        spatial_scale=s, method="bilinear")
    ps = rng.standard_normal((1, 8, 4, 4), dtype=np.float32)  # 2 classes x 2 x 2 bins
    row("PSROIPool, 2 boxes", "PSROIPool", dict(X=ps, rois=boxes, rois_num=counts), None,
        output_channels=2, spatial_scale=s, pooled_height=2, pooled_width=2)
    row("TorchvisionPSRoIAlign, 2 boxes", "TorchvisionPSRoIAlign", dict(X=ps[:, :4], rois=rois),
        None, pooled_height=2, pooled_width=2, spatial_scale=s, sampling_ratio=sr)
    image = np.ascontiguousarray(Xn.transpose(0, 2, 3, 1))  # NHWC
    crop_boxes = np.clip(normalized[:, [1, 0, 3, 2]], 0, 1)  # [y1, x1, y2, x2] in [0, 1]
    idx = np.zeros(R, np.int32)
    contrib = helper.make_node("CropAndResize", ["X", "rois", "batch_indices", "crop_size"],
                               ["Y"], domain="com.microsoft", mode="bilinear",
                               extrapolation_value=0.0)
    row("CropAndResize, 2 boxes", "CropAndResize",
        dict(image=image, boxes=crop_boxes, box_indices=idx),
        _contrib_crop(contrib, dict(X=Xn, rois=crop_boxes, batch_indices=idx,
                                    crop_size=np.array([2, 2], np.int32))),
        crop_height=2, crop_width=2, method="bilinear", extrapolation_value=0.0)
    return rows


def _contrib_crop(node, feed: dict) -> Runner:
    """onnxruntime's com.microsoft::CropAndResize (NCHW), its output as ours is laid out
    (NHWC: a transposed view)."""
    from .bench_peers import cpu_session

    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None)
           for k, v in feed.items()]
    out = helper.make_tensor_value_info("Y", helper.np_dtype_to_tensor_dtype(np.dtype("float32")),
                                        None)
    g = helper.make_graph([node], "crop", ins, [out])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16),
                                            helper.make_opsetid("com.microsoft", 1)],
                          ir_version=9)
    sess = cpu_session(m)
    return lambda: sess.run(None, feed)[0].transpose(0, 2, 3, 1)


def category(filename: str) -> str | None:
    """Where time spent in a function of ``filename`` is charged: "checks" (the ops'
    functions, the attribute and input checks), "geometry" (ort_roi.geometry, the levels),
    "kernel" (kernels/cpu and the small path, kernels/small.py), "bridge" (the rest of
    ort_roi: the invocation hook, attribute parsing, the backend dispatch); None for code
    not of ort_roi (NumPy's, onnxruntime's: charged as its callers are)."""
    p = filename.replace("\\", "/")
    if "/ort_roi/" not in p:
        return None
    if "/ort_roi/geometry/" in p or p.endswith("/ort_roi/levels.py"):
        return "geometry"
    if p.endswith(("/ort_roi/kernels/checks.py", "/ort_roi/spec.py")) or "/ort_roi/ops/" in p:
        return "checks"
    if "/ort_roi/kernels/cpu/" in p or p.endswith("/ort_roi/kernels/small.py"):
        return "kernel"
    return "bridge"


def breakdown(fn: Callable[[], object], calls: int = 2000) -> dict[str, float]:
    """Shares of ``fn``'s time (a session run) in each of PARTS, from a profile of ``calls``
    calls: each function's own time charged to its module's part (``category``); a function
    not of ort_roi (NumPy's, a builtin) charged to its callers' parts in proportion to the
    time each call site took; what no function of ort_roi called (onnxruntime's run, the
    Python-op bridge in C++) to "bridge". cProfile's overhead weighs on every Python call,
    so the shares lean towards the parts with the most calls.

    Args:
        fn: the call to profile (no arguments).
        calls: how many times.

    Returns:
        part -> share of the profiled time (the shares sum to 1).
    """
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    stats = pstats.Stats(prof).stats  # func -> (cc, nc, tt, ct, callers)
    memo: dict = {}

    def parts(f, depth: int = 0) -> dict[str, float]:
        """f's time as shares of PARTS."""
        if f in memo:
            return memo[f]
        own = category(f[0])
        if own is not None:
            memo[f] = {own: 1.0}
            return memo[f]
        memo[f] = {"bridge": 1.0}  # (a cycle, or nothing of ours above it)
        callers = stats[f][4] if f in stats else {}
        total = sum(v[2] for v in callers.values())
        if total > 0 and depth < 50:
            share: dict[str, float] = {}
            for c, v in callers.items():
                for part, x in parts(c, depth + 1).items():
                    share[part] = share.get(part, 0.0) + x * v[2] / total
            memo[f] = share
        return memo[f]

    seconds = dict.fromkeys(PARTS, 0.0)
    for f, (_, _, tt, _, _) in stats.items():
        for part, x in parts(f).items():
            seconds[part] += tt * x
    total = sum(seconds.values()) or 1.0
    return {p: seconds[p] / total for p in PARTS}


def run(repeat: int = 7, log=print, calls: int = 2000, cpu_time: bool = False) -> list[dict]:
    """Time every row (``cases``) round by round, native, bridge alone and ort_roi in turn,
    and break ort_roi's time down (``breakdown`` of ``calls`` calls); log a line per row.

    Args:
        repeat: the timed rounds (each time their median).
        log: where the lines go.
        calls: the profiled calls of each row.
        cpu_time: time the CPU time of the process (``time.process_time``) instead of wall
            time: on a machine shared with other jobs, not the time spent waiting for a core.

    Returns:
        The JSON-able rows: case, op, the three times (seconds), ort_roi / bridge per round
        (least, median, largest), the native op's largest difference from ours, the shares.
    """
    out = []
    log("small calls: onnxruntime's native op, the bridge alone (a kernel that returns at "
        "once) and ort_roi, back to back in each round" + (", CPU time of the process"
        if cpu_time else "") + "; 'ort_roi / bridge' per round; ort_roi's time by part "
        "(profiled: checks, geometry, kernel, bridge)")
    for label, ours, native in cases():
        y = ours()
        fns = {"native": native} if native is not None else {}
        fns.update({"bridge": ours.floor(y), "ort_roi": ours})
        times = time_together(fns, repeat, clock=time.process_time if cpu_time else
                              time.perf_counter)
        t_ours, _, rounds = times["ort_roi"]
        t_floor, _, floor_rounds = times["bridge"]
        t_native = times["native"][0] if native is not None else None
        diff = None
        if native is not None and times["native"][1].shape == y.shape:
            diff = float(np.abs(times["native"][1] - y).max()) if y.size else 0.0
        lo, mid, hi = round_ratios(rounds, floor_rounds)
        share = breakdown(ours, calls)
        row = {"case": label, "op": ours.op, "ort_roi_s": t_ours, "bridge_floor_s": t_floor,
               "native_s": t_native, "native_max_abs_diff": diff,
               "ort_roi_over_bridge": [lo, mid, hi], "shares": share}
        out.append(row)
        log(f"{label:<32} native {ms(t_native) if t_native is not None else '-':>6} | bridge "
            f"{ms(t_floor):>6} | ort_roi {ms(t_ours):>7}, x{mid:.1f} the bridge ({lo:.1f}-"
            f"{hi:.1f}) | " + ", ".join(f"{p} {share[p]:.0%}" for p in PARTS))
    return out


def markdown(rows: list[dict]) -> str:
    """The rows as a markdown table."""
    lines = ["| call | onnxruntime native | bridge alone | ort_roi | ort_roi / bridge (per "
             "round) | checks | geometry | kernel | bridge |", "|---|---|---|---|---|---|---|"
             "---|---|"]
    for r in rows:
        lo, mid, hi = r["ort_roi_over_bridge"]
        native = ms(r["native_s"]) if r["native_s"] is not None else "-"
        lines.append(f"| {r['case']} | {native} | {ms(r['bridge_floor_s'])} | "
                     f"{ms(r['ort_roi_s'])} | {mid:.1f}x ({lo:.1f}-{hi:.1f}) | "
                     + " | ".join(f"{r['shares'][p]:.0%}" for p in PARTS) + " |")
    return "\n".join(lines)
