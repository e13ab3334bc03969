"""CropAndResize (TensorFlow's crop_and_resize) in NumPy, in NHWC as the image comes: no
layout copy. The sample positions come from the host geometry (ops/crop_and_resize.py); here
each output pixel's neighbours are gathered as whole pixels (all channels at once, rows of
the image seen as [N*H*W, C]) straight into the output, a range of pixels per core, and
interpolated in float32 in TensorFlow's order."""

from __future__ import annotations

import numpy as np

from . import workspace
from .parallel import for_ranges

F32 = np.dtype(np.float32)
#: Elements (pixels x channels) per step of the working buffers (three of them).
CHUNK = 1 << 17


def _pixels(image: np.ndarray) -> np.ndarray:
    N, H, W, C = image.shape
    return np.ascontiguousarray(image).reshape(N * H * W, C)


def _gather(pixels: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    """out[i...] = pixels[idx[i...]] as float32 (TensorFlow casts every value it reads)."""
    if pixels.dtype == F32:
        pixels.take(idx, axis=0, out=out, mode="clip")
    else:
        np.copyto(out, pixels.take(idx, axis=0, mode="clip"), casting="unsafe")


def _for_steps(n: int, step: int, work) -> None:
    """work(s0, s1) over [0, n) on the kernel threads, in ranges of whole steps (a multiple
    of ``step`` pixels, the last range excepted): a range cut at any pixel ends in a short
    step of the same dozen NumPy calls (W9 R100 7x7: 16 steps a call instead of 10, 3-7 %
    of the kernel)."""
    for_ranges(-(-n // step), lambda a, b: work(a * step, min(n, b * step)), min_chunk=1)


def _extrapolate(out: np.ndarray, rows_on: np.ndarray, cols_on: np.ndarray, value) -> None:
    """Rows [R, CH] and columns [R, CW] off the map get the extrapolation value."""
    if not rows_on.all():
        out[~rows_on] = value
    if not cols_on.all():
        out.transpose(0, 2, 1, 3)[~cols_on] = value


def _corner_index(batch, H: int, W: int, rows: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """Pixel index (b * H + row) * W + col of every output pixel, [R * CH * CW]."""
    base = (batch[:, None] * H + rows) * W  # [R, CH]
    return (base[:, :, None] + cols[:, None, :]).reshape(-1)


def crop_bilinear(image: np.ndarray, batch: np.ndarray, y0: np.ndarray, y1: np.ndarray,
                  fy: np.ndarray, x0: np.ndarray, x1: np.ndarray, fx: np.ndarray,
                  extrapolation_value: float) -> np.ndarray:
    """Bilinear crops of checked inputs: image [N, H, W, C] float32/float64; per box its
    image ``batch`` [R]; per output row its top/bottom image rows y0, y1 [R, CH] (y0 = -1: off
    the map) and float32 weight fy; per output column x0, x1, fx [R, CW] likewise.

    Returns [R, CH, CW, C] float32: top = tl + (tr - tl) * fx, bottom = bl + (br - bl) * fx,
    top + (bottom - top) * fy (TensorFlow's order), the extrapolation value off the map.

    The output pixels, seen as rows [R*CH*CW, C], are computed a step at a time (a range of
    steps per core): the top-left neighbours gathered straight into the output, the others
    into two buffers that stay in cache, eight in-place operations. (Gathering top and bottom
    rows into one array per box, with the column weights spread over C, measured slower.)"""
    N, H, W, C = image.shape
    R, CH = y0.shape
    CW = x0.shape[1]
    out = workspace.output((R, CH, CW, C), F32)
    if out.size == 0:
        return out
    t, b = np.maximum(y0, 0), np.maximum(y1, 0)
    l, r = np.maximum(x0, 0), np.maximum(x1, 0)
    tl, tr = _corner_index(batch, H, W, t, l), _corner_index(batch, H, W, t, r)
    bl, br = _corner_index(batch, H, W, b, l), _corner_index(batch, H, W, b, r)
    dx = np.broadcast_to(fx.astype(F32)[:, None, :], (R, CH, CW)).reshape(-1, 1)
    dy = np.broadcast_to(fy.astype(F32)[:, :, None], (R, CH, CW)).reshape(-1, 1)
    pixels = _pixels(image)
    o2 = out.reshape(R * CH * CW, C)
    step = max(1, CHUNK // max(C, 1))

    def work(s0: int, s1: int) -> None:
        bb, cc = (workspace.scratch(f"crop:{n}", (step, C), F32) for n in "bc")
        for first in range(s0, s1, step):
            s = slice(first, min(s1, first + step))
            n = s.stop - first
            A, B, Cc = o2[s], bb[:n], cc[:n]
            _gather(pixels, tl[s], A)  # top = tl + (tr - tl) * fx
            _gather(pixels, tr[s], B)
            B -= A
            np.multiply(dx[s], B, out=B)  # (x * w, not w * x: the same product)
            A += B
            _gather(pixels, bl[s], B)  # bottom = bl + (br - bl) * fx
            _gather(pixels, br[s], Cc)
            Cc -= B
            np.multiply(dx[s], Cc, out=Cc)
            B += Cc
            B -= A  # top + (bottom - top) * fy
            np.multiply(dy[s], B, out=B)
            A += B

    _for_steps(R * CH * CW, step, work)
    _extrapolate(out, y0 >= 0, x0 >= 0, F32.type(extrapolation_value))
    return out


def crop_nearest(image: np.ndarray, batch: np.ndarray, y: np.ndarray, x: np.ndarray,
                 extrapolation_value: float) -> np.ndarray:
    """Nearest-neighbour crops of checked inputs: per output row its image row y [R, CH]
    (-1: off the map), per output column its image column x [R, CW].

    Returns [R, CH, CW, C] float32: the pixel there cast to float32, the extrapolation value
    off the map."""
    N, H, W, C = image.shape
    R, CH = y.shape
    CW = x.shape[1]
    out = workspace.output((R, CH, CW, C), F32)
    if out.size == 0:
        return out
    idx = _corner_index(batch, H, W, np.maximum(y, 0), np.maximum(x, 0))
    pixels = _pixels(image)
    o2 = out.reshape(R * CH * CW, C)
    step = max(1, CHUNK // max(C, 1))

    def work(s0: int, s1: int) -> None:
        for first in range(s0, s1, step):
            s = slice(first, min(s1, first + step))
            _gather(pixels, idx[s], o2[s])

    _for_steps(R * CH * CW, step, work)
    _extrapolate(out, y >= 0, x >= 0, F32.type(extrapolation_value))
    return out
