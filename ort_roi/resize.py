"""onnxruntime's Resize arithmetic, for the fused ops that replace torchvision's exported Loops:
the cubic Resize its keypoint decoding runs (HeatmapsToKeypoints) and the linear Resize its
mask pasting runs (PasteMasks), each tap and weight as onnxruntime computes them, so the
fused ops match the native graph bit for bit."""

from __future__ import annotations

import numpy as np


# --- onnxruntime's cubic Resize (torchvision's keypoint decoding) --------------------------

def _keys_cubic(s: np.ndarray, a: np.float32) -> list[np.ndarray]:
    """Keys' cubic convolution weights of the 4 taps around a position with fraction s, in
    float32 and in the order onnxruntime's upsample.cc (GetCubicCoeffs) evaluates them."""
    f = np.float32
    s = np.abs(s).astype(f)
    one, two, three = f(1), f(2), f(3)
    far = lambda d: ((a * d - f(5) * a) * d + f(8) * a) * d - f(4) * a  # noqa: E731 - |d| in [1, 2]
    near = lambda d: ((a + two) * d - (a + three)) * d * d + one  # noqa: E731 - |d| in [0, 1]
    return [far(s + one), near(s), near(one - s), far(two - s)]


def cubic_resize_taps(out: int, size: int, a: float = -0.75):
    """onnxruntime's Resize along one axis (mode cubic, coordinate_transformation_mode
    half_pixel, output size given): output position i reads input (i + 0.5) / scale - 0.5,
    scale = float32(out) / float32(size), all in float32; the 4 taps floor(.) - 1 .. + 2,
    clamped to [0, size - 1]. Returns (taps [4][out] int, weights [4][out] float32)."""
    f = np.float32
    scale = f(out) / f(size)
    pos = np.arange(out, dtype=f)
    if scale != f(1):
        pos = (pos + f(0.5)) / scale - f(0.5)
    start = np.floor(pos)
    weights = _keys_cubic((pos - start).astype(f), f(a))
    first = start.astype(np.int64) - 1
    taps = [np.clip(first + k, 0, size - 1) for k in range(4)]
    return taps, weights


# --- onnxruntime's linear Resize (torchvision's mask pasting) ------------------------------

def linear_resize_taps(out: int, size: int, index: np.ndarray):
    """onnxruntime's Resize along one axis (mode linear, coordinate_transformation_mode
    half_pixel, output size given), at output positions ``index``: position i reads input
    (i + 0.5) / scale - 0.5 (i itself when scale is 1), scale = float32(out) /
    float32(size), clamped to [0, size - 1], all in float32; taps i1 = its integer part and
    i2 = min(i1 + 1, size - 1), weights d1 = |pos - i1| (of i2) and d2 = |pos - i2| (of i1),
    both 0.5 where i1 = i2 (upsample.h, SetupUpsampleBilinear). Returns (i1, i2, d1, d2)."""
    f = np.float32
    scale = f(out) / f(size)
    pos = np.asarray(index).astype(f)
    if scale != f(1):
        pos = (pos + f(0.5)) / scale - f(0.5)
    pos = np.clip(pos, f(0), f(size - 1))
    i1 = np.minimum(pos.astype(np.int64), size - 1)
    i2 = np.minimum(i1 + 1, size - 1)
    d1, d2 = np.abs(pos - i1.astype(f)), np.abs(pos - i2.astype(f))
    same = i1 == i2
    d1[same] = d2[same] = f(0.5)
    return i1, i2, d1, d2
