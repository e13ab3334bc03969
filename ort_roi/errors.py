"""The one exception type of ort_roi."""

from __future__ import annotations


class RoiOpError(ValueError):
    """A bad input or attribute for an ort_roi op.

    The message names the op, the input (or attribute) and the offending value.
    ``op`` and ``name`` carry the first two for programs that need them.
    """

    def __init__(self, op: str, name: str, message: str):
        self.op = op
        self.name = name
        self.detail = message
        super().__init__(f"{op}: {name}: {message}")
