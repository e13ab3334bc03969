"""What ``ort-roi convert`` changes in a graph a plain session already runs, measured: the
original and the converted graph run on the same inputs in plain sessions, their outputs
compared and their runs timed side by side (``convert_effect``; ``ort-roi validate`` reports
it). What convert changes is told by the rewrite itself (``Rewrite.repairs``: an exporter's
form given its framework's arithmetic); how much that changes the numbers, and how much
faster the converted graph runs, is measured here on the inputs given."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np
import onnx

from ..graph.rewrite import Rewrite
from .bench_timing import time_together
from .compare import ATOL, RTOL, OpErrors, plain_session

#: Timed rounds of each graph (after one untimed run of each), interleaved: at most ROUNDS,
#: fewer where the two runs take longer than BUDGET_S seconds together (at least one).
ROUNDS = 5
BUDGET_S = 2.0


@dataclass
class Effect:
    """What convert changes, measured on one set of inputs.

    ``rewrite``: what the rewrite did (``moved``, ``repairs``, ``notes``); ``differs``: one
    line per graph output whose values (or shape) differ between the original and the
    converted graph beyond ATOL + RTOL x |value|; ``max_diff``: the largest |difference| over
    the float outputs of equal shape; ``native_s`` / ``converted_s``: median seconds per run;
    ``error``: why the comparison could not be made (the converted graph failed to run).
    """

    rewrite: Rewrite
    differs: list[str] = field(default_factory=list)
    max_diff: float = 0.0
    native_s: float | None = None
    converted_s: float | None = None
    error: str | None = None

    @property
    def speedup(self) -> float | None:
        if not self.native_s or not self.converted_s:
            return None
        return self.native_s / self.converted_s


def _diff(name: str, a: np.ndarray, b: np.ndarray) -> tuple[str | None, float]:
    """Whether output ``name`` differs (a line saying how) and its largest |difference|."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != b.shape:
        return f"{name}: shape {list(a.shape)} here, {list(b.shape)} converted", 0.0
    if a.size == 0:
        return None, 0.0
    if a.dtype.kind not in "fc" or b.dtype.kind not in "fc":
        n = int(np.count_nonzero(a != b))
        return (f"{name}: {n} of {a.size} values differ" if n else None), 0.0
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):  # inf - inf: compared by equality below
        d = np.abs(a64 - b64)
    same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
    d = np.where(same, 0.0, d)
    worst = float(np.nanmax(np.where(np.isnan(d), np.inf, d)))
    bad = ~same & ~(d <= ATOL + RTOL * np.abs(b64))
    if bad.any():
        return (f"{name}: {int(bad.sum())} of {a.size} values differ, by up to "
                f"{worst:.3g}"), worst
    return None, worst


def convert_effect(model: onnx.ModelProto, converted: onnx.ModelProto, done: Rewrite,
                   feed: dict[str, np.ndarray], rounds: int = ROUNDS) -> Effect:
    """Run ``model`` and ``converted`` (what ``rewrite`` made of it, ``done``) on ``feed`` in
    plain sessions with ort_roi's ops, compare every graph output and time both.

    Args:
        model: the graph as it is.
        converted: the converted graph (the same inputs and outputs).
        done: the rewrite's report.
        feed: graph input name -> array, for both.
        rounds: the most timed rounds of each, interleaved (0: not timed); fewer where a
            run of both takes over BUDGET_S.

    Returns:
        the measured ``Effect``.
    """
    effect = Effect(done)
    handler, logger = OpErrors(), logging.getLogger("ort_roi")
    logger.addHandler(handler)
    try:
        native, ours = plain_session(model), plain_session(converted)
        names = [o.name for o in native.get_outputs()]
        start = time.perf_counter()
        a = native.run(None, feed)
        logged = len(handler.messages)
        b = ours.run(names, feed)
        first = time.perf_counter() - start
        if len(handler.messages) > logged:
            effect.error = f"the converted graph's ort_roi node failed: {handler.messages[logged]}"
            return effect
        rounds = min(rounds, max(1, int(BUDGET_S / max(first, 1e-9))))
        if rounds:
            t = time_together({"native": lambda: native.run(None, feed),
                               "converted": lambda: ours.run(names, feed)}, rounds,
                              min_sample_s=0, warmup=False)
            effect.native_s, effect.converted_s = t["native"][0], t["converted"][0]
    except Exception as e:  # noqa: BLE001 - onnxruntime's refusal is the finding
        effect.error = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
        return effect
    finally:
        logger.removeHandler(handler)
    for name, x, y in zip(names, a, b):
        line, worst = _diff(name, x, y)
        effect.max_diff = max(effect.max_diff, worst)
        if line is not None:
            effect.differs.append(line)
    return effect
