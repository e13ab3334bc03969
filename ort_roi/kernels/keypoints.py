"""HeatmapsToKeypoints: torchvision's keypoint decoding (roi_heads.heatmaps_to_keypoints) in one
op, with onnxruntime's cubic Resize bit for bit, so that a converted Keypoint R-CNN gives the
native graph's keypoints exactly while skipping its per-box Loop (ort-roi convert,
ort_roi.torch_export)."""

from __future__ import annotations

import numpy as np

from ..errors import RoiOpError
from ..geometry import cubic_resize_taps
from ..specs import HEATMAPS_TO_KEYPOINTS, MAX_KEYPOINT_MAP
from .checks import check_boxes, check_features, quiet
from .cpu.parallel import for_ranges
from .dispatch import host

#: Elements of one block of upsampled rows (K x rows x width): the memory one box takes.
_BLOCK = 1 << 20


def keypoint_boxes(op: str, rois: np.ndarray):
    """torchvision's box terms: w = max(x2 - x1, 1), h likewise, in T, and the size of the
    roi map, (ceil(h), ceil(w)), checked against MAX_KEYPOINT_MAP."""
    t = rois.dtype.type
    w = np.maximum(rois[:, 2] - rois[:, 0], t(1))
    h = np.maximum(rois[:, 3] - rois[:, 1], t(1))
    wc, hc = np.ceil(w), np.ceil(h)
    big = wc.astype(np.float64) * hc > MAX_KEYPOINT_MAP
    if big.any():
        r = int(np.flatnonzero(big)[0])
        raise RoiOpError(op, "input 'rois'",
                         f"row {r} {rois[r].tolist()} asks for a {int(hc[r])} x {int(wc[r])} "
                         f"roi map, over the limit of {MAX_KEYPOINT_MAP} pixels")
    return w, h, wc, hc


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


@quiet
def heatmaps_to_keypoints(maps, rois):
    """Keypoints of each box from its heatmaps, as torchvision's exported Keypoint R-CNN
    computes them (HeatmapsToKeypoints in docs/semantics.md). ``maps`` [R, K, H, W],
    ``rois`` [R, 4] = [x1, y1, x2, y2]. Returns (keypoints [R, K, 3] = (x, y, 1), scores
    [R, K]). Computed on the host (CuPy input is copied)."""
    op = HEATMAPS_TO_KEYPOINTS.name
    X = host(check_features(op, maps, "maps"))
    rois = check_boxes(op, "rois", rois, X, 4)
    R, K = X.shape[:2]
    if rois.shape[0] != R:
        raise RoiOpError(op, "input 'rois'",
                         f"must have one row per box of maps (R = {R}), got {rois.shape[0]}")
    t = X.dtype.type
    w, h, wc, hc = keypoint_boxes(op, rois)
    keypoints = np.ones((R, K, 3), X.dtype)
    scores = np.empty((R, K), X.dtype)

    def work(first: int, last: int) -> None:
        for r in range(first, last):
            width = int(wc[r])
            pos, scores[r] = decode_box(X[r], int(hc[r]), width)
            x_int = pos % width
            y_int = (pos - x_int) // width
            keypoints[r, :, 0] = (t(0.5) + x_int.astype(t)) * (w[r] / wc[r]) + rois[r, 0]
            keypoints[r, :, 1] = (t(0.5) + y_int.astype(t)) * (h[r] / hc[r]) + rois[r, 1]

    for_ranges(R, work, min_chunk=2)
    return keypoints, scores
