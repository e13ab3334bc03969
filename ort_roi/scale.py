"""Scaling out: ort_roi models in Ray Data (batch inference) and Ray Serve (HTTP serving).

ort_roi's ops are Python ops registered per process, and sessions do not pickle: each worker
builds its own session from the model path when it starts (importing ort_roi registers the
ops there). This module does not import Ray; it gives the callables that Ray runs:

    import ray
    from ort_roi.scale import BatchPredictor, HttpPredictor

    ds = ray.data.from_items(rows)   # rows: {"id": ..., "features": ..., "rois": ...}
    out = ds.map_batches(BatchPredictor, fn_constructor_kwargs={"model": "head.onnx"},
                         concurrency=2, batch_size=8)

    from ray import serve
    serve.run(serve.deployment(HttpPredictor, num_replicas=2).bind("head.onnx"))

A bad row or request (wrong shape or dtype, NaN boxes, a count that does not add up, an image
or outputs holding NaN or Inf) is reported with the :class:`ort_roi.RoiOpError` message: in
the row's ``error`` column (its outputs empty) or as an HTTP 400 whose body is the message.
The worker goes on with the next one; no NaN output is passed on as a result.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort

from .errors import RoiOpError
from .runtime.session import InferenceSession

_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
          "tensor(int32)": np.int32, "tensor(int64)": np.int64}


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
        self.session = InferenceSession(os.fspath(model) if isinstance(model, os.PathLike)
                                        else model, so)
        self.check_finite = check_finite
        #: graph input -> its NumPy dtype (None when not a plain tensor type)
        self.inputs: dict[str, Any] = {i.name: _TYPES.get(i.type)
                                       for i in self.session.get_inputs()}
        self.outputs: list[str] = [o.name for o in self.session.get_outputs()]
        #: graph output -> a failed row's output: empty (0 rows), of its dtype and rank
        self.empty: dict[str, np.ndarray] = {o.name: _empty(o.type, o.shape)
                                             for o in self.session.get_outputs()}

    def run(self, feed: Mapping[str, Any], cast: bool = False) -> dict[str, np.ndarray]:
        """Run the model on one feed.

        Args:
            feed: graph input name -> array (or nested lists); other keys are ignored.
            cast: convert each value to its input's declared dtype (for JSON numbers, which
                carry none); a float value for an integer input is refused, not truncated.

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
            if np.dtype(want).kind in "iu" and a.dtype.kind == "f":
                raise RoiOpError("ort_roi", "feed", f"graph input {name!r} must hold "
                                 f"integers ({np.dtype(want).name}), got floats")
            a = a.astype(want)
        return a


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
    passed through. Each graph output becomes a column, and ``error_column`` holds ``None``
    or the row's :class:`ort_roi.RoiOpError` message; a failed row's outputs are empty (0
    rows, the output's dtype and rank: Ray's tensor columns cannot hold ``None``), never NaN.

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
                outs = self.run(row)
            except RoiOpError as e:
                outs, err = self.empty, str(e)
            else:
                err = None
            for k in self.outputs:
                results[k].append(outs[k])
            errors.append(err)
        out.update(results)
        out[self.error_column] = errors
        return out


class HttpPredictor(Runner):
    """A Ray Serve deployment class: ``serve.deployment(HttpPredictor, ...).bind(model)``.

    A request's body is a JSON object, graph input name -> nested lists (numbers are cast to
    the inputs' declared dtypes); the answer is a JSON object, graph output name -> nested
    lists. A bad request is answered 400 with the :class:`ort_roi.RoiOpError` message as a
    plain-text body; the replica goes on serving.

    Args:
        model: the ONNX model's path (each replica loads it when it starts).
        intra_op_threads: onnxruntime's intra-op threads per replica.
        check_finite: a request whose float inputs or outputs hold NaN or Inf is refused
            (400).
    """

    def respond(self, body: bytes) -> tuple[int, str]:
        """Answer one request body.

        Args:
            body: the request's body (JSON).

        Returns:
            (HTTP status, body): 200 and the outputs as JSON, or 400 and the error message.
        """
        try:
            try:
                feed = json.loads(body)
            except ValueError as e:
                raise RoiOpError("ort_roi", "feed", f"the request body is not JSON: {e}") from e
            if not isinstance(feed, dict):
                raise RoiOpError("ort_roi", "feed", "the request body must be a JSON object "
                                 f"(graph input name -> nested lists), got {type(feed).__name__}")
            unknown = sorted(set(feed) - set(self.inputs))
            if unknown:
                raise RoiOpError("ort_roi", "feed", f"unknown graph inputs {unknown} (the "
                                 f"model's inputs: {', '.join(self.inputs)})")
            outs = self.run(feed, cast=True)
        except RoiOpError as e:
            return 400, str(e)
        return 200, json.dumps({k: v.tolist() for k, v in outs.items()})

    async def __call__(self, request: Any) -> Any:
        """Ray Serve's HTTP entry point.

        Args:
            request: the ``starlette.requests.Request`` Serve hands over.

        Returns:
            A ``starlette.responses.Response`` (JSON, or plain text for an error).
        """
        from starlette.responses import Response  # Ray Serve installs it

        status, text = self.respond(await request.body())
        kind = "application/json" if status == 200 else "text/plain; charset=utf-8"
        return Response(text, status_code=status, media_type=kind)
