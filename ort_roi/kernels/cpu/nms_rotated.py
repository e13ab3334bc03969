"""mmdeploy::NMSRotated's compute step: its rotated IoU vectorised over pairs of boxes, each
pair's float32 arithmetic in the C++ kernel's order (definitions/nms_rotated.py is the same
computation one pair at a time; tests/test_nms_rotated.py holds this to it and to
tests/literal.py).

Per pair: the 16 edge crossings and 8 contained corners as 24 slots (a mask keeps the C++
list's order), the lowest point, the hull sort replayed as libstdc++'s insertion sort with the
kernel's tolerant comparator (ranges of more than 16 points, rare, by the literal introsort of
definitions.cxx), the Graham scan and the area with per-pair stacks. The greedy NMS then walks
the score order (proposals.order.order_sort: std::sort's order where scores tie) in blocks of
rows, computing only pairs whose both boxes are still kept, at most PAIR_CHUNK pairs at once;
an image's classes share each ordered pair's answer (ovr > iou_threshold), computed once.
"""

from __future__ import annotations

import math

import numpy as np

from ...definitions.cxx import THRESHOLD, std_sort
from .proposals.order import order_sort

F, F64 = np.float32, np.float64
#: the most box pairs computed at once (their 24-slot work arrays: ~4 KiB a pair)
PAIR_CHUNK = 1 << 14
#: an image's classes share what its pairs compared to (a byte a pair) up to this many pairs
#: (16 MiB: 4096 boxes); past it each class computes its own
KNOWN_PAIRS = 1 << 24


def half_cos_sin(theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(float)cos(theta) * 0.5f and (float)sin(theta) * 0.5f, theta float32 widened to double:
    the C library's cos / sin (``math``), as the C++ calls them, one value at a time."""
    t = theta.astype(F64).tolist()
    c = np.array([math.cos(v) if math.isfinite(v) else math.nan for v in t], F64)
    s = np.array([math.sin(v) if math.isfinite(v) else math.nan for v in t], F64)
    return c.astype(F) * F(0.5), s.astype(F) * F(0.5)


def _corners(x, y, w, h, c2, s2):
    """get_rotated_vertices over pairs: [P, 4] x and y of the corners, in float32."""
    p0x, p0y = x - s2 * h - c2 * w, y + c2 * h - s2 * w
    p1x, p1y = x + s2 * h - c2 * w, y - c2 * h - s2 * w
    two = F(2)
    return (np.stack([p0x, p1x, two * x - p0x, two * x - p1x], 1),
            np.stack([p0y, p1y, two * y - p0y, two * y - p1y], 1))


def _inside(px, py, ox, oy):
    """[P, 4]: which corners (px, py) lie within the rectangle (ox, oy) (its AB, AD sides)."""
    abx, aby = ox[:, 1:2] - ox[:, 0:1], oy[:, 1:2] - oy[:, 0:1]
    dax, day = ox[:, 0:1] - ox[:, 3:4], oy[:, 0:1] - oy[:, 3:4]
    ab, ad = abx * abx + aby * aby, dax * dax + day * day
    apx, apy = px - ox[:, 0:1], py - oy[:, 0:1]
    pab, pad = apx * abx + apy * aby, -(apx * dax + apy * day)
    return (pab >= 0) & (pad >= 0) & (pab <= ab) & (pad <= ad)


def _before(ax, ay, bx, by):
    """convex_hull_graham's comparator over arrays: a before b."""
    c = ax * by - bx * ay
    near = np.abs(c).astype(F64) < 1e-6
    return np.where(near, (ax * ax + ay * ay) < (bx * bx + by * by), c > 0)


def _sort_points(qx, qy, num):
    """std::sort(q + 1, q + num) with the hull comparator, per pair, in place: the insertion
    sort libstdc++ runs on ranges of at most 16 points, vectorised; longer ranges literally."""
    n = num - 1
    big = np.flatnonzero(n > THRESHOLD)
    for r in big.tolist():
        pts = list(zip(qx[r, 1:num[r]].tolist(), qy[r, 1:num[r]].tolist()))
        pts = [(F(a), F(b)) for a, b in pts]
        std_sort(pts, lambda a, b: bool(_before(a[0], a[1], b[0], b[1])))
        qx[r, 1:num[r]] = [p[0] for p in pts]
        qy[r, 1:num[r]] = [p[1] for p in pts]
    small = n <= THRESHOLD
    top = int(num[small].max()) if small.any() else 0
    for i in range(2, top):  # __insertion_sort: first = 1
        act = np.flatnonzero(small & (i < num))
        if not act.size:
            continue
        vx, vy = qx[act, i].copy(), qy[act, i].copy()
        c0 = _before(vx, vy, qx[act, 1], qy[act, 1])
        front = act[c0]
        if front.size:  # move_backward(first, i, i + 1); *first = val
            qx[front, 2:i + 1] = qx[front, 1:i]
            qy[front, 2:i + 1] = qy[front, 1:i]
            qx[front, 1], qy[front, 1] = vx[c0], vy[c0]
        rest, rx, ry = act[~c0], vx[~c0], vy[~c0]
        pos = np.full(rest.size, i)
        moving = np.ones(rest.size, bool)
        for nx in range(i - 1, 1, -1):  # __unguarded_linear_insert (stops at first at last)
            moving &= _before(rx, ry, qx[rest, nx], qy[rest, nx])
            m = rest[moving]
            if not m.size:
                break
            qx[m, nx + 1], qy[m, nx + 1] = qx[m, nx], qy[m, nx]
            pos[moving] = nx
        qx[rest, pos], qy[rest, pos] = rx, ry


def _hull_area(X, Y, num):
    """convex_hull_graham (shifted) then polygon_area over pairs whose points are the first
    num[p] of X[p], Y[p] ([P, 24] float32): [P] float32."""
    P, S = X.shape
    rows = np.arange(P)
    t = np.zeros(P, np.int64)
    for i in range(1, S):  # the lowest point (then leftmost), first found
        yi, yt, xi, xt = Y[:, i], Y[rows, t], X[:, i], X[rows, t]
        t = np.where((i < num) & ((yi < yt) | ((yi == yt) & (xi < xt))), i, t)
    qx, qy = X - X[rows, t][:, None], Y - Y[rows, t][:, None]
    q0x, q0y = qx[:, 0].copy(), qy[:, 0].copy()
    qx[:, 0], qy[:, 0] = qx[rows, t], qy[rows, t]
    qx[rows, t], qy[rows, t] = q0x, q0y
    _sort_points(qx, qy, num)
    dist = (qx * qx + qy * qy).astype(F64)
    slot = np.arange(S)
    far = (dist > 1e-8) & (slot >= 1) & (slot < num[:, None])
    k = np.where(far.any(1), np.argmax(far, 1), num)
    area = np.zeros(P, F)
    live = np.flatnonzero(k < num)
    if not live.size:
        return area
    qx, qy, k, n = qx[live], qy[live], k[live], num[live]
    L = live.size
    lr = np.arange(L)
    sx, sy = np.zeros((L, S), F), np.zeros((L, S), F)
    sx[:, 0], sy[:, 0] = qx[:, 0], qy[:, 0]
    sx[:, 1], sy[:, 1] = qx[lr, k], qy[lr, k]
    m = np.full(L, 2)
    for i in range(2, S):
        act = (i > k) & (i < n)
        if not act.any():
            continue
        ix, iy = qx[:, i], qy[:, i]
        while True:
            mm = np.maximum(m, 2)
            ax, ay = sx[lr, mm - 2], sy[lr, mm - 2]
            bx, by = sx[lr, mm - 1], sy[lr, mm - 1]
            c = (ix - ax) * (by - ay) - (bx - ax) * (iy - ay)  # cross(q[i]-a, b-a)
            pop = act & (m > 1) & (c >= 0)
            if not pop.any():
                break
            m = m - pop
        w = np.flatnonzero(act)
        sx[w, m[w]], sy[w, m[w]] = ix[w], iy[w]
        m = m + act
    acc = np.zeros(L, F)
    for i in range(1, S - 1):
        act = i + 1 < m
        if not act.any():
            break
        ax, ay = sx[:, i] - sx[:, 0], sy[:, i] - sy[:, 0]
        bx, by = sx[:, i + 1] - sx[:, 0], sy[:, i + 1] - sy[:, 0]
        term = np.abs(ax * by - bx * ay).astype(F64)
        acc = np.where(act, (acc.astype(F64) + term).astype(F), acc)
    area[live] = np.where(m > 2, (acc.astype(F64) / 2.0).astype(F), F(0))
    return area


def pair_ious(b1: np.ndarray, b2: np.ndarray, cs1, cs2) -> np.ndarray:
    """The IoU mmdeploy's kernel compares for each pair (b1[p] the higher-scored box):
    [P] float32. b1, b2: [P, 5] float32 (cx, cy, w, h, theta); cs1, cs2: their half cos /
    sin (``half_cos_sin``)."""
    P = b1.shape[0]
    sx = (b1[:, 0] + b2[:, 0]).astype(F64) / 2.0
    sy = (b1[:, 1] + b2[:, 1]).astype(F64) / 2.0
    x1, y1 = (b1[:, 0].astype(F64) - sx).astype(F), (b1[:, 1].astype(F64) - sy).astype(F)
    x2, y2 = (b2[:, 0].astype(F64) - sx).astype(F), (b2[:, 1].astype(F64) - sy).astype(F)
    area1, area2 = b1[:, 2] * b1[:, 3], b2[:, 2] * b2[:, 3]
    p1x, p1y = _corners(x1, y1, b1[:, 2], b1[:, 3], *cs1)
    p2x, p2y = _corners(x2, y2, b2[:, 2], b2[:, 3], *cs2)
    v1x, v1y = np.roll(p1x, -1, 1) - p1x, np.roll(p1y, -1, 1) - p1y
    v2x, v2y = np.roll(p2x, -1, 1) - p2x, np.roll(p2y, -1, 1) - p2y
    # edge i of box 1 (axis 1) by edge j of box 2 (axis 2)
    a_x, a_y = v1x[:, :, None], v1y[:, :, None]
    b_x, b_y = v2x[:, None, :], v2y[:, None, :]
    det = b_x * a_y - a_x * b_y
    dx, dy = p2x[:, None, :] - p1x[:, :, None], p2y[:, None, :] - p1y[:, :, None]
    t1 = (b_x * dy - dx * b_y) / det
    t2 = (a_x * dy - dx * a_y) / det
    ok = ~(np.abs(det).astype(F64) <= 1e-14) & (t1 >= 0) & (t1 <= 1) & (t2 >= 0) & (t2 <= 1)
    ex, ey = p1x[:, :, None] + a_x * t1, p1y[:, :, None] + a_y * t1
    X = np.concatenate([ex.reshape(P, 16), p1x, p2x], 1)
    Y = np.concatenate([ey.reshape(P, 16), p1y, p2y], 1)
    ok = np.concatenate([ok.reshape(P, 16), _inside(p1x, p1y, p2x, p2y),
                         _inside(p2x, p2y, p1x, p1y)], 1)
    num = ok.sum(1)
    inter = np.zeros(P, F)
    many = np.flatnonzero(num > 2)
    if many.size:
        order = np.argsort(~ok[many], axis=1, kind="stable")  # the found points, in order
        Xs = np.take_along_axis(X[many], order, 1)
        Ys = np.take_along_axis(Y[many], order, 1)
        inter[many] = _hull_area(Xs, Ys, num[many])
    return inter / (area1 + area2 - inter)


def _keep(boxes: np.ndarray, cs, order: np.ndarray, iou_threshold: F,
          known: np.ndarray | None = None) -> np.ndarray:
    """The greedy NMS over boxes in ``order``: [B] bool by position in the order. ``known``:
    [B, B] int8 by box index, the image's pairs already compared (i, the higher-scored,
    then j: 0 not yet, 1 kept, 2 suppressed), shared by its classes and filled here."""
    B = order.size
    keep = np.ones(B, bool)
    ob = boxes[order]
    oc, os_ = cs[0][order], cs[1][order]
    a = 0
    while a < B:
        alive = np.flatnonzero(keep)
        later = alive[alive >= a]
        rows = max(1, PAIR_CHUNK // max(later.size, 1))
        block = later[:rows]
        if not block.size:
            break
        end = int(block[-1]) + 1
        # pairs (i, j): i in the block, j after i, both kept now
        ii, jj = np.nonzero(block[:, None] < later[None, :])
        i, j = block[ii], later[jj]
        sup = np.zeros(i.size, bool)
        if i.size:
            todo = np.arange(i.size)
            if known is not None:
                seen = known[order[i], order[j]]
                sup = seen == 2
                todo = np.flatnonzero(seen == 0)
            for c in range(0, todo.size, PAIR_CHUNK):  # one row may hold more pairs
                part = todo[c:c + PAIR_CHUNK]
                ti, tj = i[part], j[part]
                ovr = pair_ious(ob[ti], ob[tj], (oc[ti], os_[ti]), (oc[tj], os_[tj]))
                sup[part] = ovr > iou_threshold
                if known is not None:
                    known[order[ti], order[tj]] = 1 + sup[part]
        bounds = np.searchsorted(ii, np.arange(block.size + 1))
        for n, r in enumerate(block.tolist()):  # in order: rows suppressed in the block skip
            if keep[r]:
                lo, hi = bounds[n], bounds[n + 1]
                keep[j[lo:hi][sup[lo:hi]]] = False
        a = end
    return keep


def nms_rotated(boxes: np.ndarray, *, scores: np.ndarray, iou_threshold: float,
                score_threshold: float) -> np.ndarray:
    """NMSRotated over checked inputs: boxes [N, B, 5] float32, scores [N, C, B] float32 (no
    NaN). Returns [S, 3] int64 rows [image, class, box]."""
    N, B = boxes.shape[:2]
    C = scores.shape[1]
    iou_t, score_t = F(iou_threshold), F(score_threshold)
    out = []
    for k in range(N):
        cs = half_cos_sin(boxes[k, :, 4])
        known = np.zeros((B, B), np.int8) if C > 1 and B * B <= KNOWN_PAIRS else None
        for g in range(C):
            s = scores[k, g]
            order = order_sort(s)
            keep = _keep(boxes[k], cs, order, iou_t, known)
            sel = order[keep & (s[order] > score_t)]
            if sel.size:
                out.append(np.stack([np.full(sel.size, k), np.full(sel.size, g), sel], 1))
    if not out:
        return np.zeros((0, 3), np.int64)
    return np.concatenate(out).astype(np.int64)
