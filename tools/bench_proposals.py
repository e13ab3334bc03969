"""Time ort_roi's GenerateProposals / DistributeFpnProposals kernels against Paddle's
(paddle.vision.ops), interleaved in one process, on a PaddleDetection Faster R-CNN FPN load:
one 800x1216 image, 5 levels (strides 4..64, 3 anchors per place), pre_nms_top_n 1000 and
post_nms_top_n 1000 per level, nms_thresh 0.7, min_size 0, pixel_offset False, then the
level assignment of the best 1000 (refer_level 4, refer_scale 224, levels 2..5).

    python -m tools.bench_proposals [--repeat 20] [--images 1]
"""

from __future__ import annotations

import argparse

import numpy as np

from ort_roi.cli.bench_timing import round_ratios, time_together


def anchors_for(h: int, w: int, stride: int, size: int) -> np.ndarray:
    """PaddleDetection's AnchorGenerator for one level: [h, w, 3, 4], ratios 0.5, 1, 2."""
    out = []
    for r in (0.5, 1.0, 2.0):
        aw = np.round(np.sqrt(size * size / r))
        ah = np.round(aw * r)
        out.append([-aw / 2, -ah / 2, aw / 2, ah / 2])
    base = np.array(out, np.float32)
    ys, xs = np.meshgrid(np.arange(h) * stride, np.arange(w) * stride, indexing="ij")
    shift = np.stack([xs, ys, xs, ys], -1).astype(np.float32)
    return shift[:, :, None, :] + base[None, None]


def load(images: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    levels = []
    for stride, size in zip((4, 8, 16, 32, 64), (32, 64, 128, 256, 512)):
        h, w = -(-800 // stride), -(-1216 // stride)
        logits = rng.normal(-3.0, 2.0, (images, 3, h, w))
        scores = (1 / (1 + np.exp(-logits))).astype(np.float32)
        deltas = rng.normal(0, 0.3, (images, 12, h, w)).astype(np.float32)
        an = anchors_for(h, w, stride, size)
        levels.append((scores, deltas, an, np.ones_like(an)))
    im = np.array([[800, 1216]] * images, np.float32)
    return levels, im


KW = dict(pre_nms_top_n=1000, post_nms_top_n=1000, nms_thresh=0.7, min_size=0.0, eta=1.0)


def run_ort_roi(levels, im):
    from ort_roi.ops.distribute_fpn_proposals import distribute_fpn_proposals
    from ort_roi.ops.generate_proposals import generate_proposals

    outs = [generate_proposals(s, d, im, a, v, pixel_offset=0, **KW) for s, d, a, v in levels]
    rois = np.concatenate([o[0] for o in outs])
    probs = np.concatenate([o[1] for o in outs])[:, 0]
    top = np.argsort(-probs, kind="stable")[:1000]
    d = distribute_fpn_proposals(rois[top], np.array([len(top)], np.int32), min_level=2,
                                 max_level=5, refer_level=4, refer_scale=224)
    return outs, d


def run_paddle(levels, im):
    import paddle

    t = paddle.to_tensor
    outs = [paddle.vision.ops.generate_proposals(t(s), t(d), t(im), t(a), t(v),
                                                 pixel_offset=False, return_rois_num=True, **KW)
            for s, d, a, v in levels]
    rois = paddle.concat([o[0] for o in outs])
    probs = paddle.concat([o[1] for o in outs])[:, 0]
    top = np.argsort(-probs.numpy(), kind="stable")[:1000]
    d = paddle.vision.ops.distribute_fpn_proposals(
        rois[paddle.to_tensor(top)], 2, 5, 4, 224, rois_num=t(np.array([len(top)], np.int32)))
    return [[x.numpy() for x in o] for o in outs], d


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--images", type=int, default=1)
    args = ap.parse_args()
    levels, im = load(args.images)
    ours, _ = run_ort_roi(levels, im)
    theirs, _ = run_paddle(levels, im)
    same = all(np.array_equal(a, b) for o, p in zip(ours, theirs) for a, b in zip(o, p))
    print(f"levels {[s.shape[2:] for s, *_ in levels]}, rois per level "
          f"{[int(o[2].sum()) for o in ours]}; ort_roi == Paddle: {same}")
    timed = time_together({"ort_roi": lambda: run_ort_roi(levels, im),
                           "Paddle": lambda: run_paddle(levels, im)}, args.repeat)
    mo, mp = timed["ort_roi"][0] * 1e3, timed["Paddle"][0] * 1e3
    lo, mid, hi = round_ratios(timed["Paddle"][2], timed["ort_roi"][2])
    print(f"median of {args.repeat}, interleaved: ort_roi {mo:.2f} ms, Paddle {mp:.2f} ms "
          f"(Paddle / ort_roi {mid:.2f}, rounds {lo:.2f}-{hi:.2f})")


if __name__ == "__main__":
    main()
