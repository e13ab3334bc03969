"""What a plain onnxruntime session with ort_roi.session_options() does with a graph, tried
rather than assumed, one answer for ``ort-roi info``, ``validate`` and ``convert``:
``declared_shape_errors`` (ort_roi's nodes whose declared input shapes contradict their
op, what onnx's checker and validate refuse) and ``tried_run`` (our attribute rules, those
shapes, the session, then one run on generated inputs: "runs" only once it ran)."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from ..errors import RoiOpError, first_line, node_label
from ..graph.inputs import feed_problems, generate_inputs
from ..graph.nodes import node_attrs
from ..graph.shapes import without_weights
from ..ops import form
from .compare import run_exposing
from .validate import plain_session_check
from .verdicts import Validation


def _dims(t: onnx.TypeProto) -> list | None:
    if not t.tensor_type.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in t.tensor_type.shape.dim]


def declared_shape_errors(model: onnx.ModelProto) -> list[str]:
    """ort_roi's nodes (top level) whose inputs' shapes, as declared or inferred, contradict
    the op (boxes declared ``[R, 3]`` for an op that reads ``[R, 4]``): what onnx's checker
    says of them with ort_roi's schemas, and what their kernel would refuse at every run.

    Args:
        model: the graph.

    Returns:
        one line per such node, naming it, its op, the input and the shape; empty where none.
    """
    nodes = [(n, form(n.domain, n.op_type)) for n in model.graph.node]
    nodes = [(n, f) for n, f in nodes if f is not None and f.registered]
    if not nodes:
        return []
    try:
        inferred = onnx.shape_inference.infer_shapes(without_weights(model), strict_mode=False)
    except Exception:  # noqa: BLE001 - what inference cannot tell stays unknown
        inferred = model
    g = inferred.graph
    types = {v.name: v.type for v in [*g.input, *g.value_info, *g.output]}
    weights = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer
               if np.prod(i.dims) <= 1024}
    found = []
    for node, f in nodes:
        spec = f.target(len(node.input)) or f.spec
        try:
            attrs = node_attrs(node, spec)
            dims = [_dims(types[x]) if x in types else None for x in node.input]
            values = {i: weights[x] for i, x in enumerate(node.input) if x in weights}
            spec.output_shapes(dims, attrs, values)
        except RoiOpError as e:
            found.append(f"node {node_label(node)!r} ({f.domain}::{f.op_type}): {e}")
    return found


def tried_run(model: onnx.ModelProto, r: int = 6, seed: int = 0) -> tuple[bool | None, str]:
    """Does a plain session with ort_roi.session_options() run ``model``: our attribute rules
    and the declared shapes of ort_roi's nodes first, then the session, then one run on
    generated inputs (``graph.inputs``), whose ort_roi nodes must not fail.

    Args:
        model: the graph.
        r: boxes in the generated inputs where no declared size fixes them.
        seed: of the generated inputs.

    Returns:
        (True, what ran: the inputs' shapes), (False, why it cannot run: the first
        finding, naming the node and the value), or (None, why it loads but was not run:
        inputs for it could not be generated, a limit of the generator's, not the model's).
    """
    v = Validation()
    plain_session_check(model, v)
    if v.problems:
        return False, v.problems[0][1]
    bad = declared_shape_errors(model)
    if bad:
        return False, bad[0]
    try:
        feed = generate_inputs(model, r, seed)
    except Exception as e:  # noqa: BLE001 - the generator's limit, not the model's failure
        return None, (f"the session loads it; not run: inputs for it could not be generated "
                      f"({first_line(e)}): `ort-roi validate MODEL --inputs FILE.npz` runs it "
                      f"on yours")
    try:
        seen, errors = run_exposing(model, list(dict.fromkeys(
            x for n in model.graph.node if form(n.domain, n.op_type)
            for x in [*n.input, *n.output] if x)), feed)
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusal is the finding
        return False, f"the run failed: {type(e).__name__}: {first_line(e)}"
    wrong = feed_problems(model, seen, set(feed))
    if wrong:
        return None, (f"the session loads it; not run as it should be: the generated inputs "
                      f"do not fit it ({wrong[0]}): `ort-roi validate MODEL --inputs "
                      f"FILE.npz` runs it on yours")
    if errors:
        return False, f"the run on generated inputs failed: {errors[0]}"
    shapes = ", ".join(f"{k} {list(a.shape)}" for k, a in feed.items())
    return True, f"it ran on generated inputs ({shapes})"
