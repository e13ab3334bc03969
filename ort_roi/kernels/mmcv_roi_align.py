"""MMCVRoiAlign (mmdeploy's onnxruntime op, mmcv.ops.roi_align semantics).

The graphs mmdeploy exports for two-stage detectors carry ``mmdeploy::MMCVRoiAlign``; this
computes it without mmdeploy's C++ library. Geometry is RoIAlign's (aligned shifts by half a
pixel, adaptive grid ceil(roi size / pooled size), samples beyond one pixel off the map are 0):
- mode "avg": the mean of the samples, exactly RoIAlign (shared kernel);
- mode "max": the largest sample value, each computed as mmcv does
  (w1*v1 + w2*v2 + w3*v3 + w4*v4); a bin without samples gives mmcv's initial -10000.
"""

from __future__ import annotations

import numpy as np

from ..specs import MMCV_ROI_ALIGN
from . import _workspace
from ._cupy import on_gpu
from ._boxes import batch_from_column, check_boxes, check_features, quiet
from ._parallel import for_ranges
from .roi_align import (align, align_geometry, check_box_sizes, neighbours,
                         sample_positions)

#: mmcv's initial running maximum: what a bin without samples returns in mode "max".
EMPTY_MAX = -10000.0
#: Samples x channels gathered per step in mode "max" (bounds the scratch memory).
_STEP = 1 << 20


@quiet
def mmcv_roi_align(input: np.ndarray, rois: np.ndarray, *, output_height: int = 1,
                   output_width: int = 1, spatial_scale: float = 1.0,
                   sampling_ratio: int = 0, mode: str = "avg", aligned: int = 1) -> np.ndarray:
    """RoIAlign over rows [batch_id, x1, y1, x2, y2] of ``rois``, mean or max of the samples.

    Returns [R, C, output_height, output_width] of the input's dtype.
    """
    op = MMCV_ROI_ALIGN.name
    a = MMCV_ROI_ALIGN.resolve(dict(output_height=output_height, output_width=output_width,
                                    spatial_scale=spatial_scale, sampling_ratio=sampling_ratio,
                                    mode=mode, aligned=aligned))
    X = check_features(op, input, "input")
    rois = check_boxes(op, "rois", rois, X, 5)
    batch = batch_from_column(op, "rois", rois[:, 0], X.shape[0])
    boxes = np.ascontiguousarray(rois[:, 1:])
    check_box_sizes(op, "rois", boxes, a["spatial_scale"])
    args = (X, batch, boxes, a["output_height"], a["output_width"], a["spatial_scale"],
            a["sampling_ratio"], bool(a["aligned"]))
    return align(*args) if a["mode"] == "avg" else align_max(*args)


def _samples(start, bin_size, grid, pooled: int, size: int):
    """Per sample along one axis [pooled * grid]: off the map?, low, high, fraction (in T)."""
    y = sample_positions(start, bin_size, grid, pooled, grid).ravel()
    inside, low, high, frac = neighbours(y, size)
    return ~inside, low, high, frac


@on_gpu
def align_max(X, batch, boxes, ph: int, pw: int, spatial_scale: float, sampling_ratio: int,
              aligned: int, empty: float | None = EMPTY_MAX) -> np.ndarray:
    """Max pooling of bilinear samples, of checked inputs: per box, the samples of each bin
    from an NHWC copy.

    ``empty`` a number (mmcv, mmdeploy): a sample's value is w1*v1 + w2*v2 + w3*v3 + w4*v4
    and the bin's is a running maximum from ``empty``, replaced only by a larger value.
    ``empty`` None (onnxruntime's RoiAlign max): a sample's value is the largest of its
    weighted corners max(w1*v1, w2*v2, w3*v3, w4*v4), the bin's the largest of its samples
    (0 for a bin without samples)."""
    corners = empty is None
    N, C, H, W = X.shape
    R = boxes.shape[0]
    t = X.dtype.type
    out = _workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    (y1, bin_h, gh), (x1, bin_w, gw) = align_geometry(boxes, spatial_scale, ph, pw,
                                                      sampling_ratio, aligned)
    Xn = _workspace.nhwc(X).reshape(N * H * W, C)

    def work(start: int, stop: int) -> None:
        for r in range(start, stop):
            gy, gx = int(gh[r]), int(gw[r])
            if gy <= 0 or gx <= 0:
                out[r] = t(0 if corners else empty)
                continue
            oy, ylo, yhi, ly = _samples(y1[r], bin_h[r], gy, ph, H)
            ox, xlo, xhi, lx = _samples(x1[r], bin_w[r], gx, pw, W)
            hy, hx = t(1) - ly, t(1) - lx
            base = batch[r] * H * W
            rows = max(1, _STEP // max(1, gx * pw * C))  # y samples per step
            res = np.empty((ph * gy, pw, C), X.dtype)
            for s0 in range(0, ph * gy, rows):
                s = slice(s0, min(ph * gy, s0 + rows))
                # mmcv: samples off the map have all weights 0 and positions 0
                off = oy[s][:, None] | ox[None, :]
                w = [np.where(off, t(0), a[:, None] * b[None, :])
                     for a, b in ((hy[s], hx), (hy[s], lx), (ly[s], hx), (ly[s], lx))]
                pos = [np.where(off, 0, base + a[:, None] * W + b[None, :])
                       for a, b in ((ylo[s], xlo), (ylo[s], xhi), (yhi[s], xlo), (yhi[s], xhi))]
                val = w[0][..., None] * Xn.take(pos[0], axis=0)
                for wk, pk in zip(w[1:], pos[1:]):
                    v = wk[..., None] * Xn.take(pk, axis=0)
                    if corners:
                        np.maximum(val, v, out=val)
                    else:
                        val += v
                # max over each bin's x samples: [n_y, pw, gx, C] -> [n_y, pw, C]
                res[s] = np.fmax.reduce(val.reshape(-1, pw, gx, C), axis=2)
            # mmcv: a running maximum from -10000 that only a larger value replaces (a NaN
            # sample never does)
            best = np.fmax.reduce(res.reshape(ph, gy, pw, C), axis=1)
            if not corners:
                best = np.fmax(best, t(empty))
            out[r] = best.transpose(2, 0, 1)

    for_ranges(R, work)
    return out
