"""Registration of the ops into onnxruntime through onnxruntime-extensions' Python-op bridge.

Three things the stock bridge gets wrong are handled here (see docs/architecture.md, "The bridge"):
- outputs: the stock handler turns every output into a Python list; our invocation hook
  hands back a C-contiguous array of the declared dtype (ops that are not ours still go to
  the stock handler);
- exceptions: one that leaves a Python op aborts the process; our hook catches everything,
  hands the error to the front-door run on the op's thread (``raising``: the front door runs
  its sessions with the sequential executor, so that thread is the one that called ``run``)
  or, in a plain session, logs it, and returns a NaN-filled output;
- float attributes: they arrive as text with 6 significant digits; ``attributes.py``
  recovers the model's float32 value (exactly, through the front door's tokens:
  ``FloatTokens``, one per attribute of each node, held while the session lives).
"""

from __future__ import annotations

import logging
import math
import threading
from contextlib import contextmanager
from typing import Callable, Iterator, Mapping

import numpy as np

from .. import forksafe
from ..errors import RoiOpError
from ..kernels import device
from ..ops import FORMS, entry, kernel
from ..spec import DOMAIN, MAX_OUTPUT_ELEMENTS, TYPES, Attr, OpSpec
from . import locate
from .attributes import parse_attrs, resolved_attrs

log = logging.getLogger("ort_roi")

_DT = {np.dtype(np.float32): "dt_float", np.dtype(np.float64): "dt_double",
       np.dtype(np.int32): "dt_int32", np.dtype(np.int64): "dt_int64"}
_ATTR_DT = {int: "dt_int64", float: "dt_float", str: "dt_string"}

#: kernel id -> (spec, output dtype, kernel, the op's small path or None) for every
#: registered overload of ours.
_KERNELS: dict[int, tuple[OpSpec, np.dtype, Callable[..., np.ndarray], Callable | None]] = {}
_lock = forksafe.RLock()


# --- errors on a side channel -------------------------------------------------------------

#: thread -> (the front-door run on it, that run's errors). The front door's sessions use the
#: sequential executor, which runs every node of a run on the thread that called ``run``: the
#: thread an op fails on names its run exactly.
_runs: dict[int, tuple[locate.Run, list[RoiOpError]]] = {}
forksafe.in_child(_runs.clear)  # the runs of threads that do not exist in the child


@contextmanager
def raising(session, feed: Mapping | None = None) -> Iterator[list[RoiOpError]]:
    """Context of a front-door run of ``session`` (with the sequential executor) on this
    thread: errors of the ops this thread runs meanwhile are collected in the list it yields
    (the caller raises them) instead of logged.

    Args:
        session: the onnxruntime session the front door runs (its graph names the node).
        feed: the run's feed (tells apart nodes whose attributes print alike).
    """
    tid = threading.get_ident()
    errors: list[RoiOpError] = []
    outer = _runs.get(tid)
    _runs[tid] = (locate.Run(session, tid, feed), errors)
    try:
        yield errors
    finally:
        if outer is None:
            _runs.pop(tid, None)
        else:
            _runs[tid] = outer


def _report(err: RoiOpError, spec: OpSpec, text: Mapping[str, str], feed) -> None:
    """Hand the error, placed (its node and tensor, see ``locate``), to the front-door run on
    this thread; with none (a plain session), log it."""
    front = _runs.get(threading.get_ident())
    if front is not None:
        run, errors = front
        errors.append(locate.place(err, spec, text, feed, run))
    else:
        err = locate.place(err, spec, text, feed, locate.running())
        log.error("%s (the output was filled with NaN)", err)


# --- the invocation hook -------------------------------------------------------------------

def _fallback(spec: OpSpec, feed, text: Mapping[str, str], dtype: np.dtype) -> tuple:
    """A NaN-filled output of the shape the op would have had, where it can be derived."""
    def dim(v) -> int:
        try:
            v = int(v)
            return v if 0 <= v <= 1 << 20 else 0
        except (TypeError, ValueError):
            return 0
    def value(v):
        for kind in (int, float):
            try:
                return kind(v)
            except (TypeError, ValueError):
                pass
        return v
    try:
        shapes = spec.output_shapes([getattr(f, "shape", None) for f in feed],
                                    {k: value(v) for k, v in text.items()})
    except Exception:  # noqa: BLE001 - contradicting shapes: empty outputs
        shapes = [[0] for _ in spec.outputs]
    out = []
    for shape, o in zip(shapes, spec.outputs):
        shape = [dim(d) for d in shape]
        if math.prod(shape) > MAX_OUTPUT_ELEMENTS:  # an output the kernel would refuse too
            shape = [0] * len(shape)
        fill = np.nan if o.dtype(dtype).kind == "f" else 0
        try:
            out.append(np.full(shape, fill, o.dtype(dtype)))
        except (MemoryError, ValueError):
            out.append(np.full([0] * len(shape), fill, o.dtype(dtype)))
    return tuple(out)


def _small(small: Callable, spec: OpSpec, feed, text: Mapping[str, str]) -> tuple | None:
    """The op's small path (``Op.small``, kernels/small.py) with the node's resolved
    attributes: its output, or None where it declines (the kernel runs). It computes on the
    CPU, for the "auto" backend too (a small call costs less there than its copies to a
    GPU); only a "cupy" backend sends every call to the kernel."""
    attrs = resolved_attrs(spec, text)
    if attrs is None or device.get_backend() == "cupy":
        return None
    y = small(*feed, **attrs)
    return None if y is None else (y,)


def _run(k_id: int, feed, text: Mapping[str, str]):
    spec, dtype, kernel, small = _KERNELS[k_id]
    try:
        ys = None if small is None else _small(small, spec, feed, text)
        if ys is None:
            attrs = parse_attrs(spec, text)
            ys = device.call(kernel, feed, spec.features, **attrs)
            if len(ys) != len(spec.outputs):
                # attributes that contradict the op (its levels, ...): its shape rule names them
                spec.output_shapes([getattr(f, "shape", None) for f in feed], attrs)
                raise RoiOpError(spec.name, "attributes", f"give {len(ys)} outputs; the "
                                 f"node declares {len(spec.outputs)}")
        ys = tuple(np.ascontiguousarray(y, dtype=o.dtype(dtype))
                   for y, o in zip(ys, spec.outputs))
    except BaseException as e:  # noqa: BLE001 - nothing may leave a kernel (it aborts)
        if not isinstance(e, RoiOpError):
            e = RoiOpError(spec.name, "kernel", f"internal error {type(e).__name__}: {e}")
        try:
            _report(e, spec, text, feed)
        except BaseException:  # noqa: BLE001
            pass
        ys = _fallback(spec, feed, text, dtype)
    out: tuple = (k_id,)
    for y in ys:  # (k_id, shape, data) per output, as the stock handler hands them back
        out += (y.shape, y)
    return out


#: onnxruntime-extensions versions whose private Python-op API ort_roi was tested with
#: (0.14.0 cannot be imported without transformers); pyproject.toml pins the same range.
TESTED = ">=0.12, <0.16, != 0.14.0"


def extensions():
    """onnxruntime-extensions' Python-op bridge, with the private pieces ort_roi uses
    checked: the stock invocation handler, the hook installer, Opdef.create and the dtype
    codes. Raises ImportError saying what moved and which versions work."""
    try:
        import onnxruntime_extensions as ext
        from onnxruntime_extensions import _ocos

        for obj, names in ((_ocos, ("_on_pyop_invocation", "PyCustomOpDef", "Opdef")),
                           (_ocos.PyCustomOpDef, ("install_hooker", *_DT.values(),
                                                  *_ATTR_DT.values())),
                           (_ocos.Opdef, ("create",)), (ext, ("get_library_path",))):
            for name in names:
                getattr(obj, name)
    except (ImportError, AttributeError) as e:
        from importlib import metadata

        try:
            found = metadata.version("onnxruntime-extensions")
        except metadata.PackageNotFoundError:
            found = "(not installed)"
        raise ImportError(
            f"ort_roi registers its ops through onnxruntime-extensions' Python-op bridge, whose "
            f"private API it uses ({e}); onnxruntime-extensions {found} does not have it. "
            f"Install a tested version: pip install 'onnxruntime-extensions{TESTED.replace(' ', '')}'"
        ) from e
    return _ocos


_next = None  # where invocations of ops that are not ours go: the stock handler, or the
#             hook someone installed after ours
_install = None  # onnxruntime-extensions' own PyCustomOpDef.install_hooker


def _hook(k_id, feed, attributes):
    if k_id in _KERNELS:
        return _run(k_id, feed, attributes)
    return _next(k_id, feed, attributes)


def _install_hooker(fn) -> None:
    """Stands in for PyCustomOpDef.install_hooker once ours is installed: another hook goes
    behind ours (it gets every op that is not ours) instead of replacing it."""
    global _next
    if fn is not _hook:
        _next = fn
    _install(_hook)


def install_hook() -> None:
    """Install our invocation hook in front of the stock one (idempotent). Hooks that others
    install later are chained behind ours; one installed before ort_roi's first registration
    cannot be seen (onnxruntime-extensions keeps it in C++, with no getter): its ops fall back
    to the stock handler."""
    global _next, _install
    _ocos = extensions()
    if _install is None:
        _next = _ocos._on_pyop_invocation
        _install = _ocos.PyCustomOpDef.install_hooker
        _ocos.PyCustomOpDef.install_hooker = staticmethod(_install_hooker)
    _install(_hook)


# --- registration --------------------------------------------------------------------------

def _overloads(spec: OpSpec):
    """Type combinations registered for an op: X and boxes each float32/float64 (a mismatch
    is reported by the kernel, not refused by onnxruntime), counts int32/int64. Ops whose
    float inputs are of one type (the multi-level ones, up to 8 inputs) get one overload per
    float type (and per integer type)."""
    floats = TYPES["T"]
    ints = TYPES["I"] if any(i.type == "I" for i in spec.inputs) else (None,)
    if spec.same_types:
        for t in floats:
            for ti in ints:
                yield [t if i.type == "T" else ti for i in spec.inputs], t
        return
    for tx in floats:
        for tb in floats:
            for ti in ints:
                types = [tx, tb] + ([ti] if ti is not None else [])
                yield types, tx


def _add(spec: OpSpec, kernel: Callable[..., np.ndarray], domain: str, op_type: str,
         small: Callable | None = None) -> None:
    _ocos = extensions()
    PyCustomOpDef, Opdef = _ocos.PyCustomOpDef, _ocos.Opdef

    attrs = {a.name: getattr(PyCustomOpDef, _ATTR_DT[a.type]) for a in spec.attrs}
    for types, out_dtype in _overloads(spec):
        opdef = Opdef.create(
            kernel, op_type=f"{domain}::{op_type}",
            inputs=[getattr(PyCustomOpDef, _DT[t]) for t in types],
            outputs=[getattr(PyCustomOpDef, _DT[o.dtype(out_dtype)]) for o in spec.outputs],
            attrs=attrs)
        _KERNELS[opdef._nativedef.obj_id] = (spec, out_dtype, kernel, small)


def register() -> None:
    """Register the kernel of every registered node form (``ops.FORMS``: our ops and the
    nodes other exporters write) with onnxruntime-extensions (once per process).

    All at once, before any session: onnxruntime-extensions keeps a domain's Python ops in
    a growing array whose addresses the sessions keep, so an op added to a domain after a
    session has used that domain leaves dangling pointers (a later session or run crashes).
    """
    _register_all(None, [(f.spec, kernel(f.spec), f.domain, f.op_type, entry(f.spec).small)
                         for f in FORMS if f.registered]
                  + [(_guard(f), _refuse, f.domain, f.op_type) for f in FORMS if f.guard_levels])


#: The attribute a guard op requires and no exported node has: onnxruntime's refusal at
#: session creation ("Unable to find attribute '...'") names the fix.
GUARD_ATTR = "not_runnable_as_exported__use_ort_roi_convert_or_ort_roi_InferenceSession"


def _guard(f) -> OpSpec:
    """A stand-in for a node the bridge cannot run as exported (a variable number of inputs,
    list attributes): same inputs as the form's ``guard_levels`` spec, one required
    attribute GUARD_ATTR, so a plain session refuses the node naming the fix (a node of
    another arity is refused by onnxruntime's own arity check). It never computes."""
    import dataclasses

    spec = f.target(f.guard_levels + 1)
    return dataclasses.replace(spec, attrs=(Attr(GUARD_ATTR, int, None),))


def _refuse(*args, **kwargs):
    raise RoiOpError("ort_roi", "node", "this node cannot run as exported: "
                     "use ort-roi convert or ort_roi.InferenceSession")


def register_stand_ins(domain: str,
                       kernel_for: Callable[[OpSpec], Callable[..., np.ndarray]]) -> None:
    """Register every op of the ort_roi domain again in ``domain`` (once per domain, all at
    once, as ``register`` does), op ``name`` computed by ``kernel_for(spec)``, with the specs'
    inputs, attributes and error handling (``ort-roi bench`` times the bridge alone this way)."""
    _register_all(domain, [(f.spec, kernel_for(f.spec), domain, f.op_type)
                           for f in FORMS if f.registered and f.domain == DOMAIN])


_registered: set[str | None] = set()  # None: the forms' own domains; else a stand-in domain


def _register_all(key: str | None, ops: list) -> None:
    """``_add`` every op once per ``key``, under the lock; then (again) install our hook."""
    with _lock:
        if key not in _registered:
            for op in ops:
                _add(*op)
            _registered.add(key)
        install_hook()
