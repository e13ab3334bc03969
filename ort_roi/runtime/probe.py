"""What runs each node form, found by trying it: a one-node graph of the form, as its
exporter writes it, given to a plain ``onnxruntime.InferenceSession`` with
``ort_roi.session_options()`` (``ort-roi info`` prints the answer; nothing here is assumed)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ..graph import builders
from ..graph.rewrite import rewrite
from ..spec import DOMAIN, TYPES, Attr, NodeForm, OpSpec
from .session import session_options

#: The default-domain opsets a native form is tried at (the others: 17).
OPSETS = {("", "RoiAlign"): (10, 16, 22)}
IR_VERSION = 9


def _sample_value(a: Attr):
    """A valid value for a required attribute (pooled sizes, strides, scales, channels)."""
    return 4 if a.type is int else 0.25


def sample_model(f: NodeForm, dtype=np.float32, opset: int = 17) -> onnx.ModelProto:
    """A one-node graph of form ``f`` as its exporter writes it (4 feature maps for the
    multi-level forms)."""
    spec: OpSpec = f.target(f.guard_levels + 1 if f.levels else 0) or f.spec
    attrs = {a.name: _sample_value(a) for a in spec.attrs if a.required}
    if "coordinate_transformation_mode" in {a.name for a in spec.attrs}:
        attrs["coordinate_transformation_mode"] = "output_half_pixel"  # every opset has it
    names = [i.name for i in spec.inputs]
    outs = [o.name for o in spec.outputs]
    domain = f.domain if f.registered else DOMAIN
    node = builders.make_node(spec if not f.registered else f.op_type, names, outs,
                              domain=domain, **attrs)
    types = {"T": dtype, "I": np.int64}
    ins = [builders.tensor(i.name, types[i.type], None) for i in spec.inputs]
    g = helper.make_graph([node], f.op_type, ins,
                          [builders.tensor(o.name, o.dtype(dtype), None) for o in spec.outputs])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset),
                                            helper.make_opsetid(domain, 1)])
    m.ir_version = IR_VERSION
    if not f.registered:  # our node back to the exporter's
        rewrite(m, "onnx")
        assert (m.graph.node[0].domain, m.graph.node[0].op_type) == f.key, f.key
    return m


def plain_session_error(model: onnx.ModelProto) -> str | None:
    """None when a plain session with ort_roi's ops accepts ``model``, else why not (the
    first line of onnxruntime's refusal)."""
    so = ort.SessionOptions()
    so.log_severity_level = 4  # the refusal is the answer, not a log line
    try:
        ort.InferenceSession(model.SerializeToString(), session_options(so),
                             providers=["CPUExecutionProvider"])
        return None
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusal is the answer
        return _reason(str(e))


def _reason(message: str) -> str:
    """onnxruntime's refusal, short: '[ONNXRuntimeError] : 9 : NOT_IMPLEMENTED : Could not
    find ...' -> 'NOT_IMPLEMENTED: Could not find ...', an attribute error up to its name."""
    parts = [p.strip() for p in message.strip().splitlines()[0].split(" : ")]
    if len(parts) >= 4 and parts[0] == "[ONNXRuntimeError]":
        message = f"{parts[2]}: {' : '.join(parts[3:])}"
    return message.split(" due to ")[0].replace("Exception during initialization: ", "")


@dataclass(frozen=True)
class Verdict:
    """Where a plain session runs a form: the (opset, dtype) tried and onnxruntime's answer."""

    runs: tuple[tuple[int, str], ...]
    refused: tuple[tuple[int, str, str], ...]  # (opset, dtype, why)


def verdict(f: NodeForm) -> Verdict:
    runs, refused = [], []
    for opset in OPSETS.get(f.key, (17,)):
        for dtype in TYPES["T"]:
            why = plain_session_error(sample_model(f, dtype, opset))
            if why is None:
                runs.append((opset, dtype.name))
            else:
                refused.append((opset, dtype.name, why))
    return Verdict(tuple(runs), tuple(refused))


def how_it_runs(f: NodeForm) -> str:
    """One line for ``ort-roi info``: who computes the form in a plain session (tried), and
    what convert and the front door do with it."""
    v = verdict(f)
    several = len(OPSETS.get(f.key, ())) > 1

    def at(opsets, dtypes) -> str:
        return ", ".join(dtypes) + (f" at opset {', '.join(map(str, opsets))}" if several else "")

    if v.runs:
        by = "ort_roi's kernel" if f.registered else "onnxruntime's own kernel"
        line = (f"a plain session runs it as it is ({by}; "
                f"{at(sorted({o for o, _ in v.runs}), sorted({d for _, d in v.runs}))})")
        why: dict[str, list] = {}
        for o, d, w in v.refused:
            why.setdefault(w, []).append((o, d))
        for w, where in why.items():
            line += (f"; not {at(sorted({o for o, _ in where}), sorted({d for _, d in where}))}"
                     f" ({w})")
    else:
        line = f"a plain session refuses it as exported ({v.refused[0][2]})"
    if not f.registered:
        target = (f"{DOMAIN}::{f.spec.name}" if f.levels is None else
                  f"{DOMAIN}::{f.spec.name.rsplit('_L', 1)[0]}_L1.._L{max(f.levels)} "
                  f"(1 to {max(f.levels)} feature maps)")
        line += (f"; ort-roi convert, ort_roi.convert() and the front door rewrite it as "
                 f"{target}, which a plain session runs")
    return line
