"""The Ray Serve replica: [`HttpPredictor`][ort_roi.scale.HttpPredictor] reads a request body into
the model's feed (every cap checked before the arrays are built), runs the model and answers 200,
400 or 500; its health check reruns a probe and compares it bit for bit."""

from __future__ import annotations

import asyncio
import json
import math
import os
from typing import Any, Mapping

import numpy as np
import onnx
import onnxruntime as ort

from ..errors import RoiOpError
from ..graph.inputs import generate_inputs, roles
from .bodies import loads, read_body
from .cluster import check_listening, replica_grpc_on_node_address
from .limits import HttpError, Limits, as_limits, bad_request, response
from .runner import Runner


def _model_proto(model: Any) -> onnx.ModelProto | None:
    try:
        if isinstance(model, onnx.ModelProto):
            return model
        if isinstance(model, (bytes, bytearray)):
            return onnx.load_from_string(bytes(model))
        return onnx.load(os.fspath(model), load_external_data=False)
    except Exception:  # noqa: BLE001 - the session loaded it; the probe is optional
        return None


#: boxes in a request over which its run returns onnxruntime's memory arena to what it held
#: before (``memory.enable_memory_arena_shrinkage``): the arena grows to a run's peak and
#: keeps it (10,000 boxes: a replica kept about 200 MB more, 86 MB with the shrinkage)
SHRINK_BOXES = 1000


def _trim() -> None:
    """Give the C heap's free memory back to the system (glibc's ``malloc_trim``, every
    thread's arena; nothing elsewhere)."""
    global _LIBC
    if _LIBC is None:
        import ctypes
        import ctypes.util

        try:
            _LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _LIBC.malloc_trim  # noqa: B018 - glibc has it; musl, macOS do not
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC: Any = None


class HttpPredictor(Runner):
    """A Ray Serve deployment class: ``serve.deployment(HttpPredictor, ...).bind(model)``
    alone, or behind [`HttpIngress`][ort_roi.scale.HttpIngress] (what
    [`application`][ort_roi.scale.application] builds).

    A request's body is a JSON object, graph input name -> nested lists (numbers are cast to
    the inputs' declared dtypes) or ``{"shape": [...], "data": [flat numbers]}`` (which also
    says an empty tensor's shape: ``{"shape": [0, 5], "data": []}``; ``[]`` alone stands for
    0 rows where the declared dimensions fix the rest). The answer is a JSON object, graph
    output name -> nested lists. A bad request is answered 400 with the
    [`ort_roi.RoiOpError`][ort_roi.RoiOpError] message, or the cap it is over, as a plain-text body;
    an error of the model itself 500 with its message; either way the replica goes on serving.
    The model runs off the event loop (a sync method, or a thread of ``__call__``).

    Args:
        model: the ONNX model's path (each replica loads it when it starts).
        intra_op_threads: onnxruntime's intra-op threads per replica.
        check_finite: a request whose float inputs or outputs hold NaN or Inf is refused
            (400).
        limits: the caps ([`Limits`][ort_roi.scale.Limits], or a dict of its fields); defaults if
            None.
    """

    def __init__(self, model: str | os.PathLike | bytes | Any, intra_op_threads: int = 1,
                 check_finite: bool = True, limits: Limits | Mapping[str, Any] | None = None):
        super().__init__(model, intra_op_threads, check_finite)
        replica_grpc_on_node_address()  # Ray would listen on every interface
        self.limits = as_limits(limits)
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
        self._listening_checked = False
        self._shrink = ort.RunOptions()
        self._shrink.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
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

        The first check (Serve's, before the replica is given a request) also checks that
        the process listens on its node's address and loopback only
        ([`check_listening`][ort_roi.scale.check_listening]).

        Raises:
            RuntimeError: the probe's outputs changed, or the process listens beyond its
                node's address (naming it).
        """
        if not self._listening_checked:
            check_listening()
            self._listening_checked = True
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
            Graph input name -> array (of the JSON's numbers;
            [`Runner.run`][ort_roi.scale.Runner.run] casts).

        Raises:
            HttpError: 400, naming what is wrong or the cap it is over.
            RoiOpError: an input that is not a numeric array.
        """
        feed = loads(body, self.limits, self.most)
        if not isinstance(feed, dict):
            raise bad_request("the request body must be a JSON object (graph input name -> nested "
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
                raise bad_request(f"graph input {name!r} holds {rows} boxes, over the cap "
                                  f"max_boxes={self.limits.max_boxes}")
        return {k: self._tensor(k, v) for k, v in feed.items()}

    def _tensor(self, name: str, value: Any) -> np.ndarray:
        if isinstance(value, dict):
            if set(value) != {"shape", "data"}:
                raise bad_request(f"graph input {name!r}: an object must be {{\"shape\": [...], "
                                  f"\"data\": [...]}}, got keys {sorted(value)}")
            shape, data = value["shape"], value["data"]
            if not (isinstance(shape, list) and all(
                    type(d) is int and d >= 0 for d in shape)):
                raise bad_request(f"graph input {name!r}: shape must be a list of sizes >= 0, got "
                                  f"{str(shape)[:80]}")
            if not isinstance(data, list) or any(isinstance(x, (list, dict)) for x in data):
                raise bad_request(f"graph input {name!r}: data must be a flat list of numbers")
            if len(data) != math.prod(shape):
                raise bad_request(f"graph input {name!r}: shape {shape} holds {math.prod(shape)} "
                                  f"values, data has {len(data)}")
            a = self._array(name, {name: data}, cast=False)
            return a.reshape(shape)
        if not isinstance(value, list):
            raise bad_request(f"graph input {name!r} must be nested lists or {{\"shape\", "
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
            raise bad_request(f"the outputs would be {n} bytes ({when}), over the cap "
                              f"max_output_bytes={self.limits.max_output_bytes}")

    def respond(self, body: bytes) -> tuple[int, str]:
        """Answer one request body (what ``__call__`` and [`HttpIngress`][ort_roi.scale.HttpIngress]
        call).

        Args:
            body: the request's body (JSON).

        Returns:
            (HTTP status, body): 200 and the outputs as JSON; 400 and the error message (a
            bad request, or the cap it is over); 500 and the message of an error of the
            model itself. Never raises. A run of more than ``SHRINK_BOXES`` boxes gives
            onnxruntime's arena back its growth afterwards.
        """
        try:
            feed = self.parse(body)
            expected = self._output_bytes(feed)
            if expected is not None:
                self._check_output_bytes(expected, "as declared, before the run")
            boxes = max((len(feed[n]) for n in self.box_inputs if np.ndim(feed.get(n)) > 0),
                        default=0)
            outs = self.run(feed, cast=True,
                            run_options=self._shrink if boxes > SHRINK_BOXES else None)
            if expected is None:
                self._check_output_bytes(sum(v.nbytes for v in outs.values()), "as run")
            text = json.dumps({k: v.tolist() for k, v in outs.items()})
            if boxes > SHRINK_BOXES:
                del feed, outs
                _trim()
            return 200, text
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
            return response(e.status, e.message, e.headers)
        status, text = await asyncio.to_thread(self.respond, body)
        return response(status, text)
