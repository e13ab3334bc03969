"""ort_roi ops for ``onnx.reference.ReferenceEvaluator``, computed by the readable
definitions (ort_roi.definitions), not by the fast kernels: a graph's run in onnxruntime
compared with this is the kernels compared with the definitions.

    from onnx.reference import ReferenceEvaluator
    from ort_roi.graph import reference
    ref = ReferenceEvaluator(model, new_ops=reference.ops_for(model))

ReferenceEvaluator needs op names unique across domains, so it is handed the classes of
the node forms a model uses (``OPS``: those of the ort_roi domain).
"""

from __future__ import annotations

import onnx
from onnx.reference.op_run import OpRun

from ..definitions import DEFINITIONS
from ..specs import DOMAIN, FORMS, NodeForm
from .nodes import iter_nodes, plain


def _op_class(f: NodeForm) -> type[OpRun]:
    spec = f.spec
    definition = DEFINITIONS[spec.key]

    def _run(self, *inputs, **attrs):
        attrs = spec.resolve({k: plain(v) for k, v in attrs.items() if v is not None})
        y = definition(*inputs, **attrs)
        return y if isinstance(y, tuple) else (y,)

    return type(f.op_type, (OpRun,), {"op_domain": f.domain, "_run": _run,
                                      "__doc__": f"{f.domain}::{f.op_type}: {spec.doc}"})


_CLASSES = {f.key: _op_class(f) for f in FORMS if f.registered}

#: One OpRun class per op of the ort_roi domain.
OPS: list[type[OpRun]] = [c for (d, _), c in _CLASSES.items() if d == DOMAIN]


def ops_for(model: onnx.ModelProto) -> list[type[OpRun]]:
    """The OpRun classes of the registered node forms ``model`` uses."""
    used = {(n.domain, n.op_type) for n in iter_nodes(model.graph)}
    classes = [c for key, c in _CLASSES.items() if key in used]
    names = [c.__name__ for c in classes]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"onnx.reference cannot evaluate a model that uses {sorted(dup)[0]} "
                         f"of two domains")
    return classes
