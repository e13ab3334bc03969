"""ort_roi ops for ``onnx.reference.ReferenceEvaluator``, backed by the same kernels.

    from onnx.reference import ReferenceEvaluator
    import ort_roi.reference
    ref = ReferenceEvaluator(model, new_ops=ort_roi.reference.ops_for(model))

ReferenceEvaluator needs op names unique across domains, so it is handed the classes of
the node forms a model uses (``OPS``: those of the ort_roi domain).
"""

from __future__ import annotations

import onnx
from onnx.reference.op_run import OpRun

from .specs import DOMAIN, FORMS, NodeForm


def _op_class(f: NodeForm) -> type[OpRun]:
    spec = f.spec

    def _run(self, *inputs, **attrs):
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        y = spec.kernel(*inputs, **attrs)
        return y if isinstance(y, tuple) else (y,)

    return type(f.op_type, (OpRun,), {"op_domain": f.domain, "_run": _run,
                                      "__doc__": f"{f.domain}::{f.op_type}: {spec.doc}"})


_CLASSES = {f.key: _op_class(f) for f in FORMS if f.registered}

#: One OpRun class per op of the ort_roi domain.
OPS: list[type[OpRun]] = [c for (d, _), c in _CLASSES.items() if d == DOMAIN]


def ops_for(model: onnx.ModelProto) -> list[type[OpRun]]:
    """The OpRun classes of the registered node forms ``model`` uses."""
    from .graph import iter_nodes

    used = {(n.domain, n.op_type) for n in iter_nodes(model.graph)}
    classes = [c for key, c in _CLASSES.items() if key in used]
    names = [c.__name__ for c in classes]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"onnx.reference cannot evaluate a model that uses {sorted(dup)[0]} "
                         f"of two domains")
    return classes
