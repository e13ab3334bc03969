"""CropAndResize on the GPU (CuPy): the compute steps crop_bilinear and crop_nearest with
the crop_and_resize kernel of ``roi_ops.cu``, over the geometry the host computed (the same
arrays the NumPy steps take), in float32 as TensorFlow computes, output float32 [R, CH, CW,
C] in NHWC. The kernel is built with the rest of roi_ops.cu (--fmad=false), once per process."""

from __future__ import annotations

import functools

import numpy as np

from . import staging
from .backend import BLOCKS, NONE, channel_block, source

_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_THREADS = 256
#: The geometry row of each box (int32), and its weights (float32).
GEO_ROW = ("batch", "top[CH]", "bottom[CH]", "left[CW]", "right[CW]")
WEIGHT_ROW = ("fy[CH]", "fx[CW]")


@functools.lru_cache(maxsize=None)
def _module():
    import cupy

    names = [f"crop_and_resize<{t}, {cb}>" for t in _CTYPE.values() for cb in BLOCKS]
    return cupy.RawModule(code=source(), options=("--fmad=false", "-std=c++14"),
                          name_expressions=names)


def _launch(X, geo: np.ndarray, w: np.ndarray, R: int, CH: int, CW: int, mode: int,
            ext: float):
    import cupy

    N, H, W, C = X.shape
    out = cupy.empty((R, CH, CW, C), np.float32)
    cb = channel_block(R, C, CH, CW)
    n = R * CH * CW * -(-C // cb)
    if n == 0:
        return out, NONE
    f = _module().get_function(f"crop_and_resize<{_CTYPE[np.dtype(X.dtype)]}, {cb}>")
    blocks = int(min((n + _THREADS - 1) // _THREADS, 1 << 20))  # grid-stride beyond that
    f((blocks,), (_THREADS,), (cupy.ascontiguousarray(X), staging.to_device(geo),
                               staging.to_device(w), out, np.int64(n),
                               *(np.int32(v) for v in (C, H, W, CH, CW, mode)),
                               np.float32(ext)))
    return out, NONE


def _geo(batch, rows: tuple, cols: tuple, R: int) -> np.ndarray:
    return np.concatenate([np.asarray(batch).reshape(R, 1), *rows, *cols], 1).astype(np.int32)


def crop_bilinear(X, batch, y0, y1, fy, x0, x1, fx, extrapolation_value: float):
    """Bilinear crops (see kernels/cpu/crop_and_resize.py for the arguments)."""
    R, CH = y0.shape
    CW = x0.shape[1]
    w = np.concatenate([fy, fx], 1).astype(np.float32)
    return _launch(X, _geo(batch, (y0, y1), (x0, x1), R), w, R, CH, CW, 0,
                   extrapolation_value)


def crop_nearest(X, batch, y, x, extrapolation_value: float):
    """Nearest crops: rows y, columns x (-1: off the map) in the geometry's top / left."""
    R, CH = y.shape
    CW = x.shape[1]
    w = np.zeros((R, CH + CW), np.float32)
    return _launch(X, _geo(batch, (y, y), (x, x), R), w, R, CH, CW, 1, extrapolation_value)
