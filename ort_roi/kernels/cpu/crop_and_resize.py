"""CropAndResize (TensorFlow's crop_and_resize) in NumPy, in NHWC as the image comes: no
layout copy. The sample positions and their neighbours come from the host geometry
(geometry/crop_and_resize.py); here each output pixel's neighbours are gathered as whole
pixels (all channels at once, rows of the image seen as [N*H*W, C]) straight into the output,
a range of pixels per core, and interpolated in float32 in TensorFlow's order."""

from __future__ import annotations

import numpy as np

from . import workspace
from .parallel import for_ranges

F32 = np.dtype(np.float32)
#: Elements (pixels x channels) per step of the working buffers (three of them).
CHUNK = 1 << 17
#: The fewest pixels per step of crop_nearest, whose only scratch is a step's pixel indices
#: (16 KiB): at C = 256 a step of CHUNK elements (512 pixels) gathers in a few microseconds,
#: about what making its indices and views costs (W9 R100 7x7: 0.24 ms against 0.20).
NEAREST_STEP = 1 << 11


def _pixels(image: np.ndarray) -> np.ndarray:
    N, H, W, C = image.shape
    return np.ascontiguousarray(image).reshape(N * H * W, C)


def _gather(pixels: np.ndarray, idx: np.ndarray, out: np.ndarray) -> None:
    """out[i...] = pixels[idx[i...]] as float32 (TensorFlow casts every value it reads)."""
    if pixels.dtype == F32:
        pixels.take(idx, axis=0, out=out, mode="clip")
    else:
        np.copyto(out, pixels.take(idx, axis=0, mode="clip"), casting="unsafe")


def _for_blocks(R: int, CH: int, CW: int, step: int, work) -> None:
    """work(blocks) on the kernel threads, over the output [R, CH, CW] (pixels) cut into
    blocks (r, y, c), slices of boxes, rows and columns: whole boxes, rows of one box, or a
    piece of one row, of at most 2 x ``step`` pixels (whole boxes where a box fits in 2
    steps, a step's worth of them rounded; else whole rows where a row fits in a step). A
    block is contiguous in the output, and what it needs besides is computed with it from
    the per-row and per-column arrays, so a call's scratch is a few steps' worth whatever
    the crop (one 8000 x 8000 box, C=1: 2.7 GiB of per-pixel indices and weights when they
    were built for the whole output first). The threads share ranges of whole blocks (W9
    R100 7x7: a range cut at any pixel ended in a short step of the same dozen NumPy calls,
    3-7 % of the kernel); ``blocks`` is an iterator over one range."""
    whole = slice(None)
    if CH * CW <= 2 * step:
        k = max(1, round(step / (CH * CW)))
        count = -(-R // k)

        def at(i: int) -> tuple[slice, slice, slice]:
            return slice(i * k, min(R, i * k + k)), whole, whole
    elif CW <= step:
        k = max(1, round(step / CW))
        per = -(-CH // k)
        count = R * per

        def at(i: int) -> tuple[slice, slice, slice]:
            r, j = divmod(i, per)
            return slice(r, r + 1), slice(j * k, min(CH, j * k + k)), whole
    else:
        per = -(-CW // step)
        count = R * CH * per

        def at(i: int) -> tuple[slice, slice, slice]:
            g, j = divmod(i, per)
            r, y = divmod(g, CH)
            return slice(r, r + 1), slice(y, y + 1), slice(j * step, min(CW, j * step + step))

    for_ranges(count, lambda a, b: work(map(at, range(a, b))), min_chunk=1)


def _extrapolate(out: np.ndarray, rows_on: np.ndarray, cols_on: np.ndarray, value) -> None:
    """Rows [R, CH] and columns [R, CW] off the map get the extrapolation value."""
    if not rows_on.all():
        out[~rows_on] = value
    if not cols_on.all():
        out.transpose(0, 2, 1, 3)[~cols_on] = value


def _row_base(batch, H: int, W: int, rows: np.ndarray) -> np.ndarray:
    """Pixel index (b * H + row) * W of the first pixel of each output row's image row,
    [R, CH]."""
    return (batch[:, None] * H + rows) * W


def _index(rows: np.ndarray, cols: np.ndarray, buf: np.ndarray) -> np.ndarray:
    """rows [k, ky, 1] + cols [k, 1, kc] (pixel indices of a block of the output) in the
    flat buffer ``buf``."""
    shape = (rows.shape[0], rows.shape[1], cols.shape[2])
    return np.add(rows, cols, out=buf[:shape[0] * shape[1] * shape[2]].reshape(shape))


def _output(rows: np.ndarray, cols: np.ndarray, C: int) -> np.ndarray:
    """The crops' output [R, CH, CW, C] float32 (the workspace's): R and CH from a per-row
    array [R, CH], CW from a per-column array [R, CW]."""
    return workspace.output((*rows.shape, cols.shape[1], C), F32)


def crop_bilinear(image: np.ndarray, batch: np.ndarray, y0: np.ndarray, y1: np.ndarray,
                  fy: np.ndarray, x0: np.ndarray, x1: np.ndarray, fx: np.ndarray,
                  extrapolation_value: float) -> np.ndarray:
    """Bilinear crops of checked inputs: image [N, H, W, C] float32/float64; per box its
    image ``batch`` [R]; per output row its top/bottom image rows y0, y1 [R, CH] (y0 = -1: off
    the map) and float32 weight fy; per output column x0, x1, fx [R, CW] likewise.

    Returns [R, CH, CW, C] float32: top = tl + (tr - tl) * fx, bottom = bl + (br - bl) * fx,
    top + (bottom - top) * fy (TensorFlow's order), the extrapolation value off the map.

    The output is computed a block at a time (_for_blocks; a range of blocks per core), each
    block's pixel indices made from the per-row and per-column arrays: the top-left
    neighbours gathered straight into the output, the others into two buffers that stay in
    cache, eight in-place operations. (Gathering top and bottom
    rows into one array per box, with the column weights spread over C, measured slower.)"""
    N, H, W, C = image.shape
    out = _output(y0, x0, C)
    if out.size == 0:
        return out
    top = _row_base(batch, H, W, np.maximum(y0, 0))  # per output row and column only
    bottom = _row_base(batch, H, W, np.maximum(y1, 0))
    left, right = np.maximum(x0, 0), np.maximum(x1, 0)
    wy, wx = fy.astype(F32), fx.astype(F32)
    pixels = _pixels(image)
    step = max(1, CHUNK // max(C, 1))

    def work(blocks) -> None:
        bb, cc = (workspace.scratch(f"crop:{k}", (2 * step * C,), F32) for k in "bc")
        ib = workspace.scratch("crop:i", (2 * step,), np.intp)
        for r, y, c in blocks:
            A = out[r, y, c]
            n = A.size
            B, Cc = bb[:n].reshape(A.shape), cc[:n].reshape(A.shape)
            t, b, L, Rt = top[r, y, None], bottom[r, y, None], left[r, None, c], right[r, None, c]
            dx, dy = wx[r, None, c, None], wy[r, y, None, None]
            _gather(pixels, _index(t, L, ib), A)  # top = tl + (tr - tl) * fx
            _gather(pixels, _index(t, Rt, ib), B)
            B -= A
            np.multiply(dx, B, out=B)  # (x * w, not w * x: the same product)
            A += B
            _gather(pixels, _index(b, L, ib), B)  # bottom = bl + (br - bl) * fx
            _gather(pixels, _index(b, Rt, ib), Cc)
            Cc -= B
            np.multiply(dx, Cc, out=Cc)
            B += Cc
            B -= A  # top + (bottom - top) * fy
            np.multiply(dy, B, out=B)
            A += B

    _for_blocks(*out.shape[:3], step, work)
    _extrapolate(out, y0 >= 0, x0 >= 0, F32.type(extrapolation_value))
    return out


def crop_nearest(image: np.ndarray, batch: np.ndarray, y: np.ndarray, x: np.ndarray,
                 extrapolation_value: float) -> np.ndarray:
    """Nearest-neighbour crops of checked inputs: per output row its image row y [R, CH]
    (-1: off the map), per output column its image column x [R, CW].

    Returns [R, CH, CW, C] float32: the pixel there cast to float32, the extrapolation value
    off the map."""
    N, H, W, C = image.shape
    out = _output(y, x, C)
    if out.size == 0:
        return out
    rows = _row_base(batch, H, W, np.maximum(y, 0))
    cols = np.maximum(x, 0)
    pixels = _pixels(image)
    step = max(NEAREST_STEP, CHUNK // max(C, 1))  # no buffers: the gather writes the output

    def work(blocks) -> None:
        ib = workspace.scratch("crop:i", (2 * step,), np.intp)
        for r, y, c in blocks:
            _gather(pixels, _index(rows[r, y, None], cols[r, None, c], ib), out[r, y, c])

    _for_blocks(*out.shape[:3], step, work)
    _extrapolate(out, y >= 0, x >= 0, F32.type(extrapolation_value))
    return out
