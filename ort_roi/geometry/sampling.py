"""RoIAlign's samples: where the samples of a bin lie along an axis (``sample_positions``; for
the max, one per distinct taps: ``max_sample_positions``), each sample's bilinear neighbours
(``neighbours``) and taps along an axis (``sample_taps``), and the four taps of a sample on
the plane (``bilinear_weights``). In T, as the reference kernels compute them; the rotated
boxes (rotated.py) and the separable weights (separable.py) place their samples here too."""

from __future__ import annotations

import numpy as np


def sample_positions(start, bin_size, grid, pooled: int, G: int, k=None) -> np.ndarray:
    """Sample coordinates [..., pooled, G] along one axis, in T, placed as the references do:
    y = (start + p*bin_size) + (k + 0.5)*bin_size/grid for bin p and sample k (only k < grid
    are samples of the bin); ``k`` the sample indices to place (default 0 .. G-1). start,
    bin_size and grid broadcast together."""
    start = np.asarray(start)
    t = start.dtype.type
    b = np.asarray(bin_size)[..., None, None]
    g = np.asarray(grid).astype(start.dtype)[..., None, None]
    p = np.arange(pooled, dtype=start.dtype)[:, None]
    k = np.arange(G, dtype=start.dtype) if k is None else np.asarray(k, start.dtype)
    return (start[..., None, None] + p * b) + (k + t(0.5)) * b / g


def neighbours(y: np.ndarray, size):
    """Bilinear neighbours of sample coordinates y along an axis of ``size``, as the
    references compute them: (inside, low, high, fraction of high), in y's type. A sample
    is inside when -1 <= y <= size; it is clamped to >= 0, and one at or past the last
    index uses the last index alone. Samples outside are also clamped to [0, size] (NaN to
    0), so every index is on the map, even for a huge box's samples."""
    t = y.dtype.type
    inside = (y >= -1) & (y <= size)
    y = np.fmin(np.fmax(y, t(0)), np.asarray(size, y.dtype))
    low = np.floor(y).astype(np.intp)
    at_end = low >= size - 1
    low = np.where(at_end, size - 1, low)
    high = np.where(at_end, size - 1, low + 1)
    return inside, low, high, np.where(at_end, t(0), y - low.astype(y.dtype))


def sample_taps(start, bin_size, grid, pooled: int, size: int, G: int):
    """Each sample's two bilinear neighbours along an axis, the samples placed exactly as
    the reference does: indices and weights [R, pooled, G, 2] (low, high), in T; a sample
    outside the map or past its bin's grid (k >= grid) weighs 0."""
    inside, low, high, frac = neighbours(sample_positions(start, bin_size, grid, pooled, G), size)
    t = frac.dtype.type
    use = inside & (np.arange(G) < np.asarray(grid)[..., None, None])
    return np.stack([low, high], -1), np.stack([t(1) - frac, frac], -1) * use[..., None]


#: RoIAlign's max takes every sample of a bin side up to this many per pixel of the map's
#: side (plus 2): an ordinary box's grid, and any adaptive grid on the map. Beyond, one
#: sample per distinct taps (max_sample_positions).
SAMPLES_PER_PIXEL = 4


def max_sample_positions(start, bin_size, grid: int, pooled: int, size: int) -> np.ndarray:
    """The sample coordinates [pooled, K] of one box's bins along an axis of ``size`` pixels
    (``grid`` >= 1 samples per bin side) that a max over the bin's samples needs: every
    value the max can take is taken by one of them, so the max over them is the max over
    all the bin's samples, bit for bit.

    A sample's taps (neighbours(): which pixels, which weights) depend only on its position
    clamped to [0, size - 1], and every sample beyond one pixel off the map reads 0 weights
    at pixel 0: samples of equal ``clamped`` position, or all off the map, give the same value
    in any channel, whatever the other axis's sample. Positions are monotone in the sample
    index, so a bin side's samples form runs of equal taps, one sample each is kept (the
    first; later columns repeat a bin's last one). Up to ``SAMPLES_PER_PIXEL * (size + 2)``
    samples per side every sample is kept (sample_positions): that covers every adaptive
    grid whose samples lie no closer than 1/4 pixel; beyond, the runs are found by binary
    search, so a huge box costs O(pooled * size * log(grid)), not O(pooled * grid)."""
    if grid <= SAMPLES_PER_PIXEL * (size + 2):
        return sample_positions(start, bin_size, grid, pooled, grid)
    t = np.asarray(start).dtype.type

    def taps_key(k):  # [pooled] sample indices: what their taps depend on, monotone in k
        y = sample_positions(start, bin_size, grid, pooled, 1, k[:, None])[:, 0]
        on = np.clip(y, t(0), t(size - 1))
        return np.where(y >= -1, np.where(y <= size, on, t(size + 1)), t(-2))  # NaN: off

    k = np.zeros(pooled, np.int64)
    kept = [k]
    while True:
        key = taps_key(k)
        nxt = k + 1  # most often the next sample has other taps: no search
        same = (nxt < grid) & (taps_key(np.minimum(nxt, grid - 1)) == key)
        nxt = _first_true(lambda j: taps_key(j) != key, np.where(same, nxt + 1, nxt),
                          np.where(same, grid, nxt))
        if (nxt >= grid).all():
            return sample_positions(start, bin_size, grid, pooled, 1, np.stack(kept, 1))
        k = np.where(nxt < grid, nxt, k)
        kept.append(k)


def _first_true(pred, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Per element, the first k in [lo, hi) where pred(k) holds, for a predicate false then
    true along k (binary search); hi where it holds nowhere."""
    lo, hi = lo.copy(), hi.copy()
    while (open_ := lo < hi).any():
        mid = lo + (hi - lo) // 2
        p = pred(np.where(open_, mid, lo))
        hi = np.where(open_ & p, mid, hi)
        lo = np.where(open_ & ~p, mid + 1, lo)
    return lo


def bilinear_weights(y: np.ndarray, x: np.ndarray, H: int, W: int, use=None):
    """The four taps of samples (y, x) as mmcv's pre_calc and onnxruntime compute them:
    (kept, positions, weights): positions [4 x ...] in the plane (low-low, low-high,
    high-low, high-high: y * W + x) and weights hy*hx, hy*lx, ly*hx, ly*lx [4 x ...] in T. A
    sample beyond one pixel off the map (or not in ``use``) is not kept: weights 0 at
    position 0."""
    t = y.dtype.type
    in_y, yl, yh, ly = neighbours(y, H)
    in_x, xl, xh, lx = neighbours(x, W)
    keep = in_y & in_x if use is None else use & in_y & in_x
    hy, hx = t(1) - ly, t(1) - lx
    pos = [np.where(keep, a * W + b, 0) for a, b in ((yl, xl), (yl, xh), (yh, xl), (yh, xh))]
    w = [np.where(keep, a * b, t(0)) for a, b in ((hy, hx), (hy, lx), (ly, hx), (ly, lx))]
    return keep, pos, w
