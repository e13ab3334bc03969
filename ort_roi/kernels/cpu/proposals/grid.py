"""GRID_DOC
"""

from __future__ import annotations

import math

import numpy as np

from .common import nms_from_pairs, suppressing

F64 = np.float64

#: The most candidate pairs the grid search examines (~50 ns each: ~7 s); past it the boxes
#: are too dense for it and the block NMS runs
NMS_GRID_PAIRS = 1 << 27
#: The most size classes the grid search makes (sides from the smallest to the largest box,
#: each class 1/t times wider: thr 1 and sides 1 to 1e28)
NMS_GRID_CLASSES = 1 << 16
#: Candidate pairs the grid search examines at once (its scratch: ~50 bytes each, ~13 MB)
NMS_GRID_CHUNK = 1 << 18
#: Size classes searched from each box (width class, height class); the others' pairs are
#: found from their other box
_GRID_OFFSETS = ((0, 0), (0, 1), (1, -1), (1, 0), (1, 1))


def grid_ranges(x1, y1, x2, y2, thr, norm):
    """The grid search's candidates: (o, a, lo, cnt), boxes sorted (``o``) by size class,
    row and x1, and for query a (a sorted position) the sorted positions [lo, lo + cnt) that
    may overlap it by more than ``thr``, each unordered pair once; None where the boxes do
    not fit the grid (a side <= 0, a non-finite size or area, coordinates too far apart,
    size classes past float64's range) or ``thr`` is <= 0 (eta 0 or below makes the adaptive
    threshold 0 or negative: every overlap suppresses, and no size class bounds a pair).

    IoU > t needs (sides w = x2 - x1 + norm, h likewise; inter <= the smaller box, union >=
    the larger): w_b / w_a in (t, 1/t), h likewise, and x1_b - x1_a in (-(1-t) w_b,
    (1-t) w_a), y1 likewise (an intersection side > t times each box's side). Boxes fall
    into width and height classes each 1/t times wider than the one before (a pair's classes
    differ by at most one in each) and, per class, into rows of y1 of height (1-t) x the
    class's largest height;
    each box queries the rows of the classes next to it that reach its y1 window, and in
    each row (sorted by x1) its x1 window. t is thr less 1e-3 of it, and the windows are
    widened by a relative 1e-9: rounding (of T's IoU, here in float64) only adds candidates."""
    if not thr > 0:
        return None
    m = x1.size
    X1, Y1 = x1.astype(F64), y1.astype(F64)
    W = (x2.astype(F64) - X1) + F64(norm)
    H = (y2.astype(F64) - Y1) + F64(norm)
    t = F64(thr) * (1 - 1e-3)
    c = 1.0 - t
    with np.errstate(all="ignore"):
        if not (np.all(W > 0) and np.all(H > 0) and np.isfinite(W).all()
                and np.isfinite(H).all()):
            return None
        smallest = float(min(W.min(), H.min()))
        spread = float(max(W.max(), H.max())) / smallest
    q = (1.0 / float(t)) * (1 + 1e-9)
    if not math.isfinite(spread) or math.log(spread) / math.log(q) > NMS_GRID_CLASSES:
        return None
    # class k: sides in [bound[k], bound[k + 1]); each bound over 1/t times the one before
    # (Python's pow, the C library's: no NumPy transcendental decides a class)
    try:
        bound = np.array([smallest * q ** k
                          for k in range(int(math.log(spread) / math.log(q)) + 4)])
    except OverflowError:  # a tiny thr (eta ~1e-45) and sides far apart: q ** k past 1e308
        return None
    if not np.isfinite(bound).all():
        return None
    cw = np.searchsorted(bound, W, "right") - 1
    ch = np.searchsorted(bound, H, "right") - 1
    with np.errstate(all="ignore"):
        row = np.floor(Y1 / (c * bound[ch + 1]))
    if not (np.isfinite(row).all() and np.abs(row).max() < F64(1 << 40)):
        return None
    row = row.astype(np.int64)
    cw0, ch0 = -1, -1
    nch = int(ch.max()) - ch0 + 2
    code = (cw - cw0) * nch + (ch - ch0)
    o = np.lexsort((X1, row, code))
    code, row, X1, Y1, W, H, cw, ch = (v[o] for v in (code, row, X1, Y1, W, H, cw, ch))
    # classes (runs of code), their rows; groups (runs of (code, row)) keyed in that order
    cstart = np.flatnonzero(np.r_[True, code[1:] != code[:-1]])
    ccount = np.diff(np.r_[cstart, m])
    ucode = code[cstart]
    rmin, rmax = row[cstart], row[cstart + ccount - 1]
    span = rmax - rmin + 1
    if span.sum(dtype=F64) > 2.0 ** 62:
        return None
    base = np.cumsum(span) - span
    cls = np.repeat(np.arange(ucode.size), ccount)
    gkey = base[cls] + (row - rmin[cls])
    gstart = np.flatnonzero(np.r_[True, gkey[1:] != gkey[:-1]])
    ugkey = gkey[gstart]
    G = ugkey.size
    gid = np.repeat(np.arange(G), np.diff(np.r_[gstart, m]))
    # one sorted key: group + x1 scaled into [0, 0.5]; eps covers its rounding
    xmin = X1.min()
    xs = max(float(X1.max() - xmin), 1.0) * 2.0
    comp = gid + (X1 - xmin) / xs
    eps = 8 * np.finfo(F64).eps * (G + 1)
    rel = 1e-9
    found = []
    for dw, dh in _GRID_OFFSETS:
        tcode = code + (dw * nch + dh)
        ct = np.minimum(np.searchsorted(ucode, tcode), ucode.size - 1)
        a = np.flatnonzero(ucode[ct] == tcode)
        if a.size == 0:
            continue
        ct = ct[a]
        hmax = bound[ch[a] + (dh + 1)]  # the target class's largest height, width
        wmax = bound[cw[a] + (dw + 1)]
        gy = c * hmax  # its rows' height (as the boxes' rows were computed)
        ya, xa = Y1[a], X1[a]
        rlo = np.floor((ya - c * hmax * (1 + rel) - rel * np.abs(ya)) / gy).astype(np.int64)
        rhi = np.floor((ya + c * H[a] * (1 + rel) + rel * np.abs(ya)) / gy).astype(np.int64)
        rlo = np.maximum(rlo, rmin[ct])
        if dw == 0 and dh == 0:
            rlo = np.maximum(rlo, row[a])  # rows above: found from the other box
        rhi = np.minimum(rhi, rmax[ct])
        xlo = np.clip((xa - c * wmax * (1 + rel) - rel * np.abs(xa) - xmin) / xs - eps,
                      -0.25, 0.75)
        xhi = np.clip((xa + c * W[a] * (1 + rel) + rel * np.abs(xa) - xmin) / xs + eps,
                      -0.25, 0.75)
        r = rlo
        while True:
            live = r <= rhi
            if not live.all():
                a, ct, r, rhi, xlo, xhi = (v[live] for v in (a, ct, r, rhi, xlo, xhi))
            if a.size == 0:
                break
            gk = base[ct] + (r - rmin[ct])
            g = np.minimum(np.searchsorted(ugkey, gk), G - 1)
            lo = np.searchsorted(comp, g + xlo, "left")
            hi = np.searchsorted(comp, g + xhi, "right")
            if dw == 0 and dh == 0:  # the box's own row: the boxes after it
                lo = np.where(r == row[a], np.maximum(lo, a + 1), lo)
            n = np.where(ugkey[g] == gk, hi - lo, 0)
            k = np.flatnonzero(n > 0)
            if k.size:  # (int32: a few per box and row searched)
                found.append((a[k].astype(np.int32), lo[k].astype(np.int32),
                              n[k].astype(np.int32)))
            r = r + 1
    if not found:
        z = np.zeros(0, np.int64)
        return o, z, z, z
    a, lo, cnt = (np.concatenate(v) for v in zip(*found))
    return o, a, lo, cnt


def grid_pairs(x1, y1, x2, y2, area, thr, norm, ranges) -> tuple[np.ndarray, np.ndarray]:
    """The suppressing pairs (u, v) among the grid's candidates: visiting positions u < v
    (suppressing). Examined NMS_GRID_CHUNK candidates at a time, in the sorted order
    (neighbours in memory)."""
    o, A, LO, CNT = ranges
    sx1, sy1, sx2, sy2, sarea = (v[o] for v in (x1, y1, x2, y2, area))
    us, vs = [], []
    ends = np.cumsum(CNT, dtype=np.int64)
    i, Q = 0, A.size
    while i < Q:
        done = int(ends[i - 1]) if i else 0
        j = max(i + 1, int(np.searchsorted(ends, done + NMS_GRID_CHUNK, "right")))
        a, lo, cnt = A[i:j], LO[i:j], CNT[i:j]
        P = int(ends[j - 1]) - done
        p = np.repeat(a, cnt)
        q = np.repeat(lo - (np.cumsum(cnt, dtype=np.int64) - cnt), cnt) + np.arange(P)
        k = suppressing(sx1, sy1, sx2, sy2, sarea, thr, norm, p, q)
        u, v = o[p[k]], o[q[k]]
        us.append(np.minimum(u, v))
        vs.append(np.maximum(u, v))
        i = j
    if not us:
        z = np.zeros(0, np.int64)
        return z, z
    return np.concatenate(us), np.concatenate(vs)


def nms_grid(x1, y1, x2, y2, area, thr, norm, limit: int,
             max_pairs: int | None = None) -> np.ndarray | None:
    """Greedy NMS at a fixed threshold from the pairs the grid search finds (grid_ranges:
    about a box's own size class, rows and x1 window, so the work follows the pairs that can
    overlap, not the square of the boxes): positions kept, the first ``limit``. None where
    the boxes do not fit the grid or give more than ``max_pairs`` candidates (too dense: the
    caller runs the block NMS)."""
    if thr >= 1:  # an IoU of boxes with positive finite areas is <= 1 in T too
        ok = (area > 0) & np.isfinite(area)
        return np.arange(min(limit, x1.size)) if ok.all() else None
    ranges = grid_ranges(x1, y1, x2, y2, thr, norm)
    if ranges is None or not (np.all(area > 0) and np.isfinite(area).all()):
        return None
    if int(ranges[3].sum(dtype=np.int64)) > (NMS_GRID_PAIRS if max_pairs is None else max_pairs):
        return None
    u, v = grid_pairs(x1, y1, x2, y2, area, thr, norm, ranges)
    return nms_from_pairs(x1.size, u, v, limit)
