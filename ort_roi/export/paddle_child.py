"""The child process of ``ort_roi.paddle_export``: loads a saved Paddle inference program,
puts a stand-in that paddle2onnx exports in place of each RoI op, and runs paddle2onnx.

Run as a script (``python paddle_child.py REQUEST.json``), never imported by ort_roi: it needs
only paddle and paddle2onnx, so it runs under any Python that has them, and paddle2onnx's
aborts (SIGABRT on some ops) end this process, not the caller's. The request (JSON) names
``path_prefix``, ``opset_version``, ``workdir``; the answer is written to
``workdir/answer.json``: ``{"rois": [...], "outputs": n, "counts": [...]}`` or
``{"error": kind, ...}`` (``"unsupported"``, with the ops paddle2onnx does not list, is
there while paddle2onnx runs: if it aborts, the caller reads it), and the ONNX model to
``workdir/exported.onnx``.

Each ``pd_op.roi_align`` / ``roi_pool`` / ``psroi_pool`` becomes a ``pd_op.roi_align`` whose
``sampling_ratio`` is ``MARK + k`` (k: the op's entry in ``rois``; paddle2onnx copies it into
ONNX RoiAlign's ``sampling_ratio``), with the op's own output shape: psroi_pool's stand-in
pools ``x[:, :output_channels]``. Each op's ``boxes_num`` is fetched as an extra output, so the
ONNX graph keeps the tensor; the caller rewrites the stand-ins into the exact nodes.
"""

from __future__ import annotations

import json
import os
import sys

#: sampling_ratio of a stand-in is MARK + its index (no real model samples 2**20 per bin).
MARK = 1 << 20
ROI_OPS = ("pd_op.roi_align", "pd_op.roi_pool", "pd_op.psroi_pool")
#: Ops paddle2onnx does not export that the caller writes as ort_roi nodes: each is cut out of
#: the program (its outputs become graph inputs named CUT.format(k, j), its inputs extra
#: outputs) and the caller joins the two ends with the node.
CUT_OPS = ("pd_op.generate_proposals", "pd_op.distribute_fpn_proposals",
           "pd_op.multiclass_nms3", "pd_op.collect_fpn_proposals")
CUT = "ort_roi_cut_{}_{}"
#: Results of CUT_OPS whose dtype in the program is not the kernel's (Paddle 3.3's
#: generate_proposals declares rpn_rois_num float32; its kernel writes int32): (op, result) ->
#: the dtype their stand-in input gets.
RESULT_DTYPES = {("pd_op.generate_proposals", 2): "int32"}
#: Results of CUT_OPS whose first dimension the program declares fixed and the kernel does not
#: keep (collect_fpn_proposals' fpn_rois: [post_nms_topN, 4] declared, min(post_nms_topN,
#: rois) rows written): their stand-in input's first dimension is left open.
OPEN_ROWS = {("pd_op.collect_fpn_proposals", 0)}
#: Ops paddle2onnx does not export that the child rewrites into ops it does (``broadcasts``).
REWRITTEN = {"pd_op.broadcast_tensors"}
#: Ops of every program that paddle2onnx handles itself (not in its supported list).
STRUCTURAL = {"pd_op.data", "pd_op.feed", "pd_op.fetch", "builtin.parameter",
              "builtin.shadow_output", "builtin.constant", "builtin.set_parameter"}


def all_ops(block):
    for op in list(block.ops):
        yield op
        for sub in op.blocks() if op.num_regions() else ():
            yield from all_ops(sub)


def unsupported(program, supported: set) -> dict:
    """Ops of the program that paddle2onnx does not list as supported (name -> count), the
    RoI ops aside. Its list has the older op names (``elementwise_add`` for ``pd_op.add``):
    Paddle's own table maps them."""
    try:
        from paddle.incubate.autograd.phi_ops_map import op_map
    except ImportError:
        op_map = {}
    older: dict = {}
    for name, entry in op_map.items():
        older.setdefault(entry.get("phi_name", name), set()).add(name)
    bad: dict = {}
    for op in all_ops(program.global_block()):
        name = op.name()
        if name in STRUCTURAL or name in ROI_OPS or name in CUT_OPS or name in REWRITTEN:
            continue
        short = name.split(".", 1)[-1]
        names = {short, name.replace(".", "_")} | older.get(short, set())
        if short.endswith("_"):  # in place (batch_norm_): paddle2onnx lists the op
            names |= {short[:-1]} | older.get(short[:-1], set())
        if not names & supported:
            bad[name] = bad.get(name, 0) + 1
    return bad


def load(paddle, path_prefix: str):
    exe = paddle.static.Executor(paddle.CPUPlace())
    if os.path.exists(path_prefix + ".json"):
        program, _, _ = paddle.static.load_inference_model(path_prefix, exe)
        return program, exe
    if not os.path.exists(path_prefix + ".pdmodel"):
        raise FileNotFoundError(f"neither {path_prefix}.json nor {path_prefix}.pdmodel exists")
    with paddle.pir_utils.OldIrGuard():  # the older format: translated to PIR
        old, _, _ = paddle.static.load_inference_model(path_prefix, exe)
    program = paddle.pir.translate_to_pir(old.desc)
    params = [v for v in program.list_vars()
              if v.persistable and v.get_defining_op().name() == "builtin.parameter"]
    paddle.base.libpaddle.pir.create_loaded_parameter(
        params, paddle.static.global_scope(), exe._default_executor)
    return program, exe


def stand_ins(paddle, program) -> tuple[list, list]:
    """Replace the RoI ops; returns their records and the count tensors to fetch."""
    rois, counts = [], []
    for op in [o for o in all_ops(program.global_block()) if o.name() in ROI_OPS]:
        kind = op.name().split(".")[1]
        attrs = {k: v for k, v in op.attrs().items() if k != "stop_gradient"}
        if kind == "roi_pool" and not op.result(1).use_empty():
            raise ValueError("roi_pool's second output (argmax) is used by the program")
        x, boxes, num = (op.operand_source(i) for i in range(3))
        record = {"op": kind, "attrs": attrs, "dtype": str(boxes.dtype).split(".")[-1],
                  "counts": None}
        if num is not None and num.initialized():
            same = [i for i, c in enumerate(counts) if c.is_same(num)]
            if not same:
                counts.append(num)
            record["counts"] = same[0] if same else len(counts) - 1
        paddle.pir.set_insertion_point(op)
        if kind == "psroi_pool":
            x = x[:, :attrs["output_channels"]]
        new = paddle._C_ops.roi_align(x, boxes, num if record["counts"] is not None else None,
                                      attrs["pooled_height"], attrs["pooled_width"],
                                      attrs["spatial_scale"], MARK + len(rois), False)
        op.result(0).replace_all_uses_with(new)
        op.get_parent_block().remove_op(op)
        rois.append(record)
    paddle.pir.reset_insertion_point_to_end()
    # fetched through a copy: paddle2onnx names a fetched graph input's output but writes no
    # node for it (the .pdmodel path)
    return rois, [paddle.assign(c) for c in counts]


def cut_outs(paddle, program) -> tuple[list, list, list]:
    """Cut each CUT_OPS op out of the program: its results (and the elements of its vector
    results) become ``pd_op.data`` inputs, its inputs (each element of a vector input: a
    ``builtin.combine``'s operands, collect_fpn_proposals' levels) are fetched. Returns the
    records, the new feeds and the values to fetch."""
    cuts, feeds, fetches = [], [], []
    for op in [o for o in all_ops(program.global_block()) if o.name() in CUT_OPS]:
        k = len(cuts)
        attrs = {a: v for a, v in op.attrs().items() if a not in ("stop_gradient", "struct_name")}
        ins, ranks, combines = [], [], []
        for i in range(op.num_operands()):
            v = op.operand_source(i)
            if v is None or not v.initialized():
                ins.append(None)
                ranks.append(None)
                continue
            combine = v.get_defining_op()
            if combine is not None and combine.name() == "builtin.combine":  # a vector input
                parts = [combine.operand_source(j) for j in range(combine.num_operands())]
                ins.append(list(range(len(fetches), len(fetches) + len(parts))))
                ranks.append([len(p.shape) for p in parts])
                fetches += parts
                combines.append(combine)
                continue
            ins.append(len(fetches))
            ranks.append(len(v.shape))
            fetches.append(v)
        paddle.pir.set_insertion_point(op)
        outs, dead = [], [op]
        for j, r in enumerate(op.results()):
            users = r.all_used_ops()
            if users and all(u.name() == "builtin.split" for u in users):  # a vector result
                split = users[0]
                group = []
                for e in split.results():
                    group.append(_feed(paddle, e, CUT.format(k, len(feeds)), feeds))
                outs.append(group)
                dead[:0] = users
            elif users:
                outs.append(_feed(paddle, r, CUT.format(k, len(feeds)), feeds,
                                  RESULT_DTYPES.get((op.name(), j)),
                                  (op.name(), j) in OPEN_ROWS))
            else:
                outs.append(None)
        for d in dead:
            d.get_parent_block().remove_op(d)
        for c in combines:  # its vector fed only the cut op
            if c.result(0).use_empty():
                c.get_parent_block().remove_op(c)
        cuts.append({"op": op.name().split(".", 1)[1], "attrs": attrs, "inputs": ins,
                     "outputs": outs, "ranks": ranks})
    paddle.pir.reset_insertion_point_to_end()
    return cuts, feeds, [paddle.assign(v) for v in fetches]


def _feed(paddle, value, name: str, feeds: list, dtype=None, open_rows: bool = False):
    if value.use_empty():
        return None
    shape = list(value.shape)
    if open_rows:
        shape[0] = -1
    data = paddle.static.data(name, shape, dtype or value.dtype)
    # read through a copy: paddle2onnx 2.1 names an output computed from a graph input
    # after that input (a program output bbox_num + 1 came out as the cut's input itself)
    value.replace_all_uses_with(paddle.assign(data))
    feeds.append(data)
    return name


def constants(paddle, program) -> None:
    """Rewrite ``pd_op.assign_value_`` (``paddle.to_tensor`` of an array in a traced model,
    e.g. PaddleDetection's post-processing) as ``pd_op.full`` ops: paddle2onnx 2.1 stops on
    its array of double attributes ("the 0th elementwise MUST be ir::FloatAttribute")."""
    for op in [o for o in all_ops(program.global_block())
               if o.name() in ("pd_op.assign_value_", "pd_op.assign_value")]:
        a = op.attrs()
        values, shape, dtype = list(a["values"]), list(a["shape"]), a["dtype"]
        if len(values) > 4096:
            continue
        paddle.pir.set_insertion_point(op)
        if len(set(values)) == 1:
            new = paddle.full(shape, values[0], dtype)
        else:
            new = paddle.reshape(paddle.concat([paddle.full([1], v, dtype) for v in values]),
                                 shape)
        op.result(0).replace_all_uses_with(new)
        op.get_parent_block().remove_op(op)
    paddle.pir.reset_insertion_point_to_end()


INTERP = ("pd_op.nearest_interp", "pd_op.bilinear_interp")


def interp_sizes(paddle, program) -> None:
    """Rewrite ``nearest_interp`` / ``bilinear_interp`` with an integral ``scale`` attribute
    (an FPN's upsampling) to take the output size as a tensor (in size * scale, the size
    Paddle computes, and the same source coordinates: in / out = 1 / scale exactly):
    paddle2onnx 2.1 stops on the scale Paddle 3.3 stores as doubles."""
    for op in [o for o in all_ops(program.global_block()) if o.name() in INTERP]:
        a = op.attrs()
        scale = list(a.get("scale") or [])
        others = [op.operand_source(i) for i in range(1, op.num_operands())]
        if (not scale or any(v != int(v) or v < 1 for v in scale)
                or any(v is not None and v.initialized() for v in others)):
            continue
        x = op.operand_source(0)
        paddle.pir.set_insertion_point(op)
        first = 2 if a["data_format"].startswith("NC") else 1
        hw = paddle.cast(paddle.shape(x)[first:first + len(scale)], "int32")
        size = hw * paddle.to_tensor([int(v) for v in scale], "int32") if len(set(scale)) > 1 \
            else hw * int(scale[0])
        fn = getattr(paddle._C_ops, op.name().split(".", 1)[1])
        new = fn(x, size, None, None, a["data_format"], a["out_d"], a["out_h"], a["out_w"], [],
                 a["interp_method"], a["align_corners"], a["align_mode"])
        op.result(0).replace_all_uses_with(new)
        op.get_parent_block().remove_op(op)
    paddle.pir.reset_insertion_point_to_end()


def broadcasts(paddle, program) -> None:
    """Rewrite ``pd_op.broadcast_tensors`` (Paddle's advanced indexing ``x[i, j]`` by tensors,
    e.g. PaddleDetection's MaskHead picking each box's class mask) as a ``tile`` of each input
    to the common shape: paddle2onnx 2.1 does not export it (it aborts). The common shape is
    computed from the inputs' shapes at run time (right aligned, padded with 1s): each
    dimension the largest, or 0 where one is 0 (broadcasting 1 against 0 gives 0); an input
    whose dimension is 1 where the common one is not is repeated that many times. (Not
    ``expand``: paddle2onnx writes it as ``Expand(x, Max(Shape(x), shape))``, which cannot
    broadcast a 1 to a 0.)"""
    for op in [o for o in all_ops(program.global_block())
               if o.name() == "pd_op.broadcast_tensors"]:
        combine = op.operand_source(0).get_defining_op()
        users = op.result(0).all_used_ops()
        if (combine is None or combine.name() != "builtin.combine" or not users
                or any(u.name() != "builtin.split" for u in users)):
            continue
        xs = [combine.operand_source(i) for i in range(combine.num_operands())]
        rank = max(len(x.shape) for x in xs)
        paddle.pir.set_insertion_point(op)
        shapes = []
        for k, x in enumerate(xs):
            s = paddle.cast(paddle.shape(x), "int64")
            if len(x.shape) < rank:
                s = paddle.concat([paddle.full([rank - len(x.shape)], 1, "int64"), s])
                xs[k] = paddle.reshape(x, s)
            shapes.append(s)
        big, small = shapes[0], shapes[0]
        for s in shapes[1:]:
            big, small = paddle.maximum(big, s), paddle.minimum(small, s)
        common = big * paddle.cast(small > 0, "int64")
        one = paddle.full([1], 1, "int64")
        news = [paddle.tile(x, paddle.where(s == common, one, common))
                for x, s in zip(xs, shapes)]
        for split in users:
            for r, new in zip(split.results(), news):
                r.replace_all_uses_with(new)
        for dead in [*users, op]:
            dead.get_parent_block().remove_op(dead)
        if combine.result(0).use_empty():
            combine.get_parent_block().remove_op(combine)
    paddle.pir.reset_insertion_point_to_end()


def gathers(paddle, program) -> None:
    """Follow each ``pd_op.gather`` by an index of shape [N, 1] (PaddleDetection's FPN RoI
    stage gathers its pooled levels by restore_index [R, 1]) with a reshape to the shape Paddle
    gives it, ``x.shape[:axis] + [N] + x.shape[axis + 1:]``: paddle2onnx 2.1 writes it as an
    ONNX Gather of the [N, 1] indices, whose result has one more dimension
    (``[R, 1, C, PH, PW]``, which a Conv after it refuses: Mask R-CNN's mask head). In Paddle
    the reshape is a no-op."""
    for op in [o for o in all_ops(program.global_block()) if o.name() == "pd_op.gather"]:
        x, index = op.operand_source(0), op.operand_source(1)
        axis_op = op.operand_source(2).get_defining_op() if op.num_operands() > 2 else None
        if (len(index.shape) != 2 or axis_op is None or axis_op.name() != "pd_op.full"
                or op.result(0).use_empty()):
            continue
        axis = int(axis_op.attrs()["value"])
        axis = axis + len(x.shape) if axis < 0 else axis
        y = op.result(0)
        users = y.all_used_ops()
        paddle.pir.set_insertion_point_after(op)
        # from the result's own shape (its first axis + 1 dimensions and its last
        # rank(x) - axis - 1 are Paddle's in either): neither x (the levels' concat, which the
        # stage's fusion in graph/paddle.py requires that nothing else reads) nor the index
        # (restore_index: a Shape of it would keep the unfused Distribute alive)
        # (explicit slices: Python's ys[:4] of a [4] shape is ys itself, no op, while the
        # ONNX side's shape has 5)
        ys, tail = paddle.shape(y), len(x.shape) - axis - 1
        parts = [paddle.slice(ys, [0], [0], [axis + 1])]
        if tail:
            parts.append(paddle.slice(ys, [0], [-tail], [1 << 30]))
        new = paddle.reshape(y, paddle.concat(parts))
        for u in users:
            for i in range(u.num_operands()):
                if u.operand_source(i).is_same(y):
                    u.operand(i).set_source(new)
    paddle.pir.reset_insertion_point_to_end()


def main(request_path: str) -> int:
    with open(request_path) as fh:
        req = json.load(fh)
    work = req["workdir"]

    def answer(**kw) -> int:
        with open(os.path.join(work, "answer.json"), "w") as fh:
            json.dump(kw, fh)
        return 0 if "error" not in kw else 2

    here = os.path.dirname(os.path.abspath(__file__))  # holds paddle.py: not Paddle
    sys.path[:] = [p for p in sys.path if os.path.abspath(p or ".") != here]
    try:
        import paddle
        import paddle2onnx.paddle2onnx_cpp2py_export as p2o
    except ImportError as e:
        return answer(error="import", message=str(e))
    paddle.enable_static()
    try:
        program, exe = load(paddle, req["path_prefix"])
    except Exception as e:  # noqa: BLE001 - reported to the caller, whatever it is
        return answer(error="load", message=f"{type(e).__name__}: {e}")
    # written before paddle2onnx runs: if it aborts, the caller names these ops
    answer(error="unsupported", ops=unsupported(program,
                                                set(p2o.get_all_supported_operators_pir())))
    block = program.global_block()
    feeds = [o.result(0) for o in block.ops if o.name() in ("pd_op.data", "pd_op.feed")]
    try:
        with paddle.static.program_guard(program):
            interp_sizes(paddle, program)
            constants(paddle, program)
            broadcasts(paddle, program)
            gathers(paddle, program)
            rois, counts = stand_ins(paddle, program)
            cuts, cut_feeds, cut_fetches = cut_outs(paddle, program)
    except ValueError as e:
        return answer(error="roi", message=str(e))
    fetches = [o.operand_source(0) for o in block.ops
               if o.name() in ("pd_op.fetch", "builtin.shadow_output")]
    prefix = os.path.join(work, "standin")
    paddle.static.save_inference_model(prefix, feeds + cut_feeds,
                                       fetches + counts + cut_fetches, exe, program=program)
    params = prefix + ".pdiparams"
    sys.stdout.flush()
    model = p2o.export(prefix + ".json", params if os.path.exists(params) else "",
                       int(req["opset_version"]), True, False, True, True, True, {},
                       "onnxruntime", "", "", False)
    with open(os.path.join(work, "exported.onnx"), "wb") as fh:
        fh.write(model)
    return answer(rois=rois, outputs=len(fetches), counts=len(counts), cuts=cuts)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
