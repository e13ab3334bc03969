"""mmdeploy::NMSRotated, one class and one pair of boxes at a time, in float32 as mmdeploy's
onnxruntime kernel computes it (csrc/mmdeploy/backend_ops/onnxruntime/nms_rotated/
nms_rotated.cpp, MMDeploy v1.3.1), step by step: docs/semantics.md says it in prose.

Per image k and class g: the boxes' indices sorted by score, highest first (libstdc++'s
std::sort, not stable: ``definitions.cxx.std_sort``); greedy NMS over *every* box (boxes under
``score_threshold`` suppress too), box j dropped when IoU(i, j) > iou_threshold for a kept i
before it; then the kept boxes with score > score_threshold, in that order, as rows
[k, g, box index]. The IoU: both boxes moved by the mean of their centres (in double), their
corners (cos / sin of theta in double, rounded to float), the polygon of their edge crossings
and contained corners, its Graham-scan hull (points sorted by another std::sort with a
tolerant comparator) and the hull's area, in float; IoU = inter / (area1 + area2 - inter).
"""

from __future__ import annotations

import math

import numpy as np

from .cxx import std_sort

F = np.float32
F64 = np.float64


def corners(x, y, w, h, a) -> list:
    """get_rotated_vertices: the four corners (float32) of the box centred at (x, y), sides
    w, h, turned by a (radians); cos / sin in double, rounded to float, halved."""
    a = float(a)  # the C library's cos / sin (NaN for inf, where Python's raise)
    c2 = F(math.cos(a) if math.isfinite(a) else math.nan) * F(0.5)
    s2 = F(math.sin(a) if math.isfinite(a) else math.nan) * F(0.5)
    p0 = (x - s2 * h - c2 * w, y + c2 * h - s2 * w)
    p1 = (x + s2 * h - c2 * w, y - c2 * h - s2 * w)
    p2 = (F(2) * x - p0[0], F(2) * y - p0[1])
    p3 = (F(2) * x - p1[0], F(2) * y - p1[1])
    return [p0, p1, p2, p3]


def cross(a, b):
    """cross_2d(A, B) = A.x * B.y - B.x * A.y (float32)."""
    return a[0] * b[1] - b[0] * a[1]


def dot(a, b):
    """dot_2d(A, B) = A.x * B.x + A.y * B.y (float32)."""
    return a[0] * b[0] + a[1] * b[1]


def sub(a, b):
    return (a[0] - b[0], a[1] - b[1])


def _inside(pts, of) -> list:
    """The points of ``pts`` within rectangle ``of`` (projections on its sides AB, AD)."""
    AB, DA = sub(of[1], of[0]), sub(of[0], of[3])
    ab, ad = dot(AB, AB), dot(DA, DA)
    found = []
    for p in pts:
        AP = sub(p, of[0])
        pab, pad = dot(AP, AB), -dot(AP, DA)
        if pab >= 0 and pad >= 0 and pab <= ab and pad <= ad:
            found.append(p)
    return found


def intersection_points(pts1, pts2) -> list:
    """get_intersection_points: edge crossings (edge i of box 1 by edge j of box 2, i then j),
    then box 1's corners inside box 2, then box 2's inside box 1."""
    vec1 = [sub(pts1[(i + 1) % 4], pts1[i]) for i in range(4)]
    vec2 = [sub(pts2[(i + 1) % 4], pts2[i]) for i in range(4)]
    found = []
    for i in range(4):
        for j in range(4):
            det = cross(vec2[j], vec1[i])
            if abs(float(det)) <= 1e-14:  # parallel (float compared in double)
                continue
            v12 = sub(pts2[j], pts1[i])
            t1, t2 = cross(vec2[j], v12) / det, cross(vec1[i], v12) / det
            if t1 >= 0 and t1 <= 1 and t2 >= 0 and t2 <= 1:
                found.append((pts1[i][0] + vec1[i][0] * t1, pts1[i][1] + vec1[i][1] * t1))
    return found + _inside(pts1, pts2) + _inside(pts2, pts1)


def hull_before(a, b) -> bool:
    """convex_hull_graham's sort comparator: by angle (cross > 0), points within 1e-6 of the
    same angle by distance to the start."""
    c = cross(a, b)
    if abs(float(c)) < 1e-6:
        return bool(dot(a, a) < dot(b, b))
    return bool(c > 0)


def hull_area(p: list) -> F:
    """convex_hull_graham (shifted to the lowest point) then polygon_area, in float32."""
    t = 0
    for i in range(1, len(p)):
        if p[i][1] < p[t][1] or (p[i][1] == p[t][1] and p[i][0] < p[t][0]):
            t = i
    q = [sub(v, p[t]) for v in p]
    q[0], q[t] = q[t], q[0]
    rest = q[1:]
    std_sort(rest, hull_before)
    q = q[:1] + rest
    k = next((k for k in range(1, len(q)) if float(dot(q[k], q[k])) > 1e-8), len(q))
    if k == len(q):
        return F(0)  # one point
    stack = [q[0], q[k]]
    for i in range(k + 1, len(q)):
        while len(stack) > 1 and cross(sub(q[i], stack[-2]), sub(stack[-1], stack[-2])) >= 0:
            stack.pop()
        stack.append(q[i])
    if len(stack) <= 2:
        return F(0)
    area = F(0)
    for i in range(1, len(stack) - 1):  # float += |cross| (exact in double, rounded)
        area = F(F64(area) + F64(abs(cross(sub(stack[i], stack[0]), sub(stack[i + 1],
                                                                          stack[0])))))
    return F(F64(area) / 2.0)


def rotated_iou(b1, b2) -> F:
    """The IoU the kernel compares: both boxes moved by the mean of their centres (float sum,
    halved and subtracted in double, stored as float), inter / (area1 + area2 - inter)."""
    sx = F64(b1[0] + b2[0]) / 2.0
    sy = F64(b1[1] + b2[1]) / 2.0
    x1, y1 = F(F64(b1[0]) - sx), F(F64(b1[1]) - sy)
    x2, y2 = F(F64(b2[0]) - sx), F(F64(b2[1]) - sy)
    area1, area2 = b1[2] * b1[3], b2[2] * b2[3]
    pts = intersection_points(corners(x1, y1, b1[2], b1[3], b1[4]),
                              corners(x2, y2, b2[2], b2[3], b2[4]))
    inter = F(0) if len(pts) <= 2 else hull_area(pts)
    return inter / (area1 + area2 - inter)


def nms_rotated(boxes, scores, *, iou_threshold, score_threshold):
    """mmdeploy::NMSRotated over boxes [N, B, 5] (cx, cy, w, h, theta) and scores [N, C, B]
    (float32): [S, 3] int64 rows [image, class, box], image by image, class by class, by
    descending score within a class (libstdc++'s std::sort order where scores tie)."""
    boxes, scores = np.asarray(boxes, F), np.asarray(scores, F)
    iou_t, score_t = F(iou_threshold), F(score_threshold)
    rows = []
    with np.errstate(all="ignore"):
        _classes(boxes, scores, iou_t, score_t, rows)
    return np.array(rows, np.int64).reshape(-1, 3)


def _classes(boxes, scores, iou_t, score_t, rows) -> None:
    N, B = boxes.shape[:2]
    for k in range(N):
        box = [tuple(F(v) for v in boxes[k, i]) for i in range(B)]
        # a pair's answer (box i before box j: 1 kept, 2 suppressed) is the same in every
        # class: remembered, so an image's classes compare each ordered pair once
        known = bytearray(B * B) if B * B <= 1 << 24 else None

        def suppresses(i, j):
            if known is None:
                return bool(rotated_iou(box[i], box[j]) > iou_t)
            if not known[i * B + j]:
                known[i * B + j] = 2 if rotated_iou(box[i], box[j]) > iou_t else 1
            return known[i * B + j] == 2

        for g in range(scores.shape[1]):
            sc = [F(v) for v in scores[k, g]]
            order = list(range(B))
            std_sort(order, lambda i, j: bool(sc[i] > sc[j]))
            keep = [True] * B
            for a in range(B):
                if not keep[a]:
                    continue
                for b in range(a + 1, B):
                    if keep[b] and suppresses(order[a], order[b]):
                        keep[b] = False
            rows += [[k, g, order[a]] for a in range(B) if keep[a] and sc[order[a]] > score_t]
