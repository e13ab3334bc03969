"""The one timing harness (``time_together``: ``ort-roi bench``'s, and every bench and
end-to-end run in ``tools/``), the per-round ratios it makes possible, and what the numbers
were measured on (``machine``, ``describe``). Nothing here knows a workload or an op."""

from __future__ import annotations

import platform
import statistics
import time
from typing import Callable

import numpy as np
import onnxruntime as ort

from .. import __version__

#: A call of no arguments, timed as it is; its output is kept and compared.
Runner = Callable[[], np.ndarray]


def time_together(fns: dict[str, Runner], repeat: int, min_sample_s: float = 0.02, *,
                  shuffle: int | None = None, warmup: bool = True,
                  settle_s: float = 0.0, clock: Callable[[], float] = time.perf_counter
                  ) -> dict[str, tuple[float, np.ndarray, list[float]]]:
    """Per runner: median seconds per call over ``repeat`` rounds after a warm-up, its last
    output and the seconds of each round. Every round times each runner once, in turn, so a
    slow spell of the machine falls on all of them alike; a fast call is timed in loops of
    several calls per sample (at least ``min_sample_s`` each; 0: one call). The one timing
    harness of ``ort-roi bench`` and of ``tools/`` (the benches, the end-to-end runs).

    Args:
        fns: name -> a call of no arguments (its output kept).
        repeat: the rounds.
        min_sample_s: the least seconds of one sample (calls looped to reach it).
        shuffle: a seed: each round runs the runners in a fresh random order (a whole model,
            where the order within a round matters); None: in ``fns``' order.
        warmup: one untimed call of each first (False: the caller has warmed them up).
        settle_s: an untimed pause after each runner's sample. onnxruntime's idle intra-op
            threads spin for tens of milliseconds after a parallel node and take the cores
            from whatever runs next: a pause longer than that (0.1 s) starts every runner
            on quiet cores, as one session alone would be; 0: back to back, each runner
            meets the previous one's spinning threads.
        clock: what is timed: wall time (``time.perf_counter``, the default) or, on a machine
            shared with other jobs, the CPU time of this process (``time.process_time``: the
            time its threads ran, not the time they waited for a core).

    Returns:
        name -> (median seconds per call, its last output, the seconds of each round).
    """
    import random

    loops, ys, ts = {}, {}, {name: [] for name in fns}
    for name, fn in fns.items():
        t = clock()
        ys[name] = fn() if warmup else None
        took = clock() - t if warmup else min_sample_s
        loops[name] = max(1, min(10000, int(min_sample_s / max(took, 1e-7))))
    rng = random.Random(shuffle) if shuffle is not None else None
    for _ in range(repeat):
        order = list(fns)
        if rng is not None:
            rng.shuffle(order)
        for name in order:
            fn = fns[name]
            t = clock()
            for _ in range(loops[name]):
                ys[name] = fn()
            ts[name].append((clock() - t) / loops[name])
            if settle_s:
                time.sleep(settle_s)
    return {name: (statistics.median(ts[name]), ys[name], ts[name]) for name in fns}


def round_ratios(peer: list[float], ours: list[float]) -> list[float]:
    """min, median and max over the rounds of peer time / our time in the same round."""
    r = [p / o for p, o in zip(peer, ours)]
    return [min(r), statistics.median(r), max(r)]


def machine() -> dict:
    """What the numbers were measured on: CPU, cores, Python and library versions."""
    import os

    cpu, flags = platform.processor() or platform.machine(), None
    try:
        with open("/proc/cpuinfo") as f:
            lines = f.read().splitlines()
        cpu = next(ln.split(":", 1)[1].strip() for ln in lines if ln.startswith("model name"))
        flags = next(ln.split(":", 1)[1].split() for ln in lines if ln.startswith("flags"))
    except (OSError, StopIteration):
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "machine": platform.machine(),
            "avx512": None if flags is None else "avx512f" in flags,
            "numpy_simd": numpy_simd(),
            "python": platform.python_version(), "numpy": np.__version__,
            "onnxruntime": ort.__version__, "ort_roi": __version__}


def numpy_simd() -> list[str]:
    """The SIMD targets NumPy dispatches to on this CPU (its highest first), as
    ``NPY_DISABLE_CPU_FEATURES`` would name them; [] where NumPy does not say."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:
        try:
            from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
        except ImportError:
            return []
    return [f for f in reversed(__cpu_dispatch__) if __cpu_features__.get(f)]


def describe(info: dict) -> str:
    avx = {True: ", AVX-512", False: ", no AVX-512"}.get(info.get("avx512"), "")
    simd = info.get("numpy_simd") or []
    top = f" (NumPy dispatches {simd[0]})" if simd else ""
    return (f"{info['cpu']}{avx}{top}, {info['cores']} cores; Python {info['python']}, numpy "
            f"{info['numpy']}, onnxruntime {info['onnxruntime']}, ort_roi {info['ort_roi']}")
