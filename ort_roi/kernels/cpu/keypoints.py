"""HeatmapsToKeypoints on the host: each box's heatmaps resized with onnxruntime's cubic
Resize (bit for bit) and the first maximum of each map."""

from __future__ import annotations

import numpy as np

from ...resize import cubic_resize_taps
from .parallel import for_ranges

#: Elements of one block of upsampled rows (K x rows x width): the memory one box takes.
_BLOCK = 1 << 20


def decode_box(maps: np.ndarray, h: int, w: int):
    """One box: its K heatmaps [K, H, W] resized to [K, h, w] (onnxruntime's cubic Resize,
    separable: the width pass, then the height pass, each a sum of 4 products in the order
    onnxruntime adds them) and the first maximum of each map: (flat position, value)."""
    K, H, W = maps.shape
    t = maps.dtype.type
    (xt, xw), (yt, yw) = cubic_resize_taps(w, W), cubic_resize_taps(h, H)
    rows = maps[:, :, xt[0]] * xw[0].astype(t)
    for k in range(1, 4):
        rows = rows + maps[:, :, xt[k]] * xw[k].astype(t)  # [K, H, w]
    best = np.full(K, -np.inf, maps.dtype)
    pos = np.zeros(K, np.int64)
    step = max(1, _BLOCK // max(1, K * w))
    for y0 in range(0, h, step):
        y1 = min(h, y0 + step)
        block = rows[:, yt[0][y0:y1], :] * yw[0][y0:y1, None].astype(t)
        for k in range(1, 4):
            block = block + rows[:, yt[k][y0:y1], :] * yw[k][y0:y1, None].astype(t)
        flat = block.reshape(K, -1)
        at = flat.argmax(axis=1)
        value = flat[np.arange(K), at]
        better = (value > best) | (y0 == 0)  # later blocks only when strictly larger
        best = np.where(better, value, best)
        pos = np.where(better, at + y0 * w, pos)
    return pos, best


def keypoints(X: np.ndarray, rois: np.ndarray, w, h, wc, hc):
    """The keypoints of checked inputs: maps X [R, K, H, W], rois [R, 4], each box's size
    (w, h) and roi map size (wc, hc) = (ceil(w), ceil(h)). Returns (keypoints [R, K, 3],
    scores [R, K])."""
    R, K = X.shape[:2]
    t = X.dtype.type
    out = np.ones((R, K, 3), X.dtype)
    scores = np.empty((R, K), X.dtype)

    def work(first: int, last: int) -> None:
        for r in range(first, last):
            width = int(wc[r])
            pos, scores[r] = decode_box(X[r], int(hc[r]), width)
            x_int = pos % width
            y_int = (pos - x_int) // width
            out[r, :, 0] = (t(0.5) + x_int.astype(t)) * (w[r] / wc[r]) + rois[r, 0]
            out[r, :, 1] = (t(0.5) + y_int.astype(t)) * (h[r] / hc[r]) + rois[r, 1]

    for_ranges(R, work, min_chunk=2)
    return out, scores
