"""Bilinear ROIPooling (OpenVINO ROIPooling-1 method=bilinear): one sample per bin."""

from __future__ import annotations

import math

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


#: bilinear_pool_few: at most this many outputs (each interpolated with scalars of T).
FEW_OUT = 64


def bilinear_pool_few(X: np.ndarray, batch: list[int], boxes: np.ndarray, ph: int,
                      pw: int) -> np.ndarray | None:
    """bilinear_pool for a few outputs (a W6 call), bit for bit, with NumPy scalars of T: the
    samples and their neighbours as geometry.bilinear_pool_positions and
    bilinear_pool_neighbours make them (``_samples_few``), each sample on the map
    interpolated as bilinear_pool does (top = tl + (tr - tl) dx, bottom likewise, then
    top + (bottom - top) dy, in T), 0 off it; a new [R, C, ph, pw]. None (the caller takes
    bilinear_pool) past FEW_OUT outputs, or where an output is NaN: which NaN an operation
    of two NaNs gives (its sign, its payload) differs between NumPy's scalars and its
    arrays, and between arrays of one element and more."""
    N, C, H, W = X.shape
    R = boxes.shape[0]
    if R * C * ph * pw > FEW_OUT:
        return None
    t, b, x = X.dtype.type, boxes.ravel(), X.ravel()
    zero = t(0)
    out = []
    for r in range(R):
        ys = _samples_few(b[4 * r + 1], b[4 * r + 3], ph, H, t)
        xs = _samples_few(b[4 * r], b[4 * r + 2], pw, W, t)
        for c in range(C):
            plane = (batch[r] * C + c) * H * W
            for y in ys:
                for s in xs:
                    if y is None or s is None:
                        out.append(zero)
                        continue
                    top, bottom = plane + y[0] * W, plane + y[1] * W
                    tl, tr, bl, br = x[top + s[0]], x[top + s[1]], x[bottom + s[0]], \
                        x[bottom + s[1]]
                    upper = tl + (tr - tl) * s[2]
                    lower = bl + (br - bl) * s[2]
                    out.append(upper + (lower - upper) * y[2])
    y = np.array(out, X.dtype)
    return None if np.isnan(y.sum()) else y.reshape(R, C, ph, pw)  # (inf - inf too: None)


def _samples_few(lo, hi, pooled: int, size: int, t) -> list:
    """One box's samples along an axis (``lo``, ``hi``: its normalized edges, scalars of T):
    per sample (low, high, fraction of high in T), or None off the map; the positions as
    geometry.bilinear_pool_positions places them, in T, the neighbours as
    bilinear_pool_neighbours takes them (the fraction c - floor(c) is exact)."""
    extent = t(size - 1)
    if pooled == 1:
        cs = [(lo + hi) * t(0.5) * extent]
    else:
        step = (hi - lo) * extent / t(pooled - 1)
        start = lo * extent
        cs = [t(p) * step + start for p in range(pooled - 1)] + [hi * extent]
    out = []
    for c in cs:
        if not 0 <= c <= size - 1:  # (NaN too)
            out.append(None)
            continue
        low = math.floor(c)  # frac = c - floor(c): +0 for c = -0 (-0 - -0), as in T
        out.append((low, min(math.ceil(c), size - 1), t(float(c) - low + 0.0)))
    return out
