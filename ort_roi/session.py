"""``session_options`` for plain onnxruntime sessions, and the ``InferenceSession`` front door."""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort

from . import _bridge
from .errors import RoiOpError
from .specs import all_specs


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


def prepare_model(model: onnx.ModelProto, exact_floats: bool = True) -> onnx.ModelProto:
    """Check our nodes' attributes, fill omitted ones with their defaults, and (with
    ``exact_floats``) replace float attributes by tokens that reach the kernels exactly.
    Raises RoiOpError naming the node. Works in place and returns the model."""
    specs = {(s.domain, s.name): s for s in all_specs()}
    graphs = [model.graph]
    while graphs:
        g = graphs.pop()
        for node in g.node:
            for at in node.attribute:
                graphs.extend([at.g] if at.type == onnx.AttributeProto.GRAPH else [])
                graphs.extend(at.graphs)
            spec = specs.get((node.domain, node.op_type))
            if spec is None:
                continue
            given = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            given = {k: v.decode() if isinstance(v, bytes) else v for k, v in given.items()}
            try:
                values = spec.resolve(given)
            except RoiOpError as e:
                raise RoiOpError(e.op, e.name,
                                 f"{e.detail} (node {node.name or '<unnamed>'!r})") from None
            if len(node.input) != len(spec.inputs):
                raise RoiOpError(spec.name, "inputs",
                                 f"node {node.name!r} has {len(node.input)} inputs, expected "
                                 f"{len(spec.inputs)} ({', '.join(i.name for i in spec.inputs)})")
            del node.attribute[:]
            for a in spec.attrs:
                v = values[a.name]
                if a.type is float and exact_floats:
                    v = _bridge.float_token(v)
                node.attribute.append(onnx.helper.make_attribute(a.name, v))
    return model


class InferenceSession:
    """An onnxruntime.InferenceSession with the ort_roi ops registered, that raises.

    Accepts a path, bytes or ``onnx.ModelProto``. Omitted optional attributes take their
    defaults, float attributes reach the kernels exactly, and a bad input raises
    :class:`ort_roi.RoiOpError` (a ValueError) from ``run`` instead of returning NaN.
    Everything else is delegated to the wrapped ``onnxruntime.InferenceSession``.
    """

    def __init__(self, model, sess_options: ort.SessionOptions | None = None,
                 providers: Sequence[Any] | None = None, **kw: Any):
        m = prepare_model(_load(model))
        so = session_options(sess_options)
        # Python ops report errors on the calling thread: keep nodes on that thread.
        so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        try:
            self._sess = ort.InferenceSession(m.SerializeToString(), so,
                                              providers=providers or ["CPUExecutionProvider"],
                                              **kw)
        except Exception as e:  # onnxruntime refused the graph: say why in our terms
            raise RoiOpError("ort_roi", "model", f"onnxruntime could not load it: {e}") from e

    def run(self, output_names, input_feed, run_options=None) -> list[np.ndarray]:
        """Run like onnxruntime; raises RoiOpError if an ort_roi op rejected its input."""
        with _bridge.raising():
            outs = self._sess.run(output_names, input_feed, run_options)
            errors = _bridge.take_errors()
        if errors:
            raise errors[0]
        return outs

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sess, name)
