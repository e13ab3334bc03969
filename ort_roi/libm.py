"""The C library's exp and log2 over arrays, whatever NumPy dispatches to.

The frameworks ort_roi is exact to (Paddle's proposal kernels, OpenVINO's and mmdeploy's level
rules) call the C library: ``std::exp`` / ``std::log2`` in double, ``expf`` / ``log2f`` in
float. NumPy's own ``np.exp`` / ``np.log2`` pick a SIMD routine by the CPU (AVX-512 among
them), and those round differently from the C library on a few percent of arguments (float64
``np.exp`` on an AVX-512 CPU: 1 ULP on ~5 % of random inputs). So every bit-exact step takes
its transcendental from here:

- ``exp`` -- ``exp`` (float64: the C library's, each element through ``math.exp``, which
  calls it) or ``expf`` (float32: the double exponential rounded; the few results near a
  float32 rounding midpoint, where glibc's expf may round the other way, from ``expf``).
- ``floor_log2`` -- ``floor(log2(q) + add)`` in q's type, the level rules' form: NumPy's
  log2 decides where no value within its error could give another floor, the C library's
  ``log2`` / ``log2f`` decides the rest.

tests/test_libm.py holds both to the C library (ctypes) on random and edge arguments, so a
routine that rounds differently fails on any CPU; CI also runs the exact tests with NumPy's
dispatch lowered (``NPY_DISABLE_CPU_FEATURES``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math

import numpy as np

F32, F64 = np.float32, np.float64


def _load():
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        for name, t in (("expf", ctypes.c_float), ("log2f", ctypes.c_float),
                        ("exp", ctypes.c_double), ("log2", ctypes.c_double)):
            getattr(lib, name).restype = t
            getattr(lib, name).argtypes = [t]
        return lib
    except (OSError, AttributeError):  # no C library to load: the double result, rounded
        return None


#: The C library through ctypes (None where none loads: then the double result, rounded).
LIBM = _load()

#: A float32 rounded from the double exponential within this fraction of an ULP of a rounding
#: midpoint may differ from glibc's expf (error <= 0.502 ULP; measured: no difference past
#: 0.4984 over 22.5 million arguments in [-20, 4.2]): those few take the C library's.
EXPF_MIDPOINT_BAND = 0.49

#: NumPy's float64 log2 is within this many ULP of the C library's (SIMD routines: <= 4);
#: a floor that a value this far either side would not change is decided by NumPy's.
LOG2_ULPS = 8


def c_expf(x: float) -> np.float32:
    """expf(x) of the C library (glibc's is not always correctly rounded: Paddle's float32
    kernels get its result); without a loadable C library, exp in double rounded."""
    if LIBM is not None:
        return F32(LIBM.expf(float(x)))
    return F32(math.exp(float(x)))


def c_log2f(x: float) -> np.float32:
    """log2f(x) of the C library (glibc's is off by up to 0.75 ULP); without one, log2 in
    double rounded."""
    if LIBM is not None:
        return F32(LIBM.log2f(float(x)))
    return F32(math.log2(float(x)))


def _c_exp(x: float) -> float:
    try:
        return math.exp(x)
    except OverflowError:  # the C function returns inf (and sets errno)
        return math.inf


def exp(x: np.ndarray) -> np.ndarray:
    """The C library's exp (float64) or expf (float32), element by element.

    Args:
        x: a float32 or float64 array.
    Returns:
        An array of x's shape and type.
    """
    x = np.asarray(x)
    if x.dtype == F32:
        with np.errstate(over="ignore", invalid="ignore"):
            y = np.exp(x.astype(F64))  # any SIMD exp: far within float32's rounding band
            f = y.astype(F32)
            frac = np.abs(y - f) / np.abs(np.spacing(f)).astype(F64)
        near = np.flatnonzero(~(frac < EXPF_MIDPOINT_BAND))  # NaN and inf too
        if near.size:
            f.flat[near] = [c_expf(v) for v in x.flat[near].tolist()]
        return f
    if x.dtype != F64:
        raise TypeError(f"libm.exp: float32 or float64, not {x.dtype}")
    flat = x.ravel()
    with np.errstate(over="ignore"):
        out = np.exp(flat)  # non-finite arguments: inf, 0, NaN, as the C library gives
    finite = np.flatnonzero(np.isfinite(flat))
    out[finite] = np.fromiter(map(_c_exp, flat[finite].tolist()), F64, finite.size)
    return out.reshape(x.shape)


def _c_log2(x: float, t) -> float:
    if t is F32:
        return float(c_log2f(x))
    return math.log2(x)  # x > 0 and finite here: the C library's log2


def floor_log2(q: np.ndarray, add) -> np.ndarray:
    """floor(log2(q) + add) in q's type, as C computes it: ``log2f`` (float32) or ``log2``
    (float64) of the C library, the sum rounded to the type, then floored.

    Args:
        q: a float32 or float64 array; add: a number (converted to q's type).
    Returns:
        An array of q's shape and type (-inf / NaN / inf where log2 gives them).
    """
    q = np.asarray(q)
    t = q.dtype.type
    if t not in (F32, F64):
        raise TypeError(f"libm.floor_log2: float32 or float64, not {q.dtype}")
    add = t(add)
    with np.errstate(divide="ignore", invalid="ignore"):
        if t is F32:  # glibc's log2f is within 1 ULP of the double log2 rounded
            f = np.log2(q.astype(F64)).astype(F32)
            inf = F32(np.inf)
            lo = np.nextafter(np.nextafter(f, -inf), -inf)
            hi = np.nextafter(np.nextafter(f, inf), inf)
        else:
            f = np.log2(q)
            step = LOG2_ULPS * np.spacing(np.abs(f))
            lo, hi = f - step, f + step
        v = np.floor(f + add)
        sure = (np.floor(lo + add) == v) & (np.floor(hi + add) == v)
    # q <= 0, inf, NaN: log2 is -inf / NaN / inf in every implementation (IEEE's special cases)
    unsure = np.flatnonzero(~sure & (q > 0) & np.isfinite(q))
    if unsure.size:
        g = np.array([_c_log2(a, t) for a in q.flat[unsure].tolist()], t)
        v.flat[unsure] = np.floor(g + add)
    return v
