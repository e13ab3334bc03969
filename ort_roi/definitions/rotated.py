"""Rotated RoIAlign (mmcv roi_align_rotated), one bin at a time (docs/semantics.md)."""

from __future__ import annotations

import numpy as np

from ..geometry import rotated_rows, sample_positions
from .common import bilinear


def mmcv_roi_align_rotated(input, rois, *, output_height=1, output_width=1, spatial_scale=1.0,
                           sampling_ratio=0, aligned=1, clockwise=0):
    """MMCVRoIAlignRotated over rows [batch, cx, cy, w, h, theta]: RoIAlign's samples laid
    out about the box's centre from (-h/2, -w/2) (geometry.rotated_rows), rotated by theta
    (-theta when clockwise): y = yy*cos - xx*sin + cy, x = yy*sin + xx*cos + cx; the mean of
    the bilinear samples over max(gh*gw, 1)."""
    X, t = input, input.dtype.type
    PH, PW = output_height, output_width
    out = np.zeros((rois.shape[0], X.shape[1], PH, PW), X.dtype)
    for r in range(rois.shape[0]):
        row = rotated_rows(rois[r:r + 1], rois[r:r + 1, 0], spatial_scale, PH, PW,
                           sampling_ratio, bool(aligned), bool(clockwise))
        b, cy, cx, sh, sw, bh, bw, cos, sin, gh, gw = row[0]
        gh, gw = int(gh), int(gw)
        yys = sample_positions(sh, bh, gh, PH, gh)  # [PH, gh]
        xxs = sample_positions(sw, bw, gw, PW, gw)  # [PW, gw]
        for p in range(PH):
            for q in range(PW):
                yy, xx = yys[p][:, None], xxs[q][None, :]  # the bin's samples, about the centre
                y, x = yy * cos - xx * sin + cy, yy * sin + xx * cos + cx  # rotated
                total = bilinear(X[int(b)], y, x).reshape(X.shape[1], -1).sum(axis=1,
                                                                               dtype=X.dtype)
                out[r, :, p, q] = total / t(max(gh * gw, 1))
    return out
