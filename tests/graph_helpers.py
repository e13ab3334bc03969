"""Small helpers the graph-rewrite tests share (the fused stages of torchvision, detectron2 and
MMDeploy): a run in a session with or without ort_roi's ops, convert without its warnings, and
reading or setting a graph's nodes."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper, numpy_helper

import ort_roi


def run(model: onnx.ModelProto, feed: dict, ours: bool = True) -> list[np.ndarray]:
    """Every output of one run of ``model`` in a session with ort_roi's ops (``ours``) or a
    bare onnxruntime session, its warnings off."""
    so = ort_roi.session_options() if ours else ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return s.run(None, feed)


def convert_quietly(model: onnx.ModelProto, **kw):
    """``ort_roi.convert(model, report=True, **kw)`` with its notes' warnings silenced (the
    tests read the notes from the report)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ort_roi.convert(model, report=True, **kw)


def op_types(model: onnx.ModelProto) -> list[tuple[str, str]]:
    """(domain, op type) of each node of the main graph, in order."""
    return [(n.domain, n.op_type) for n in model.graph.node]


def nodes(model: onnx.ModelProto, op: str) -> list[onnx.NodeProto]:
    """The main graph's nodes of op type ``op``."""
    return [n for n in model.graph.node if n.op_type == op]


def set_attr(node: onnx.NodeProto, name: str, value) -> None:
    """Set (or add) one attribute of a node."""
    for a in list(node.attribute):
        if a.name == name:
            node.attribute.remove(a)
    node.attribute.append(helper.make_attribute(name, value))


def set_constant(model: onnx.ModelProto, name: str, value: np.ndarray) -> onnx.NodeProto:
    """The main graph's Constant node that makes ``name`` now makes ``value`` (its attribute
    replaced by a ``value`` tensor). Returns the node."""
    c = next(n for n in model.graph.node if n.output[0] == name)
    del c.attribute[:]
    c.attribute.append(helper.make_attribute("value", numpy_helper.from_array(value)))
    return c


def assert_fused_rows_of_no_level_stay_zero(native: onnx.ModelProto, feed: dict) -> None:
    """``native`` (a multi-level stage whose level rule selects some boxes, not all, for no
    level) converts into one PyramidRoIAlign_L4 that gives native's output on ``feed``: the
    rows no level selects zero in both."""
    conv, _ = convert_quietly(native)
    assert op_types(conv).count(("ort_roi", "PyramidRoIAlign_L4")) == 1
    want, got = run(native, feed, ours=False)[0], run(conv, feed)[0]
    zero = np.abs(want).reshape(len(want), -1).sum(1) == 0
    assert 0 < zero.sum() < len(zero)
    assert not np.abs(got[zero]).any()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=2e-6)
