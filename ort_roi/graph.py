"""The one graph-rewrite pass over the node forms (``specs.FORMS``).

``rewrite`` serves ``ort-roi convert``, :func:`convert` and the front door's model
preparation: every node of a form is checked against its spec; forms onnxruntime runs
natively (ONNX RoiAlign, MaxRoiPool) are rewritten into ort_roi nodes (``to="ort_roi"``) or
back (``to="onnx"``); registered forms keep their node and get every attribute explicit.
"""

from __future__ import annotations

from typing import Any, Iterator

import onnx
from onnx import helper

from .errors import RoiOpError, node_label
from .specs import DOMAIN, FORMS, OPSET_VERSION, NodeForm, OpSpec, form


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


def given_attrs(node: onnx.NodeProto) -> dict[str, Any]:
    """A node's attributes as Python values (strings decoded)."""
    out = {}
    for a in node.attribute:
        v = helper.get_attribute_value(a)
        out[a.name] = v.decode() if isinstance(v, bytes) else v
    return out


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


def rewrite(model: onnx.ModelProto, to: str = "ort_roi", exact_floats: bool = False) -> int:
    """Rewrite ``model`` in place (see the module doc); returns the nodes moved between
    onnxruntime's native ops and ort_roi. With ``exact_floats`` float attributes of the
    nodes the bridge runs become tokens that reach the kernels exactly (front door only).
    Raises RoiOpError naming a node whose attributes are bad."""
    if to not in ("ort_roi", "onnx"):
        raise ValueError(f"convert: 'to' must be 'ort_roi' or 'onnx', got {to!r}")
    onnx_opset = opset(model) or 1
    moved = 0
    for node in iter_nodes(model.graph):
        f = form(node.domain, node.op_type)
        if to == "ort_roi" and f is not None and not f.registered:
            _into_ours(node, f, onnx_opset)
            moved += 1
        elif to == "onnx" and f is not None and f.domain == DOMAIN:
            back = _native_form(node, f.spec)
            if back is not None:
                _into_native(node, back, onnx_opset)
                moved += 1
                continue
        f = form(node.domain, node.op_type)
        if f is not None and f.registered:
            _explicit(node, f.spec, exact_floats)
    _fix_imports(model)
    return moved


def convert(model: onnx.ModelProto, to: str = "ort_roi") -> onnx.ModelProto:
    """A copy of ``model`` that a plain onnxruntime session with ``ort_roi.session_options()``
    runs (``to="ort_roi"``): ONNX RoiAlign and MaxRoiPool become ort_roi nodes, every node of
    ours or of another exporter gets its attributes explicit. ``to="onnx"`` moves ort_roi
    RoiAlign and ROIPooling (max) nodes back to onnxruntime's native ops."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    rewrite(m, to)
    return m


def _native_form(node: onnx.NodeProto, spec: OpSpec) -> NodeForm | None:
    """The native form a node of ours goes back to with --to onnx, if its values allow."""
    for f in FORMS:
        if f.registered or f.spec is not spec:
            continue
        values = node_attrs(node, spec)
        if all(values[k] == v for k, v in f.fixed.items()):
            return f
    return None


def _into_ours(node: onnx.NodeProto, f: NodeForm, onnx_opset: int) -> None:
    where = node_label(node)
    spec = f.target(len(node.input))
    if spec is None:
        raise RoiOpError(f.op_type, "inputs",
                         f"{len(node.input) - 1} feature maps: ort_roi runs 1 to "
                         f"{max(f.levels)}", node=where)
    levels = len(node.input) - 1
    given = {**f.defaults, **given_attrs(node)}
    for name in f.drop:
        given.pop(name, None)
    for name, parts in f.split.items():
        if isinstance(parts, str):  # one per level
            parts = tuple(parts.format(i) for i in range(levels))
        v = given.pop(name, None)
        if v is None or len(v) != len(parts):
            raise RoiOpError(f.op_type, f"attribute '{name}'",
                             f"must hold {len(parts)} values (one per "
                             f"{'feature map' if f.levels else 'output axis'}), got {v!r}",
                             node=where)
        given.update(zip(parts, v))
    given.update(f.fixed)
    if f.before_opset is not None and onnx_opset < f.before_opset[0]:
        for k, v in f.before_opset[1].items():
            given.setdefault(k, v)
    values = node_attrs(node, spec, given)
    outputs = list(node.output)
    if spec.extra_output and len(outputs) == 1:  # the rois output was not used
        outputs.append("")
    new = helper.make_node(spec.name, list(node.input), outputs,
                           name=node.name or None, domain=spec.domain, **values)
    node.CopyFrom(new)


def _into_native(node: onnx.NodeProto, f: NodeForm, onnx_opset: int) -> None:
    values = node_attrs(node, f.spec)
    for k in f.fixed:
        values.pop(k)
    if f.before_opset is not None and onnx_opset < f.before_opset[0]:
        for k, v in f.before_opset[1].items():
            if values[k] != v:
                raise RoiOpError(f.spec.name, f"attribute '{k}'",
                                 f"{values[k]!r} needs ONNX opset >= {f.before_opset[0]} for "
                                 f"{f.op_type}; the model imports opset {onnx_opset}",
                                 node=node_label(node))
            values.pop(k)
    for name, parts in f.split.items():
        values[name] = [values.pop(p) for p in parts]
    new = helper.make_node(f.op_type, list(node.input), list(node.output),
                           name=node.name or None, domain=f.domain, **values)
    node.CopyFrom(new)


def _explicit(node: onnx.NodeProto, spec: OpSpec, exact_floats: bool) -> None:
    """Check a node the bridge runs and rewrite its attributes with every default filled
    (the bridge requires every declared attribute)."""
    from . import _bridge

    values = node_attrs(node, spec)
    if len(node.input) != len(spec.inputs):
        raise RoiOpError(spec.name, "inputs",
                         f"has {len(node.input)} inputs, expected "
                         f"{len(spec.inputs)} ({', '.join(i.name for i in spec.inputs)})",
                         node=node_label(node))
    del node.attribute[:]
    for a in sorted(spec.attrs, key=lambda a: a.name):  # helper.make_node's order
        v = values[a.name]
        if a.type is float and exact_floats:
            v = _bridge.float_token(v)
        node.attribute.append(helper.make_attribute(a.name, v))


def _fix_imports(model: onnx.ModelProto) -> None:
    """Import exactly the custom domains the graph uses (ort_roi at its opset)."""
    used = {n.domain for n in iter_nodes(model.graph)}
    imports = [o for o in model.opset_import if o.domain in used or o.domain in ("", "ai.onnx")]
    have = {o.domain for o in imports}
    for d in sorted(used - have - {"", "ai.onnx"}):
        imports.append(helper.make_opsetid(d, OPSET_VERSION))
    del model.opset_import[:]
    model.opset_import.extend(imports)
