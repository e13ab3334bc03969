"""torchvision: its position-sensitive ops and the RoI stage of its detection models, one bin
at a time, as torchvision's C++ kernels compute them (docs/semantics.md)."""

from __future__ import annotations

import numpy as np

from ..geometry import (ALIGNED, align_bins, box_extent, roi_align_geometry, sample_positions,
                        torchvision_psroi_bins, torchvision_sample_grid)
from ..resize import cubic_resize_taps, linear_resize_taps
from .align import align_box
from .common import bilinear, ps_average


def torchvision_ps_roi_align(X, rois, *, pooled_height=1, pooled_width=1, spatial_scale=1.0,
                             sampling_ratio=-1):
    """ps_roi_align: the box's corners scaled and shifted by -0.5 (geometry.ALIGNED); bin
    (ph, pw) samples as RoIAlign places them, gh x gw of them (sampling_ratio, or C's int of
    ceil(bin size): negative for an inverted box); output (c, ph, pw) is the sum, in T, of
    the bilinear samples of input channel (c*PH + ph)*PW + pw divided by gh * gw (0 / 0 is
    NaN, as torchvision's kernel)."""
    t = X.dtype.type
    PH, PW = pooled_height, pooled_width
    oc = X.shape[1] // (PH * PW)
    out = np.zeros((rois.shape[0], oc, PH, PW), X.dtype)
    for r in range(rois.shape[0]):
        b, box = int(rois[r, 0]), rois[r, 1:]
        bins = align_bins(box[None], spatial_scale, ALIGNED, PH, PW)
        grid, count = torchvision_sample_grid(box_extent(box[None], spatial_scale, ALIGNED),
                                              (PH, PW), sampling_ratio)
        (gh, gw), count = grid[0].tolist(), int(count[0])
        (y0, x0), (bh, bw) = bins.start[0], bins.size[0]
        ys = sample_positions(y0, bh, max(gh, 0), PH, max(gh, 0))
        xs = sample_positions(x0, bw, max(gw, 0), PW, max(gw, 0))
        for p in range(PH):
            for q in range(PW):
                channels = (np.arange(oc) * PH + p) * PW + q
                values = bilinear(X[b, channels], ys[p][:, None], xs[q][None, :])
                total = values.reshape(oc, -1).sum(axis=1, dtype=X.dtype)
                with np.errstate(all="ignore"):
                    out[r, :, p, q] = total / t(count)
    return out


def torchvision_ps_roi_pool(X, rois, *, pooled_height=1, pooled_width=1, spatial_scale=1.0):
    """ps_roi_pool: bins from round(x * scale), the box at least 1 x 1, bin p over
    [floor(p * bin), ceil((p + 1) * bin)) from the start, clipped to [0, H - 1]
    (geometry.torchvision_psroi_bins); output (c, ph, pw) the mean of input channel
    (c*PH + ph)*PW + pw over it, summed row by row in T; 0 if empty."""
    H, W = X.shape[2:]
    PH, PW = pooled_height, pooled_width
    oc = X.shape[1] // (PH * PW)
    out = np.zeros((rois.shape[0], oc, PH, PW), X.dtype)
    for r in range(rois.shape[0]):
        b = int(rois[r, 0])
        with np.errstate(all="ignore"):
            (hlo, hhi), (wlo, whi) = torchvision_psroi_bins(rois[r:r + 1, 1:], spatial_scale,
                                                            PH, PW, H, W)
        ps_average(X[b], (hlo[0], hhi[0]), (wlo[0], whi[0]), out[r])
    return out


def pyramid_roi_align(rois, levels, *feats, output_height=1, output_width=1, sampling_ratio=0,
                      aligned=0, spatial_scales=()):
    """PyramidRoIAlign: box r [batch, x1, y1, x2, y2] pooled with RoIAlign (aligned 0:
    torchvision's MultiScaleRoIAlign) from feats[levels[r]] at spatial_scales[levels[r]]
    (float32, as graph attributes); a level outside 0 .. L-1 gives 0."""
    out = np.zeros((rois.shape[0], feats[0].shape[1], output_height, output_width),
                   feats[0].dtype)
    for r in range(rois.shape[0]):
        level = int(levels[r])
        if 0 <= level < len(feats):
            out[r] = align_box(feats[level][int(rois[r, 0])], rois[r, 1:],
                               roi_align_geometry(aligned),
                               float(np.float32(spatial_scales[level])), output_height,
                               output_width, sampling_ratio)
    return out


def pyramid_roi_align_levels(rois, levels, *feats, **attrs):
    """``pyramid_roi_align`` with the scales as attributes spatial_scale_0 .. _{L-1}."""
    scales = [attrs.pop(f"spatial_scale_{i}") for i in range(len(feats))]
    return pyramid_roi_align(rois, levels, *feats, spatial_scales=scales, **attrs)


def heatmaps_to_keypoints(maps, rois):
    """HeatmapsToKeypoints: box r [x1, y1, x2, y2], w = max(x2 - x1, 1), h likewise; its
    maps resized to ceil(h) x ceil(w) as onnxruntime's cubic Resize computes each output
    pixel (4 rows, each the sum of 4 taps times the width weights, then the sum of the rows
    times the height weights, in that order, in T); keypoint k at the first maximum of map
    k: x = (x_int + 0.5) * (w / ceil(w)) + x1, y likewise, 1; its score the maximum."""
    t = maps.dtype.type
    R, K, H, W = maps.shape
    keypoints = np.ones((R, K, 3), maps.dtype)
    scores = np.zeros((R, K), maps.dtype)
    for r in range(R):
        x1, y1, x2, y2 = rois[r]
        w, h = max(x2 - x1, t(1)), max(y2 - y1, t(1))
        wc, hc = int(np.ceil(w)), int(np.ceil(h))
        (xt, xw), (yt, yw) = cubic_resize_taps(wc, W), cubic_resize_taps(hc, H)
        roi_map = np.zeros((K, hc, wc), maps.dtype)
        for y in range(hc):
            total = t(0)
            for i in range(4):
                row = t(0)
                for j in range(4):
                    row = row + maps[r][:, yt[i][y], xt[j]] * xw[j].astype(t)
                total = total + row * t(yw[i][y])
            roi_map[:, y, :] = total
        for k in range(K):
            at = int(np.argmax(roi_map[k]))
            y_int, x_int = divmod(at, wc)
            keypoints[r, k, 0] = (t(0.5) + t(x_int)) * (w / t(wc)) + x1
            keypoints[r, k, 1] = (t(0.5) + t(y_int)) * (h / t(hc)) + y1
            scores[r, k] = roi_map[k, y_int, x_int]
    return keypoints, scores


def paste_masks(masks, boxes, image_size):
    """PasteMasks: an image of image_size = (height, width); box r [x1, y1, x2, y2] (integers,
    inclusive), w = max(x2 - x1 + 1, 1), h
    likewise; channel 0 of its mask resized to h x w as onnxruntime's linear Resize computes
    each pixel (dx2*dy2*X11 + dx1*dy2*X21 + dx2*dy1*X12 + dx1*dy1*X22, the weights' products
    in float32, the sum in T, in that order); then, as torchvision's paste_mask_in_image, the
    image rows max(y1, 0) .. min(y2 + 1, height) and columns max(x1, 0) .. min(x2 + 1, width)
    take the resized mask's rows and columns there (none when either range is empty)."""
    t = masks.dtype.type
    height, width = (int(v) for v in image_size)
    out = np.zeros((masks.shape[0], height, width), masks.dtype)
    for r in range(masks.shape[0]):
        x1, y1, x2, y2 = (int(v) for v in boxes[r])
        w, h = max(x2 - x1 + 1, 1), max(y2 - y1 + 1, 1)
        m = masks[r, 0]
        iy1, iy2, dy1, dy2 = linear_resize_taps(h, m.shape[0], np.arange(h))
        ix1, ix2, dx1, dx2 = linear_resize_taps(w, m.shape[1], np.arange(w))
        resized = np.zeros((h, w), masks.dtype)
        for y in range(h):
            for x in range(w):
                resized[y, x] = (t(dx2[x] * dy2[y]) * m[iy1[y], ix1[x]]
                                 + t(dx1[x] * dy2[y]) * m[iy1[y], ix2[x]]
                                 + t(dx2[x] * dy1[y]) * m[iy2[y], ix1[x]]
                                 + t(dx1[x] * dy1[y]) * m[iy2[y], ix2[x]])
        top, bottom = max(y1, 0), min(y2 + 1, height)
        left, right = max(x1, 0), min(x2 + 1, width)
        if bottom > top and right > left:
            out[r, top:bottom, left:right] = resized[top - y1:bottom - y1, left - x1:right - x1]
    return out
