"""What a plain onnxruntime session with ort_roi.session_options() does with a graph, tried
rather than assumed, one answer for ``ort-roi info``, ``validate`` and ``convert``:
``tried_run`` (our attribute rules, the declared shapes ``graph.shapes.declared_shape_errors``
refuses, the session, then one run on generated inputs: "runs" only once it ran)."""

from __future__ import annotations

import onnx

from ..errors import first_line
from ..graph.inputs import feed_problems, generate_inputs
from ..graph.shapes import declared_shape_errors
from ..ops import form
from .compare import run_exposing
from .validate import plain_session_check
from .verdicts import Validation


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
