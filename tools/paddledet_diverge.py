#!/usr/bin/env python3
"""Where onnxruntime (the model ``ort-roi export-paddle`` wrote) and Paddle part on
tools/paddledet_e2e.py's Faster R-CNN FPN: every generate_proposals / distribute_fpn_proposals /
roi_align / multiclass_nms3 input and output, the box head's matmuls and softmax, fetched from
both (Paddle: the program re-saved with them as outputs, run by its Executor on CPU; ORT: the
exported graph with them as outputs), then each ort_roi node and the multiclass_nms3 form run
alone on Paddle's own inputs.

    python tools/paddledet_diverge.py --depth 50 --size 480 640 [--no-calibrate] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import paddledet_e2e as e2e  # noqa: E402

import ort_roi  # noqa: E402

TARGETS = ("pd_op.generate_proposals", "pd_op.distribute_fpn_proposals", "pd_op.roi_align",
           "pd_op.multiclass_nms3", "pd_op.matmul", "pd_op.softmax")


def paddle_side(prefix: str, f: dict, work: str) -> dict[str, np.ndarray]:
    import paddle

    paddle.enable_static()
    exe = paddle.static.Executor(paddle.CPUPlace())
    prog, _, _ = paddle.static.load_inference_model(prefix, exe)
    vals, labels, count = [], [], {}
    for op in prog.global_block().ops:
        n = op.name()
        if n not in TARGETS:
            continue
        k = count.get(n, 0)
        count[n] = k + 1
        for i in range(op.num_operands()):
            v = op.operand_source(i)
            if v is not None and v.initialized():
                vals.append(v)
                labels.append(f"{n}#{k} in{i}")
        for j, r in enumerate(op.results()):
            users = r.all_used_ops()
            if users and all(u.name() == "builtin.split" for u in users):
                for e, s in enumerate(users[0].results()):
                    vals.append(s)
                    labels.append(f"{n}#{k} out{j}[{e}]")
            elif users:
                vals.append(r)
                labels.append(f"{n}#{k} out{j}")
    skip = ("pd_op.data", "builtin.parameter", "pd_op.full", "builtin.constant",
            "builtin.combine")
    keep = [i for i, v in enumerate(vals) if v.get_defining_op().name() not in skip]
    vals, labels = [vals[i] for i in keep], [labels[i] for i in keep]
    uniq, where = [], []
    for v in vals:
        j = next((i for i, u in enumerate(uniq) if u.is_same(v)), None)
        if j is None:
            uniq.append(v)
            j = len(uniq) - 1
        where.append(j)
    block = prog.global_block()
    fetch0 = [o.operand_source(0) for o in block.ops
              if o.name() in ("pd_op.fetch", "builtin.shadow_output")]
    data = [o.result(0) for o in block.ops if o.name() in ("pd_op.data", "pd_op.feed")]
    with paddle.static.program_guard(prog):
        copies = [paddle.assign(v) for v in uniq]
    inter = os.path.join(work, "inter")
    paddle.static.save_inference_model(inter, data, fetch0 + copies, exe, program=prog)
    prog2, names, targets = paddle.static.load_inference_model(inter, exe)
    res = [np.array(t) for t in exe.run(prog2, feed={k: f[k] for k in names},
                                        fetch_list=targets, return_numpy=False)]
    out = {"FINAL": res[0]}
    out.update({lab: res[len(fetch0) + j] for lab, j in zip(labels, where)})
    return out


def names_in_onnx(g: onnx.GraphProto) -> dict[str, str]:
    by = {n.name: n for n in g.node}
    names = {}
    for k in range(5):
        n = by[f"paddle_generate_proposals_{k}"]
        for i in range(5):
            names[f"pd_op.generate_proposals#{k} in{i}"] = n.input[i]
        names[f"pd_op.generate_proposals#{k} out0"] = n.output[0]
        names[f"pd_op.generate_proposals#{k} out1"] = n.output[1]
    n = by["paddle_distribute_fpn_proposals_5"]
    names["pd_op.distribute_fpn_proposals#0 in0"] = n.input[0]
    for e in range(4):
        names[f"pd_op.distribute_fpn_proposals#0 out0[{e}]"] = n.output[e]
        names[f"pd_op.distribute_fpn_proposals#0 out1[{e}]"] = n.output[4 + e]
    names["pd_op.distribute_fpn_proposals#0 out2"] = n.output[8]
    for k in range(4):
        n = by[f"paddle_roi_align_{k}"]
        names[f"pd_op.roi_align#{k} in0"] = n.input[0]
        names[f"pd_op.roi_align#{k} in1"] = n.input[1]
        names[f"pd_op.roi_align#{k} out0"] = n.output[0]
    for k, n in enumerate(x for x in g.node if x.op_type in ("MatMul", "Gemm")):
        names[f"pd_op.matmul#{k} in0"] = n.input[0]
        names[f"pd_op.matmul#{k} out0"] = n.output[0]
    sm = next(x for x in g.node if x.op_type == "Softmax")
    names["pd_op.softmax#0 in0"], names["pd_op.softmax#0 out0"] = sm.input[0], sm.output[0]
    for i, end in enumerate(("/boxes_cm", "/scores_cm")):
        n = next(x for x in g.node if x.output and x.output[0].endswith(end))
        names[f"pd_op.multiclass_nms3#0 in{i}"] = n.input[0]
    return names


def sub(model: onnx.ModelProto, inputs: dict, outputs: list) -> list[np.ndarray]:
    """The part of the graph computing ``outputs`` from ``inputs`` (name -> array)."""
    g = model.graph
    prod = {o: n for n in g.node for o in n.output}
    need, picked = list(outputs), set()
    while need:
        t = need.pop()
        if t in inputs or t not in prod or id(prod[t]) in picked:
            continue
        picked.add(id(prod[t]))
        need += [i for i in prod[t].input if i]
    nodes = [n for n in g.node if id(n) in picked]
    reads = {i for n in nodes for i in n.input}
    gin = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype),
                                         list(v.shape)) for k, v in inputs.items() if k in reads]
    graph = helper.make_graph(nodes, "sub", gin, [onnx.ValueInfoProto(name=o) for o in outputs],
                              [x for x in g.initializer if x.name in reads])
    m = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options())
    return sess.run(None, {k: v for k, v in inputs.items() if k in reads})


def diff(p: np.ndarray, o: np.ndarray) -> str:
    if p.shape != o.shape:
        return f"SHAPE paddle {p.shape} ort {o.shape}"
    if p.size == 0:
        return "empty"
    d = np.abs(p.astype(np.float64) - o.astype(np.float64))
    return (f"{str(p.shape):18s} max|d| {d.max():.3g} (max|paddle| {np.abs(p).max():.3g}) "
            f"elements differing {int((d > 0).sum())}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--depth", type=int, default=50, choices=(18, 34, 50, 101))
    ap.add_argument("--size", type=int, nargs=2, default=(480, 640), metavar=("H", "W"))
    ap.add_argument("--no-calibrate", action="store_true")
    ap.add_argument("--out")
    args = ap.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix="paddledet_diverge_")
    os.makedirs(out, exist_ok=True)
    prefix = os.path.join(out, f"faster_rcnn_r{args.depth}_fpn")
    e2e.build(prefix, args.depth, calibrate=None if args.no_calibrate else tuple(args.size))
    model = ort_roi.paddle_export(prefix, prefix + ".onnx")
    f = e2e.feeds(tuple(args.size))
    P = paddle_side(prefix, f, out)
    names = names_in_onnx(model.graph)
    m = onnx.load(prefix + ".onnx")
    have = {o.name for o in m.graph.output}
    m.graph.output.extend(onnx.ValueInfoProto(name=v) for v in dict.fromkeys(names.values())
                          if v not in have)
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options())
    got = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, f)))
    O = {lab: got[v] for lab, v in names.items()}
    O["FINAL"] = got[m.graph.output[0].name]
    print("== the whole model, Paddle against onnxruntime")
    for lab in P:
        if lab in O:
            print(f"{lab:42s} {diff(P[lab], O[lab])}")
    print("== each stage alone on Paddle's inputs")
    by = {n.name: n for n in model.graph.node}
    for k in range(5):
        n = by[f"paddle_generate_proposals_{k}"]
        r = sub(model, {n.input[i]: P[f"pd_op.generate_proposals#{k} in{i}"] for i in range(5)},
                list(n.output[:2]))
        ok = all(np.array_equal(r[j], P[f"pd_op.generate_proposals#{k} out{j}"]) for j in (0, 1))
        print(f"GenerateProposals level {k}: rois and probs bit-equal {ok}")
    n = by["paddle_distribute_fpn_proposals_5"]
    cast = next(x for x in model.graph.node if x.output[0] == n.input[1])
    rois = P["pd_op.distribute_fpn_proposals#0 in0"]
    r = sub(model, {n.input[0]: rois, cast.input[0]: np.array([len(rois)], np.int64)},
            list(n.output))
    ok = all(np.array_equal(r[e], P[f"pd_op.distribute_fpn_proposals#0 out0[{e}]"])
             for e in range(4)) and np.array_equal(r[8], P["pd_op.distribute_fpn_proposals#0 out2"])
    print(f"DistributeFpnProposals: bit-equal {ok}")
    for k in range(4):
        n = by[f"paddle_roi_align_{k}"]
        b = P[f"pd_op.roi_align#{k} in1"]
        if not len(b):
            continue
        y, = sub(model, {n.input[0]: P[f"pd_op.roi_align#{k} in0"], n.input[1]: b,
                         n.input[2]: np.array([len(b)], np.int32)}, [n.output[0]])
        print(f"RoIAlign level {k}: {diff(P[f'pd_op.roi_align#{k} out0'], y)}")
    fin = model.graph.output[0].name
    tb, ts = names["pd_op.multiclass_nms3#0 in0"], names["pd_op.multiclass_nms3#0 in1"]
    small = {k: v for k, v in f.items() if k != "image"}
    det, = sub(model, {**small, tb: P["pd_op.multiclass_nms3#0 in0"],
                       ts: P["pd_op.multiclass_nms3#0 in1"]}, [fin])
    print(f"multiclass_nms3 and the post-processing: bit-equal {np.array_equal(det, P['FINAL'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
