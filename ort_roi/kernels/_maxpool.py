"""Max over integer bins, the shared core of ROIPooling(max) and RoIPool."""

from __future__ import annotations

import numpy as np


def _window_max(a: np.ndarray, lo: np.ndarray, hi: np.ndarray, axis: int) -> np.ndarray:
    """Max of ``a`` over the windows [lo[p], hi[p]) along ``axis`` (empty windows: any value).

    Windows are padded to the longest one by repeating their last index: max is idempotent,
    so the padding does not change the result.
    """
    length = int((hi - lo).max())
    last = np.maximum(hi - 1, lo)
    res = a.take(lo, axis=axis)
    for k in range(1, length):
        np.maximum(res, a.take(np.minimum(lo + k, last), axis=axis), out=res)
    return res


def pool_max(X: np.ndarray, batch: np.ndarray, hlo: np.ndarray, hhi: np.ndarray,
             wlo: np.ndarray, whi: np.ndarray) -> np.ndarray:
    """out[r, c, ph, pw] = max of X[batch[r], c, hlo:hhi, wlo:whi] per bin, 0 if empty."""
    R, C = batch.shape[0], X.shape[1]
    PH, PW = hlo.shape[1], wlo.shape[1]
    out = np.zeros((R, C, PH, PW), X.dtype)
    if R == 0 or C == 0:
        return out
    vh, vw = hhi > hlo, whi > wlo
    for r in range(R):
        if not (vh[r].any() and vw[r].any()):
            continue
        h0, h1 = hlo[r][vh[r]].min(), hhi[r][vh[r]].max()
        w0, w1 = wlo[r][vw[r]].min(), whi[r][vw[r]].max()
        crop = X[batch[r], :, h0:h1, w0:w1]
        rows = _window_max(crop, np.clip(hlo[r] - h0, 0, h1 - h0 - 1), hhi[r] - h0, axis=1)
        res = _window_max(rows, np.clip(wlo[r] - w0, 0, w1 - w0 - 1), whi[r] - w0, axis=2)
        res[:, ~vh[r], :] = 0
        res[:, :, ~vw[r]] = 0
        out[r] = res
    return out
