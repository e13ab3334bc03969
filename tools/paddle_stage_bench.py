#!/usr/bin/env python3
"""PaddleDetection's FPN RoI stage fused (ort_roi/graph/paddle.py: DistributeFpnProposals, a
RoIAlign per level, Concat and Gather by restore_index -> one DistributeRoIAlign_L{L}) on a
whole exported detector: the model as ``ort_roi.paddle_export`` wrote it against the same
model fused, in two plain onnxruntime sessions, timed interleaved, with onnxruntime's profile
of each (ms per run by op type).

    python -m tools.paddle_stage_bench MODEL.onnx [--size 480 640] [--repeat 10]
    python -m tools.paddle_stage_bench --depth 50 [--size 480 640]   # builds and exports it

MODEL.onnx: what ``ort-roi export-paddle`` (or tools/paddledet_e2e.py --out DIR) wrote for
PaddleDetection's Faster R-CNN FPN; without it the model is built by tests/paddle_models.py
(needs paddledet, see tools/paddledet_e2e.py) and exported. The feeds are paddle_models' (one
normalised random image). The outputs of the two sessions must be equal bit for bit (the script fails
otherwise).

Timing on a machine of few cores: onnxruntime's idle intra-op threads spin for a while after
a parallel node, taking a core from the Python kernel that runs next; two sessions timed in
turn meet each other's spinning threads, which one session alone never does (measured on the
stage alone, R50 480x640, 1000 rois, 2 cores: run by run in turn the unfused stage took 68-106
ms and the fused one 78-129 ms, in blocks 93 and 76 ms). So the
whole models are timed run by run in turn (ort_roi.cli.bench_timing.time_together: the stage is 10%
of a run and the model's first node is a Conv) and profiled in blocks of runs of each
session; ``--stage`` also times the stage alone in blocks (the first run of each block not
counted): the subgraph from the Distribute's inputs and the levels' maps to the Gather, cut
out of the model and fused, fed the values the whole model computes for them.
``--no-spin`` sets session.intra_op.allow_spinning 0 in every session.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from tests import paddle_models


SPIN = {"spin": True}  # onnxruntime's intra-op threads spin between nodes (its default)


def options(threads: int | None = None):
    """ort_roi.session_options(), ``threads`` intra-op threads, spinning as --no-spin says
    (set before ``session_options``, which turns it off only where the options do not say)."""
    import onnxruntime as ort

    import ort_roi

    so = ort.SessionOptions()
    so.add_session_config_entry("session.intra_op.allow_spinning", "1" if SPIN["spin"] else "0")
    ort_roi.session_options(so)
    if threads:
        so.intra_op_num_threads = threads
    return so


def blocks(fns: dict, rounds: int, per_block: int = 5) -> dict[str, tuple[float, list]]:
    """Median seconds per call of each runner, timed in alternating blocks of ``per_block``
    calls (``rounds`` blocks each; the first call of a block is not counted: it meets the
    other session's intra-op threads still spinning, which one session alone never does)."""
    ts: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(rounds):
        for k, fn in fns.items():
            fn()
            for _ in range(per_block):
                t = time.perf_counter()
                fn()
                ts[k].append(time.perf_counter() - t)
    return {k: (statistics.median(v), v) for k, v in ts.items()}


def profiles(paths: dict[str, str], f: dict, runs: int) -> dict[str, list[tuple[str, float]]]:
    """onnxruntime's profile of each model, the sessions run in turn, ``runs`` runs each
    in two blocks of their own (after a warm-up run each): mean ms per run by op type,
    largest first."""
    import onnxruntime as ort

    sessions = {}
    with tempfile.TemporaryDirectory() as d:
        for k, p in paths.items():
            so = options()
            so.enable_profiling = True
            so.profile_file_prefix = os.path.join(d, k)
            sessions[k] = ort.InferenceSession(p, so)
        for s in sessions.values():
            s.run(None, f)  # warm-up (profiled too)
        for block in (runs // 2, runs - runs // 2):
            for s in sessions.values():
                for _ in range(block):
                    s.run(None, f)
        events = {k: json.load(open(s.end_profiling())) for k, s in sessions.items()}
    n = runs + 1
    out = {}
    for k, ev in events.items():
        total: dict[str, float] = {}
        for e in ev:
            if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
                op = e["args"].get("op_name", "?")
                total[op] = total.get(op, 0.0) + e["dur"] / 1000.0
        out[k] = sorted(((op, v / n) for op, v in total.items()), key=lambda kv: -kv[1])
    return out


def _cut(model, values: dict, out: str):
    """The nodes of ``model`` computing ``out`` from the tensors ``values`` holds, as a model
    with those inputs (typed from the values) and ``out`` as its output."""
    import onnx
    from onnx import helper

    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: t for t in model.graph.initializer}
    keep, used, todo = set(), set(), [out]
    while todo:
        name = todo.pop()
        if name in values or name in used:
            continue
        used.add(name)
        n = producer.get(name)
        if n is None:
            continue
        keep.add(id(n))
        todo += [i for i in n.input if i]
    nodes = [n for n in model.graph.node if id(n) in keep]
    read = {i for n in nodes for i in n.input}
    graph = helper.make_graph(
        nodes, "paddle_fpn_stage",
        [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), v.shape)
         for k, v in values.items()],
        [onnx.ValueInfoProto(name=out)], [t for k, t in inits.items() if k in read])
    m = helper.make_model(graph, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return m


def stage_alone(path: str, f: dict, repeat: int, threads: int, work: str) -> dict:
    """The stage cut out of the model (Distribute's inputs and the RoIAligns' maps -> the
    Gather's output), unfused and fused, fed what the whole model computes for those inputs:
    times in alternating blocks, profiles, outputs equal."""
    import onnx
    import onnxruntime as ort

    from ort_roi.cli.bench_timing import round_ratios
    from ort_roi.graph.paddle import fuse_fpn_stages

    model = onnx.load(path)
    dist = next(n for n in model.graph.node if n.op_type.startswith("DistributeFpnProposals"))
    aligns = [n for n in model.graph.node if n.op_type == "RoIAlign" and n.domain == "ort_roi"]
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    (name, _, _), = fuse_fpn_stages(probe)[0]
    out = next(n.output[0] for n in probe.graph.node if n.op_type == "Unsqueeze"
               and n.input[0] == next(x for x in probe.graph.node if x.name == name).output[0])
    del probe  # out: the Gather's output, which the fused node's Unsqueeze now writes
    inputs = list(dist.input) + [n.input[0] for n in aligns]
    taps = onnx.ModelProto()
    taps.CopyFrom(model)
    for name in inputs:
        taps.graph.output.append(onnx.ValueInfoProto(name=name))
    so = options(threads)
    sess = ort.InferenceSession(taps.SerializeToString(), so)
    values = dict(zip(inputs, sess.run(inputs, f)))
    del sess, taps
    stage = _cut(model, values, out)
    del model
    fused = onnx.ModelProto()
    fused.CopyFrom(stage)
    fuse_fpn_stages(fused)
    a = ort.InferenceSession(stage.SerializeToString(), so)
    b = ort.InferenceSession(fused.SerializeToString(), so)
    ya, yb = a.run(None, values)[0], b.run(None, values)[0]
    timed = blocks({"unfused": lambda: a.run(None, values),
                    "fused": lambda: b.run(None, values)}, repeat)
    paths = {}
    for k, m in (("unfused", stage), ("fused", fused)):
        paths[k] = os.path.join(work, f"stage_{k}.onnx")
        onnx.save(m, paths[k])
    prof = profiles(paths, values, 10)
    return {"rois": int(values[dist.input[0]].shape[0]),
            "maps": [list(values[n.input[0]].shape) for n in aligns],
            "nodes": {"unfused": len(stage.graph.node), "fused": len(fused.graph.node)},
            "equal": bool(ya.shape == yb.shape and np.array_equal(ya, yb)),
            "ms": {k: round(v[0] * 1e3, 2) for k, v in timed.items()},
            "unfused_over_fused": [round(r, 3) for r in round_ratios(timed["unfused"][1],
                                                                     timed["fused"][1])],
            "profile_ms": {k: [(op, round(t, 2)) for op, t in v] for k, v in prof.items()}}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", nargs="?", help="the exported ONNX model (else built)")
    ap.add_argument("--depth", type=int, default=50, choices=(18, 34, 50, 101))
    ap.add_argument("--size", type=int, nargs=2, default=(480, 640), metavar=("H", "W"))
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--profile-runs", type=int, default=3)
    ap.add_argument("--stage", action="store_true", help="time the stage alone too")
    ap.add_argument("--no-spin", action="store_true",
                    help="session.intra_op.allow_spinning 0 in every session (onnxruntime's "
                         "idle intra-op threads otherwise spin, taking cores from the Python "
                         "kernels that run next: on 2 cores it moves the stage's times)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    SPIN["spin"] = not args.no_spin
    with tempfile.TemporaryDirectory(prefix="paddle_stage_bench_") as work:
        res = _bench(args, work)
    print(json.dumps(res, indent=1))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(res, fh, indent=1)
    return 0 if res["outputs_equal"] and res.get("stage", {}).get("equal", True) else 1


def _bench(args, work: str) -> dict:
    import onnx
    import onnxruntime as ort

    import ort_roi
    from ort_roi.cli.bench_timing import round_ratios, time_together
    from ort_roi.graph.paddle import fuse_fpn_stages

    path = args.model
    if path is None:
        prefix = os.path.join(work, f"faster_rcnn_r{args.depth}_fpn")
        paddle_models.build(prefix, args.depth, calibrate=tuple(args.size))
        path = prefix + ".onnx"
        ort_roi.paddle_export(prefix, path)
    model = onnx.load(path)
    moved, notes = fuse_fpn_stages(model)
    if not moved:
        raise SystemExit(f"no FPN RoI stage fused in {path}: {notes}")
    fused_path = os.path.join(work, "fused.onnx")
    onnx.save(model, fused_path, save_as_external_data=model.ByteSize() > 1.9e9)
    res: dict = {"model": path, "size": list(args.size), "fused": moved, "notes": notes,
                 "nodes": {"unfused": len(onnx.load(path, load_external_data=False).graph.node),
                           "fused": len(model.graph.node)}}
    del model

    def session(p):
        return ort.InferenceSession(p, options(args.threads))

    unfused, fused = session(path), session(fused_path)
    f = paddle_models.feeds(tuple(args.size))
    a, b = unfused.run(None, f), fused.run(None, f)
    res["outputs_equal"] = all(x.shape == y.shape and x.dtype == y.dtype
                               and np.array_equal(x, y) for x, y in zip(a, b))
    res["detections"] = int(a[1].sum())
    timed = time_together({"unfused": lambda: unfused.run(None, f),
                           "fused": lambda: fused.run(None, f)}, args.repeat)
    res["ms"] = {k: round(v[0] * 1e3, 1) for k, v in timed.items()}
    res["unfused_over_fused"] = [round(r, 3) for r in
                                 round_ratios(timed["unfused"][2], timed["fused"][2])]
    unfused = fused = None  # the sessions let go before the profiles
    prof = profiles({"unfused": path, "fused": fused_path}, f, args.profile_runs)
    ops = sorted({op for v in prof.values() for op, _ in v},
                 key=lambda op: -max(dict(v).get(op, 0.0) for v in prof.values()))
    res["profile_ms"] = {op: [round(dict(prof["unfused"]).get(op, 0.0), 2),
                              round(dict(prof["fused"]).get(op, 0.0), 2)] for op in ops[:14]}
    res["profile_total_ms"] = {k: round(sum(t for _, t in v), 1) for k, v in prof.items()}
    if args.stage:
        res["stage"] = stage_alone(path, f, args.repeat, args.threads, work)
    res["spinning"] = SPIN["spin"]
    return res


if __name__ == "__main__":
    sys.exit(main())
