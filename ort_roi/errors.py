"""The one exception type of ort_roi, and how messages name a node (``node_label``) and
another exception in one line (``first_line``)."""

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
    ``tensor`` carry the parts for programs that need them; ``detail`` is the rest. It is a
    ``ValueError``, so code that catches those catches it too.

    Args:
        op: the op's name (``"RoIAlign"``), or ``"ort_roi"`` for the front door, a feed or a
            model.
        name: what is at fault, as the message names it: ``"input 'boxes'"``,
            ``"attribute 'pooled_h'"``, ``"feed"``, ``"model"``, ...
        message: what is wrong, with the offending value.
        node: the graph node's name, or a tuple of names when several nodes fit what the op
            was given; None outside a graph.
        tensor: the graph's tensor that fed the input at fault, or None.
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
        """The spec's name of the input at fault (``"boxes"``), or None for an attribute, a
        feed or the node."""
        m = _INPUT.match(self.name)
        return m.group(1) if m else None

    def at(self, node: str | tuple[str, ...],
           tensors: Mapping[str, str] | None = None) -> "RoiOpError":
        """This error, placed in a graph: the node's name and, for an input, the tensor
        that fed it.

        Args:
            node: the node's name, or a tuple of names when several nodes fit.
            tensors: spec input name -> graph tensor name for the node's inputs, or None.

        Returns:
            A new RoiOpError with the same op, name and detail, naming ``node`` and (for an
            input found in ``tensors``) its tensor; this one's tensor otherwise.
        """
        tensor = (tensors or {}).get(self.input) if self.input else None
        return RoiOpError(self.op, self.name, self.detail, node=node,
                          tensor=tensor if tensor is not None else self.tensor)


class BoxError(RoiOpError):
    """A compute step's refusal of one box of the rows it was given (``box``: their index),
    raised under the step's op; ``placed`` names the op that called the step and maps the
    index to that op's rows (a step runs on a subset: one level's rows, the boxes a GPU step
    left to the host).

    Args:
        op: the op the step computes for (as far as the step knows).
        name: the input at fault (``"input 'rois'"``).
        box: the box's index in the rows the step was given.
        message: what is wrong, with ``{box}`` where the box is named.
    """

    def __init__(self, op: str, name: str, box: int, message: str):
        self.box, self.template = int(box), message
        super().__init__(op, name, message.format(box=int(box)))

    def placed(self, op: str | None = None, rows=None) -> "BoxError":
        """This error for ``op`` (None: the same), its box as row ``rows[box]`` (None: the
        same index).

        Args:
            op: the op to name.
            rows: the caller's row of each box the step was given.

        Returns:
            The error, renamed and re-indexed.
        """
        return BoxError(op or self.op, self.name,
                        self.box if rows is None else int(rows[self.box]), self.template)


def node_label(node) -> str:
    """How messages name a graph node: its name, or its op type when it has none."""
    return node.name or f"<unnamed {node.op_type}>"


def first_line(e: Exception, node_line: bool = True) -> str:
    """An exception's message in one line: its first line and, with ``node_line``, the first
    later one that names a node (onnx's checker and shape inference say which node after a
    first line of context); its type where it says nothing."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    context = [ln for ln in lines if "node" in ln.lower() and ln is not lines[0]]
    return "; ".join(lines[:1] + context[:1 if node_line else 0]) or type(e).__name__
