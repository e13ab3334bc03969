"""Batch inference with Ray Data: [`BatchPredictor`][ort_roi.scale.BatchPredictor] (the callable
class each actor runs, a row failing alone into the error column) and
[`predict_batches`][ort_roi.scale.predict_batches] (``map_batches`` on a fixed actor pool, its
retries bounded)."""

from __future__ import annotations

import os
import warnings
from typing import Any, Mapping

from ..errors import RoiOpError
from .runner import Runner, feed_array


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
                merged its types) fails with it, unrun; any other value there (None, or the NaN
                Ray makes of a column of None alone) is no message.

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
                # a message is a string; Ray hands a column of None alone as NaN (float)
                if refused is not None and isinstance(refused[i], str):
                    raise _Refused(refused[i])
                outs = self.run(row, cast=True)
            except _Refused as e:
                outs, err = self.empty, str(e)
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
            or a list of such rows (dicts). Each row's graph inputs are first made arrays of
            their declared dtypes, or refused alone (a placeholder and the message in the
            error column): a list's rows here, before ``ray.data.from_items`` types the
            columns (booleans and strings are told apart); a Dataset's rows by ``ds.map``
            before any batch puts blocks together (a float64 block, a block of booleans or of
            nested lists no longer fails the dataset; a boolean among float rows of one
            block is already 0.0 / 1.0 there, out of reach).
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

    runner = Runner(model)  # the graph's inputs and dtypes, as each actor reads them
    normal = _Normalise(runner.inputs, runner.input_dims, error_column)
    kwargs = {"model": model, "intra_op_threads": intra_op_threads,
              "check_finite": check_finite, "error_column": error_column}
    remote = {"num_cpus": num_cpus, "max_restarts": max_restarts,
              "max_task_retries": max_task_retries}
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*ray_remote_args.*deprecated.*")
        if isinstance(ds, (list, tuple)):  # each row alone, before Ray types a column
            ds = ray.data.from_items([normal(row) for row in ds])
        else:
            # each row alone, before a batch puts blocks of divergent types together: tasks
            # that reserve no CPU (the actors may hold every CPU: they would wait for ever),
            # as many at once as there are actors
            ds = ds.map(normal, num_cpus=0,
                        compute=ray.data.TaskPoolStrategy(size=max(1, actors)))
        return ds.map_batches(
            predictor, fn_constructor_kwargs=kwargs,
            compute=ray.data.ActorPoolStrategy(
                size=actors, max_tasks_in_flight_per_actor=tasks_per_actor),
            batch_size=batch_size, **remote)


class _Refused(Exception):
    """A row refused before it reached the actor: its message, as it is."""


class _Normalise:
    """One row's graph inputs made what every row of the dataset holds, before Ray puts rows
    together: each an array of its input's declared dtype
    (``runner.feed_array``: cast where the values stay what they
    are, as [`Runner.run`][ort_roi.scale.Runner.run] casts), or, for an input that is missing,
    ragged, not numeric, booleans, of the wrong rank or holding values its dtype cannot
    hold, a placeholder (zeros of its declared shape, open dimensions 0) with the
    RoiOpError message in the error column, which
    [`BatchPredictor`][ort_roi.scale.BatchPredictor] reports unrun. Ray gives a column one
    type: a float64 row, a nested list or booleans among float32 rows failed the whole
    dataset ("Can't unify tensor types with divergent scalar types").

    Args:
        inputs: graph input -> its NumPy dtype (None: left as it is).
        dims: graph input -> its declared dimensions.
        error_column: the name of the error column (a message there already is kept).
    """

    def __init__(self, inputs: Mapping[str, Any], dims: Mapping[str, list],
                 error_column: str = "error"):
        self.inputs, self.dims, self.error_column = dict(inputs), dict(dims), error_column

    def __call__(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """Normalise one row.

        Args:
            row: column -> value.

        Returns:
            The row: its graph inputs as arrays of their dtypes (placeholders where refused)
            and the error column (None, or the first refused input's message).
        """
        import numpy as np

        out = dict(row)
        why = row.get(self.error_column)
        why = why if isinstance(why, str) else None
        for name, want in self.inputs.items():
            dims = self.dims.get(name) or []
            try:
                a = feed_array(name, row.get(name), want, tuple(self.inputs))
                if dims and a.ndim != len(dims):
                    raise RoiOpError("ort_roi", "feed", f"graph input {name!r} is declared "
                                     f"[{', '.join(map(str, dims))}], got shape "
                                     f"{list(a.shape)}")
                out[name] = np.ascontiguousarray(a)
            except RoiOpError as e:
                why = why or str(e)
                out[name] = np.zeros([d if isinstance(d, int) else 0 for d in dims],
                                     want or np.float32)
        out[self.error_column] = why
        return out
