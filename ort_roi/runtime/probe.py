"""What runs each node form, found by trying it: a one-node graph of the form, as its
exporter writes it, given to a plain ``onnxruntime.InferenceSession`` with
``ort_roi.session_options()`` (``ort-roi info`` prints the answer; nothing here is assumed)."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import onnx
import onnxruntime as ort
from onnx import helper

from ..graph import builders
from ..graph.nodes import iter_nodes
from ..graph.rewrite import rewrite
from ..ops import form
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


#: Nodes onnxruntime runs without a kernel of their own (it folds a Constant into a weight).
BUILT_IN = frozenset({("", "Constant")})


@functools.lru_cache(maxsize=1)
def _onnxruntime_kernels() -> frozenset[tuple[str, str]]:
    """(domain, op type) of every kernel onnxruntime's CPU provider registers ("" for ONNX's
    own domain)."""
    try:
        from onnxruntime.capi import onnxruntime_pybind11_state as C

        return frozenset((d.domain, d.op_name) for d in C.get_all_opkernel_def())
    except Exception:  # noqa: BLE001 - an onnxruntime without the listing: none known
        return frozenset()


def _onnx_function(domain: str, op_type: str) -> bool:
    """Whether ONNX defines ``op_type`` as a function of other ops (onnxruntime expands it)."""
    try:
        s = onnx.defs.get_schema(op_type, domain)
    except Exception:  # noqa: BLE001 - no such op in ONNX
        return False
    return bool(s.has_function or s.has_context_dependent_function)


def unprovided(model: onnx.ModelProto) -> dict[str, int]:
    """The nodes that no runtime here provides: neither onnxruntime (a kernel of its CPU
    provider, or an ONNX function it expands) nor ort_roi (its ops, and the forms convert and
    the front door rewrite into them). Subgraphs included.

    Args:
        model: the model.

    Returns:
        "domain::op_type" -> how many such nodes, in the order first met.
    """
    kernels = _onnxruntime_kernels()
    # an onnxruntime that does not list its kernels: its own domains taken as provided
    known = {"", "ai.onnx.ml", "com.microsoft"} if not kernels else set()
    out: dict[str, int] = {}
    for node in iter_nodes(model.graph):
        domain = "" if node.domain == "ai.onnx" else node.domain
        if (form(domain, node.op_type) is not None or (domain, node.op_type) in kernels
                or domain in known
                or (domain, node.op_type) in BUILT_IN or _onnx_function(domain, node.op_type)):
            continue
        key = f"{domain or 'onnx'}::{node.op_type}"
        out[key] = out.get(key, 0) + 1
    return out


def onnxruntime_kernel(domain: str, op_type: str) -> bool:
    """Whether onnxruntime's CPU provider has a kernel for ``domain::op_type``."""
    return ("" if domain == "ai.onnx" else domain, op_type) in _onnxruntime_kernels()
