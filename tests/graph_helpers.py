"""Small helpers the graph-rewrite tests share (the fused stages of torchvision, detectron2 and
MMDeploy): a run in a session with or without ort_roi's ops, convert without its warnings, and
reading or setting a graph's nodes."""

from __future__ import annotations

import warnings

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

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
