"""ort_roi ops for ``onnx.reference.ReferenceEvaluator``, backed by the same kernels.

    from onnx.reference import ReferenceEvaluator
    import ort_roi.reference
    ref = ReferenceEvaluator(model, new_ops=ort_roi.reference.OPS)
"""

from __future__ import annotations

from onnx.reference.op_run import OpRun

from .specs import OpSpec, all_specs


def _op_class(spec: OpSpec) -> type[OpRun]:
    def _run(self, *inputs, **attrs):
        attrs = {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}
        return (spec.kernel(*inputs, **attrs),)

    return type(spec.name, (OpRun,), {"op_domain": spec.domain, "_run": _run,
                                      "__doc__": f"{spec.domain}::{spec.name}: {spec.doc}"})


def _classes() -> list[type[OpRun]]:
    return [_op_class(s) for s in all_specs()]


#: One OpRun class per op, for ReferenceEvaluator(model, new_ops=OPS).
OPS: list[type[OpRun]] = _classes()
