"""CuPy backend: the kernels on NVIDIA GPUs, from the CUDA source ``roi_ops.cu``.

Each public kernel given X as a CuPy array computes on the GPU and returns a CuPy array.
The public kernels check their inputs on the host (boxes and counts are small and are
copied there) and then call their compute function (``max_pool``, ``bilinear_pool``,
``ps_pool``, ``align``, ``align_max``); ``on_gpu`` sends that call here when X is on the GPU.
The CUDA kernels (one thread per output element, compiled once per process with
--fmad=false through cupy.RawModule) do the arithmetic of the contract in T. RoIAlign boxes
with huge adaptive grids use the NumPy path's closed-form weights (two GEMMs on the GPU);
MMCVRoiAlign mode "max" is computed on the host.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from ._boxes import is_cupy

KERNELS = ("max_pool", "bilinear_pool", "psroi_pool", "roi_align")
_CTYPE = {np.dtype(np.float32): "float", np.dtype(np.float64): "double"}
_THREADS = 256


def source() -> str:
    """The CUDA source of the kernels."""
    return resources.files("ort_roi.kernels").joinpath("roi_ops.cu").read_text()


@functools.lru_cache(maxsize=None)
def _module():
    import cupy

    names = [f"{k}<{t}>" for k in KERNELS for t in _CTYPE.values()]
    return cupy.RawModule(code=source(), options=("--fmad=false", "-std=c++14"),
                          name_expressions=names)


def _launch(kernel: str, dtype, n: int, *args) -> None:
    if n == 0:
        return
    f = _module().get_function(f"{kernel}<{_CTYPE[np.dtype(dtype)]}>")
    blocks = int(min((n + _THREADS - 1) // _THREADS, 1 << 20))  # grid-stride beyond that
    f((blocks,), (_THREADS,), args)


def _i(v) -> np.int32:
    return np.int32(v)


def _to_gpu(X, batch: np.ndarray, boxes: np.ndarray):
    import cupy

    return cupy.ascontiguousarray(X), cupy.asarray(batch, cupy.int64), \
        cupy.asarray(np.ascontiguousarray(boxes))


def max_pool(X, batch, boxes, ph: int, pw: int, spatial_scale: float):
    import cupy

    N, C, H, W = X.shape
    out = cupy.empty((boxes.shape[0], C, ph, pw), X.dtype)
    Xg, bg, boxg = _to_gpu(X, batch, boxes)
    _launch("max_pool", X.dtype, out.size, Xg, bg, boxg, out, np.int64(out.size), _i(C), _i(H),
            _i(W), _i(ph), _i(pw), X.dtype.type(spatial_scale))
    return out


def bilinear_pool(X, batch, boxes, ph: int, pw: int):
    import cupy

    N, C, H, W = X.shape
    out = cupy.empty((boxes.shape[0], C, ph, pw), X.dtype)
    Xg, bg, boxg = _to_gpu(X, batch, boxes)
    _launch("bilinear_pool", X.dtype, out.size, Xg, bg, boxg, out, np.int64(out.size), _i(C),
            _i(H), _i(W), _i(ph), _i(pw))
    return out


def ps_pool(X, batch, rois, oc: int, ph: int, pw: int, spatial_scale: float):
    import cupy

    N, C, H, W = X.shape
    out = cupy.empty((rois.shape[0], oc, ph, pw), X.dtype)
    Xg, bg, boxg = _to_gpu(X, batch, rois)
    _launch("psroi_pool", X.dtype, out.size, Xg, bg, boxg, out, np.int64(out.size), _i(C),
            _i(oc), _i(H), _i(W), _i(ph), _i(pw), X.dtype.type(spatial_scale))
    return out


def align(X, batch, boxes, ph: int, pw: int, spatial_scale: float, sampling_ratio: int,
          aligned: bool):
    import cupy

    from .roi_align import EXPLICIT_GRID_MAX, align_geometry, axis_weights

    N, C, H, W = X.shape
    R = boxes.shape[0]
    out = cupy.empty((R, C, ph, pw), X.dtype)
    (y1, bh, gh), (x1, bw, gw) = align_geometry(boxes, spatial_scale, ph, pw, sampling_ratio,
                                                aligned)
    big = (gh > EXPLICIT_GRID_MAX) | (gw > EXPLICIT_GRID_MAX)
    grid = np.stack([np.where(big, 0, gh), np.where(big, 0, gw)], 1).astype(np.int64)
    geom = np.stack([y1, bh, x1, bw], 1).astype(X.dtype)
    Xg = cupy.ascontiguousarray(X)
    _launch("roi_align", X.dtype, out.size, Xg, cupy.asarray(batch, cupy.int64),
            cupy.asarray(geom), cupy.asarray(grid), out, np.int64(out.size), _i(C), _i(H),
            _i(W), _i(ph), _i(pw))
    for r in np.flatnonzero(big):  # closed-form weights: O(pooled * size), not O(samples)
        s = slice(r, r + 1)
        Ay = cupy.asarray(axis_weights(y1[s], bh[s], gh[s], ph, H, X.dtype)[0])
        Ax = cupy.asarray(axis_weights(x1[s], bw[s], gw[s], pw, W, X.dtype)[0])
        out[r] = cupy.matmul(cupy.matmul(Ay, Xg[batch[r]]), Ax.T)
    return out


def align_max(X, batch, boxes, ph: int, pw: int, spatial_scale: float, sampling_ratio: int,
              aligned: bool):
    """MMCVRoiAlign mode "max": computed on the host."""
    import cupy

    from .mmcv_roi_align import align_max as on_host

    return cupy.asarray(on_host(cupy.asnumpy(X), batch, boxes, ph, pw, spatial_scale,
                                sampling_ratio, aligned))


def on_gpu(kernel):
    """Decorator: a compute function given X as a CuPy array runs this module's GPU version."""
    @functools.wraps(kernel)
    def wrapper(*args, **kwargs):
        if args and is_cupy(args[0]):
            return globals()[kernel.__name__](*args, **kwargs)
        return kernel(*args, **kwargs)
    return wrapper
