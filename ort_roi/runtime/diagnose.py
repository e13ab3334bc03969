"""What is wrong with a model or a feed, named in ort_roi's terms where onnxruntime's own
message would not name it: a type one of our ops has no kernel for (onnxruntime refused the
graph), a feed that does not fit a declared input (onnxruntime refused the run), attributes
that contradict each other (the run would only give outputs of the wrong number). The front
door (``session.py``) reads them when onnxruntime fails."""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import onnx

from ..errors import RoiOpError, first_line, node_label
from ..graph.nodes import given_attrs, iter_nodes, spec_of
from ..spec import TYPES


_ONNX_TYPE_NAMES = {np.dtype(np.float32): "float", np.dtype(np.float64): "double",
                    np.dtype(np.float16): "float16", np.dtype(np.int32): "int32",
                    np.dtype(np.int64): "int64"}


def _our_inputs(model: onnx.ModelProto):
    """(node, spec, value name, spec input) for every input of every node of ours."""
    for node in iter_nodes(model.graph):
        spec = spec_of(node)
        for name, inp in zip(node.input, spec.inputs if spec else ()):
            yield node, spec, name, inp


def check_attributes(model: onnx.ModelProto) -> None:
    """What each node's attributes imply together, checked at creation by its spec's shape
    rule with the shapes unknown (a DistributeFpnProposals_L4 whose max_level - min_level + 1
    is 3, ...): RoiOpError naming the op, the node and the attributes, where the run would
    only see outputs of the wrong number."""
    for node in iter_nodes(model.graph):
        spec = spec_of(node)
        if spec is None:
            continue
        try:
            spec.output_shapes([None] * len(spec.inputs), given_attrs(node))
        except RoiOpError as e:
            raise e.at(node_label(node)) from None


def consumers(model: onnx.ModelProto) -> dict[str, tuple[str, str, str]]:
    """Graph value name -> (op, input name, node) of the first ort_roi node reading it."""
    found: dict[str, tuple[str, str, str]] = {}
    for node, spec, name, inp in _our_inputs(model):
        found.setdefault(name, (spec.name, inp.name, node_label(node)))
    return found


def declared_inputs(model: onnx.ModelProto) -> dict[str, tuple]:
    """Graph input -> (NumPy dtype or None, dims or None: ints, names or "?")."""
    out = {}
    for vi in model.graph.input:
        t = vi.type.tensor_type
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type) if t.elem_type else None
        shape = None
        if t.HasField("shape"):
            shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                     for d in t.shape.dim]
        out[vi.name] = (dtype, shape)
    return out


def _type_name(dtype) -> str:
    """A dtype as onnxruntime names tensor types: tensor(float), tensor(double), ..."""
    return f"tensor({_ONNX_TYPE_NAMES.get(np.dtype(dtype), np.dtype(dtype).name)})"


def _dims(shape: list) -> str:
    return "[" + ", ".join(str(d) for d in shape) + "]"


def type_error(model: onnx.ModelProto) -> RoiOpError | None:
    """If one of our nodes reads a tensor of a type it has no kernel for, say which: a type
    outside its constraint, or (ops whose T inputs share one type, ``same_types``: onnxruntime
    has one kernel per type) a T input of another type than the node's first."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model).graph
    except Exception:  # noqa: BLE001 - fall back to what the graph declares
        inferred = model.graph
    types = {v.name: v.type.tensor_type.elem_type
             for v in [*inferred.input, *inferred.value_info, *inferred.output]}
    types.update({t.name: t.data_type for t in inferred.initializer})
    for node, spec, name, inp in _our_inputs(model):
        elem = types.get(name, 0)
        if not elem:
            continue
        dtype = onnx.helper.tensor_dtype_to_np_dtype(elem)
        if dtype not in TYPES[inp.type]:
            allowed = " or ".join(t.name for t in TYPES[inp.type])
            return RoiOpError(spec.name, f"input '{inp.name}'",
                              f"must be {allowed}, got {dtype.name}; onnxruntime has no "
                              f"kernel for it", node=node_label(node), tensor=name)
    for node in iter_nodes(model.graph):
        spec = spec_of(node)
        if spec is None or not spec.same_types:
            continue
        first = None  # (spec input, dtype) of the node's first T input of known type
        for name, inp in zip(node.input, spec.inputs):
            if inp.type != "T" or not types.get(name, 0):
                continue
            dtype = onnx.helper.tensor_dtype_to_np_dtype(types[name])
            if first is None:
                first = (inp, dtype)
            elif dtype != first[1]:
                return RoiOpError(spec.name, f"input '{inp.name}'",
                                  f"must have the dtype of {first[0].name} ({first[1].name}), "
                                  f"got {dtype.name}: the op's float inputs share one type T; "
                                  f"onnxruntime has no kernel for the mix",
                                  node=node_label(node), tensor=name)
    return None


def feed_error(feed: Mapping[str, Any], e: Exception, declared: Mapping[str, tuple],
               consumers: Mapping[str, tuple[str, str, str]]) -> RoiOpError:
    """What a failed run of onnxruntime's was, in ort_roi's terms: where the feed does not fit
    a declared input, which graph input and, where one of our nodes reads it, which op, node
    and input; else the graph's own node failed (onnxruntime's first line names it).

    Args:
        feed: the run's feed, graph input name -> array.
        e: onnxruntime's exception.
        declared: the model's ``declared_inputs``.
        consumers: the model's ``consumers``.

    Returns:
        The RoiOpError to raise (from ``e``).
    """
    for name, value in feed.items():
        if name not in declared:
            continue
        dtype, shape = declared[name]
        a = np.asarray(value)
        if dtype is not None and a.dtype != dtype:
            problem = (f"graph input {name!r} is declared {_type_name(dtype)}, got "
                       f"{_type_name(a.dtype)}")
        elif shape is not None and not (len(shape) == a.ndim and all(
                not isinstance(d, int) or d == n for d, n in zip(shape, a.shape))):
            problem = (f"graph input {name!r} is declared {_dims(shape)}, got shape "
                       f"{list(a.shape)}")
        else:
            continue
        where = consumers.get(name)
        if where is None:
            return RoiOpError("ort_roi", "feed", problem)
        op, inp, node = where
        return RoiOpError(op, f"input '{inp}'", problem, node=node, tensor=name)
    # the feed fits the declared inputs and no node of ours failed: a node of the graph
    # itself did (onnxruntime's message names it), not the feed
    return RoiOpError("ort_roi", "run", f"onnxruntime failed running the model (the feed "
                      f"fits its declared inputs; no ort_roi node failed): {first_line(e, node_line=False)}")
