"""Where the registered ops compute: ``numpy`` (the default), ``cupy`` or ``auto``.

Set it with the environment variable ``ORT_ROI_BACKEND`` (read at import) or
``set_backend``. With ``cupy`` the ops in onnxruntime copy their inputs to the GPU
(through pinned, reused buffers: kernels/cuda/staging.py), run the CUDA kernels and copy the
output back, with one synchronisation per call; when CuPy or a GPU is missing they fall back
to NumPy with one warning. ``auto`` measures: for each op and call shape (the feature maps'
shapes, the number of boxes to a power of two, the node's attributes) it runs NumPy and the GPU alternately, twice
each (``PROBES``; a first call warms up, the GPU's compiles: not counted), then the faster,
timing the slower again every ``REPROBE`` calls; without a GPU it is NumPy, silently. The
copies are what decide:
an op whose output is large against its work (W1's 240 MB from 8 MB of input) can run
faster on the CPU than copied to and from a GPU.
"""

from __future__ import annotations

import math
import os
import time
import warnings
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from .. import forksafe
from .cpu import workspace

CHOICES = ("numpy", "cupy", "auto")
_lock = forksafe.Lock()


_choice = "numpy"
_resolved: str | None = None


def set_backend(name: str) -> str:
    """Choose where the registered ops compute: NumPy on the CPU or CuPy on the GPU.

    Args:
        name: "numpy", "cupy" (falls back to NumPy with one warning when CuPy or a GPU is
            missing) or "auto" (the GPU when there is one, silently).

    Returns:
        The backend that will actually run: "numpy" or "cupy".

    Raises:
        ValueError: ``name`` is not one of "numpy", "cupy", "auto".
    """
    global _choice, _resolved
    if name not in CHOICES:
        raise ValueError(f"ort_roi backend must be one of {', '.join(CHOICES)}, got {name!r}")
    with _lock:
        _choice, _resolved = name, None
    return get_backend()


def get_backend() -> str:
    """The backend the registered ops compute on now (``set_backend`` or ``ORT_ROI_BACKEND``).

    Returns:
        "numpy", "cupy" or "auto" (measured per call shape), the choice resolved: "auto"
        and an unavailable "cupy" give "numpy" without a GPU.
    """
    global _resolved
    resolved = _resolved  # set once per choice: read without the lock (every call does)
    if resolved is not None:
        return resolved
    with _lock:
        if _resolved is None:
            _resolved = _resolve(_choice)
        return _resolved


def gpu_available() -> tuple[bool, str]:
    """Whether the "cupy" backend can run here.

    Returns:
        (True, "") when CuPy imports and sees a GPU, else (False, why).
    """
    try:
        import cupy

        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as e:  # noqa: BLE001 - ImportError, CUDA driver errors, ...
        return False, f"{type(e).__name__}: {e}"
    return (n > 0, "" if n > 0 else "no CUDA device")


def _resolve(choice: str) -> str:
    if choice == "numpy":
        return "numpy"
    ok, why = gpu_available()
    if ok:
        return choice
    if choice == "cupy":  # one warning (a log record too would print it twice)
        warnings.warn(f"ort_roi: backend 'cupy' requested but unavailable ({why}); using NumPy",
                      RuntimeWarning, stacklevel=3)
    return "numpy"


_env = os.environ.get("ORT_ROI_BACKEND", "").strip().lower()
if _env:
    if _env in CHOICES:
        _choice = _env
    else:
        warnings.warn(f"ORT_ROI_BACKEND={_env!r} is not one of {', '.join(CHOICES)}; "
                      f"using numpy", RuntimeWarning, stacklevel=2)


#: "auto": a call shape's first calls, each backend twice (a first call is not counted).
PROBES = ("numpy", "cupy", "numpy", "cupy")
#: "auto": the slower backend of a call shape is timed again every REPROBE calls.
REPROBE = 64
#: "auto": at most this many call shapes remembered (least recently used first out).
SHAPES = 512


class _Timings:
    """One call shape's measured seconds per backend under "auto"."""

    def __init__(self) -> None:
        self.seconds = {"numpy": math.inf, "cupy": math.inf}
        self.tries = {"numpy": 0, "cupy": 0}
        self.calls = 0

    def pick(self) -> str:
        n = self.tries["numpy"] + self.tries["cupy"]
        if n < len(PROBES):
            return PROBES[n]
        self.calls += 1
        fast, slow = sorted(self.seconds, key=self.seconds.__getitem__)
        return slow if self.calls % REPROBE == 0 else fast

    def record(self, backend: str, seconds: float) -> None:
        self.tries[backend] += 1
        if self.tries[backend] == 1:  # a first call warms up (the GPU's compiles): not counted
            return
        self.seconds[backend] = seconds


_timings: "OrderedDict[tuple, _Timings]" = OrderedDict()


def _frozen(v: Any) -> Any:
    """An attribute's value as a hashable key (lists and arrays as tuples)."""
    if isinstance(v, np.ndarray):
        return (str(v.dtype), v.shape, v.tobytes())
    if isinstance(v, (list, tuple)):
        return tuple(_frozen(x) for x in v)
    return v


def _shape_key(kernel: Callable, inputs: Sequence[np.ndarray], features: Sequence[int],
               attrs: dict[str, Any]) -> tuple:
    """What a call's cost follows: the kernel, the feature maps' dtypes and shapes, the
    number of boxes to a power of two, and every attribute (a 14x14 mask head costs more
    than a 7x7 box head on the same maps and boxes; a node's attributes are fixed, so they
    add no keys beyond one per node and shape), last."""
    parts: list[Any] = [getattr(kernel, "__qualname__", repr(kernel))]
    for i, x in enumerate(inputs):
        shape = getattr(x, "shape", ())
        if i in features or not shape:
            parts.append((str(getattr(x, "dtype", "")), tuple(shape)))
        else:  # boxes and counts: their number to a power of two
            parts.append((str(getattr(x, "dtype", "")), int(shape[0]).bit_length(),
                          tuple(shape[1:])))
    parts.append(tuple(sorted((k, _frozen(v)) for k, v in attrs.items())))
    return tuple(parts)


def _timings_of(kernel: Callable, inputs: Sequence[np.ndarray], features: Sequence[int],
                attrs: dict[str, Any]) -> _Timings:
    """The measurements of this call's shape and attributes (made on its first call; the
    least recently used let go past SHAPES)."""
    key = _shape_key(kernel, inputs, features, attrs)
    with _lock:
        t = _timings.pop(key, None) or _Timings()
        _timings[key] = t
        while len(_timings) > SHAPES:
            _timings.popitem(last=False)
        return t


def _on_gpu(kernel: Callable, inputs: Sequence[np.ndarray], features: Sequence[int],
            **attrs: Any) -> tuple[np.ndarray, ...]:
    from .cuda import staging

    with staging.call_scope():
        inputs = [staging.to_device(x) if i in features else x for i, x in enumerate(inputs)]
        ys = kernel(*inputs, **attrs)
        return tuple(staging.to_host(y) for y in (ys if isinstance(ys, tuple) else (ys,)))


def _on_cpu(kernel: Callable, inputs: Sequence[np.ndarray], **attrs: Any):
    workspace.set_reuse(True)  # workspace.reuse_outputs(), without a with's cost
    try:
        ys = kernel(*inputs, **attrs)
    finally:
        workspace.set_reuse(False)
    return ys if isinstance(ys, tuple) else (ys,)


def call(kernel: Callable[..., Any], inputs: Sequence[np.ndarray], features: Sequence[int],
         **attrs: Any) -> tuple[np.ndarray, ...]:
    """Run a kernel for a registered op where the ops compute (``get_backend``).

    Args:
        kernel: the op's kernel.
        inputs: its inputs as onnxruntime hands them (NumPy arrays).
        features: which inputs are feature maps (copied to the GPU with "cupy").
        **attrs: its attributes.

    Returns:
        Its outputs as a tuple of NumPy arrays (arrays a later call on this thread may reuse:
        onnxruntime copies them before the next call).
    """
    backend = get_backend()
    if backend == "cupy":
        return _on_gpu(kernel, inputs, features, **attrs)
    if backend == "numpy":
        return _on_cpu(kernel, inputs, **attrs)
    t = _timings_of(kernel, inputs, features, attrs)
    with _lock:
        use = t.pick()
    start = time.perf_counter()
    ys = (_on_gpu(kernel, inputs, features, **attrs) if use == "cupy"
          else _on_cpu(kernel, inputs, **attrs))
    seconds = time.perf_counter() - start
    with _lock:
        t.record(use, seconds)
    return ys
