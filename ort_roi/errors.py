"""The one exception type of ort_roi."""

from __future__ import annotations

import re
from typing import Mapping

_INPUT = re.compile(r"^input '([^']*)'")


class RoiOpError(ValueError):
    """A bad input or attribute for an ort_roi op.

    The message names the op, the node of the graph (when the op ran in a graph), the input
    or attribute (and the graph's tensor that fed the input) and the offending value::

        RoiAlign (node 'level_p3'): input 'batch_indices' (tensor 'b2'): box 0 has batch
        index 3, out of range [0, 2)

    ``op``, ``name`` (``"input 'boxes'"`` or ``"attribute 'pooled_h'"``), ``node`` and
    ``tensor`` carry the parts for programs that need them; ``detail`` is the rest.
    """

    def __init__(self, op: str, name: str, message: str, *,
                 node: str | tuple[str, ...] | None = None, tensor: str | None = None):
        self.op = op
        self.name = name
        self.detail = message
        self.node = node
        self.tensor = tensor
        if node is None:
            head = op
        elif isinstance(node, tuple):  # several nodes fit what the op was given
            head = f"{op} (one of the nodes {', '.join(map(repr, node))})"
        else:
            head = f"{op} (node {node!r})"
        what = name if tensor is None else f"{name} (tensor {tensor!r})"
        super().__init__(f"{head}: {what}: {message}")

    @property
    def input(self) -> str | None:
        """The spec's name of the input at fault (None for an attribute or the node)."""
        m = _INPUT.match(self.name)
        return m.group(1) if m else None

    def at(self, node: str | tuple[str, ...],
           tensors: Mapping[str, str] | None = None) -> "RoiOpError":
        """This error, placed: the node's name and, for an input, the graph's tensor that
        fed it (``tensors``: spec input name -> graph tensor name)."""
        tensor = (tensors or {}).get(self.input) if self.input else None
        return RoiOpError(self.op, self.name, self.detail, node=node,
                          tensor=tensor if tensor is not None else self.tensor)


def node_label(node) -> str:
    """How messages name a graph node: its name, or its op type when it has none."""
    return node.name or f"<unnamed {node.op_type}>"
