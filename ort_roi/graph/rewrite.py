"""The one graph-rewrite pass over the node forms (``ops.FORMS``).

``rewrite`` serves ``ort-roi convert``, ``convert`` and the front door's model
preparation: every node of a form is checked against its spec; forms onnxruntime runs
natively (ONNX RoiAlign, MaxRoiPool) are rewritten into ort_roi nodes (``to="ort_roi"``) or
back (``to="onnx"``); registered forms keep their node and get every attribute explicit.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import Callable, Literal, overload

import onnx
from onnx import helper

from ..errors import RoiOpError, node_label
from ..ops import FORMS, form
from ..spec import DOMAIN, OPSET_VERSION, NodeForm, OpSpec
from . import exporters, shapes
from .nodes import copy_model, given_attrs, iter_nodes, node_attrs, opset


#: How ort_roi::RoiAlign reads ONNX RoiAlign's mode "max" for each ``roialign_max`` choice:
#: "sample", the largest bilinear sample of the bin (mmcv, OpenVINO: what exporters mean), or
#: "onnx", onnxruntime's (and onnx's conformance data's) largest weighted corner.
ROIALIGN_MAX = {"sample": "max", "onnx": "onnx_max"}


@dataclass
class Rewrite:
    """What one rewrite pass did: the nodes it moved (label, from, to: "domain::op"), notes
    worth telling the user (semantics that differ, nodes left as they were), and the exporter
    the graph was taken to come from (``exporter``: a name of ``exporters.NAMES``, None when
    it could not be told; ``evidence``: why), whose repairs alone were applied. ``repairs``:
    one line per change of what the graph computes (an exporter's form given its framework's
    arithmetic, ONNX RoiAlign's max read as the largest sample); the other moves compute what
    onnxruntime computed from the nodes they replace."""

    moved: list[tuple[str, str, str]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    exporter: str | None = None
    evidence: str = ""
    repairs: list[str] = field(default_factory=list)

    def summary(self) -> str:
        """The exporter, then one entry per kind of move: "exporter: torch.onnx (producer_name
        'pytorch' 2.14.1); 4 x onnx::RoiAlign -> ort_roi::RoiAlign"."""
        kinds: dict[tuple[str, str], int] = {}
        for _, a, b in self.moved:
            kinds[(a, b)] = kinds.get((a, b), 0) + 1
        moves = "; ".join(f"{n} x {a} -> {b}" for (a, b), n in kinds.items()) or "no node moved"
        if not self.evidence:
            return moves
        return f"exporter: {self.exporter or 'unknown'} ({self.evidence}); {moves}"


def _name(domain: str, op_type: str) -> str:
    return f"{domain or 'onnx'}::{op_type}"


def rewrite(model: onnx.ModelProto, to: str = "ort_roi",
            float_token: Callable[[float], float] | None = None,
            roialign_max: str = "sample", fuse: bool = True,
            exporter: str | None = None) -> Rewrite:
    """Rewrite ``model`` in place (see the module doc); returns what was done. With
    ``float_token`` (a front-door session's attributes.FloatTokens) float attributes of the
    nodes the bridge runs become tokens that reach the kernels exactly. ``roialign_max``: how
    ONNX RoiAlign's mode "max" is computed (ROIALIGN_MAX). The exporters' passes come from one
    table (``exporters.run_passes``): the graph's exporter is told once (``exporter``: a name of
    ``exporters.NAMES`` to say it instead) and only its repairs apply. Raises RoiOpError
    naming a node whose attributes are bad, ValueError a bad argument."""
    if to not in ("ort_roi", "onnx"):
        raise ValueError(f"convert: 'to' must be 'ort_roi' or 'onnx', got {to!r}")
    if roialign_max not in ROIALIGN_MAX:
        raise ValueError(f"convert: 'roialign_max' must be one of {', '.join(ROIALIGN_MAX)}, "
                         f"got {roialign_max!r}")
    if not model.HasField("graph"):
        raise ValueError("the input is not an ONNX model: it holds no graph (an empty file, or "
                         "a file of another kind)")
    onnx_opset = opset(model) or 1
    origin, moved, notes, repairs = exporters.run_passes(model, to, fuse, exporter)
    done = Rewrite(moved, notes, origin.exporter, origin.evidence, repairs)
    for node in iter_nodes(model.graph):
        f = form(node.domain, node.op_type)
        before = _name(node.domain, node.op_type)
        if to == "ort_roi" and f is not None and not f.registered:
            _into_ours(node, f, onnx_opset, roialign_max, done)
            done.moved.append((node_label(node), before, _name(node.domain, node.op_type)))
        elif to == "onnx" and f is not None and f.domain == DOMAIN:
            back = _native_form(node, f.spec)
            if back is not None:
                _into_native(node, back, onnx_opset, done)
                done.moved.append((node_label(node), before, _name(node.domain, node.op_type)))
                continue
            if any(not g.registered and g.computed_by(f.spec) for g in FORMS):
                done.notes.append(f"node {node_label(node)!r}: {before} stays: "
                                  f"{_why_not_native(node, f.spec)}")
            elif not f.spec.name.startswith("PyramidRoIAlign"):  # (unfuse_all said why)
                done.notes.append(f"node {node_label(node)!r}: {before} stays: it has no "
                                  f"standard ONNX form, so the model still needs ort_roi's "
                                  f"ops (ort_roi.session_options())")
        f = form(node.domain, node.op_type)
        if f is not None and f.registered:
            _explicit(node, f.spec, float_token)
    _fix_imports(model)
    return done


@overload
def convert(model: onnx.ModelProto, to: str = ..., *, roialign_max: str = ...,
            fuse: bool = ..., exporter: str | None = ...,
            report: Literal[False] = ...) -> onnx.ModelProto: ...


@overload
def convert(model: onnx.ModelProto, to: str = ..., *, roialign_max: str = ...,
            fuse: bool = ..., exporter: str | None = ...,
            report: Literal[True]) -> tuple[onnx.ModelProto, Rewrite]: ...


def convert(model: onnx.ModelProto, to: str = "ort_roi", *, roialign_max: str = "sample",
            fuse: bool = True, exporter: str | None = None, report: bool = False):
    """A copy of ``model`` that a plain onnxruntime session with ``ort_roi.session_options()``
    runs (``to="ort_roi"``): ONNX RoiAlign and MaxRoiPool become ort_roi nodes, the
    exporters' multi-level nodes fixed-arity ort_roi ops, every node of ours or of another
    exporter gets its attributes explicit, and (``fuse``) torchvision's exported
    MultiScaleRoIAlign stages, the ScatterND family's stages (detectron2's ROIPooler, MMDeploy's,
    MMRotate's) and torchvision's per-box Loops become one node each (only where they match torch.onnx's form
    exactly; else a note says which node and why). ``to="onnx"`` moves the
    nodes convert writes back to the nodes they came from (a PyramidRoIAlign to standard ONNX
    computing the same, which convert fuses again); ort_roi nodes with no standard ONNX form
    (PasteMasks, HeatmapsToKeypoints, ...) stay, with a note.

    What an exporter wrote that ONNX reads otherwise than the exporter meant (mx2onnx's
    RoiAlign and Splits, tf2onnx's crop_and_resize) is repaired only in a graph told to be that
    exporter's (its producer_name, its graph name: ``graph.exporters``) or said to be with
    ``exporter``; elsewhere it keeps ONNX's meaning, with a note naming the nodes.

    Args:
        model: the model (not changed).
        to: "ort_roi" or "onnx".
        roialign_max: ONNX RoiAlign's mode "max" as the largest bilinear sample ("sample",
            the default) or as onnxruntime computes it ("onnx").
        fuse: fuse the RoI stages and Loops (``to="ort_roi"``).
        exporter: who wrote the model: None (the default) tells it from the model;
            "mx2onnx", "tf2onnx", "torch.onnx", "paddle2onnx" or "ort_roi" says it (that
            exporter's repairs apply), "none" applies no exporter's repairs.
        report: also return what was done.

    Returns:
        The converted copy; with ``report=True``, ``(copy, Rewrite)``, where ``Rewrite.moved``
        holds the nodes rewritten (label, from, to), ``Rewrite.notes`` what is worth knowing (a
        max that differs from onnxruntime's, a stage or Loop left unfused and why, a node that
        cannot go back, an exporter's form left as ONNX reads it, RoiAligns torch.onnx wrote
        below opset 16, where aligned=True is lost), ``Rewrite.exporter`` and
        ``Rewrite.evidence`` the exporter taken and why, ``Rewrite.summary()`` one line. The
        notes are also issued as warnings.

    Raises:
        ValueError: a bad ``to`` / ``roialign_max`` / ``exporter``, or ``model`` holds no
            graph.
        RoiOpError: naming a node whose attributes are bad.
    """
    m = copy_model(model)
    done = rewrite(m, to, roialign_max=roialign_max, fuse=fuse, exporter=exporter)
    shapes.annotate(m)  # our nodes' inferred output types, for EPs that need ranks
    for note in done.notes:
        warnings.warn(note, stacklevel=2)
    return (m, done) if report else m


def _native_form(node: onnx.NodeProto, spec: OpSpec) -> NodeForm | None:
    """The native form a node of ours goes back to with --to onnx, if its values allow."""
    for f in FORMS:
        if f.registered or not f.computed_by(spec):
            continue
        values = node_attrs(node, spec)
        if all(values[k] == v for k, v in f.fixed.items()):
            return f
    return None


def _why_not_native(node: onnx.NodeProto, spec: OpSpec) -> str:
    """Why a node convert writes has no native form to go back to."""
    for f in FORMS:
        if not f.registered and f.computed_by(spec):
            values = node_attrs(node, spec)
            bad = {k: values[k] for k, v in f.fixed.items() if values[k] != v}
            return (f"{_name(f.domain, f.op_type)} computes only "
                    + ", ".join(f"{k}={f.fixed[k]!r}" for k in bad)
                    + f" (this node has {', '.join(f'{k}={v!r}' for k, v in bad.items())})")
    return "no exported node computes it"


def _into_ours(node: onnx.NodeProto, f: NodeForm, onnx_opset: int, roialign_max: str,
               done: Rewrite) -> None:
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
        parts = f.parts(name, levels)
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
    if f.two_maxes and given.get("mode") == "max":
        given["mode"] = ROIALIGN_MAX[roialign_max]
        if roialign_max == "sample":
            done.repairs.append(f"node {where!r}: ONNX RoiAlign mode=max as the largest "
                                f"bilinear sample (mmcv, OpenVINO), not onnxruntime's largest "
                                f"weighted corner")
            done.notes.append(
                f"node {where!r}: RoiAlign mode=max is computed as the largest bilinear sample "
                f"of each bin (mmcv, OpenVINO), not as onnxruntime computes it (the largest "
                f"weighted corner of any sample): its numbers differ from onnxruntime's; "
                f"roialign_max='onnx' (--roialign-max onnx) keeps onnxruntime's")
    values = node_attrs(node, spec, given)
    outputs = list(node.output)
    outputs += [""] * (len(spec.outputs) - len(outputs))  # outputs the node did not use
    new = helper.make_node(spec.name, list(node.input), outputs,
                           name=node.name or None, domain=spec.domain, **values)
    node.CopyFrom(new)


def _into_native(node: onnx.NodeProto, f: NodeForm, onnx_opset: int, done: Rewrite) -> None:
    spec = form(node.domain, node.op_type).spec
    values = node_attrs(node, spec)
    for k in f.fixed:
        values.pop(k)
    if f.before_opset is not None and onnx_opset < f.before_opset[0]:
        for k, v in f.before_opset[1].items():
            if values[k] != v:
                raise RoiOpError(spec.name, f"attribute '{k}'",
                                 f"{values[k]!r} needs ONNX opset >= {f.before_opset[0]} for "
                                 f"{f.op_type}; the model imports opset {onnx_opset}",
                                 node=node_label(node))
            values.pop(k)
    if f.two_maxes and values.get("mode") in ROIALIGN_MAX.values():
        if values["mode"] == ROIALIGN_MAX["sample"]:
            done.notes.append(
                f"node {node_label(node)!r}: back to ONNX RoiAlign mode=max, which onnxruntime "
                f"computes as the largest weighted corner of any sample, not the largest "
                f"sample ort_roi computed: its numbers change")
        values["mode"] = "max"
    for name in f.split:
        parts = f.parts(name, len(node.input) - 1)
        values[name] = [values.pop(p) for p in parts]
    outputs = list(node.output)
    while outputs and not outputs[-1]:  # an unused second output convert added
        outputs.pop()
    new = helper.make_node(f.op_type, list(node.input), outputs,
                           name=node.name or None, domain=f.domain, **values)
    node.CopyFrom(new)


def _explicit(node: onnx.NodeProto, spec: OpSpec,
              float_token: Callable[[float], float] | None) -> None:
    """Check a node the bridge runs and rewrite its attributes with every default filled
    (the bridge requires every declared attribute)."""
    values = node_attrs(node, spec)
    if len(node.input) != len(spec.inputs):
        raise RoiOpError(spec.name, "inputs",
                         f"has {len(node.input)} inputs, expected "
                         f"{len(spec.inputs)} ({', '.join(i.name for i in spec.inputs)})",
                         node=node_label(node))
    del node.attribute[:]
    for a in sorted(spec.attrs, key=lambda a: a.name):  # helper.make_node's order
        v = values[a.name]
        if a.type is float and float_token is not None:
            v = float_token(v)
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
