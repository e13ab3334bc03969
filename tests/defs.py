"""The readable definitions by name, called as their entries call them: ``defs.roi_align(X,
boxes, counts, **some_attrs)`` is ``ort_roi.ops.define(<RoIAlign's spec>, ...)`` (defaults
filled, float attributes as float32); the multi-level list forms are the definitions' own."""

import functools

from ort_roi import ops
from ort_roi.definitions import multilevel, torchvision


def __getattr__(name: str):
    for e in ops.ENTRIES:
        if e.definition.__name__ == name and len(e.specs) == 1:
            return functools.partial(ops.define, e.spec)
    for module in (multilevel, torchvision):
        if hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(name)
