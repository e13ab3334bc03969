#!/usr/bin/env python3
"""How far ort_roi's RoIAlign is from Paddle's CPU roi_align, and what bit-for-bit would cost.

    python tools/roi_align_paddle_order.py            # the divergence table (needs paddlepaddle)
    python tools/roi_align_paddle_order.py --time     # + W1-W3: ort_roi's kernel against the
                                                      #   vectorised Paddle-order transcription

``paddle_order_roi_align`` below transcribes the float arithmetic of Paddle's CPU kernel
(paddle/phi/kernels/cpu/roi_align_kernel.cc, Paddle 3.3.1: GetIndexesAndRatios, Interpolate,
AvgPool) in T, vectorised over channels and bins:

- ``roi_xmin = box * T(float(spatial_scale)) - offset``; sizes (at least 1 unless aligned);
  ``bin = size / pooled``; grid = sampling_ratio or ``ceil(size / pooled)``;
- sample ``y = ymin + bin_h * (py + T(iy + .5f) / T(grid_h))``, off the map when y < -1 or
  y > H (all four weights 0, all four taps pixel 0 of the image); clamped ``y <= 0 -> 0``;
  ``low = (size_t)y``, a low index >= H-1 uses H-1 alone with ``y = low``;
  ``ratio_y = high - y`` (not ``1 - (y - low)``);
- weights ``xy = rx*ry, Xy = (1-rx)*ry, xY = rx*(1-ry), XY = (1-rx)*(1-ry)``;
- a sample is ``((xy*d[yl,xl] + Xy*d[yl,xh]) + xY*d[yh,xl]) + XY*d[yh,xh]``, the bin's sum
  ``((0 + v_0) + v_1) + ...`` over (iy, ix) in order, times ``T(1.0 / (grid_h*grid_w))``.

No FMA contraction: the transcription equals live Paddle bit for bit (every case below, float32
and float64). ort_roi's kernel instead applies separable bin weights with two GEMMs per box
(docs/semantics.md), another order of the same sums. The transcription is as vectorised as
NumPy allows (row gathers of an NHWC copy in channel blocks, one pass per tap, product and
sum): it is the cost of bit-for-bit in NumPy, which --time measures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np


def _axis(start, bin_size, g: int, pooled: int, size: int):
    """Paddle's samples along one axis for boxes [B]: (off the map, low, high, ratio of the
    low tap = high - y), each [B, pooled, g]."""
    t = start.dtype.type
    k = (np.arange(g, dtype=np.float32) + np.float32(0.5)).astype(start.dtype) / t(g)
    p = np.arange(pooled, dtype=start.dtype)[:, None]
    y = start[:, None, None] + bin_size[:, None, None] * (p + k)
    off = (y < -1) | (y > size)
    y = np.where(y <= 0, t(0), y)
    low = np.minimum(y, t(size)).astype(np.intp)  # (size_t)y; y > size is off the map
    end = low >= size - 1
    low = np.where(end, size - 1, low)
    high = np.where(end, size - 1, low + 1)
    ratio = np.where(end, t(0), high.astype(start.dtype) - y)
    return off, low, high, ratio


def _taps(start, bin_size, image, gh: int, gw: int, ph: int, pw: int, H: int, W: int):
    """Boxes [B] of one grid (gh, gw): row indices into the NHWC map and weights, both
    [gh*gw, 4, B*ph*pw] (sample in Paddle's order, tap xy Xy xY XY, bin)."""
    t = start.dtype.type
    B = start.shape[0]
    oy, yl, yh, ry = _axis(start[:, 0], bin_size[:, 0], gh, ph, H)
    ox, xl, xh, rx = _axis(start[:, 1], bin_size[:, 1], gw, pw, W)

    def along_y(a):
        return a.transpose(0, 2, 1)[:, :, None, :, None]  # [B, gh, 1, ph, 1]

    def along_x(a):
        return a.transpose(0, 2, 1)[:, None, :, None, :]  # [B, 1, gw, 1, pw]

    off = along_y(oy) | along_x(ox)
    ry, rx, one = along_y(ry), along_x(rx), t(1)
    w = np.stack(np.broadcast_arrays(rx * ry, (one - rx) * ry, rx * (one - ry),
                                     (one - rx) * (one - ry)), 1)
    w = np.where(off[:, None], t(0), w)  # [B, 4, gh, gw, ph, pw]
    yl, yh, xl, xh = along_y(yl) * W, along_y(yh) * W, along_x(xl), along_x(xh)
    idx = np.stack(np.broadcast_arrays(yl + xl, yl + xh, yh + xl, yh + xh), 1)
    idx = np.where(off[:, None], 0, idx) + (image * (H * W))[:, None, None, None, None, None]
    K, M = gh * gw, ph * pw
    return (idx.reshape(B, 4, K, M).transpose(2, 1, 0, 3).reshape(K, 4, B * M),
            w.reshape(B, 4, K, M).transpose(2, 1, 0, 3).reshape(K, 4, B * M))


def paddle_order_roi_align(X: np.ndarray, boxes: np.ndarray, boxes_num: np.ndarray,
                           pooled_height: int, pooled_width: int, spatial_scale: float,
                           sampling_ratio: int, aligned: bool, block: int = 256,
                           threads: bool = True) -> np.ndarray:
    """Paddle's CPU roi_align, its float arithmetic in Paddle's order (module doc).

    Args:
        X: [N, C, H, W] float32 or float64.
        boxes: [R, 4] rows [x1, y1, x2, y2], X's dtype (no inverted box with adaptive grids:
            Paddle aborts there).
        boxes_num: [N] boxes per image.
        pooled_height, pooled_width, spatial_scale, sampling_ratio, aligned: Paddle's.
        block: channels per block of the NHWC copy.
        threads: share boxes among ort_roi's worker threads.

    Returns:
        [R, C, pooled_height, pooled_width] of X's dtype; a bin of 0 samples is NaN, as
        Paddle's (0 * inf).
    """
    from ort_roi.kernels.cpu.parallel import for_ranges

    N, C, H, W = X.shape
    R = boxes.shape[0]
    t = X.dtype.type
    ph, pw = pooled_height, pooled_width
    out = np.empty((R, C, ph, pw), X.dtype)
    if R == 0 or C == 0:
        return out
    image = np.repeat(np.arange(N), np.asarray(boxes_num, np.int64))
    off = t(0.5) if aligned else t(0)
    c = boxes[:, [1, 0, 3, 2]] * t(np.float32(spatial_scale)) - off  # ymin xmin ymax xmax
    size = c[:, 2:] - c[:, :2]
    if not aligned:
        size = np.maximum(size, t(1))
    pooled = np.array([ph, pw], X.dtype)
    if sampling_ratio > 0:
        grid = np.full((R, 2), sampling_ratio, np.int64)
    else:
        grid = np.ceil(size / pooled).astype(np.int64)
    start, bin_size = c[:, :2], size / pooled
    # channel blocks of an NHWC copy: [blocks, N*H*W, cb]; W1's C = 1024 in one block (rows
    # of 4 KiB) was gathered 2x slower (measured)
    cb = min(C, block)
    nb = -(-C // cb)
    Xp = X if nb * cb == C else np.concatenate(
        [X, np.zeros((N, nb * cb - C, H, W), X.dtype)], 1)
    Xb = np.ascontiguousarray(Xp.reshape(N, nb, cb, H, W).transpose(1, 0, 3, 4, 2)).reshape(
        nb, N * H * W, cb)
    M = ph * pw
    mc = max(1, (1 << 17) // (4 * cb))  # bins per step: the gathered taps ~512 KiB
    per = max(1, (1 << 18) // (M * cb))  # boxes per step
    key = grid[:, 0] * (1 << 31) + grid[:, 1]
    for k_ in np.unique(key):
        rs = np.flatnonzero(key == k_)
        gh, gw = int(grid[rs[0], 0]), int(grid[rs[0], 1])
        K = gh * gw
        if K <= 0:
            with np.errstate(invalid="ignore"):
                out[rs] = t(0) * t(np.inf)  # Paddle's sum * (1.0 / 0): the machine's NaN
            continue
        count = t(1.0 / K)

        def work(a: int, b: int) -> None:
            G = np.empty((4, mc, cb), X.dtype)
            acc = np.empty((per * M, cb), X.dtype)
            for b0 in range(a, b, per):
                sel = rs[b0:min(b, b0 + per)]
                B = sel.size
                idx, w = _taps(start[sel], bin_size[sel], image[sel], gh, gw, ph, pw, H, W)
                for ci in range(nb):
                    Xc = Xb[ci]
                    for m0 in range(0, B * M, mc):
                        m1 = min(B * M, m0 + mc)
                        n = m1 - m0
                        s = acc[m0:m1]
                        for k in range(K):
                            if n == mc:  # into the reused buffer
                                g = G
                                Xc.take(idx[k, :, m0:m1].ravel(), axis=0, mode="clip",
                                        out=G.reshape(4 * mc, cb))
                            else:
                                g = Xc.take(idx[k, :, m0:m1].ravel(), axis=0,
                                            mode="clip").reshape(4, n, cb)
                            np.multiply(g, w[k, :, m0:m1, None], out=g)
                            np.add(g[0], g[1], out=g[0])
                            np.add(g[0], g[2], out=g[0])
                            if k == 0:
                                np.add(g[0], g[3], out=s)  # 0 + v_0: the sign of 0 below
                            else:
                                np.add(g[0], g[3], out=g[0])
                                np.add(s, g[0], out=s)
                    A = acc[:B * M]
                    A *= count
                    A += t(0)  # Paddle's sum starts from +0: -0 becomes +0
                    c0, c1 = ci * cb, min(C, ci * cb + cb)
                    out[sel, c0:c1] = A.reshape(B, M, cb)[:, :, :c1 - c0].transpose(
                        0, 2, 1).reshape(B, c1 - c0, ph, pw)

        if threads:
            for_ranges(rs.size, work, min_chunk=per)
        else:
            work(0, rs.size)
    return out


# --- measurement ----------------------------------------------------------------------------


def make_case(rng, dtype, N: int, C: int, H: int, W: int, R: int, scale: float, mag: float,
              spread: float = 0.3):
    """Features of magnitude ``mag`` and boxes of 2 .. 0.8 x the image's size, centres up to
    ``spread`` x the image beyond its edges (across and outside the map)."""
    X = (rng.standard_normal((N, C, H, W)) * mag).astype(dtype)
    Hi, Wi = H / scale, W / scale
    cx = rng.uniform(-spread * Wi, (1 + spread) * Wi, R)
    cy = rng.uniform(-spread * Hi, (1 + spread) * Hi, R)
    bw, bh = rng.uniform(2, 0.8 * Wi, R), rng.uniform(2, 0.8 * Hi, R)
    boxes = np.stack([cx - bw / 2, cy - bh / 2, cx + bw / 2, cy + bh / 2], 1).astype(dtype)
    num = np.full(N, R // N, np.int32)
    num[: R % N] += 1
    return X, boxes, num


def paddle_roi_align(X, boxes, num, ph, pw, scale, sr, aligned):
    import paddle
    paddle.set_device("cpu")
    return paddle.vision.ops.roi_align(
        paddle.to_tensor(X), paddle.to_tensor(boxes), paddle.to_tensor(num),
        output_size=(ph, pw), spatial_scale=scale, sampling_ratio=sr,
        aligned=bool(aligned)).numpy()


def compare(got: np.ndarray, ref: np.ndarray) -> tuple[float, float, float]:
    """(max |got - ref|, max |got - ref| / max |ref|, fraction of elements equal)."""
    d = np.abs(got.astype(np.float64) - ref)
    scale = float(np.abs(ref).max()) or 1.0
    return float(d.max()), float(d.max()) / scale, float(np.mean(got == ref))


def divergence_table(seed: int = 0) -> bool:
    from ort_roi.ops.roi_align import roi_align

    rng = np.random.default_rng(seed)
    print("| dtype | aligned | sampling_ratio | scale | |X| | map | ort_roi vs Paddle: max abs "
          "| max abs / max|Paddle| | equal | transcription vs Paddle: equal |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    exact_everywhere = True
    for dtype in (np.float32, np.float64):
        for aligned in (0, 1):
            for sr in (-1, 0, 2):
                for scale, (N, C, H, W, R) in ((0.25, (2, 16, 24, 31, 40)),
                                                (0.1, (3, 8, 48, 64, 60))):
                    for mag in (1.0, 100.0):
                        X, boxes, num = make_case(rng, dtype, N, C, H, W, R, scale, mag)
                        ref = paddle_roi_align(X, boxes, num, 7, 5, scale, sr, aligned)
                        ours = roi_align(X, boxes, num, pooled_height=7, pooled_width=5,
                                         spatial_scale=scale, sampling_ratio=sr,
                                         aligned=aligned)
                        tr = paddle_order_roi_align(X, boxes, num, 7, 5, scale, sr, aligned)
                        same = bool(np.array_equal(tr.view(np.uint8), ref.view(np.uint8)))
                        exact_everywhere &= same
                        a, r, e = compare(ours, ref)
                        print(f"| {np.dtype(dtype).name} | {aligned} | {sr} | {scale} | {mag:g} "
                              f"| {N}x{C}x{H}x{W}, R={R} | {a:.2e} | {r:.2e} | {e:.3f} "
                              f"| {'bit for bit' if same else 'DIFFERS'} |")
    # edges: maps of one row / column, boxes past the map, large adaptive grids (up to 300
    # samples a bin side), empty boxes (NaN in Paddle with aligned=1 and adaptive grids)
    edge_boxes = np.array([[-3, -2, 5, 4], [0, 0, 0.5, 0.5], [-10, -10, -5, -5],
                           [0.2, 0.3, 30, 40], [1, 1, 1.5, 9], [5, 5, 5, 5], [3, 4, 9, 4],
                           [-100, -50, 600, 500]])
    print("\n| dtype | map | cases (aligned 0/1 x sampling_ratio -1/2/3) | ort_roi vs Paddle: "
          "max abs (non-NaN) | transcription vs Paddle |")
    print("|---|---|---|---|---|")
    for dtype in (np.float32, np.float64):
        for H, W in ((1, 1), (1, 9), (7, 1), (2, 2), (30, 40)):
            X = rng.standard_normal((2, 3, H, W)).astype(dtype)
            boxes, num = edge_boxes.astype(dtype), np.array([5, 3], np.int32)
            worst, same = 0.0, True
            for aligned in (0, 1):
                for sr in (-1, 2, 3):
                    ref = paddle_roi_align(X, boxes, num, 3, 2, 1.0, sr, aligned)
                    ours = roi_align(X, boxes, num, pooled_height=3, pooled_width=2,
                                     spatial_scale=1.0, sampling_ratio=sr, aligned=aligned)
                    tr = paddle_order_roi_align(X, boxes, num, 3, 2, 1.0, sr, aligned)
                    same &= bool(np.array_equal(tr.view(np.uint8), ref.view(np.uint8)))
                    ok = ~np.isnan(ref)
                    worst = max(worst, float(np.abs(ours[ok] - ref[ok]).max(initial=0)))
            exact_everywhere &= same
            print(f"| {np.dtype(dtype).name} | {H}x{W} | 6 x {len(edge_boxes)} boxes | "
                  f"{worst:.2e} | {'bit for bit' if same else 'DIFFERS'} |")
    return exact_everywhere


def time_workloads(repeat: int, with_paddle: bool) -> None:
    """W1-W3 (ort_roi/data/workloads.json's shapes and box rule), float32, aligned: ort_roi's
    kernel, the transcription and Paddle's roi_align (``with_paddle``) timed back to back,
    median of ``repeat`` rounds after a warm-up."""
    import json
    import os

    from ort_roi.geometry import ALIGNED, align_bins
    from ort_roi.kernels.cpu.align import align

    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "..", "ort_roi", "data", "workloads.json")) as f:
        ws = json.load(f)
    for name in ("W1_faster_rcnn_c4", "W2_mask_rcnn_p2", "W3_batch2_p3"):
        w = ws[name]
        rng = np.random.default_rng(0)
        N, C, H, W, R, p, s = w["N"], w["C"], w["H"], w["W"], w["R"], w["pooled"], \
            w["spatial_scale"]
        sr = w["sampling_ratio"]
        X = rng.standard_normal((N, C, H, W)).astype(np.float32)
        cx, cy = rng.uniform(0, W / s, R), rng.uniform(0, H / s, R)
        side = rng.uniform(16, 300, (R, 2))
        boxes = np.stack([cx - side[:, 0] / 2, cy - side[:, 1] / 2, cx + side[:, 0] / 2,
                          cy + side[:, 1] / 2], 1).astype(np.float32)
        num = np.full(N, R // N, np.int32)
        num[: R % N] += 1
        image = np.repeat(np.arange(N), num)
        bins = align_bins(boxes, s, ALIGNED, p, p, sr)
        ta, tb, tp = [], [], []
        for _ in range(repeat + 1):
            t0 = time.perf_counter()
            ours = align(X, image, *bins, p, p, sr)
            t1 = time.perf_counter()
            tr = paddle_order_roi_align(X, boxes, num, p, p, s, sr, True)
            t2 = time.perf_counter()
            if with_paddle:
                ref = paddle_roi_align(X, boxes, num, p, p, s, sr, True)
            t3 = time.perf_counter()
            ta.append(t1 - t0)
            tb.append(t2 - t1)
            tp.append(t3 - t2)
        a, b, c = (statistics.median(v[1:]) for v in (ta, tb, tp))
        samples = int(np.prod(bins.grid, 1).sum()) * p * p * C
        paddle, diff = "-", "-"
        if with_paddle:
            d, r, e = compare(ours, ref)
            same = np.array_equal(tr.view(np.uint8), ref.view(np.uint8))
            paddle = f"{1e3 * c:.1f} ms"
            diff = (f"{d:.1e} / {r:.1e} / {e:.3f} | "
                    f"{'bit for bit' if same else 'DIFFERS'}")
        print(f"| {name} | {1e3 * a:.1f} ms | {1e3 * b:.1f} ms | {b / a:.2f}x | {paddle} | "
              f"{samples / 1e6:.0f} M | {1e9 * b / samples:.2f} ns | {diff} |")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", action="store_true", help="also time W1-W3")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--no-paddle", action="store_true", help="timing only")
    args = ap.parse_args()
    ok = True
    if not args.no_paddle:
        ok = divergence_table()
        print("transcription bit for bit with Paddle in every case:", ok)
    if args.time or args.no_paddle:
        print("\n| workload | ort_roi align (GEMMs) | Paddle-order transcription | ratio "
              "| Paddle roi_align | samples x channels | transcription per sample x channel "
              "| ort_roi vs Paddle: max abs / max abs over max|Paddle| / equal | transcription "
              "vs Paddle |")
        print("|---|---|---|---|---|---|---|---|---|")
        time_workloads(args.repeat, not args.no_paddle)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
