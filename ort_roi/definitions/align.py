"""The RoIAlign family, one bin at a time (docs/semantics.md): RoIAlign (Paddle roi_align;
detectron2 / torchvision), MMCVRoiAlign (mmcv), ONNX RoiAlign as ort_roi computes it, and
Caffe2's RoIAlign (detectron2's export)."""

from __future__ import annotations

import numpy as np

from ..geometry import (MMCV_EMPTY_MAX, BoxGeometry, align_bins, max_sample_positions,
                        onnx_geometry, roi_align_geometry, sample_positions, sampling_grid)
from .common import bilinear, images_of, weighted_corners


def align_box(X: np.ndarray, box: np.ndarray, geometry: BoxGeometry, spatial_scale, ph: int,
              pw: int, sampling_ratio: int, reduce: str = "mean", empty=0.0) -> np.ndarray:
    """One box [x1, y1, x2, y2] of X [C, H, W]: its bins (geometry.align_bins: corners
    scaled and shifted, the size at least the geometry's least), each bin's grid
    (geometry.sampling_grid: sampling_ratio or ceil(bin size)), each bin's gh x gw samples
    at y = (start + p*bin) + (iy + 0.5)*bin/gh (x likewise), each sample bilinear (0 beyond
    one pixel off the map). ``reduce``: "mean" (the sum in T over max(gh*gw, 1)), "max" (a
    running maximum from ``empty``, mmcv) or "onnx_max" (onnxruntime: the largest weighted
    corner of any sample, 0 without samples). A max reads, of the samples with the same taps
    (a huge box's samples off the map, or clamped to its edge), one:
    geometry.max_sample_positions; the same value."""
    t = X.dtype.type
    C, H, W = X.shape
    bins = align_bins(box[None], spatial_scale, geometry, ph, pw)
    (y0, x0), (bh, bw) = bins.start[0], bins.size[0]
    gh, gw = sampling_grid(bins.size, sampling_ratio)[0]
    if reduce != "mean" and gh > 0 and gw > 0:
        ys = max_sample_positions(y0, bh, gh, ph, H)  # [ph, <= gh]
        xs = max_sample_positions(x0, bw, gw, pw, W)  # [pw, <= gw]
    else:
        ys = sample_positions(y0, bh, gh, ph, int(max(gh, 0)))  # [ph, gh]
        xs = sample_positions(x0, bw, gw, pw, int(max(gw, 0)))  # [pw, gw]
    out = np.zeros((X.shape[0], ph, pw), X.dtype)
    for p in range(ph):
        for q in range(pw):
            y, x = ys[p][:, None], xs[q][None, :]  # the bin's gh x gw samples
            if reduce == "mean":  # the sum over max(gh * gw, 1), in T
                total = bilinear(X, y, x).reshape(X.shape[0], -1).sum(axis=1, dtype=X.dtype)
                out[:, p, q] = total / t(max(gh * gw, 1))
            elif reduce == "max":  # a running maximum from ``empty`` (NaN never replaces it)
                values = bilinear(X, y, x).reshape(X.shape[0], -1)
                out[:, p, q] = np.fmax(np.fmax.reduce(values, axis=1, initial=-np.inf), t(empty))
            elif gh > 0 and gw > 0:  # onnx_max: the largest weighted corner of any sample
                corners = weighted_corners(X, y, x).reshape(X.shape[0], -1)
                best = corners[:, 0]
                for v in corners.T[1:]:
                    best = np.where(best < v, v, best)
                out[:, p, q] = best
    return out


def roi_align(X, boxes, boxes_num, *, pooled_height=1, pooled_width=1, spatial_scale=1.0,
              sampling_ratio=-1, aligned=1):
    """RoIAlign's readable definition, a box at a time (the reference, not the kernel).

    The kernel that computes it fast is ``ort_roi.ops.roi_align``; the ONNX node,
    ``ort_roi.builders.roi_align``. RoIAlign (Paddle roi_align; detectron2 / torchvision):
    the mean of each bin's bilinear samples; aligned=1 shifts the scaled box by -0.5,
    aligned=0 keeps it at least 1 x 1."""
    out = np.zeros((boxes.shape[0], X.shape[1], pooled_height, pooled_width), X.dtype)
    g = roi_align_geometry(aligned)
    for r, b in enumerate(images_of(boxes_num)):
        out[r] = align_box(X[b], boxes[r], g, spatial_scale, pooled_height, pooled_width,
                           sampling_ratio)
    return out


def _rows(X, rois, geometry, spatial_scale, ph, pw, sampling_ratio, reduce="mean", empty=0.0):
    out = np.zeros((rois.shape[0], X.shape[1], ph, pw), X.dtype)
    for r in range(rois.shape[0]):
        out[r] = align_box(X[int(rois[r, 0])], rois[r, 1:], geometry, spatial_scale, ph, pw,
                           sampling_ratio, reduce, empty)
    return out


def mmcv_roi_align(input, rois, *, output_height=1, output_width=1, spatial_scale=1.0,
                   sampling_ratio=0, mode="avg", aligned=1):
    """MMCVRoiAlign's readable definition, a box at a time (the kernel: ops.mmcv_roi_align).

    Over rows [batch, x1, y1, x2, y2]: "avg" is RoIAlign; "max" the largest
    sample w1*v1 + w2*v2 + w3*v3 + w4*v4 of each bin, from mmcv's initial -10000."""
    return _rows(input, rois, roi_align_geometry(aligned), spatial_scale, output_height,
                 output_width, sampling_ratio, "mean" if mode == "avg" else "max",
                 MMCV_EMPTY_MAX)


def onnx_roi_align(X, rois, batch_indices, *, coordinate_transformation_mode="half_pixel",
                   mode="avg", output_height=1, output_width=1, sampling_ratio=0,
                   spatial_scale=1.0):
    """ONNX RoiAlign's readable definition, a box at a time (the kernel: ops.onnx_roi_align).

    half_pixel is RoIAlign aligned=1, output_half_pixel aligned=0; sampling_ratio 0
    adaptive; "max" the largest sample (mmcv's), "onnx_max" onnxruntime's largest weighted
    corner."""
    rows = np.concatenate([np.asarray(batch_indices, rois.dtype)[:, None], rois], 1)
    reduce = {"avg": "mean", "max": "max", "onnx_max": "onnx_max"}[mode]
    return _rows(X, rows, onnx_geometry(coordinate_transformation_mode), spatial_scale,
                 output_height, output_width, sampling_ratio, reduce, MMCV_EMPTY_MAX)


def caffe2_roi_align(X, rois, *, order="NCHW", spatial_scale=1.0, pooled_h=1, pooled_w=1,
                     sampling_ratio=-1, aligned=0):
    """Caffe2 RoIAlign's readable definition, a box at a time (kernel: ops.caffe2_roi_align).

    Caffe2 RoIAlign (detectron2's export): RoIAlign over rows [batch, x1, y1, x2, y2], or
    [x1, y1, x2, y2] when X holds one image."""
    if rois.shape[1] == 4:
        rois = np.concatenate([np.zeros((rois.shape[0], 1), rois.dtype), rois], 1)
    return _rows(X, rois, roi_align_geometry(aligned), spatial_scale, pooled_h, pooled_w,
                 sampling_ratio)
