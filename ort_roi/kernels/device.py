"""Where the registered ops compute: ``numpy`` (the default), ``cupy`` or ``auto``.

Set it with the environment variable ``ORT_ROI_BACKEND`` (read at import) or
:func:`set_backend`. With ``cupy`` the ops in onnxruntime copy their inputs to the GPU, run
the CUDA kernels and copy the output back; when CuPy or a GPU is missing they fall back to
NumPy with one warning. ``auto`` picks the GPU when there is one, silently.
"""

from __future__ import annotations

import os
import warnings
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
        "numpy" or "cupy" (the choice resolved: "auto" and an unavailable "cupy" give
        "numpy" without a GPU).
    """
    global _resolved
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
        return "cupy"
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


def call(kernel: Callable[..., Any], inputs: Sequence[np.ndarray], features: Sequence[int],
         **attrs: Any) -> tuple[np.ndarray, ...]:
    """Run a kernel for a registered op where the ops compute (``get_backend``).

    Args:
        kernel: the op's kernel.
        inputs: its inputs as onnxruntime hands them (NumPy arrays).
        features: which inputs are feature maps (copied to the GPU with "cupy").
        **attrs: its attributes.

    Returns:
        Its outputs as a tuple of NumPy arrays (with "numpy", arrays a later call may reuse:
        onnxruntime copies them before the next call).
    """
    if get_backend() == "cupy":
        import cupy

        inputs = [cupy.asarray(x) if i in features else x for i, x in enumerate(inputs)]
        ys = kernel(*inputs, **attrs)
        return tuple(cupy.asnumpy(y) for y in (ys if isinstance(ys, tuple) else (ys,)))
    with workspace.reuse_outputs():
        ys = kernel(*inputs, **attrs)
    return ys if isinstance(ys, tuple) else (ys,)
