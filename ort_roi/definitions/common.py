"""What the definitions share: per-image counts as each box's image, one bilinear sample of
every channel, and the position-sensitive average over integer bins."""

from __future__ import annotations

import numpy as np

from ..geometry import bilinear_weights


def images_of(counts) -> list[int]:
    """The image of each box, from per-image counts (boxes of image 0 first)."""
    return [i for i, n in enumerate(np.asarray(counts).tolist()) for _ in range(int(n))]


def bilinear(X: np.ndarray, y, x) -> np.ndarray:
    """Bilinear samples of every channel of X [C, H, W] at (y, x) (broadcast together:
    [C, *shape]), in T, as mmcv and onnxruntime compute them: w1*v1 + w2*v2 + w3*v3 + w4*v4
    over the four neighbours, 0 beyond one pixel off the map."""
    C, H, W = X.shape
    _, pos, w = bilinear_weights(np.asarray(y), np.asarray(x), H, W)
    plane = X.reshape(C, H * W)
    return (w[0] * plane[:, pos[0]] + w[1] * plane[:, pos[1]]
            + w[2] * plane[:, pos[2]] + w[3] * plane[:, pos[3]])


def weighted_corners(X: np.ndarray, y, x) -> np.ndarray:
    """onnxruntime's RoiAlign max of samples at (y, x): max(w1*v1, w2*v2, w3*v3, w4*v4) per
    channel (std::max's order: a < b ? b : a), [C, *shape]."""
    C, H, W = X.shape
    _, pos, w = bilinear_weights(np.asarray(y), np.asarray(x), H, W)
    plane = X.reshape(C, H * W)
    best = w[0] * plane[:, pos[0]]
    for k in (1, 2, 3):
        v = w[k] * plane[:, pos[k]]
        best = np.where(best < v, v, best)
    return best


def ps_average(X: np.ndarray, rows, cols, out: np.ndarray) -> None:
    """Position-sensitive average of one box of image X [C, H, W] into out [oc, PH, PW]:
    bin (ph, pw) covers rows [rows[0][ph], rows[1][ph]) and columns [cols[0][pw],
    cols[1][pw]); out[c, ph, pw] is the mean of channel (c*PH + ph)*PW + pw over it, summed
    pixel by pixel, row by row, in T (Paddle's and torchvision's order); 0 for an empty bin."""
    t = X.dtype.type
    oc, PH, PW = out.shape
    for ph in range(PH):
        for pw in range(PW):
            h0, h1, w0, w1 = rows[0][ph], rows[1][ph], cols[0][pw], cols[1][pw]
            if h1 <= h0 or w1 <= w0:
                out[:, ph, pw] = 0
                continue
            channels = (np.arange(oc) * PH + ph) * PW + pw
            total = np.zeros(oc, X.dtype)
            for h in range(h0, h1):
                for w in range(w0, w1):
                    total += X[channels, h, w]
            out[:, ph, pw] = total / t((h1 - h0) * (w1 - w0))
