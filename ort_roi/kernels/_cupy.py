"""CuPy backend: the kernels on NVIDIA GPUs, from the CUDA source ``roi_ops.cu``.

Each public kernel given a CuPy array computes on the GPU and returns a CuPy array. Checks
and box geometry run on the host (boxes and counts are small and are copied there), with the
same code as the NumPy kernels; the CUDA kernels (one thread per output element, compiled
once per process with --fmad=false through cupy.RawModule) do the arithmetic of the contract
in T. RoIAlign boxes with huge adaptive grids use the NumPy path's closed-form weights
(two GEMMs on the GPU); MMCVRoiAlign mode "max" is computed on the host.
"""

from __future__ import annotations

import functools
from importlib import resources

import numpy as np

from ..specs import MMCV_ROI_ALIGN, PSROI_POOL, ROI_ALIGN, ROI_POOL, ROI_POOLING
from ._boxes import (batch_from_column, batch_from_counts, check_boxes, check_features,
                     is_cupy)

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


def _host(a) -> np.ndarray:
    import cupy

    return cupy.asnumpy(a) if is_cupy(a) else np.asarray(a)


def _i(v) -> np.int32:
    return np.int32(v)


def _to_gpu(X, batch: np.ndarray, boxes: np.ndarray):
    import cupy

    return cupy.ascontiguousarray(X), cupy.asarray(batch, cupy.int64), \
        cupy.asarray(np.ascontiguousarray(boxes))


def _max_pool(op, X, batch, boxes, ph, pw, scale):
    import cupy

    N, C, H, W = X.shape
    out = cupy.empty((boxes.shape[0], C, ph, pw), X.dtype)
    Xg, bg, boxg = _to_gpu(X, batch, boxes)
    _launch("max_pool", X.dtype, out.size, Xg, bg, boxg, out, np.int64(out.size), _i(C), _i(H),
            _i(W), _i(ph), _i(pw), X.dtype.type(scale))
    return out


def roi_pooling(X, rois, *, pooled_h: int, pooled_w: int, spatial_scale: float,
                method: str = "max"):
    import cupy

    op = ROI_POOLING.name
    a = ROI_POOLING.resolve(dict(pooled_h=pooled_h, pooled_w=pooled_w,
                                 spatial_scale=spatial_scale, method=method))
    X = check_features(op, X)
    rois = check_boxes(op, "rois", _host(rois), X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    ph, pw = a["pooled_h"], a["pooled_w"]
    if a["method"] == "max":
        return _max_pool(op, X, batch, rois[:, 1:], ph, pw, a["spatial_scale"])
    N, C, H, W = X.shape
    out = cupy.empty((rois.shape[0], C, ph, pw), X.dtype)
    Xg, bg, boxg = _to_gpu(X, batch, rois[:, 1:])
    _launch("bilinear_pool", X.dtype, out.size, Xg, bg, boxg, out, np.int64(out.size), _i(C),
            _i(H), _i(W), _i(ph), _i(pw))
    return out


def roi_pool(X, boxes, boxes_num, *, pooled_height: int = 1, pooled_width: int = 1,
             spatial_scale: float = 1.0):
    op = ROI_POOL.name
    a = ROI_POOL.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                              spatial_scale=spatial_scale))
    X = check_features(op, X)
    boxes = check_boxes(op, "boxes", _host(boxes), X, 4)
    batch = batch_from_counts(op, "boxes_num", _host(boxes_num), X.shape[0], boxes.shape[0])
    return _max_pool(op, X, batch, boxes, a["pooled_height"], a["pooled_width"],
                     a["spatial_scale"])


def psroi_pool(X, rois, rois_num, *, output_channels: int, spatial_scale: float = 1.0,
               pooled_height: int = 1, pooled_width: int = 1):
    import cupy

    from .psroi_pool import check_channels

    op = PSROI_POOL.name
    a = PSROI_POOL.resolve(dict(output_channels=output_channels, spatial_scale=spatial_scale,
                                pooled_height=pooled_height, pooled_width=pooled_width))
    oc, ph, pw = a["output_channels"], a["pooled_height"], a["pooled_width"]
    X = check_features(op, X)
    N, C, H, W = X.shape
    check_channels(op, C, oc, ph, pw)
    rois = check_boxes(op, "rois", _host(rois), X, 4)
    batch = batch_from_counts(op, "rois_num", _host(rois_num), N, rois.shape[0])
    out = cupy.empty((rois.shape[0], oc, ph, pw), X.dtype)
    Xg, bg, boxg = _to_gpu(X, batch, rois)
    _launch("psroi_pool", X.dtype, out.size, Xg, bg, boxg, out, np.int64(out.size), _i(C),
            _i(oc), _i(H), _i(W), _i(ph), _i(pw), X.dtype.type(a["spatial_scale"]))
    return out


def _align(X, batch, boxes, ph, pw, spatial_scale, sampling_ratio, aligned):
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


def roi_align(X, boxes, boxes_num, *, pooled_height: int = 1, pooled_width: int = 1,
              spatial_scale: float = 1.0, sampling_ratio: int = -1, aligned: int = 1):
    from .roi_align import check_box_sizes

    op = ROI_ALIGN.name
    a = ROI_ALIGN.resolve(dict(pooled_height=pooled_height, pooled_width=pooled_width,
                               spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                               aligned=aligned))
    X = check_features(op, X)
    boxes = check_boxes(op, "boxes", _host(boxes), X, 4)
    batch = batch_from_counts(op, "boxes_num", _host(boxes_num), X.shape[0], boxes.shape[0])
    check_box_sizes(op, "boxes", boxes, a["spatial_scale"])
    return _align(X, batch, boxes, a["pooled_height"], a["pooled_width"], a["spatial_scale"],
                  a["sampling_ratio"], bool(a["aligned"]))


def mmcv_roi_align(input, rois, *, output_height: int = 1, output_width: int = 1,
                   spatial_scale: float = 1.0, sampling_ratio: int = 0, mode: str = "avg",
                   aligned: int = 1):
    import cupy

    from .mmcv_roi_align import mmcv_roi_align as on_host
    from .roi_align import check_box_sizes

    attrs = dict(output_height=output_height, output_width=output_width,
                 spatial_scale=spatial_scale, sampling_ratio=sampling_ratio, mode=mode,
                 aligned=aligned)
    op = MMCV_ROI_ALIGN.name
    a = MMCV_ROI_ALIGN.resolve(attrs)
    if a["mode"] == "max":
        return cupy.asarray(on_host(cupy.asnumpy(input), _host(rois), **attrs))
    X = check_features(op, input, "input")
    rois = check_boxes(op, "rois", _host(rois), X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    boxes = np.ascontiguousarray(rois[:, 1:])
    check_box_sizes(op, "rois", boxes, a["spatial_scale"])
    return _align(X, batch, boxes, a["output_height"], a["output_width"], a["spatial_scale"],
                  a["sampling_ratio"], bool(a["aligned"]))


def on_gpu(kernel):
    """Decorator: a kernel given a CuPy array runs this module's GPU version instead."""
    @functools.wraps(kernel)
    def wrapper(*args, **kwargs):
        if args and is_cupy(args[0]):
            return globals()[kernel.__name__](*args, **kwargs)
        return kernel(*args, **kwargs)
    return wrapper
