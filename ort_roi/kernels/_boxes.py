"""Shared helpers of the kernels: input checks, rounding and the integer bins of max pooling.

Every check raises RoiOpError naming the op, the input and the offending value.
"""

from __future__ import annotations

import functools

import numpy as np

from ..errors import RoiOpError
from ..specs import TYPES


def is_cupy(a) -> bool:
    """True for a CuPy array (checked without importing CuPy)."""
    return type(a).__module__.split(".")[0] == "cupy"


def host(a):
    """A CuPy array copied to the host; anything else as it is (boxes and counts are small:
    their checks and geometry run on the host for both backends)."""
    if is_cupy(a):
        import cupy

        return cupy.asnumpy(a)
    return a


def quiet(kernel):
    """Run a kernel with IEEE behaviour: a huge box may overflow T on purpose (inf bin
    sizes follow the references' arithmetic), so no warnings and no FloatingPointError."""
    @functools.wraps(kernel)
    def wrapper(*args, **kwargs):
        with np.errstate(all="ignore"):
            return kernel(*args, **kwargs)
    return wrapper


def round_half_away(x: np.ndarray) -> np.ndarray:
    """C's round(): halves go away from zero (NumPy's np.round goes to even). Exact in x's type."""
    t = np.trunc(x)
    frac = x - t  # exact: |x - trunc(x)| < 1 has no rounding error
    return t + np.where(np.abs(frac) >= 0.5, np.sign(x), 0).astype(x.dtype)


def _show(a: np.ndarray, limit: int = 6) -> str:
    flat = np.asarray(a).ravel()
    s = ", ".join(repr(v.item()) for v in flat[:limit])
    return f"[{s}{', ...' if flat.size > limit else ''}]"


def check_features(op: str, X, name: str = "X") -> np.ndarray:
    """X must be a [N, C, H, W] float32/float64 array with H, W >= 1."""
    X = _as_array(op, name, X)
    if X.dtype not in TYPES["T"]:
        raise RoiOpError(op, f"input '{name}'", f"must be float32 or float64, got {X.dtype}")
    if X.ndim != 4:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have rank 4 [N, C, H, W], got shape {list(X.shape)}")
    if X.shape[2] < 1 or X.shape[3] < 1:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have H >= 1 and W >= 1, got shape {list(X.shape)}")
    return X


def check_boxes(op: str, name: str, boxes, X: np.ndarray, cols: int) -> np.ndarray:
    """boxes must be [R, cols] of X's dtype, all finite. Returns them on the host."""
    boxes = _as_array(op, name, host(boxes))
    if boxes.ndim != 2 or boxes.shape[1] != cols:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have shape [R, {cols}], got {list(boxes.shape)}")
    if boxes.dtype != X.dtype:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have the dtype of X ({X.dtype}), got {boxes.dtype}")
    finite = np.isfinite(boxes)
    if not finite.all():
        r, c = np.argwhere(~finite)[0]
        raise RoiOpError(op, f"input '{name}'",
                         f"row {r} has a non-finite coordinate {boxes[r, c].item()!r}: "
                         f"{_show(boxes[r])}")
    return boxes


def batch_from_column(op: str, name: str, col: np.ndarray, n: int) -> np.ndarray:
    """Batch indices given as the first column of rois: integer values in [0, N)."""
    b = col.astype(np.intp)  # a non-integer or huge value does not survive the round trip
    bad = (b != col) | (b.view(np.uintp) >= n)  # negatives wrap to huge unsigned values
    if bad.any():
        r = int(np.flatnonzero(bad)[0])
        v = col[r].item()
        why = "is not an integer" if v != np.floor(v) else f"is out of range [0, {n})"
        raise RoiOpError(op, f"input '{name}'", f"row {r} has batch index {v!r}, which {why}")
    return b


def _int_vector(op: str, name: str, a, n: int, shape: str) -> np.ndarray:
    """An int32/int64 input of shape [n] (``shape``: how the message names it)."""
    a = _as_array(op, name, host(a))
    if a.dtype not in TYPES["I"]:
        raise RoiOpError(op, f"input '{name}'", f"must be int32 or int64, got {a.dtype}")
    if a.ndim != 1 or a.shape[0] != n:
        raise RoiOpError(op, f"input '{name}'",
                         f"must have shape {shape.format(n)}, got {list(a.shape)}")
    return a


def batch_from_indices(op: str, name: str, indices, n: int, r: int) -> np.ndarray:
    """Batch indices given as their own input: int32/int64 [R], each in [0, N)."""
    idx = _int_vector(op, name, indices, r, "[R] = [{}] (one index per box)")
    bad = (idx < 0) | (idx >= n)
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise RoiOpError(op, f"input '{name}'",
                         f"box {i} has batch index {idx[i].item()}, out of range [0, {n})")
    return idx.astype(np.intp)


def batch_from_counts(op: str, name: str, counts, n: int, r: int) -> np.ndarray:
    """Batch indices from per-image counts: int32/int64 [N], non-negative, summing to R."""
    counts = _int_vector(op, name, counts, n, "[N] = [{}] (one count per image of X)")
    values = counts.tolist()  # N is small: Python ints, no overflow
    if min(values, default=0) < 0:
        i = next(i for i, v in enumerate(values) if v < 0)
        raise RoiOpError(op, f"input '{name}'", f"count {i} is negative: {values[i]}")
    if sum(values) != r:
        raise RoiOpError(op, f"input '{name}'",
                         f"must sum to R = {r} (the rows of the boxes), got {_show(counts)}")
    if n == 1:
        return np.zeros(r, np.intp)
    return np.repeat(np.arange(n, dtype=np.intp), counts.astype(np.intp))


def _as_array(op: str, name: str, a) -> np.ndarray:
    if is_cupy(a):  # X on the GPU: its metadata is checked, its data stays there
        return a
    if not isinstance(a, np.ndarray):
        try:
            a = np.asarray(a)
        except Exception as e:  # noqa: BLE001 - any conversion failure is a bad input
            raise RoiOpError(op, f"input '{name}'", f"is not an array: {e}") from None
    return a


def max_pool_bins(start: np.ndarray, end: np.ndarray, pooled, size):
    """Integer bins of max pooling, for every box and axis at once.

    start/end [R, A] are the already scaled and rounded box edges (in T) along A axes with
    ``pooled`` bins over ``size`` pixels each (ints or length-A sequences). Returns int
    arrays lo, hi [R, A, max(pooled)]: bin p covers [lo, hi), clipped to [0, size]; entries
    past an axis's own pooled count are meaningless. All arithmetic before the clip is done
    in T, as the reference kernels do.
    """
    t = start.dtype.type
    pooled = np.asarray(pooled, dtype=start.dtype)
    length = np.maximum(end - start + t(1), t(1))
    bin_size = (length / pooled)[:, :, None]
    p = np.arange(int(pooled.max()), dtype=start.dtype)
    lo = np.floor(p * bin_size) + start[:, :, None]
    hi = np.ceil((p + t(1)) * bin_size) + start[:, :, None]
    size = np.asarray(size)[..., None]
    return clip_edges(lo, size), clip_edges(hi, size)


def clip_edges(edges: np.ndarray, size: int) -> np.ndarray:
    """Bin edges in T clipped to [0, size], as intp.

    An edge is NaN only when a box so large that its size overflows T meets 0 * inf; the
    C++ references cast it to INT_MIN (x86), which clips to 0: so does this.
    """
    return np.minimum(np.fmax(edges, 0), size).astype(np.intp)  # fmax(NaN, 0) = 0
