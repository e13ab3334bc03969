"""Batch inference with Ray Data: [`BatchPredictor`][ort_roi.scale.BatchPredictor] (the callable
class each actor runs, a row failing alone into the error column) and
[`predict_batches`][ort_roi.scale.predict_batches] (``map_batches`` on a fixed actor pool, its
retries bounded)."""

from __future__ import annotations

import os
import warnings
from typing import Any, Mapping

from ..errors import RoiOpError
from .runner import Runner


class BatchPredictor(Runner):
    """A callable class for ``ray.data.Dataset.map_batches``: each actor builds the session
    once, then runs every row of each batch (a row: one image's inputs) on its own.

    Columns named after the graph's inputs feed the model; the other columns (an id) are
    passed through. Each row is cast to the inputs' declared dtypes on its own (Ray turns a
    whole block's column float64 when one row is float64; a row whose values the dtype cannot
    hold fails alone). Each graph output becomes a column, and ``error_column`` holds
    ``None`` or the row's [`ort_roi.RoiOpError`][ort_roi.RoiOpError] message (another exception's
    type and message); a failed row's outputs are empty (0 rows, the output's dtype and rank: Ray's
    tensor columns cannot hold ``None``), never NaN.
    [`predict_batches`][ort_roi.scale.predict_batches] maps a dataset with it, its retries bounded.

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
                object arrays of arrays for tensors of varying shape). A row whose error
                column already holds a message (set by
                [`predict_batches`][ort_roi.scale.predict_batches] for a row refused before Ray
                merged its types) fails with it, unrun.

        Returns:
            The passed-through columns, one column per graph output (arrays, empty where the
            row failed) and the error column, in the rows' order.
        """
        n = len(next(iter(batch.values()))) if batch else 0
        out: dict[str, Any] = {k: v for k, v in batch.items() if k not in self.inputs}
        results: dict[str, list] = {k: [] for k in self.outputs}
        errors: list[str | None] = []
        refused = batch.get(self.error_column)
        for i in range(n):
            row = {k: batch[k][i] for k in self.inputs if k in batch}
            try:
                if refused is not None and refused[i] is not None:
                    raise RoiOpError("ort_roi", "feed", str(refused[i]))
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


def predict_batches(ds: Any, model: str | os.PathLike | bytes, *, actors: int = 2,
                    batch_size: int = 8, num_cpus: float = 1.0, intra_op_threads: int = 1,
                    check_finite: bool = True, error_column: str = "error",
                    max_restarts: int = 2, max_task_retries: int = 1,
                    tasks_per_actor: int = 1, predictor: type = BatchPredictor) -> Any:
    """``ds.map_batches`` with [`BatchPredictor`][ort_roi.scale.BatchPredictor] on a fixed pool of
    ``actors`` actors, its retries bounded.

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
        ds: the ``ray.data.Dataset`` (columns named after the graph's inputs, and an id),
            or a list of such rows (dicts), checked, then ``ray.data.from_items(ds)``.
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
        predictor: the callable class, [`BatchPredictor`][ort_roi.scale.BatchPredictor] or a
            subclass of it.

    Returns:
        The mapped ``ray.data.Dataset`` (lazy).
    """
    import ray

    if isinstance(ds, (list, tuple)):
        inputs = set(Runner(model).inputs)  # the graph's inputs, as each actor reads them
        ds = ray.data.from_items([_checked(row, inputs, error_column) for row in ds])
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


def _checked(row: Mapping[str, Any], inputs: set[str],
             error_column: str) -> dict[str, Any]:
    """``row``, or where one of its ``inputs`` holds booleans or values that are not numbers
    (which Ray's column type would turn into numbers or refuse for the whole dataset): the
    row with those arrays as zeros of their shape and the message in ``error_column``."""
    import numpy as np

    out, why = dict(row), None
    for k, v in row.items():
        if k not in inputs or not isinstance(v, (np.ndarray, list)):
            continue
        try:
            a = np.asarray(v)
        except (ValueError, TypeError):
            continue  # ragged: the predictor names it
        if a.dtype.kind not in "iuf":
            kind = "booleans" if a.dtype.kind == "b" else "values that are not numbers"
            why = why or f"graph input {k!r} holds {kind}; it takes numbers"
            out[k] = np.zeros(a.shape, np.float32)
    out[error_column] = why
    return out
