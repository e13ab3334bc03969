"""Scaling out: ort_roi models in Ray Data (batch inference) and Ray Serve (HTTP serving).

ort_roi's ops are Python ops registered per process, and sessions do not pickle: each worker
builds its own session from the model path when it starts (importing ort_roi registers the
ops there). This module does not import Ray until one of its Ray helpers is called; it gives
the callables that Ray runs, the applications that put them together with production
settings, and a client that retries what may be retried:

    import ray
    from ray import serve
    from ort_roi import scale

    scale.start_local(num_cpus=2)                    # a local cluster on 127.0.0.1 only
    out = scale.predict_batches(ray.data.from_items(rows), "head.onnx", actors=2)

    serve.start(http_options=scale.http_options(port=8000))
    serve.run(scale.application("head.onnx", replicas=2), route_prefix="/roi")
    reply = scale.Client("http://127.0.0.1:8000/roi").post(feed)   # retries 503 / 408

A bad row or request (wrong shape or dtype, NaN boxes, a count that does not add up, an image
or outputs holding NaN or Inf) is reported with the :class:`ort_roi.RoiOpError` message: in
the row's ``error`` column (its outputs empty) or as an HTTP 400 whose body is the message.
A request over one of the :class:`Limits` is a 400 naming the cap, before the work it would
cost. The worker goes on with the next one; no NaN output is passed on as a result.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import math
import os
import random
import re
import threading
import time
import urllib.parse
import warnings
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping, NamedTuple

import numpy as np
import onnx
import onnxruntime as ort

from .errors import RoiOpError
from .graph.inputs import generate_inputs, roles
from .runtime.session import InferenceSession

_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
          "tensor(int32)": np.int32, "tensor(int64)": np.int64}

#: the response header that says which kind of error an ort_roi answer is (absent on 200s
#: and on errors Serve itself answered, e.g. a 500 for a replica lost with the request)
ERROR_HEADER = "X-Ort-Roi-Error"
_KINDS = {400: "bad-request", 405: "method", 408: "timeout", 415: "content-type",
          500: "model-error", 503: "unavailable"}


def _empty(onnx_type: str, shape: list | None) -> np.ndarray:
    """An array of 0 rows of the declared type, with the declared rank and trailing sizes."""
    dims = [d if isinstance(d, int) else 0 for d in (shape or [0])]
    return np.zeros([0, *dims[1:]], _TYPES.get(onnx_type, np.float32))


class Runner:
    """One ``ort_roi.InferenceSession`` and the checks that make a run a result or an error.

    The base of ``BatchPredictor`` and ``HttpPredictor``; usable alone in a worker of one's own.

    Args:
        model: the ONNX model: a path, bytes or ``onnx.ModelProto`` (as the front door).
        intra_op_threads: onnxruntime's intra-op threads for this session. On a machine
            shared by several workers keep ``intra_op_threads x workers <= cores``.
        check_finite: refuse a run whose float inputs or outputs hold NaN or Inf (an op
            that reads the NaN names it first: its message is the error).
    """

    def __init__(self, model: str | os.PathLike | bytes | Any, intra_op_threads: int = 1,
                 check_finite: bool = True):
        so = ort.SessionOptions()
        so.intra_op_num_threads = intra_op_threads
        so.inter_op_num_threads = 1
        self.model = os.fspath(model) if isinstance(model, os.PathLike) else model
        self.session = InferenceSession(self.model, so)
        self.check_finite = check_finite
        #: graph input -> its NumPy dtype (None when not a plain tensor type)
        self.inputs: dict[str, Any] = {i.name: _TYPES.get(i.type)
                                       for i in self.session.get_inputs()}
        #: graph input -> its declared dimensions (ints, names or None)
        self.input_dims: dict[str, list] = {i.name: list(i.shape or [])
                                            for i in self.session.get_inputs()}
        self.outputs: list[str] = [o.name for o in self.session.get_outputs()]
        #: graph output -> its declared dimensions and dtype
        self.output_dims: dict[str, list] = {o.name: list(o.shape or [])
                                             for o in self.session.get_outputs()}
        self.output_types: dict[str, Any] = {o.name: _TYPES.get(o.type, np.float32)
                                             for o in self.session.get_outputs()}
        #: graph output -> a failed row's output: empty (0 rows), of its dtype and rank
        self.empty: dict[str, np.ndarray] = {o.name: _empty(o.type, o.shape)
                                             for o in self.session.get_outputs()}

    def run(self, feed: Mapping[str, Any], cast: bool = False) -> dict[str, np.ndarray]:
        """Run the model on one feed.

        Args:
            feed: graph input name -> array (or nested lists); other keys are ignored.
            cast: convert each value to its input's declared dtype (for JSON numbers, which
                carry none, and Ray Data columns, which a float64 row turns float64 for the
                whole block); refused, not truncated or wrapped: floats for an integer
                input, booleans, integers outside the dtype's range, finite values beyond
                float32's.

        Returns:
            Graph output name -> NumPy array, as the session returns it (of the output's
            declared dtype, e.g. float32 [R, C, 7, 7] pooled features).

        Raises:
            RoiOpError: a missing or unreadable input, an input an op refuses (the op's
                message), or (``check_finite``) inputs or outputs holding NaN or Inf.
        """
        arrays = {name: self._array(name, feed, cast) for name in self.inputs}
        outs = dict(zip(self.outputs, self.session.run(None, arrays)))
        if self.check_finite:
            _check_finite(arrays, outs)
        return outs

    def _array(self, name: str, feed: Mapping[str, Any], cast: bool) -> np.ndarray:
        if name not in feed or feed[name] is None:
            raise RoiOpError("ort_roi", "feed", f"graph input {name!r} is missing (the "
                             f"model's inputs: {', '.join(self.inputs)})")
        try:
            a = np.asarray(feed[name])
        except (ValueError, TypeError) as e:  # ragged nested lists
            raise RoiOpError("ort_roi", "feed", f"graph input {name!r} is not an array: "
                             f"{e}") from e
        if a.dtype.kind not in "biuf":
            raise RoiOpError("ort_roi", "feed", f"graph input {name!r} is not numeric "
                             f"(got {a.dtype.name} values)")
        want = self.inputs[name]
        if cast and want is not None and a.dtype != want:
            a = _cast(name, a, np.dtype(want))
        return a


def _cast(name: str, a: np.ndarray, want: np.dtype) -> np.ndarray:
    """``a`` as ``want``, or RoiOpError where the values would change kind or overflow."""
    if a.dtype.kind == "b":
        raise RoiOpError("ort_roi", "feed", f"graph input {name!r} holds booleans; it takes "
                         f"numbers ({want.name})")
    if want.kind in "iu":
        if a.dtype.kind == "f":
            raise RoiOpError("ort_roi", "feed", f"graph input {name!r} must hold integers "
                             f"({want.name}), got floats")
        info = np.iinfo(want)
        if a.size and (a.min() < info.min or a.max() > info.max):
            raise RoiOpError("ort_roi", "feed", f"graph input {name!r} holds integers outside"
                             f" {want.name}'s range [{info.min}, {info.max}]: {a.min()} .. "
                             f"{a.max()}")
        return a.astype(want)
    with np.errstate(over="ignore"):
        out = a.astype(want)
    if out.dtype.kind == "f" and a.dtype.kind in "fiu" and out.size:
        grew = ~np.isfinite(out) & np.isfinite(a)
        if grew.any():
            raise RoiOpError("ort_roi", "feed", f"graph input {name!r} holds "
                             f"{int(grew.sum())} values beyond {want.name}'s range (first: "
                             f"{a[grew].flat[0].item()!r})")
    return out


def _nonfinite(arrays: Mapping[str, np.ndarray]) -> dict[str, int]:
    """Name -> how many NaN or Inf values, for the float arrays that hold some."""
    counts = {k: int(v.size - np.count_nonzero(np.isfinite(v)))
              for k, v in arrays.items() if v.dtype.kind == "f"}
    return {k: n for k, n in counts.items() if n}


def _check_finite(feed: Mapping[str, np.ndarray], outs: Mapping[str, np.ndarray]) -> None:
    """RoiOpError when a float input or output holds NaN or Inf (a NaN in an image can be
    swallowed by the model's Relu or max pooling: its finite outputs are no result either)."""
    bad_in, bad_out = _nonfinite(feed), _nonfinite(outs)
    if bad_in:
        k, n = next(iter(bad_in.items()))
        raise RoiOpError("ort_roi", "feed", f"graph input {k!r} holds {n} NaN or Inf values "
                         "(no result given)")
    if bad_out:
        held = ", ".join(f"{k!r} ({n} values)" for k, n in bad_out.items())
        raise RoiOpError("ort_roi", f"output {next(iter(bad_out))!r}", "holds NaN or Inf "
                         f"from finite inputs: {held} (no result given)")


class BatchPredictor(Runner):
    """A callable class for ``ray.data.Dataset.map_batches``: each actor builds the session
    once, then runs every row of each batch (a row: one image's inputs) on its own.

    Columns named after the graph's inputs feed the model; the other columns (an id) are
    passed through. Each row is cast to the inputs' declared dtypes on its own (Ray turns a
    whole block's column float64 when one row is float64; a row whose values the dtype cannot
    hold fails alone). Each graph output becomes a column, and ``error_column`` holds
    ``None`` or the row's :class:`ort_roi.RoiOpError` message (another exception's type and
    message); a failed row's outputs are empty (0 rows, the output's dtype and rank: Ray's
    tensor columns cannot hold ``None``), never NaN. :func:`predict_batches` maps a dataset
    with it, its retries bounded.

    Args:
        model: the ONNX model's path (each actor loads it; a path pickles cheaply).
        intra_op_threads: onnxruntime's intra-op threads per actor.
        check_finite: a row whose float inputs or outputs hold NaN or Inf is an error.
        error_column: the name of the error column.
    """

    def __init__(self, model: str | os.PathLike | bytes | Any, intra_op_threads: int = 1,
                 check_finite: bool = True, error_column: str = "error"):
        super().__init__(model, intra_op_threads, check_finite)
        self.error_column = error_column

    def __call__(self, batch: Mapping[str, Any]) -> dict[str, Any]:
        """Run every row of ``batch``.

        Args:
            batch: column -> values, one per row (Ray's ``numpy`` batch format: arrays, or
                object arrays of arrays for tensors of varying shape).

        Returns:
            The passed-through columns, one column per graph output (arrays, empty where the
            row failed) and the error column, in the rows' order.
        """
        n = len(next(iter(batch.values()))) if batch else 0
        out: dict[str, Any] = {k: v for k, v in batch.items() if k not in self.inputs}
        results: dict[str, list] = {k: [] for k in self.outputs}
        errors: list[str | None] = []
        for i in range(n):
            row = {k: batch[k][i] for k in self.inputs if k in batch}
            try:
                outs = self.run(row, cast=True)
            except RoiOpError as e:
                outs, err = self.empty, str(e)
            except Exception as e:  # noqa: BLE001 - the row fails alone, named
                outs, err = self.empty, f"ort_roi: model error: {type(e).__name__}: {e}"
            else:
                err = None
            for k in self.outputs:
                results[k].append(outs[k])
            errors.append(err)
        out.update(results)
        out[self.error_column] = errors
        return out


# --- HTTP: what a request may hold, and reading it safely -----------------------------------

@dataclass(frozen=True)
class Limits:
    """What one HTTP request may hold, each checked before the work it would cost; a request
    over one is answered 400 (408 for time) with a message naming the cap.

    Args:
        max_body_bytes: the request body's size, checked on ``Content-Length`` before the
            body is read and again while it streams in (a chunked body). A JSON body of
            short numbers costs its replica up to 11 times its size while it is parsed;
            where the inputs' declared shapes bound the arrays and values a request can
            hold, a body holding more is refused on its bytes first.
        max_depth: how deeply JSON arrays and objects may nest, checked on the bytes before
            they are parsed (a [N, C, H, W] map as nested lists in the body's object: 5).
        max_boxes: the rows of each boxes input (the graph inputs of [R, 4..6] boxes), checked
            after parsing, before any array is built.
        max_output_bytes: the raw bytes of all outputs (their JSON is 3-5 times as many),
            checked before the model runs where the declared output shapes follow from the
            inputs' (``[R, 5]``), after the run and before encoding otherwise.
        read_timeout_s: how long the body may take to arrive once the request is in (a slow
            client); over it the answer is 408.
    """

    max_body_bytes: int = 16 << 20
    max_depth: int = 32
    max_boxes: int = 10000
    max_output_bytes: int = 64 << 20
    read_timeout_s: float = 10.0


def _limits(limits: Limits | Mapping[str, Any] | None) -> Limits:
    if limits is None:
        return Limits()
    if isinstance(limits, Limits):
        return limits
    unknown = set(limits) - {f.name for f in fields(Limits)}
    if unknown:
        raise TypeError(f"unknown limits {sorted(unknown)}: the caps are "
                        f"{[f.name for f in fields(Limits)]}")
    return replace(Limits(), **limits)


class HttpError(Exception):
    """An HTTP answer other than 200 that ort_roi gives: its status, its plain-text message
    and the headers that go with it (``Retry-After`` on a 503, ``Allow`` on a 405).

    Args:
        status: the HTTP status (400, 405, 408, 415, 500, 503).
        message: the body: what was wrong, naming the cap, input or value.
        headers: extra response headers.
    """

    def __init__(self, status: int, message: str, headers: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = {ERROR_HEADER: _KINDS.get(status, "error"), **(headers or {})}


def _bad(message: str) -> HttpError:
    return HttpError(400, f"ort_roi: request: {message}")


_CHUNK = 1 << 20
_NEST = np.zeros(256, np.int8)
_NEST[[ord("["), ord("{")]] = 1
_NEST[[ord("]"), ord("}")]] = -1
_LETTER = np.zeros(256, bool)  # letters outside strings: only a number's exponent is one
_LETTER[[c for c in range(128) if chr(c).isalpha() and chr(c) not in "eE"]] = True


_NUMBERS = b"0123456789.,:-+eE \t\n\r"  # what a body of numbers is mostly made of


def _scan_json(body: bytes, max_depth: int,
               most: tuple[int, int] | None = None) -> None:
    """Refuse, on the bytes and before any parsing, JSON nested deeper than ``max_depth``,
    holding more arrays or values than ``most`` = (arrays, values) the model's inputs can
    hold (a body of a million empty lists costs 25 times its size and seconds to parse, one
    of short numbers 11 times its size) and literals that are not numbers (``true``,
    ``false``, ``null``, ``NaN``, ``Infinity``), outside strings.
    Numbers, commas, colons and blanks are dropped first (``bytes.translate``: in valid JSON
    none follows an escaping backslash, so strings keep their bounds), which leaves a body of
    numbers a few hundred bytes of brackets and keys; the rest is scanned with NumPy in
    chunks of 1 MiB (bounded memory). Where it finds something the body itself is scanned
    again, to name the byte."""
    rest = body.translate(None, _NUMBERS)
    if _scan(rest, max_depth) is None:
        if most is not None:
            for what, n, cap in (("arrays", rest.count(b"["), most[0]),
                                 ("values", body.count(b",") + 1, most[1])):
                if n > cap:
                    raise _bad(f"the JSON holds {n} {what}; the model's inputs hold at most "
                               f"{cap} (their declared shapes, max_boxes boxes)")
        return
    kind, at = _scan(body, max_depth) or ("?", 0)
    if kind == "depth":
        raise _bad(f"the JSON nests deeper than the cap max_depth={max_depth} (at byte {at});"
                   " graph inputs are nested lists of their rank")
    left = at
    while left > 0 and body[left - 1:left].isalpha():
        left -= 1
    word = re.match(rb"[A-Za-z]*", body[left:left + 32]).group().decode() or "?"
    raise _bad(f"{word!r} at byte {left} is not a number: graph inputs hold numbers (JSON's "
               "true, false and null, NaN and Infinity are refused)")


def _scan(body: bytes, max_depth: int) -> tuple[str, int] | None:
    """("depth" or "literal", byte) of the first nesting over ``max_depth`` or letter (other
    than an exponent's) outside strings; None when there is none."""
    depth, inside, run = 0, 0, 0  # carried between chunks: nesting, in a string, backslashes
    for start in range(0, len(body), _CHUNK):
        b = np.frombuffer(body, np.uint8, count=min(_CHUNK, len(body) - start), offset=start)
        quote = b == 34
        backslash = b == 92
        if run or backslash.any():  # a quote after an odd run of backslashes is escaped
            idx = np.arange(len(b))
            last = np.maximum.accumulate(np.where(backslash, -1, idx))
            before = np.empty(len(b), np.int64)
            before[0] = run
            before[1:] = idx[:-1] - last[:-1] + np.where(last[:-1] < 0, run, 0)
            quote &= before % 2 == 0
            run = len(b) - 1 - last[-1] + (run if last[-1] < 0 else 0)
        toggles = np.cumsum(quote, dtype=np.int32) + inside
        outside = (toggles & 1 == 0) & ~quote
        inside = int(toggles[-1] & 1)
        level = depth + np.cumsum(_NEST[b] * outside, dtype=np.int32)
        letters = _LETTER[b] & outside
        deep = int(np.argmax(level > max_depth)) if level.max() > max_depth else len(b)
        word = int(np.argmax(letters)) if letters.any() else len(b)
        if min(deep, word) < len(b):
            return ("depth", start + deep) if deep < word else ("literal", start + word)
        depth = int(level[-1])
    return None


def _object(pairs: list) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _Duplicate(k)
        out[k] = v
    return out


class _Duplicate(ValueError):
    pass


def _constant(word: str) -> None:
    raise ValueError(f"the literal {word} is not a number")


def _loads(body: bytes, limits: Limits, most: tuple[int, int] | None = None) -> Any:
    """The JSON of ``body``, refused (HttpError 400) over the caps or when it is not
    strict JSON: UTF-8, no duplicate keys, numbers only where numbers go."""
    if len(body) > limits.max_body_bytes:
        raise _bad(f"the body is {len(body)} bytes, over the cap max_body_bytes="
                   f"{limits.max_body_bytes}")
    if not body.strip():
        raise _bad("the body is empty; send a JSON object (graph input name -> nested lists)")
    _scan_json(body, limits.max_depth, most)
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad(f"the body is not UTF-8 text: {e}") from e
    try:
        return json.loads(text, object_pairs_hook=_object, parse_constant=_constant)
    except _Duplicate as e:
        raise _bad(f"the key {e.args[0]!r} appears twice in one JSON object") from e
    except ValueError as e:
        raise _bad(f"the request body is not JSON: {e}") from e
    except RecursionError as e:  # _scan_json refuses this first; kept as the backstop
        raise _bad(f"the JSON nests too deeply (cap max_depth={limits.max_depth})") from e


async def read_body(request: Any, limits: Limits | None = None) -> bytes:
    """The body of a Starlette request to an ort_roi endpoint, checked on the way in.

    Args:
        request: the ``starlette.requests.Request`` (what Ray Serve hands a deployment).
        limits: the caps (``max_body_bytes``, ``read_timeout_s``); defaults if None.

    Returns:
        The body's bytes.

    Raises:
        HttpError: 405 for a method other than POST, 415 for a content type other than
            ``application/json``, 400 for a ``Content-Length`` over ``max_body_bytes`` (the
            body unread) or a body that grows over it while it streams in (reading stops),
            408 for a body that has not arrived within ``read_timeout_s``.
    """
    limits = limits or Limits()
    if request.method != "POST":
        raise HttpError(405, f"ort_roi: request: method {request.method} is not allowed; "
                        "POST a JSON object", {"Allow": "POST"})
    kind = request.headers.get("content-type", "")
    if kind.split(";")[0].strip().lower() != "application/json":
        raise HttpError(415, "ort_roi: request: the content type must be application/json, "
                        f"got {kind or 'none'!r}")
    length = request.headers.get("content-length")
    if length is not None:
        if not length.strip().isdigit():
            raise _bad(f"Content-Length {length!r} is not a number")
        if int(length) > limits.max_body_bytes:
            raise _bad(f"the body is {int(length)} bytes (Content-Length), over the cap "
                       f"max_body_bytes={limits.max_body_bytes}")

    chunks, size = [], 0

    async def read() -> None:
        nonlocal size
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise _bad(f"the body grew over the cap max_body_bytes="
                           f"{limits.max_body_bytes} while it was read ({size} bytes so far)")
            chunks.append(chunk)

    try:
        await asyncio.wait_for(read(), limits.read_timeout_s)
    except asyncio.TimeoutError:
        raise HttpError(408, f"ort_roi: request: the body did not arrive within "
                        f"read_timeout_s={limits.read_timeout_s} ({size} bytes came)",
                        {"Connection": "close"}) from None
    return b"".join(chunks)


def _response(status: int, text: str, headers: Mapping[str, str] | None = None) -> Any:
    from starlette.responses import Response  # Ray Serve installs it

    if status == 200:
        return Response(text, status_code=200, media_type="application/json")
    headers = {ERROR_HEADER: _KINDS.get(status, "error"), **(headers or {})}
    return Response(text, status_code=status, media_type="text/plain; charset=utf-8",
                    headers=headers)


def _model_proto(model: Any) -> onnx.ModelProto | None:
    try:
        if isinstance(model, onnx.ModelProto):
            return model
        if isinstance(model, (bytes, bytearray)):
            return onnx.load_from_string(bytes(model))
        return onnx.load(os.fspath(model), load_external_data=False)
    except Exception:  # noqa: BLE001 - the session loaded it; the probe is optional
        return None


class HttpPredictor(Runner):
    """A Ray Serve deployment class: ``serve.deployment(HttpPredictor, ...).bind(model)``
    alone, or behind :class:`HttpIngress` (what :func:`application` builds).

    A request's body is a JSON object, graph input name -> nested lists (numbers are cast to
    the inputs' declared dtypes) or ``{"shape": [...], "data": [flat numbers]}`` (which also
    says an empty tensor's shape: ``{"shape": [0, 5], "data": []}``; ``[]`` alone stands for
    0 rows where the declared dimensions fix the rest). The answer is a JSON object, graph
    output name -> nested lists. A bad request is answered 400 with the
    :class:`ort_roi.RoiOpError` message, or the cap it is over, as a plain-text body; an
    error of the model itself 500 with its message; either way the replica goes on serving.
    The model runs off the event loop (a sync method, or a thread of ``__call__``).

    Args:
        model: the ONNX model's path (each replica loads it when it starts).
        intra_op_threads: onnxruntime's intra-op threads per replica.
        check_finite: a request whose float inputs or outputs hold NaN or Inf is refused
            (400).
        limits: the caps (:class:`Limits`, or a dict of its fields); defaults if None.
    """

    def __init__(self, model: str | os.PathLike | bytes | Any, intra_op_threads: int = 1,
                 check_finite: bool = True, limits: Limits | Mapping[str, Any] | None = None):
        super().__init__(model, intra_op_threads, check_finite)
        self.limits = _limits(limits)
        proto = _model_proto(self.model)
        role = roles(proto) if proto is not None else {}
        #: the graph inputs that hold boxes, one a row (what ``max_boxes`` caps)
        self.box_inputs: list[str] = [
            n for n, d in self.input_dims.items() if len(d) == 2 and (
                (n in role and role[n].kind == "boxes") or
                (n not in role and isinstance(d[1], int) and d[1] in (4, 5, 6)))]
        #: the most JSON (arrays, values) a request can hold: its inputs at their declared
        #: shapes, ``max_boxes`` boxes (a few more for the shape-and-data form, keys and
        #: sub-arrays); None where a dimension is open
        self.most: tuple[int, int] | None = (0, 0)
        for name, dims in self.input_dims.items():
            sizes = [d if isinstance(d, int) else self.limits.max_boxes
                     if name in self.box_inputs and i == 0 else None
                     for i, d in enumerate(dims)]
            if None in sizes:
                self.most = None
                break
            arrays = 2 + sum(math.prod(sizes[:i]) for i in range(len(sizes)))
            self.most = (self.most[0] + arrays,
                         self.most[1] + math.prod(sizes) + arrays + len(sizes) + 2)
        self._probe: dict[str, np.ndarray] | None = None
        self._probe_out: dict[str, np.ndarray] | None = None
        if proto is not None:
            try:
                probe = generate_inputs(proto, r=1, seed=0)
                self._probe_out = self.run(probe)
                self._probe = probe
            except Exception:  # noqa: BLE001 - a graph the generator cannot feed: no probe
                self._probe = None

    def check_health(self) -> None:
        """Ray Serve's health check: run the model on a tiny input (one box) and compare with
        the answer it gave when the replica started, bit for bit; a frozen or broken replica
        fails it (or times out) and Serve replaces it.

        Raises:
            RuntimeError: the probe's outputs changed.
        """
        if self._probe is None:
            return
        outs = self.run(self._probe)
        for k, v in self._probe_out.items():
            if not np.array_equal(outs[k], v):
                raise RuntimeError(f"ort_roi: health check: output {k!r} of the probe changed")

    def parse(self, body: bytes) -> dict[str, np.ndarray]:
        """Read a request body into the model's feed, checking every cap that applies before
        the arrays are built.

        Args:
            body: the request's body (JSON).

        Returns:
            Graph input name -> array (of the JSON's numbers; :meth:`Runner.run` casts).

        Raises:
            HttpError: 400, naming what is wrong or the cap it is over.
            RoiOpError: an input that is not a numeric array.
        """
        feed = _loads(body, self.limits, self.most)
        if not isinstance(feed, dict):
            raise _bad("the request body must be a JSON object (graph input name -> nested "
                       f"lists), got {type(feed).__name__}")
        unknown = sorted(set(feed) - set(self.inputs))
        if unknown:
            raise RoiOpError("ort_roi", "feed", f"unknown graph inputs {unknown} (the "
                             f"model's inputs: {', '.join(self.inputs)})")
        missing = [k for k in self.inputs if feed.get(k) is None]
        if missing:
            raise RoiOpError("ort_roi", "feed", f"graph input {missing[0]!r} is missing (the "
                             f"model's inputs: {', '.join(self.inputs)})")
        for name in self.box_inputs:
            v = feed.get(name)
            rows = (len(v) if isinstance(v, list) else
                    v.get("shape", [0])[0] if isinstance(v, dict) and
                    isinstance(v.get("shape"), list) and v["shape"] and
                    isinstance(v["shape"][0], int) else 0)
            if rows > self.limits.max_boxes:
                raise _bad(f"graph input {name!r} holds {rows} boxes, over the cap max_boxes="
                           f"{self.limits.max_boxes}")
        return {k: self._tensor(k, v) for k, v in feed.items()}

    def _tensor(self, name: str, value: Any) -> np.ndarray:
        if isinstance(value, dict):
            if set(value) != {"shape", "data"}:
                raise _bad(f"graph input {name!r}: an object must be {{\"shape\": [...], "
                           f"\"data\": [...]}}, got keys {sorted(value)}")
            shape, data = value["shape"], value["data"]
            if not (isinstance(shape, list) and all(
                    type(d) is int and d >= 0 for d in shape)):
                raise _bad(f"graph input {name!r}: shape must be a list of sizes >= 0, got "
                           f"{str(shape)[:80]}")
            if not isinstance(data, list) or any(isinstance(x, (list, dict)) for x in data):
                raise _bad(f"graph input {name!r}: data must be a flat list of numbers")
            if len(data) != math.prod(shape):
                raise _bad(f"graph input {name!r}: shape {shape} holds {math.prod(shape)} "
                           f"values, data has {len(data)}")
            a = self._array(name, {name: data}, cast=False)
            return a.reshape(shape)
        if not isinstance(value, list):
            raise _bad(f"graph input {name!r} must be nested lists or {{\"shape\", "
                       f"\"data\"}}, got {type(value).__name__}")
        a = self._array(name, {name: value}, cast=False)
        rest = self.input_dims.get(name, [])[1:]
        if a.shape == (0,) and rest and all(isinstance(d, int) for d in rest):
            a = a.reshape([0, *rest])  # [] for 0 rows: the declaration fixes the rest
        return a

    def _output_bytes(self, feed: Mapping[str, np.ndarray]) -> int | None:
        """The outputs' raw bytes as declared, with the inputs' named dimensions bound; None
        where a declared dimension does not follow from the inputs."""
        sizes: dict[str, int] = {}
        for name, dims in self.input_dims.items():
            shape = np.shape(feed.get(name, ()))
            for d, n in zip(dims, shape):
                if isinstance(d, str):
                    sizes.setdefault(d, n)
        total = 0
        for name, dims in self.output_dims.items():
            n = 1
            for d in dims:
                d = d if isinstance(d, int) else sizes.get(d) if isinstance(d, str) else None
                if d is None:
                    return None
                n *= d
            total += n * np.dtype(self.output_types[name]).itemsize
        return total

    def _check_output_bytes(self, n: int, when: str) -> None:
        if n > self.limits.max_output_bytes:
            raise _bad(f"the outputs would be {n} bytes ({when}), over the cap "
                       f"max_output_bytes={self.limits.max_output_bytes}")

    def respond(self, body: bytes) -> tuple[int, str]:
        """Answer one request body (what ``__call__`` and :class:`HttpIngress` call).

        Args:
            body: the request's body (JSON).

        Returns:
            (HTTP status, body): 200 and the outputs as JSON; 400 and the error message (a
            bad request, or the cap it is over); 500 and the message of an error of the
            model itself. Never raises.
        """
        try:
            feed = self.parse(body)
            expected = self._output_bytes(feed)
            if expected is not None:
                self._check_output_bytes(expected, "as declared, before the run")
            outs = self.run(feed, cast=True)
            if expected is None:
                self._check_output_bytes(sum(v.nbytes for v in outs.values()), "as run")
            return 200, json.dumps({k: v.tolist() for k, v in outs.items()})
        except HttpError as e:
            return e.status, e.message
        except RoiOpError as e:
            return 400, str(e)
        except Exception as e:  # noqa: BLE001 - the model's own error: 500, named
            return 500, f"ort_roi: model error: {type(e).__name__}: {e}"

    async def __call__(self, request: Any) -> Any:
        """Ray Serve's HTTP entry point (used when this class is the ingress itself).

        Args:
            request: the ``starlette.requests.Request`` Serve hands over.

        Returns:
            A ``starlette.responses.Response`` (JSON, or plain text for an error, with the
            ``X-Ort-Roi-Error`` header saying which kind).
        """
        try:
            body = await read_body(request, self.limits)
        except HttpError as e:
            return _response(e.status, e.message, e.headers)
        status, text = await asyncio.to_thread(self.respond, body)
        return _response(status, text)


class HttpIngress:
    """The HTTP ingress of :func:`application`: reads and checks each request (method,
    content type, body size and time) and hands the body to an :class:`HttpPredictor`
    replica, retrying on another replica when the one it went to was lost (killed, or
    replaced by its health check): inference is idempotent, so a lost replica costs no
    request. What cannot be answered now is 503 with ``Retry-After`` (the predictors' queue
    is full, or every attempt found a replica lost); slow clients hold an ingress slot, never
    a model's.

    Args:
        predictor: the :class:`HttpPredictor` deployment's handle (Serve passes it for the
            bound deployment).
        limits: the caps (:class:`Limits`, or a dict of its fields); defaults if None.
        attempts: tries per request on a lost replica (the first included).
        backoff_s: the wait before the second try, doubled for each later one (jittered).
        retry_after_s: the ``Retry-After`` of a 503.
    """

    def __init__(self, predictor: Any, limits: Limits | Mapping[str, Any] | None = None,
                 attempts: int = 4, backoff_s: float = 0.05, retry_after_s: float = 1.0):
        self.predictor = predictor
        self.limits = _limits(limits)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.retry_after_s = retry_after_s

    async def forward(self, body: bytes) -> tuple[int, str, dict]:
        """Have a predictor replica answer ``body``, retrying where the replica was lost.

        Args:
            body: the request's body.

        Returns:
            (status, text, headers): the predictor's answer, or 503 with ``Retry-After``.
        """
        from ray import exceptions as rex
        from ray.serve.exceptions import BackPressureError

        after = str(max(1, math.ceil(self.retry_after_s)))
        lost = (rex.RayActorError, rex.ActorUnavailableError)
        why = "?"
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1) * random.uniform(.5, 1.5))
            try:
                status, text = await self.predictor.respond.remote(body)
                return status, text, {}
            except BackPressureError as e:
                return 503, f"ort_roi: overloaded: {e}; retry after {after} s", \
                    {"Retry-After": after, ERROR_HEADER: "overloaded"}
            except lost as e:  # the replica was lost with the request: try another
                why = type(e).__name__
            except rex.RayTaskError as e:
                if not isinstance(getattr(e, "cause", None), lost):
                    return 500, f"ort_roi: model error: {type(e).__name__}: {e}", {}
                why = type(e.cause).__name__
        return 503, (f"ort_roi: unavailable: {self.attempts} attempts each found the model's "
                     f"replica lost ({why}); retry after {after} s"), {"Retry-After": after}

    async def __call__(self, request: Any) -> Any:
        """Ray Serve's HTTP entry point.

        Args:
            request: the ``starlette.requests.Request`` Serve hands over.

        Returns:
            A ``starlette.responses.Response``.
        """
        try:
            body = await read_body(request, self.limits)
        except HttpError as e:
            return _response(e.status, e.message, e.headers)
        status, text, headers = await self.forward(body)
        return _response(status, text, headers)


# --- Ray: a loopback cluster, production settings, bounded Ray Data -------------------------

def start_local(num_cpus: int = 2, **kwargs: Any) -> Any:
    """Start a Ray cluster on this machine whose every server listens on 127.0.0.1 only
    (Ray otherwise binds the machine's address and all interfaces).

    Sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's local-only mode: node address
    127.0.0.1, inherited by the cluster's processes) before Ray starts them, then
    ``ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, ...)``.

    Args:
        num_cpus: the cluster's CPUs.
        **kwargs: more ``ray.init`` arguments (``log_to_driver=False``, ...).

    Returns:
        What ``ray.init`` returns.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # read when the node's address is resolved
    kwargs.setdefault("include_dashboard", False)
    return ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", **kwargs)


def http_options(port: int = 8000, request_timeout_s: float = 30.0,
                 host: str = "127.0.0.1") -> dict:
    """``serve.start(http_options=...)`` for an ort_roi service: Serve's proxy on ``host``
    (loopback unless said), every request bounded in time (a slow client or a stuck request
    is answered 408 and the proxy goes on).

    Args:
        port: the proxy's port.
        request_timeout_s: the end-to-end limit of a request.
        host: the address to listen on.

    Returns:
        The options, a dict.
    """
    return {"host": host, "port": port, "request_timeout_s": request_timeout_s}


def application(model: str | os.PathLike | bytes, *, replicas: int = 2,
                ingress_replicas: int = 1, cpus_per_replica: float = 1.0,
                intra_op_threads: int = 1, check_finite: bool = True,
                limits: Limits | Mapping[str, Any] | None = None,
                max_ongoing_requests: int = 2, max_queued_requests: int = 16,
                health_check_period_s: float = 2.0, health_check_timeout_s: float = 2.0,
                attempts: int = 4, retry_after_s: float = 1.0, ingress: bool = True) -> Any:
    """The production form of the Serve recipe: an :class:`HttpIngress` in front of
    ``replicas`` :class:`HttpPredictor` replicas; ``serve.run(application(...))``.

    ``ingress=False`` deploys the predictors alone, one Serve hop less (on a 2-core machine
    running everything, about 1.5 times the requests a second): then a request whose replica
    is lost is Serve's own 500 (no ``X-Ort-Roi-Error``; :class:`Client` retries it) and a slow
    client holds one of a predictor's ``max_ongoing_requests`` until ``read_timeout_s``.

    Args:
        model: the ONNX model's path (or bytes), loaded by each replica.
        replicas: predictor replicas.
        ingress_replicas: ingress replicas (light: reading bodies and retrying).
        cpus_per_replica: Ray CPUs per predictor replica (with ``intra_op_threads``).
        intra_op_threads: onnxruntime's intra-op threads per predictor replica.
        check_finite: refuse NaN or Inf in inputs or outputs (400).
        limits: the caps (:class:`Limits`, or a dict of its fields).
        max_ongoing_requests: requests a predictor replica holds at once: it runs one model
            at a time (a thread per request; 2 keeps the next one's JSON parsed meanwhile).
        max_queued_requests: requests the ingress queues for the predictors beyond those;
            more are answered 503 with ``Retry-After``, so a request's wait stays bounded.
        health_check_period_s: how often Serve runs each predictor's ``check_health``.
        health_check_timeout_s: how long a health check may take (3 missed in a row: the
            replica is replaced).
        attempts: the ingress's tries per request when a replica is lost.
        retry_after_s: the ``Retry-After`` of the 503s.
        ingress: put the :class:`HttpIngress` in front (else the predictors take HTTP).

    Returns:
        A bound Serve application.
    """
    from ray import serve
    from ray.serve.config import BackpressureConfig

    limits = _limits(limits)
    retry = BackpressureConfig(status_code=503, retry_after_s=retry_after_s)
    predictor = serve.deployment(
        HttpPredictor, name="HttpPredictor", num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus_per_replica},
        max_ongoing_requests=max_ongoing_requests, max_queued_requests=max_queued_requests,
        backpressure_config=retry, health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s, graceful_shutdown_timeout_s=5,
    ).bind(model, intra_op_threads, check_finite, limits)
    if not ingress:
        return predictor
    front = serve.deployment(
        HttpIngress, name="HttpIngress", num_replicas=ingress_replicas,
        ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256,
        max_queued_requests=512, backpressure_config=retry, graceful_shutdown_timeout_s=5,
    )
    return front.bind(predictor, limits, attempts, 0.05, retry_after_s)


def predict_batches(ds: Any, model: str | os.PathLike | bytes, *, actors: int = 2,
                    batch_size: int = 8, num_cpus: float = 1.0, intra_op_threads: int = 1,
                    check_finite: bool = True, error_column: str = "error",
                    max_restarts: int = 2, max_task_retries: int = 1,
                    tasks_per_actor: int = 1, predictor: type = BatchPredictor) -> Any:
    """``ds.map_batches`` with :class:`BatchPredictor` on a fixed pool of ``actors`` actors,
    its retries bounded.

    Ray Data restarts a dead actor and retries its batch without end by default, so a row
    that kills its worker (a crash in native code, the OOM killer) would be retried forever.
    Here an actor is restarted at most ``max_restarts`` times and a batch retried at most
    ``max_task_retries`` times; then its block fails, and the dataset fails unless
    ``ray.data.DataContext.get_current().max_errored_blocks`` lets it drop that many blocks
    (their rows are missing from the output: key rows by an id). An actor is given one batch
    at a time (``tasks_per_actor``), so a crash takes down its own batch only, not another
    block's that was queued on the same actor. Ray 2.60 has no named
    parameter for these two; they go through ``map_batches``' remote arguments, whose
    deprecation warning (removal in Ray 2.64) this call keeps quiet.

    Args:
        ds: the ``ray.data.Dataset`` (columns named after the graph's inputs, and an id).
        model: the ONNX model's path (or bytes).
        actors: the actor pool's size (``compute=ray.data.ActorPoolStrategy(size=actors)``,
            the form that replaces ``concurrency=``).
        batch_size: rows per batch.
        num_cpus: Ray CPUs per actor.
        intra_op_threads: onnxruntime's intra-op threads per actor.
        check_finite: a row whose float inputs or outputs hold NaN or Inf is an error.
        error_column: the name of the error column.
        max_restarts: restarts of an actor that died.
        max_task_retries: retries of a batch whose actor died.
        tasks_per_actor: batches sent to an actor before it has answered.
        predictor: the callable class, :class:`BatchPredictor` or a subclass of it.

    Returns:
        The mapped ``ray.data.Dataset`` (lazy).
    """
    import ray

    kwargs = {"model": model, "intra_op_threads": intra_op_threads,
              "check_finite": check_finite, "error_column": error_column}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated.*")
        return ds.map_batches(
            predictor, fn_constructor_kwargs=kwargs,
            compute=ray.data.ActorPoolStrategy(
                size=actors, max_tasks_in_flight_per_actor=tasks_per_actor),
            batch_size=batch_size,
            num_cpus=num_cpus, max_restarts=max_restarts, max_task_retries=max_task_retries)


# --- the client -----------------------------------------------------------------------------

class Reply(NamedTuple):
    """What :meth:`Client.post` got: the last answer, and how it got there.

    Attributes:
        status: the HTTP status of the last answer (0: the connection failed each time).
        text: its body (the outputs' JSON on a 200, the message otherwise).
        attempts: tries made (1: answered at once).
        history: what each failed try got: a status, or the connection error's name.
    """

    status: int
    text: str
    attempts: int
    history: tuple


class Client:
    """A client of an ort_roi HTTP endpoint that retries what may be retried, boundedly.

    Inference is idempotent, so a request is sent again after: 503 (overloaded or a replica
    lost; after its ``Retry-After``), 408 (the request was not done within the service's
    timeout), 429, a 5xx that Serve itself answered (no ``X-Ort-Roi-Error`` header: the
    replica holding the request was lost) and a failed connection. A 400 (bad request,
    naming the input or cap), 405, 415 and a 500 from the model (``X-Ort-Roi-Error:
    model-error``) are answers, never retried. Waits grow from ``backoff_s``, doubling,
    jittered, at most ``max_wait_s``; no retry starts after ``deadline_s``. One keep-alive
    connection per thread.

    Args:
        url: the endpoint, ``http://127.0.0.1:8000/roi``.
        attempts: tries per request, the first included.
        backoff_s: the wait before the second try.
        max_wait_s: the longest wait between tries (a longer ``Retry-After`` is cut to it).
        timeout_s: the socket timeout of one try.
        deadline_s: no try starts this long after the first.
        retry_statuses: the statuses retried (besides Serve's own 5xx).
    """

    def __init__(self, url: str, *, attempts: int = 6, backoff_s: float = 0.1,
                 max_wait_s: float = 2.0, timeout_s: float = 60.0, deadline_s: float = 120.0,
                 retry_statuses: tuple = (408, 429, 503)):
        u = urllib.parse.urlsplit(url)
        if u.scheme != "http" or not u.hostname:
            raise ValueError(f"Client: an http:// URL, got {url!r}")
        self.host, self.port, self.path = u.hostname, u.port or 80, u.path or "/"
        self.attempts, self.backoff_s, self.max_wait_s = attempts, backoff_s, max_wait_s
        self.timeout_s, self.deadline_s = timeout_s, deadline_s
        self.retry_statuses = tuple(retry_statuses)
        self._local = threading.local()

    def send(self, body: bytes) -> tuple[int, dict, bytes]:
        """One POST of ``body``, no retry.

        Args:
            body: the JSON body.

        Returns:
            (status, headers with lower-case names, body).

        Raises:
            OSError, http.client.HTTPException: the connection failed.
        """
        conn = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = http.client.HTTPConnection(self.host, self.port,
                                                                 timeout=self.timeout_s)
        try:
            conn.request("POST", self.path, body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self._local.conn = None
            conn.close()
            raise
        headers = {k.lower(): v for k, v in r.getheaders()}
        if headers.get("connection", "").lower() == "close":
            self._local.conn = None
            conn.close()
        return r.status, headers, data

    def retryable(self, status: int, headers: Mapping[str, str]) -> bool:
        """Whether an answer may be retried.

        Args:
            status: its HTTP status.
            headers: its headers (lower-case names).

        Returns:
            True for the retried statuses and for Serve's own 5xx.
        """
        return status in self.retry_statuses or (
            status >= 500 and ERROR_HEADER.lower() not in headers)

    def post(self, feed: Mapping[str, Any] | bytes) -> Reply:
        """POST one request, retrying as the class says.

        Args:
            feed: graph input name -> array (or nested lists), or the JSON body's bytes.

        Returns:
            The :class:`Reply`: the last status and body, tries, and what failed before.
        """
        body = feed if isinstance(feed, (bytes, bytearray)) else json.dumps(
            {k: np.asarray(v).tolist() for k, v in feed.items()}).encode()
        start, history = time.monotonic(), []
        status, text = 0, ""
        for attempt in range(1, self.attempts + 1):
            wait = self.backoff_s * 2 ** (attempt - 1) * random.uniform(0.5, 1.5)
            try:
                status, headers, data = self.send(body)
            except (OSError, http.client.HTTPException) as e:
                status, text = 0, f"{type(e).__name__}: {e}"
                history.append(type(e).__name__)
            else:
                text = data.decode("utf-8", "replace")
                if not self.retryable(status, headers):
                    return Reply(status, text, attempt, tuple(history))
                history.append(status)
                after = headers.get("retry-after", "")
                if after.isdigit():
                    wait = max(wait, float(after))
            wait = min(wait, self.max_wait_s)
            if attempt == self.attempts or time.monotonic() + wait - start > self.deadline_s:
                break
            time.sleep(wait)
        return Reply(status, text, len(history), tuple(history))
