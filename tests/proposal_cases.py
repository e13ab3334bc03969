"""Cases of GenerateProposals and DistributeFpnProposals_L{L} (Paddle's generate_proposals and
distribute_fpn_proposals): random and tied scores, 1-3 images, pixel_offset 0 / 1, eta < 1,
pre_nms_top_n below and above the anchors, no NMS, images left without boxes, float64, expf
arguments glibc rounds differently from the double exponential, level boundaries; and of
CollectFpnProposals_L{L} (collect_fpn_proposals: ties within and across levels and images,
empty levels, post_nms_topN below and above the total). Each: dict(name, op, inputs (in the
op's input order), attrs). tools/make_proposal_goldens.py runs them through Paddle."""

from __future__ import annotations

import json

import numpy as np


def anchors(H: int, W: int, A: int, stride: int, dtype) -> np.ndarray:
    """[H, W, A, 4] square-ish anchors on a stride grid (sizes 2 * stride * 2**a)."""
    ys, xs = np.meshgrid(np.arange(H) * stride, np.arange(W) * stride, indexing="ij")
    out = np.zeros((H, W, A, 4), np.float64)
    for a in range(A):
        half = stride * 2 ** a
        ratio = (0.5, 1.0, 2.0)[a % 3]
        hw, hh = half / np.sqrt(ratio), half * np.sqrt(ratio)
        out[:, :, a] = np.stack([xs - hw, ys - hh, xs + hw, ys + hh], -1)
    return out.astype(dtype)


def hard_exp_arguments(n: int) -> np.ndarray:
    """float32 arguments in [0.01, 4.1] whose glibc expf differs from exp in double rounded
    to float32 (empty without a loadable C library)."""
    from ort_roi.libm import c_expf

    x = np.arange(np.float32(0.01).view(np.uint32), np.float32(4.1).view(np.uint32), 3,
                  dtype=np.uint32)[:400000].view(np.float32)
    y = np.exp(x.astype(np.float64))
    f = y.astype(np.float32)
    frac = np.abs(y - f) / np.spacing(f).astype(np.float64)
    near = x[frac > 0.49]
    hard = [v for v in near.tolist() if c_expf(v) != np.float32(np.exp(v))]
    return np.array(hard[:n], np.float32)


def generate(name: str, *, N=2, A=3, H=8, W=10, stride=8, ties=False, dtype=np.float32,
             seed=0, **attrs) -> dict:
    rng = np.random.default_rng(seed)
    s = rng.random((N, A, H, W))
    if ties:
        s = np.round(s * 8) / 8
    d = rng.normal(0, 0.5, (N, 4 * A, H, W))
    an = anchors(H, W, A, stride, dtype)
    va = rng.uniform(0.75, 1.25, an.shape)
    im = np.array([[H * stride, W * stride]] * N, np.float64)
    if N > 1:
        im[-1] = [H * stride * 0.6, W * stride * 0.7]
    a = dict(pre_nms_top_n=100, post_nms_top_n=50, nms_thresh=0.5, min_size=0.1, eta=1.0,
             pixel_offset=1)
    a.update(attrs)
    return dict(name=name, op="GenerateProposals",
                inputs=dict(scores=s.astype(dtype), bbox_deltas=d.astype(dtype),
                            im_shape=im.astype(dtype), anchors=an,
                            variances=va.astype(dtype)), attrs=a)


def hard_exp_case() -> dict:
    """Boxes whose width is expf(x) for arguments glibc rounds differently: anchors [0, 0, 0,
    0] (width 1 with pixel_offset), dw = dh = x, no NMS, all anchors taken."""
    x = hard_exp_arguments(48)
    M = max(len(x), 1)
    s = np.linspace(1, 0.5, M).astype(np.float32).reshape(1, 1, 1, M)
    d = np.zeros((1, 4, 1, M), np.float32)
    d[0, 2, 0, :len(x)] = x
    d[0, 3, 0, :len(x)] = x
    an = np.zeros((1, M, 1, 4), np.float32)
    return dict(name="generate_hard_expf", op="GenerateProposals",
                inputs=dict(scores=s, bbox_deltas=d, im_shape=np.array([[1e4, 1e4]], np.float32),
                            anchors=an, variances=np.ones_like(an)),
                attrs=dict(pre_nms_top_n=0, post_nms_top_n=0, nms_thresh=0.0, min_size=0.1,
                           eta=1.0, pixel_offset=1))


def generate_cases() -> list[dict]:
    return [
        generate("generate_basic"),
        generate("generate_offset0_ties", ties=True, pixel_offset=0, seed=1),
        generate("generate_ties", ties=True, seed=2),
        generate("generate_sort_all_ties", ties=True, pre_nms_top_n=1000, seed=3),
        generate("generate_pre0_ties", ties=True, pre_nms_top_n=0, N=1, seed=4),
        generate("generate_no_nms_ties", ties=True, nms_thresh=0.0, seed=5),
        generate("generate_eta", nms_thresh=0.9, eta=0.7, seed=6),
        generate("generate_eta_ties_offset0", ties=True, nms_thresh=0.8, eta=0.9, seed=7,
                 pixel_offset=0),
        generate("generate_all_too_small", min_size=1000.0, seed=8),
        generate("generate_float64", dtype=np.float64, seed=9),
        generate("generate_float64_ties_offset0", dtype=np.float64, ties=True, pixel_offset=0,
                 seed=10),
        generate("generate_one_image_nth_ties", N=1, H=16, W=24, ties=True, pre_nms_top_n=600,
                 post_nms_top_n=300, nms_thresh=0.7, min_size=0.0, pixel_offset=0, seed=11),
        generate("generate_three_images", N=3, A=2, H=12, W=9, nms_thresh=0.3, seed=12,
                 post_nms_top_n=0),
        generate("generate_one_anchor", A=1, H=1, W=1, seed=15),
        hard_exp_case(),
    ]


def distribute(name: str, nums, *, min_level=2, max_level=5, dtype=np.float32, seed=0,
               **attrs) -> dict:
    rng = np.random.default_rng(seed)
    nums = np.asarray(nums, np.int32)
    R = int(nums.sum())
    xy = rng.uniform(0, 800, (R, 2))
    wh = np.exp(rng.uniform(0, 7, (R, 2))) - 1
    wh[::3] = np.round(wh[::3])
    b = np.concatenate([xy, xy + wh], 1)
    edge = [[0, 0, 0, 0], [10, 10, 5, 5], [0, 0, 224, 224], [0, 0, 223, 223], [0, 0, 112, 112],
            [0, 0, 111.999, 111.999], [0, 0, 448, 448], [0, 0, 3e38, 3e38]]
    k = min(R, len(edge))
    if k:
        b[:k] = edge[:k]
    a = dict(min_level=min_level, max_level=max_level, refer_level=4, refer_scale=224,
             pixel_offset=0)
    a.update(attrs)
    L = max_level - min_level + 1
    return dict(name=name, op=f"DistributeFpnProposals_L{L}",
                inputs=dict(fpn_rois=b.astype(dtype), rois_num=nums), attrs=a)


def distribute_cases() -> list[dict]:
    return [
        distribute("distribute_L4", [40]),
        distribute("distribute_L4_three_images", [7, 0, 13], seed=1),
        distribute("distribute_L4_offset1", [20, 9], pixel_offset=1, seed=2),
        distribute("distribute_L4_float64", [15, 15], dtype=np.float64, seed=3),
        distribute("distribute_L6", [30, 5], min_level=1, max_level=6, refer_level=3,
                   refer_scale=112, seed=5),
        distribute("distribute_L4_one_roi", [1], seed=6),
        distribute("distribute_L4_empty_first_image", [0, 2], seed=16),
        distribute("distribute_no_rois", [0, 0], seed=13),
        distribute("distribute_L2", [9, 4], min_level=3, max_level=4, seed=17),
        distribute("distribute_L3", [11], min_level=2, max_level=4, pixel_offset=1, seed=18),
        distribute("distribute_L5", [6, 6, 6], min_level=2, max_level=6, seed=19),
    ]


def definition_only_cases() -> list[dict]:
    """Cases Paddle's Python API refuses (distribute_fpn_proposals asserts max_level >
    min_level; its kernel and ort_roi's take one level) or answers with a scalar count (no
    image: ort_roi's rpn_rois_num is [0])."""
    return [distribute("distribute_L1", [12], min_level=3, max_level=3, seed=4),
            # Paddle's DenseTensor::Slice returns a one-row tensor whole, whatever the range:
            # its kernel gives both images the one roi (and writes past restore_index); ort_roi
            # gives the empty image none
            distribute("distribute_one_roi_empty_image", [0, 1], seed=6),
            generate("generate_no_image", N=0, seed=14)]


def cases() -> list[dict]:
    return generate_cases() + distribute_cases()


# --- collect_fpn_proposals ---------------------------------------------------------------------

def collect(name: str, counts, post_nms_topN: int, *, dtype=np.float32, ties=False,
            seed=0, scores=None) -> dict:
    """CollectFpnProposals_L{L}: counts[l] the rois of level l per image; scores random (with
    ``ties`` a few values, equal within and across levels and images), or ``scores`` (one
    list per level)."""
    rng = np.random.default_rng(seed)
    L = len(counts)
    rois, sc, nums = [], [], []
    for i, c in enumerate(counts):
        c = np.asarray(c, np.int32)
        R = int(c.sum())
        xy = rng.uniform(0, 600, (R, 2))
        rois.append(np.concatenate([xy, xy + rng.uniform(1, 300, (R, 2))], 1).astype(dtype))
        s = rng.random((R, 1))
        if ties:
            s = np.round(s * 4) / 4
        if scores is not None:
            s = np.asarray(scores[i], np.float64).reshape(R, 1)
        sc.append(s.astype(dtype))
        nums.append(c)
    inputs = {f"rois_{i}": r for i, r in enumerate(rois)}
    inputs.update({f"scores_{i}": s for i, s in enumerate(sc)})
    inputs.update({f"rois_num_{i}": n for i, n in enumerate(nums)})
    return dict(name=name, op=f"CollectFpnProposals_L{L}", inputs=inputs,
                attrs=dict(post_nms_topN=post_nms_topN))


def collect_levels(case: dict) -> tuple[list, list, list]:
    """A collect case's inputs as Paddle's lists: (multi_rois, multi_scores, multi_rois_num)."""
    x = list(case["inputs"].values())
    L = len(x) // 3
    return x[:L], x[L:2 * L], x[2 * L:]


def paddle_defined(case: dict) -> bool:
    """Whether Paddle's kernel answers the case as written: it steps at most one image per roi
    (an image past the first with no rois in a level, followed by one with rois, is handed the
    next roi), and it counts rois per image by the changes of image along the kept list (an
    image past the first with none kept shifts the counts and reads past its count vector)."""
    from ort_roi.definitions.collect import collect_fpn_proposals_outputs

    _, _, nums = collect_levels(case)
    for c in nums:
        c = [int(v) for v in c]
        if any(v == 0 and any(c[k + 1:]) for k, v in enumerate(c) if k >= 1):
            return False
    n = len(nums[0])
    _, got = collect_fpn_proposals_outputs(*case["inputs"].values(), **case["attrs"])
    return n == 0 or all(got[1:])


def collect_cases() -> list[dict]:
    """Cases Paddle's kernel answers as written (``paddle_defined``)."""
    tie = [[0.5, 0.25, 0.5], [0.5, 0.5], [0.25, 0.5, 0.5, 0.5]]
    return [
        collect("collect_L4_one_image", [[30], [20], [10], [5]], 40),
        collect("collect_L5_two_images_ties", [[12, 9], [7, 8], [5, 4], [3, 2], [1, 1]], 30,
                ties=True, seed=1),
        collect("collect_L4_topn_above_total", [[6, 5], [4, 4], [2, 3], [1, 1]], 1000,
                ties=True, seed=2),
        collect("collect_L4_empty_level", [[10, 6], [0, 0], [4, 3], [2, 2]], 15, seed=3),
        collect("collect_L3_three_images_float64", [[6, 5, 7], [4, 3, 2], [2, 1, 1]], 20,
                dtype=np.float64, ties=True, seed=4),
        collect("collect_L2_first_image_empty_in_a_level", [[0, 5], [3, 4]], 8, seed=5),
        collect("collect_L1", [[9, 7]], 12, ties=True, seed=6),
        collect("collect_L6", [[8, 6], [6, 5], [4, 4], [3, 2], [2, 1], [1, 1]], 25,
                ties=True, seed=7),
        collect("collect_topn_0", [[5], [3]], 0, seed=8),
        collect("collect_no_rois", [[0], [0], [0]], 10, seed=9),
        collect("collect_all_equal", [[3, 2], [2, 3], [1, 1]], 9,
                scores=[[0.5] * 5, [0.5] * 5, [0.5] * 2], seed=10),
        collect("collect_equal_across_levels", [[2, 1], [1, 1], [1, 3]], 6, scores=tie,
                seed=11),
        collect("collect_signed_zero_and_inf", [[3, 2], [2, 2]], 7,
                scores=[[0.0, -0.0, np.inf, -np.inf, 0.0], [-0.0, np.inf, 1.0, -np.inf]],
                seed=12),
        collect("collect_float64_topn_equals_total", [[7, 3], [2, 6]], 18, dtype=np.float64,
                seed=13),
        collect("collect_no_image", [[], []], 5, seed=14),
    ]


def collect_definition_only_cases() -> list[dict]:
    """Cases Paddle's kernel does not answer as written (``paddle_defined``; docs/semantics.md,
    deliberate divergences): an image left with no roi among the kept (Paddle reads past its
    counts), an empty image before others in a level (Paddle hands the next roi to the empty
    image)."""
    return [
        collect("collect_second_image_none_kept", [[3, 2], [2, 1]], 3,
                scores=[[0.9, 0.8, 0.7, 0.1, 0.2], [0.6, 0.5, 0.3]], seed=20),
        collect("collect_middle_image_empty_in_a_level", [[2, 0, 2], [1, 1, 1]], 7, seed=21),
    ]


def load_goldens(path: str) -> list[dict]:
    """The cases of a goldens file tools/make_proposal_goldens.py wrote: name, op, attrs,
    inputs and the expected outputs (Paddle's)."""
    with np.load(path) as z:
        names = sorted({k.rsplit(":", 1)[0] for k in z.files})
        out = []
        for n in names:
            meta = json.loads(str(z[f"{n}:meta"]))
            out.append(dict(name=n, op=meta["op"], attrs=meta["attrs"],
                            inputs={k: z[f"{n}:{k}"] for k in meta["inputs"]},
                            expected=[z[f"{n}:out{i}"] for i in range(meta["outputs"])]))
        return out
