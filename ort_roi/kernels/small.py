"""Small calls (a W6-sized call: a few boxes on a small map): the kernel's output, bit for
bit, in a handful of NumPy calls, for the bridge to try before the kernel (``Op.small``).

A call near the bridge's floor spends its time in NumPy calls on arrays of a few values
(~1 us each, and more in a session, whose run leaves the caches cold) and in the layers of
the kernels (attributes resolved, each check, the dispatch, the strategy): here the inputs
are accepted in one pass of Python's numbers (``checks.few_*``), the geometry is made with
scalars (``geometry.few``, ``geometry.roi_pool_bins_few``) and the output with the small
strategies' own last step. Every function returns None for anything it does not take
whole: an input a check would refuse, a box whose scaled size could overflow, a call the
kernel would compute by another strategy (or a forced one), a value whose bits the scalars
cannot promise (a max of 0 with zeros of both signs, a NaN out of NaNs, a weight under
2**-24). The kernel then runs, with every error and bit it has; the small path raises no
error of its own and, like the kernels, computes quietly (no floating-point warning,
whatever ``np.seterr`` says).
"""

from __future__ import annotations

import numpy as np

from ..geometry import BoxGeometry, psroi_box_bins
from ..geometry.few import align_bins_few, align_weights_few, sampling_grid_few
from ..spec import MAX_OUTPUT_ELEMENTS
from .checks import few_sizes_fit
from .cpu import strategies
from .cpu.align import small_product
from .cpu.bilinear import bilinear_pool_few
from .cpu.max_pool import pool_max_few
from .cpu.psroi import pool_bins_few

_F32 = np.dtype(np.float32)
#: ``align``: at most this many samples (boxes x 2 axes x bins x grid) and weights (boxes x
#: 2 axes x bins x map side) a call. Measured against the kernel (a call alone, 4 channels,
#: boxes on the map, sampling ratio 2; us): 8 samples 22 against 47, 16: 33 / 55, 32 (96
#: weights): 51 / 87, 48 (192): 69 / 90, 56 (392): 72 / 93, 64 (256): 94 / 97, 112 (784):
#: 136 / 105.
ALIGN_SAMPLES = 56
ALIGN_WEIGHTS = 512


def align(X: np.ndarray, batch: list[int], boxes: np.ndarray, values: list[float], *,
          pooled_h: int, pooled_w: int, spatial_scale: float, sampling_ratio: int,
          geometry: BoxGeometry) -> np.ndarray | None:
    """RoIAlign's mean (``checks.compute_align`` over ``steps.align``) of accepted float32
    inputs (``checks.few_*``: X, each box's image, boxes [R, 4] and their values), with
    resolved attributes: the small strategy's output (``cpu.align._align_small``), or None.
    """
    N, C, H, W = X.shape
    R, P = boxes.shape[0], max(pooled_h, pooled_w)
    if X.dtype != _F32 or not (R and C) or R * 2 * P * max(H, W) > ALIGN_WEIGHTS \
            or not strategies.align_is_small(R, C, H, W, pooled_h, pooled_w, 1) \
            or R * C * pooled_h * pooled_w > MAX_OUTPUT_ELEMENTS \
            or not few_sizes_fit(values, spatial_scale, _F32):
        return None
    # quiet, as the kernel: a huge box overflows T on purpose (its samples then fall off the
    # map), NaN and inf in X propagate
    with np.errstate(all="ignore"):
        bins = align_bins_few(boxes, spatial_scale, geometry, pooled_h, pooled_w)
        if sampling_ratio > 0:  # one grid for every bin
            G, grids = sampling_ratio, [(sampling_ratio, sampling_ratio)] * R
        else:
            grids = [(sampling_grid_few(b[2], 0), sampling_grid_few(b[3], 0)) for b in bins]
            G = max(max(g) for g in grids)
        if not (R * 2 * P * G <= ALIGN_SAMPLES
                and strategies.align_is_small(R, C, H, W, pooled_h, pooled_w, G)):
            return None
        A = align_weights_few(bins, grids, P, (H, W))
        if A is None:
            return None
        return small_product(X, batch, np.array(A, _F32).reshape(R, 2, P, max(H, W)),
                             pooled_h, pooled_w)


def bilinear_pool(X: np.ndarray, batch: list[int], boxes: np.ndarray, *, pooled_h: int,
                  pooled_w: int) -> np.ndarray | None:
    """Bilinear ROIPooling (``cpu.bilinear_pool``) of accepted inputs (``checks.few_*``: X,
    each box's image, the normalized boxes [R, 4]), with resolved attributes:
    ``cpu.bilinear.bilinear_pool_few`` (one sample per bin with scalars of T), or None
    (a larger call), quietly as the kernel."""
    with np.errstate(all="ignore"):  # (inf in X: inf - inf propagates NaN, as in the kernel)
        return bilinear_pool_few(X, batch, boxes, pooled_h, pooled_w)


def max_pool(X: np.ndarray, batch: list[int], values: list[float], *, pooled_h: int,
             pooled_w: int, spatial_scale: float) -> np.ndarray | None:
    """Max pooling over integer bins (``cpu.max_pool``: ROIPooling max, RoIPool) of accepted
    inputs (``checks.few_*``: X, each box's image, the boxes' values [x1, y1, x2, y2] row by
    row), with resolved attributes: ``cpu.max_pool.pool_max_few`` (the maxima in Python's
    numbers), or None: a forced strategy, or what pool_max_few declines (a larger call)."""
    if strategies.forced("max_pool") is not None:
        return None
    return pool_max_few(X, batch, values, pooled_h, pooled_w, spatial_scale)


def psroi_pool(X: np.ndarray, batch: list[int], rois: np.ndarray, *, output_channels: int,
               spatial_scale: float, pooled_height: int, pooled_width: int) -> np.ndarray | None:
    """Paddle's psroi_pool (``cpu.psroi.pool_bins``) of accepted inputs (``checks.few_*``: X
    with one channel per output channel and bin, each box's image, rois [R, 4]), with
    resolved attributes: the bins as the kernel makes them (``geometry.psroi_box_bins``), each
    bin's mean with scalars of T (``cpu.psroi.pool_bins_few``), or None (a larger call),
    quietly as the kernel."""
    with np.errstate(all="ignore"):  # (a huge box overflows T on purpose, as in the kernel)
        (hlo, hhi), (wlo, whi) = psroi_box_bins(rois, spatial_scale, pooled_height,
                                                pooled_width, *X.shape[2:])
        return pool_bins_few(X, batch, hlo, hhi, wlo, whi, output_channels, pooled_height,
                             pooled_width)
