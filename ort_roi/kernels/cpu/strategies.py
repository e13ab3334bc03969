"""The CPU kernels' fast strategies: their names, the tuning that picks one per call (or per
box), and a way to force one (tests hold every strategy to the definition; bench can compare
them). Every choice the NumPy kernels make is made here.

- RoIAlign's mean (``align``): "small" (a small problem at once: every sample's weights on
  every row and column), "taps" (a fixed sampling_ratio: each box from its
  ph * 2 * sampling_ratio x pw * 2 * sampling_ratio bilinear taps, a few boxes per step),
  "crops" (each box from its crop of an NHWC copy of the map, two GEMMs with the bins' mean
  weights, in closed form for grids over
  ``EXPLICIT_GRID_MAX``; where the crops cover less than the map, each crop read from the
  NCHW map as it is instead of a copy of the whole map, ``align_crops_in_place``) or
  "planes" (the same weights applied to the NCHW map as it is, over each crop's rows: no
  copy, for a few boxes on a map).
- Max pooling (``max_pool``): "small" (masks over the whole map) or "table" (a table of window
  maxima, its lengths a ladder: "powers of two" or "every length").
- Rotated RoIAlign (``rotated``): "regular" (every sample of a few boxes at once) or
  "clipped" (a huge grid: only the samples that can fall on the map).
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any

import numpy as np

from ...geometry import EXPLICIT_GRID_MAX

NAMES = {"align": ("small", "taps", "crops", "planes"), "max_pool": ("small", "table"),
         "rotated": ("regular", "clipped"),
         "table_ladder": ("powers of two", "every length"),
         "align_weights": ("explicit", "closed form")}

# --- tuning -------------------------------------------------------------------------------

#: RoIAlign and max pooling: problems whose every (box, channel, bin, pixel) or X rows per
#: box and samples x pixels fit in this many elements are computed at once ("small").
SMALL = 1 << 14
#: RoIAlign: a box is computed from its taps (fixed sampling ratios) when its crop's two
#: products take more than this many multiply-adds per gathered tap (channels aside). Measured
#: on a 200 x 272 map, 200 boxes, sampling ratio 2 (crops / taps, us per box): 7 x 7 bins,
#: 28-pixel boxes 119 / 131, 40-pixel 167 / 120; 14 x 14 bins, 28-pixel 259 / 297, 40-pixel
#: 372 / 349: the crossovers at 11-15 multiply-adds per tap.
TAPS_VS_CROPS = 12.0
#: ... and when its taps hold at most this many elements (taps x channels).
TAPS_MAX = 1 << 22
#: RoIAlign: the NHWC copy that "crops" and "taps" start from, per element of X, in
#: multiply-adds of their products. Measured on a 24 x 30 x 256 map (W8f's P4): the copy
#: 90 us, a box's products 1.1 M multiply-adds in 70-80 us: about 12 multiply-adds per
#: element. A call whose boxes would cost more from the copy (its cost included) than from
#: the planes is computed from the planes.
NHWC_COPY = 12.0
#: RoIAlign's crops: elements of the weights (rows x map side) made at once (bounds memory).
WEIGHTS_MAX = 1 << 21
#: Elements of gathered taps per step (a few boxes, about the size of a core's L2 cache).
TAPS_STEP = 1 << 19
#: RoIAlign's crops: multiply-adds per call of the first product at most. OpenBLAS (NumPy's,
#: this machine) runs a product of 8 rows by a crop 2-3x faster in pieces below about a
#: million multiply-adds than in one call (8 rows x 30 x 30 pixels x 256 channels: 104 us in
#: one call, 49 us in four; 50 x 50: 318 us against 149 us; 14 or 16 rows: 3.4x the time of
#: 8); 2**19 was the best of 2**19, 2**20 and one call over crops of 22 to 100 pixels.
GEMM_MAX = 1 << 19
#: Max pooling's table: elements over all threads at least TABLE_MIN, up to the size of X plus
#: the output where those are larger (the memory bound allows that much), at most TABLE_MAX
#: per thread.
TABLE_MIN = 1 << 23
TABLE_MAX = 1 << 24
#: Channels per table row at most: longer gathered runs gained nothing (W1, W3) and a
#: smaller table stays in cache.
MAX_RUN = 64
#: Elements of gathered rows per step (keeps the working set in cache).
CHUNK = 1 << 18
#: Longest table of every window length 1..M considered.
EXACT_MAX = 16
#: Cost of one gathered element relative to one element of a table-building pass (measured).
GATHER_COST = 3
#: Rotated RoIAlign: boxes with more samples than this (pooled bins x grid) are clipped.
SAMPLES_PER_BOX = 1 << 16

_local = threading.local()


@contextmanager
def force(**choices: Any):
    """Force strategies or tuning on this thread, by name: ``align`` ("small", "taps",
    "crops", "planes"), ``align_weights`` ("explicit", "closed form"), ``taps_step`` (elements),
    ``gemm_max`` (multiply-adds), ``crops_in_place`` (RoIAlign's crops: read from the NCHW map
    as it is, True, or from an NHWC copy of the whole map, False), ``max_pool`` ("small",
    "table"), ``table_ladder`` ("powers of two", "every length"), ``table_budget`` (elements), ``table_chunk`` (elements), ``table_run`` (channels),
    ``rotated`` ("regular", "clipped")."""
    for k, v in choices.items():
        if k in NAMES and v not in NAMES[k]:
            raise ValueError(f"{k} must be one of {NAMES[k]}, got {v!r}")
        if k not in NAMES and k not in ("taps_step", "gemm_max", "table_budget",
                                        "table_chunk", "table_run", "crops_in_place"):
            raise ValueError(f"no strategy or tuning named {k!r}")
    old = dict(getattr(_local, "forced", {}))
    _local.forced = {**old, **choices}
    try:
        yield
    finally:
        _local.forced = old


def forced(name: str, default=None):
    """The forced strategy or tuning ``name`` on this thread, else ``default``."""
    f = getattr(_local, "forced", None)
    return f.get(name, default) if f else default


# --- the choices ----------------------------------------------------------------------------

#: The "small" strategies hold every (box, bin, sample or pixel, pixel) at once: forced, they
#: still take only problems up to this many elements.
SMALL_FORCED = 1 << 30


def _small_limit(name: str) -> int:
    f = forced(name)
    return SMALL if f is None else SMALL_FORCED if f == "small" else -1


def align_is_small(R: int, C: int, H: int, W: int, ph: int, pw: int, grid_max: int) -> bool:
    """RoIAlign's mean: the "small" strategy for the whole call?"""
    limit = _small_limit("align")
    return R * C * H * W <= limit and R * max(ph, pw) * grid_max * max(H, W) <= limit


def align_by_taps(sampling_ratio: int, bin_size: np.ndarray, ph: int, pw: int, H: int,
                  W: int, C: int) -> np.ndarray:
    """RoIAlign's mean, per box: from its taps (True) or its crop (False)."""
    R = bin_size.shape[0]
    f = forced("align")
    if f in ("taps", "crops"):
        return np.full(R, f == "taps" and sampling_ratio > 0)
    if sampling_ratio <= 0:
        return np.zeros(R, bool)
    taps = (2 * sampling_ratio) ** 2 * ph * pw
    crop_work = _crop_work(*_crop_sides(bin_size, ph, pw, H, W), ph, pw)
    return (crop_work > TAPS_VS_CROPS * taps) & (taps * C <= TAPS_MAX)


def _crop_sides(bin_size: np.ndarray, ph: int, pw: int, H: int, W: int):
    """The boxes' crops (rows, columns), about."""
    return np.clip(np.ceil(bin_size * [ph, pw]) + 2, 1, [H, W]).T


def _crop_work(hc: np.ndarray, wc: np.ndarray, ph: int, pw: int) -> np.ndarray:
    """Multiply-adds per channel of each box's two products from its crop (hc x wc)."""
    return (-(-ph // 8) * 8 * hc + ph * pw) * wc


def align_by_planes(sampling_ratio: int, bin_size: np.ndarray, ph: int, pw: int, H: int,
                    W: int) -> bool:
    """RoIAlign's mean, for the whole call: from the NCHW planes (True) or from an NHWC copy
    of the map ("crops" and "taps", False). From the planes a box's first product runs over
    every row of the map (the planes' rows are not a strided crop), so it pays only where
    the copy would cost more: a few boxes on a small map (W8's coarse levels)."""
    f = forced("align")
    if f is not None:
        return f == "planes"
    hc, wc = _crop_sides(bin_size, ph, pw, H, W)
    planes = float((pw * wc * H + ph * pw * hc).sum())  # the products' multiply-adds / C
    work = _crop_work(hc, wc, ph, pw)
    if sampling_ratio > 0:
        work = np.minimum(work, TAPS_VS_CROPS * (2 * sampling_ratio) ** 2 * ph * pw)
    return planes < NHWC_COPY * H * W + float(work.sum())


#: RoIAlign's planes read only a box's crop rows (one product per crop row over every
#: channel) from this many channels on, with output rows and columns > 1 and crop sides up
#: to PLANES_ROWS_MAX_SIDE; other boxes run over every row of the planes. The same dot
#: products, but NumPy / OpenBLAS pick another kernel by shape, whose last bits differ:
#: a vector product for a dimension of 1, another small-matrix kernel for 1-15 channels or
#: a crop side (a product's inner dimension) of 32 or more: 215 of 410 random shapes with a
#: side over 32, 21 of 3000 with sides up to 32, 0 of 6000 with sides up to 31 (16-256
#: channels, float32 and float64, each against the products over every row).
PLANES_ROWS_MIN_C = 16
PLANES_ROWS_MAX_SIDE = 31


def planes_rows_only(C: int, ph: int, pw: int, hc: int, wc: int) -> bool:
    """RoIAlign's planes, per box: over its crop's rows only (True) or over every row of the
    planes (the same values, bit for bit, where this says True)."""
    return (C >= PLANES_ROWS_MIN_C and ph > 1 and pw > 1 and hc <= PLANES_ROWS_MAX_SIDE
            and wc <= PLANES_ROWS_MAX_SIDE)


#: RoIAlign's crops read in place (each channel's crop a strided matrix, two products per
#: box, nothing copied) against from one NHWC copy of the whole map: in place wins while the
#: crops on the map cover less than about this many times its area (measured on the mask and
#: box stages: docs/benchmarks.md, "Measurements behind design choices").
CROPS_IN_PLACE = 3.0


def align_crops_in_place(start: np.ndarray, bin_size: np.ndarray, ph: int, pw: int, H: int,
                         W: int) -> bool:
    """RoIAlign's crops, for the whole call: each box's crop read from the NCHW map as it is
    (True) or from one NHWC copy of the whole map (False). The copy pays where the crops
    cover more than the map (the box heads' 1000 boxes); in place wins for few boxes on a
    large map (the mask heads' 100 boxes on P2). The crops are counted as far as they lie
    on the map (a box off the map reads nothing)."""
    f = forced("crops_in_place")
    if f is not None:
        return bool(f)
    hc, wc = _crop_sides_on_map(start, bin_size, ph, pw, H, W)
    return float((hc * wc).sum()) < CROPS_IN_PLACE * H * W


def _crop_sides_on_map(start: np.ndarray, bin_size: np.ndarray, ph: int, pw: int, H: int,
                       W: int):
    """The boxes' crops (rows, columns) cut to the map, about: a bin's samples lie between
    its box's start and end, and read the rows (columns) of their taps (geometry.neighbours:
    a sample up to one pixel off the map reads its edge, one further reads nothing)."""
    size = np.array([H, W])
    end = start + bin_size * [ph, pw]
    first = np.clip(np.floor(start), 0, size - 1)
    last = np.clip(np.floor(end) + 1, 0, size - 1)
    off = (end < -1) | (start > size)
    return np.where(off, 0, last - first + 1).T


def taps_step() -> int:
    return forced("taps_step", TAPS_STEP)


def gemm_max() -> int:
    return forced("gemm_max", GEMM_MAX)


def explicit_grid_max() -> int:
    """Grids above this are summed in closed form (geometry.axis_weights)."""
    w = forced("align_weights")
    return {"explicit": 2**62, "closed form": 0}.get(w, EXPLICIT_GRID_MAX)


def max_pool_is_small(R: int, C: int, PH: int, PW: int, H: int, W: int) -> bool:
    return R * C * PH * PW * H * W <= _small_limit("max_pool")


def table_budget(x_size: int, out_size: int, workers: int) -> int:
    """Elements of max pooling's table per thread."""
    f = forced("table_budget")
    if f is not None:
        return f
    return min(max(TABLE_MIN, x_size + out_size) // workers, TABLE_MAX)


def table_ladders(longest: int) -> list[np.ndarray]:
    """Candidate window lengths of a table along an axis whose windows reach ``longest``:
    the powers of two (few levels; a window is covered by up to two blocks) and every
    length up to EXACT_MAX (a window of length <= M is one block)."""
    kind = forced("table_ladder")
    if kind == "powers of two":
        return powers_of_two(longest)
    if kind == "every length":
        return every_length(longest, longest)
    return powers_of_two(longest) + every_length(longest, EXACT_MAX)[2:]


def powers_of_two(longest: int) -> list[np.ndarray]:
    """Ladders 1, 2, 4, ..., 2**K for every 2**K <= longest."""
    return [1 << np.arange(k + 1) for k in range(int(longest).bit_length())]


def every_length(longest: int, most: int) -> list[np.ndarray]:
    """Ladders 1, 2, ..., M for every M <= min(longest, most)."""
    return [np.arange(1, m + 1) for m in range(1, min(int(longest), most) + 1)]


def gather_cost() -> float:
    """Relative cost of a gathered element (forced ladders make gathers dear so that the
    table is built as deep as the budget allows)."""
    return 10**9 if forced("table_ladder") is not None else GATHER_COST


def table_chunk() -> int:
    return forced("table_chunk", CHUNK)


def table_run() -> int:
    return forced("table_run", MAX_RUN)


def rotated_clipped(samples: np.ndarray) -> np.ndarray:
    """Rotated RoIAlign, per box: clipped sampling (True) or every sample (False)."""
    f = forced("rotated")
    if f is not None:
        return np.full(samples.shape, f == "clipped")
    return samples > SAMPLES_PER_BOX
