"""A model in a worker: one ``ort_roi.InferenceSession`` and the checks that make a run a
result or an error (a missing or unreadable input, values the input's dtype cannot hold, NaN
or Inf in or out). [`Runner`][ort_roi.scale.Runner] is the base of the Ray Data and Ray Serve
predictors."""

from __future__ import annotations

import os
from typing import Any, Mapping

import numpy as np
import onnxruntime as ort

from ..errors import RoiOpError
from ..runtime.session import InferenceSession

_TYPES = {"tensor(float)": np.float32, "tensor(double)": np.float64,
          "tensor(int32)": np.int32, "tensor(int64)": np.int64}

#: what a non-numeric array holds, by NumPy dtype kind (its dtype's name for a string says
#: its size in bits: "str503316480")
_KIND_NAMES = {"U": "strings", "S": "bytes", "O": "Python objects", "c": "complex numbers",
               "M": "datetimes", "m": "timedeltas", "V": "raw records"}


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

    def run(self, feed: Mapping[str, Any], cast: bool = False,
            run_options: ort.RunOptions | None = None) -> dict[str, np.ndarray]:
        """Run the model on one feed.

        Args:
            feed: graph input name -> array (or nested lists); other keys are ignored.
            cast: convert each value to its input's declared dtype (for JSON numbers, which
                carry none, and Ray Data columns, which a float64 row turns float64 for the
                whole block); refused, not truncated or wrapped: floats for an integer
                input, booleans, integers outside the dtype's range, finite values beyond
                float32's.
            run_options: onnxruntime's ``RunOptions`` for this run (None: the defaults).

        Returns:
            Graph output name -> NumPy array, as the session returns it (of the output's
            declared dtype, e.g. float32 [R, C, 7, 7] pooled features).

        Raises:
            RoiOpError: a missing or unreadable input, an input an op refuses (the op's
                message), or (``check_finite``) inputs or outputs holding NaN or Inf.
        """
        arrays = {name: self._array(name, feed, cast) for name in self.inputs}
        outs = dict(zip(self.outputs, self.session.run(None, arrays, run_options)))
        if self.check_finite:
            _check_finite(arrays, outs)
        return outs

    def _array(self, name: str, feed: Mapping[str, Any], cast: bool) -> np.ndarray:
        return feed_array(name, feed.get(name), self.inputs[name] if cast else None,
                          tuple(self.inputs))


def feed_array(name: str, value: Any, want: Any = None,
               inputs: tuple[str, ...] = ()) -> np.ndarray:
    """``value`` as graph input ``name``'s array: numeric, and of dtype ``want`` where given
    (cast as [`Runner.run`][ort_roi.scale.Runner.run] says), or RoiOpError naming the input.

    Args:
        name: the graph input's name.
        value: its value (an array or nested lists; None: missing).
        want: the NumPy dtype to cast to (None: as it is).
        inputs: the model's input names, for the message of a missing one.

    Returns:
        The array.

    Raises:
        RoiOpError: missing, ragged, not numeric, or values ``want`` cannot hold.
    """
    if value is None:
        raise RoiOpError("ort_roi", "feed", f"graph input {name!r} is missing (the "
                         f"model's inputs: {', '.join(inputs)})")
    try:
        a = np.asarray(value)
    except (ValueError, TypeError) as e:  # ragged nested lists
        raise RoiOpError("ort_roi", "feed", f"graph input {name!r} is not an array: "
                         f"{e}") from e
    if a.dtype.kind not in "biuf":
        raise RoiOpError("ort_roi", "feed", f"graph input {name!r} is not numeric "
                         f"(got {_KIND_NAMES.get(a.dtype.kind, a.dtype.name)})")
    if want is not None and a.dtype != want:
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
