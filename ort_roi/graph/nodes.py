"""Reading graph nodes: every node (subgraphs too), its attributes as Python values (the one
place attributes are decoded), its spec and its checked attributes."""

from __future__ import annotations

from typing import Any, Iterator

import onnx
from onnx import helper

from ..errors import RoiOpError, node_label
from ..ops import form
from ..spec import OpSpec


def copy_model(model: onnx.ModelProto) -> onnx.ModelProto:
    """A deep copy of ``model``, which rewrites and shape inference may change freely."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    return m


def iter_nodes(graph: onnx.GraphProto) -> Iterator[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs (If/Loop/Scan bodies). A node may be
    rewritten in place when it is yielded: its subgraphs are read afterwards."""
    for node in graph.node:
        yield node
        for at in node.attribute:
            for sub in ([at.g] if at.type == onnx.AttributeProto.GRAPH else []) + list(at.graphs):
                yield from iter_nodes(sub)


def spec_of(node: onnx.NodeProto) -> OpSpec | None:
    """The spec of a node that the bridge runs as it is (a registered form), else None."""
    f = form(node.domain, node.op_type)
    return f.spec if f is not None and f.registered else None


def plain(value: Any) -> Any:
    """An attribute value as Python holds it: strings decoded (onnx gives bytes)."""
    return value.decode() if isinstance(value, bytes) else value


def attribute_value(proto: onnx.AttributeProto) -> Any:
    """One attribute's value (strings decoded)."""
    return plain(helper.get_attribute_value(proto))


def given_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded)."""
    return {a.name: attribute_value(a) for a in node.attribute}


def node_attrs(node: onnx.NodeProto, spec: OpSpec, given: dict | None = None) -> dict[str, Any]:
    """One node's attributes checked by its spec, every default filled in. Raises
    RoiOpError naming the node."""
    try:
        return spec.resolve(given_attrs(node) if given is None else given)
    except RoiOpError as e:
        raise e.at(node_label(node)) from None


def opset(model: onnx.ModelProto, domain: str = "") -> int | None:
    for o in model.opset_import:
        if o.domain == domain or (domain == "" and o.domain == "ai.onnx"):
            return o.version
    return None
