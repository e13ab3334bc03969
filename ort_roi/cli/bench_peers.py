"""The runners ``ort-roi bench`` times: ours (``Ours``: one ort_roi op in a plain onnxruntime
session with ``session_options()``, and ``bridge_floor``: the same session with a kernel that
only hands back its output; ``graph_floor`` the same inside a whole graph) and each peer's,
built from arrays: onnxruntime's native node (``ort_native``), OpenVINO (``openvino_op``,
``openvino_onnx``), Paddle (``paddle_op``) and torchvision (``torchvision_op``). A peer
whose framework is not installed is None."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper

from ..graph import builders
from ..graph.nodes import copy_model
from ..runtime import bridge
from ..runtime.session import session_options
from ..spec import DOMAIN
from .bench_timing import Runner

#: OpenVINO's CPU plugin computes in bfloat16 on CPUs that support it unless told otherwise.
OPENVINO_F32 = {"INFERENCE_PRECISION_HINT": "f32"}


def cpu_session(model, so: ort.SessionOptions | None = None) -> ort.InferenceSession:
    """A CPU session of ``model``: with ``so`` (ours: session_options()), else
    onnxruntime's defaults (its native ops, every core)."""
    if so is None:
        so = ort.SessionOptions()
        so.intra_op_num_threads = 0
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


class Ours:
    """Our op in a plain onnxruntime session; ``floor(y)`` is the same session shape with a
    kernel that only hands back y."""

    def __init__(self, op: str, feed: dict, **attrs):
        self.op, self.feed, self.attrs = op, feed, attrs
        self.sess = cpu_session(builders.single_op_model(op, **attrs), session_options())

    def __call__(self) -> np.ndarray:
        return self.sess.run(None, self.feed)[0]

    def floor(self, y: np.ndarray) -> Runner:
        return bridge_floor(self.op, self.feed, y, **self.attrs)


FLOOR_DOMAIN = "ort_roi_bench_floor"
_floor_outputs: dict[str, np.ndarray] = {}  # op name -> what its stand-in hands back


def bridge_floor(op: str, feed: dict, y: np.ndarray, **attrs) -> Runner:
    """Our session with the kernel replaced by one that hands back ``y`` at once: what
    onnxruntime-extensions' Python-op bridge costs by itself (X copied in, the output
    copied out, our hook), the least any kernel of ours can take."""
    return graph_floor(builders.single_op_model(op, **attrs), feed, y)


def graph_floor(model, feed: dict, y: np.ndarray) -> Runner:
    """``model`` (a graph with one ort_roi node, e.g. a stage ``ort-roi convert`` fused) in a
    plain session with that node's kernel replaced by one that hands back ``y`` (what the
    node computes on ``feed``) at once: the graph's other nodes and the node's bridge (its
    inputs copied in, ``y`` copied out), the least the graph can take whatever the kernel.
    The stand-ins are one per op type: each runner hands back the ``y`` of the latest
    ``graph_floor`` / ``bridge_floor`` for its op."""
    m = copy_model(model)
    ours = [n for n in m.graph.node if n.domain == DOMAIN]
    if len(ours) != 1:
        raise ValueError(f"graph_floor: the graph must hold one node of domain {DOMAIN!r}, "
                         f"it holds {len(ours)}")
    bridge.register_stand_ins(
        FLOOR_DOMAIN, lambda spec: lambda *args, **kw: _floor_outputs[spec.name])
    _floor_outputs[ours[0].op_type] = y
    ours[0].domain = FLOOR_DOMAIN
    for o in m.opset_import:
        if o.domain == DOMAIN:
            o.domain = FLOOR_DOMAIN
    sess = cpu_session(m, session_options())
    return lambda: sess.run(None, feed)[0]


def ort_native(node, feed: dict) -> Runner:
    ins = [helper.make_tensor_value_info(k, helper.np_dtype_to_tensor_dtype(v.dtype), None)
           for k, v in feed.items()]
    g = helper.make_graph([node], "g", ins, [helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)])
    sess = cpu_session(helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)], ir_version=9))
    return lambda: sess.run(None, feed)[0]


def openvino_onnx(model, feed: dict) -> Runner | None:
    try:
        import openvino as ov
    except ImportError:
        return None
    core = ov.Core()
    compiled = core.compile_model(core.read_model(model.SerializeToString(), b""), "CPU",
                                  OPENVINO_F32)
    req = compiled.create_infer_request()
    return lambda: np.asarray(req.infer(feed)[0])


def openvino_op(build, feed: list) -> Runner | None:
    try:
        import openvino as ov
        import openvino.opset9 as ops
    except ImportError:
        return None
    params = [ops.parameter(list(a.shape), a.dtype) for a in feed]
    compiled = ov.Core().compile_model(ov.Model([build(ops, *params)], params), "CPU",
                                       OPENVINO_F32)
    req = compiled.create_infer_request()
    return lambda: np.asarray(req.infer(feed)[0])


def paddle_op(fn_name: str, X, boxes, counts, *args) -> Runner | None:
    try:
        import paddle
        from paddle.vision import ops
    except ImportError:
        return None
    fn = getattr(ops, fn_name)
    x, b, n = paddle.to_tensor(X), paddle.to_tensor(boxes), paddle.to_tensor(counts)
    return lambda: fn(x, b, n, *args).numpy()


def torchvision_op(fn_name: str, X, rois, *args, **kw) -> Runner | None:
    """torchvision.ops on the CPU (installed with the 'torchvision' extra)."""
    try:
        import torch
        from torchvision import ops
    except ImportError:
        return None
    fn = getattr(ops, fn_name)
    x, r = torch.from_numpy(X), torch.from_numpy(rois)

    def run() -> np.ndarray:
        with torch.no_grad():
            return fn(x, r, *args, **kw).numpy()
    return run
