"""torchvision's ps_roi_align (TorchvisionPSRoIAlign) of checked inputs.

Output (r, c, p, q) is the mean of the bilinear samples of input channel (c*PH + p)*PW + q
over bin (p, q). The mean is separable (geometry.axis_weights: Ay[p] over rows, Ax[q] over
columns), and channel group (p, q) of X is read only inside bin (p, q): so each box is its
crop of an NHWC copy of X viewed as [h, w, oc, PH, PW], weighted by Ay[p, y] * Ax[q, x] and
summed over y and x, for every (c, p, q) at once. The count torchvision divides by is gh * gw
as C ints (geometry.torchvision_sample_grid): a bin without samples gives NaN (0 / 0), an
inverted box's negative grids give 0.
"""

from __future__ import annotations

import numpy as np

from ...geometry import (ALIGNED, align_bins, axis_weights, box_extent,
                         torchvision_sample_grid)
from . import workspace
from .parallel import for_ranges


def ps_align(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int, pw: int,
             spatial_scale: float, sampling_ratio: int) -> np.ndarray:
    N, C, H, W = X.shape
    R, oc = boxes.shape[0], C // (ph * pw)
    out = np.zeros((R, oc, ph, pw), X.dtype)
    if R == 0 or oc == 0:
        return out
    start, bin_size = align_bins(boxes, spatial_scale, ALIGNED, ph, pw)
    grid, count = torchvision_sample_grid(box_extent(boxes, spatial_scale, ALIGNED), (ph, pw),
                                          sampling_ratio)
    samples = np.maximum(grid, 0)  # a negative grid (an inverted box): no samples
    Xn = workspace.nhwc(X).reshape(N, H, W, oc, ph, pw)
    chunk = max(1, (1 << 20) // (ph * H + pw * W))

    def work(a: int, b: int) -> None:
        for c0 in range(a, b, chunk):
            c1 = min(b, c0 + chunk)
            Ay = axis_weights(start[c0:c1, 0], bin_size[c0:c1, 0], samples[c0:c1, 0], ph, H,
                              X.dtype)
            Ax = axis_weights(start[c0:c1, 1], bin_size[c0:c1, 1], samples[c0:c1, 1], pw, W,
                              X.dtype)
            for i in range(c1 - c0):
                rows, cols = np.flatnonzero(Ay[i].any(axis=0)), np.flatnonzero(Ax[i].any(axis=0))
                if rows.size == 0 or cols.size == 0:
                    continue
                h0, h1, w0, w1 = rows[0], rows[-1] + 1, cols[0], cols[-1] + 1
                crop = Xn[batch[c0 + i], h0:h1, w0:w1]  # [h, w, oc, ph, pw]
                # sum over y then x of Ay[p, y] * Ax[q, x] * crop[y, x, c, p, q]
                v = np.einsum("py,yxcpq->xcpq", Ay[i, :, h0:h1], crop)
                out[c0 + i] = np.einsum("qx,xcpq->cpq", Ax[i, :, w0:w1], v)

    for_ranges(R, work)
    t = X.dtype.type
    # axis_weights divided each axis by max(grid, 1): torchvision divides by gh * gw itself
    bad = (grid <= 0).any(axis=1)
    out[bad] = np.where(count[bad] == 0, t(np.nan), t(0))[:, None, None, None]
    return out
