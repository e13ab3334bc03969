"""Bilinear ROIPooling (OpenVINO ROIPooling-1 method=bilinear): one sample per bin."""

from __future__ import annotations

import numpy as np

from ...geometry import bilinear_pool_neighbours, bilinear_pool_positions
from . import workspace
from .parallel import for_ranges

#: Elements (channels x samples) per step of the working buffers.
CHUNK = 1 << 17


def bilinear_pool(X: np.ndarray, batch: np.ndarray, boxes: np.ndarray, ph: int,
                  pw: int) -> np.ndarray:
    """Bilinear ROIPooling of checked inputs (normalized boxes [R, 4]).

    Only samples on the map are computed (the rest are 0): their four neighbours are
    gathered as whole pixels (all channels at once) from an NHWC copy of X, a range of
    samples per core, interpolated as OpenVINO does (top, bottom, then between them) and
    scattered into the output.
    """
    N, C, H, W = X.shape
    R, P = boxes.shape[0], ph * pw
    out = workspace.output((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    vy, y0, y1, fy = bilinear_pool_neighbours(
        bilinear_pool_positions(boxes[:, 1], boxes[:, 3], ph, H), H)
    vx, x0, x1, fx = bilinear_pool_neighbours(
        bilinear_pool_positions(boxes[:, 0], boxes[:, 2], pw, W), W)
    on_map = np.flatnonzero((vy[:, :, None] & vx[:, None, :]).reshape(R * P))
    r, p = np.divmod(on_map, P)
    iy, ix = np.divmod(p, pw)
    top, bottom = (batch[r] * H + y0[r, iy]) * W, (batch[r] * H + y1[r, iy]) * W
    left, right = x0[r, ix], x1[r, ix]
    corners = (top + left, top + right, bottom + left, bottom + right)  # pixels
    dx, dy = fx[r, ix][:, None], fy[r, iy][:, None]
    pixels = workspace.nhwc(X).reshape(N * H * W, C)
    o3 = out.reshape(R, C, P)
    if on_map.size < R * P:
        for_ranges(R, lambda r0, r1: o3[r0:r1].fill(0))
    step = max(1, CHUNK // C)

    def work(s0: int, s1: int) -> None:
        a, b, c = (workspace.scratch(f"bilinear:{n}", (step, C), X.dtype) for n in "abc")
        for first in range(s0, s1, step):
            s = slice(first, min(s1, first + step))
            A, B, Cc = a[:s.stop - first], b[:s.stop - first], c[:s.stop - first]
            pixels.take(corners[0][s], axis=0, out=A, mode="clip")  # top = tl + (tr - tl) dx
            pixels.take(corners[1][s], axis=0, out=B, mode="clip")
            B -= A
            B *= dx[s]
            A += B
            pixels.take(corners[2][s], axis=0, out=B, mode="clip")  # bottom = bl + (br - bl) dx
            pixels.take(corners[3][s], axis=0, out=Cc, mode="clip")
            Cc -= B
            Cc *= dx[s]
            B += Cc
            B -= A  # top + (bottom - top) dy
            B *= dy[s]
            A += B
            o3[r[s], :, p[s]] = A

    for_ranges(on_map.size, work, min_chunk=step)
    return out
