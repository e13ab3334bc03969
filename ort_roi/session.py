"""``session_options`` for plain onnxruntime sessions, and the ``InferenceSession`` front door."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from . import _bridge
from .errors import RoiOpError
from .graph import iter_nodes, rewrite, spec_of
from .specs import TYPES


def session_options(so: ort.SessionOptions | None = None) -> ort.SessionOptions:
    """Return ``so`` (or new SessionOptions) with every ort_roi op registered.

    A plain ``onnxruntime.InferenceSession(model, ort_roi.session_options())`` then runs
    graphs that use the ops. Bad input never aborts the process: the op logs the error on
    the ``ort_roi`` logger and returns a NaN-filled output.
    """
    from onnxruntime_extensions import get_library_path

    _bridge.register()
    so = so if so is not None else ort.SessionOptions()
    so.register_custom_ops_library(get_library_path())
    return so


def _load(model) -> onnx.ModelProto:
    if isinstance(model, onnx.ModelProto):
        m = onnx.ModelProto()
        m.CopyFrom(model)
        return m
    if isinstance(model, (bytes, bytearray)):
        return onnx.load_from_string(bytes(model))
    if isinstance(model, (str, os.PathLike)):
        return onnx.load(os.fspath(model))
    raise TypeError(f"model must be a path, bytes or onnx.ModelProto, got {type(model).__name__}")


def prepare_model(model: onnx.ModelProto, exact_floats: bool = True) -> int:
    """The front door's preparation: the graph-rewrite pass (``graph.rewrite``: native
    RoiAlign / MaxRoiPool and the multi-level nodes into ort_roi, every node form checked and
    its attributes explicit) with float attributes as tokens that reach the kernels exactly.
    Raises RoiOpError naming the node. Works in place; returns the nodes moved."""
    return rewrite(model, "ort_roi", exact_floats=exact_floats)


class InferenceSession:
    """An onnxruntime.InferenceSession with the ort_roi ops registered, that raises.

    Accepts a path, bytes or ``onnx.ModelProto``. Omitted optional attributes take their
    defaults, float attributes reach the kernels exactly, and a bad input raises
    :class:`ort_roi.RoiOpError` (a ValueError) from ``run`` instead of returning NaN.
    Everything else is delegated to the wrapped ``onnxruntime.InferenceSession``.
    """

    def __init__(self, model, sess_options: ort.SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, **kw: Any):
        m = _load(model)
        prepare_model(m)
        so = session_options(sess_options)
        # Python ops report errors on the calling thread: keep nodes on that thread.
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        try:
            self._sess = ort.InferenceSession(m.SerializeToString(), so,
                                              providers=providers or ["CPUExecutionProvider"],
                                              **kw)
        except Exception as e:  # onnxruntime refused the graph: say why in our terms
            raise _type_error(m) or RoiOpError("ort_roi", "model",
                                               f"onnxruntime could not load it: {e}") from e
        self._consumers = _consumers(m)
        self._declared = {i.name: i.type for i in self._sess.get_inputs()}

    def run(self, output_names, input_feed, run_options=None) -> list[np.ndarray]:
        """Run like onnxruntime; raises RoiOpError if an ort_roi op rejected its input."""
        with _bridge.raising():
            try:
                outs = self._sess.run(output_names, input_feed, run_options)
            except Exception as e:  # onnxruntime refused the feed: name the op and input
                raise self._feed_error(input_feed) or e
            errors = _bridge.take_errors()
        if errors:
            raise errors[0]
        return outs

    def _feed_error(self, feed: dict) -> RoiOpError | None:
        for name, value in feed.items():
            want, op = self._declared.get(name), self._consumers.get(name)
            dtype = np.asarray(value).dtype
            got = f"tensor({_ONNX_TYPE_NAMES.get(dtype, dtype)})"
            if op is not None and want is not None and got != want:
                return RoiOpError(op[0], f"input '{op[1]}'",
                                  f"graph input {name!r} is declared {want}, got {got}")
        return None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)


_ONNX_TYPE_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
                    np.dtype(np.float16): "float16", np.dtype(np.int32): "int32",
                    np.dtype(np.int64): "int64"}


def _our_inputs(model: onnx.ModelProto):
    """(node, spec, value name, spec input) for every input of every node of ours."""
    for node in iter_nodes(model.graph):
        spec = spec_of(node)
        for name, inp in zip(node.input, spec.inputs if spec else ()):
            yield node, spec, name, inp


def _consumers(model: onnx.ModelProto) -> dict[str, tuple[str, str]]:
    """Graph value name -> (op, input name) of the first ort_roi node reading it."""
    found: dict[str, tuple[str, str]] = {}
    for _, spec, name, inp in _our_inputs(model):
        found.setdefault(name, (spec.name, inp.name))
    return found


def _type_error(model: onnx.ModelProto) -> RoiOpError | None:
    """If one of our nodes reads a tensor of a type it has no kernel for, say which."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - fall back to what the graph declares
        inferred = model.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in [*inferred.input, *inferred.value_info, *inferred.output]}
    types.update({t.name: t.data_type for t in inferred.initializer})
    for node, spec, name, inp in _our_inputs(model):
        elem = types.get(name, 0)
        if not elem:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
        if dtype not in TYPES[inp.type]:
            allowed = " or ".join(t.name for t in TYPES[inp.type])
            return RoiOpError(spec.name, f"input '{inp.name}'",
                              f"must be {allowed}, got {dtype.name} (tensor {name!r} of "
                              f"node {node.name or '<unnamed>'!r}); onnxruntime has no "
                              f"kernel for it")
    return None
