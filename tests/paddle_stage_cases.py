"""Cases of DistributeRoIAlign_L{L} (PaddleDetection's FPN RoI stage fused): rois of every
size over the levels (some levels empty), one to three images (one without rois), no rois at
all, float32 / float64, aligned 0 / 1, adaptive and fixed sampling, 1 to 6 levels. Each:
dict(name, op, inputs (in the op's input order), attrs)."""

from __future__ import annotations

import numpy as np

from ort_roi.spec import MAX_LEVELS


def stage(name: str, nums, *, L: int = 4, min_level: int = 2, C: int = 3, H: int = 40,
          W: int = 48, dtype=np.float32, count_dtype=np.int32, seed: int = 0,
          sizes=(4.0, 1500.0), **attrs) -> dict:
    """rois of sides log-uniform in ``sizes`` on a (4H x 4W) image, nums per image; L maps of
    N = len(nums) images, map l of (H >> l) x (W >> l) at scale 1 / 2**(min_level + l)."""
    rng = np.random.default_rng(seed)
    R, N = int(sum(nums)), len(nums)
    xy = rng.uniform(-8, 4 * W, (R, 2)) * [1, H / W]
    wh = np.exp(rng.uniform(*np.log(sizes), (R, 2)))
    rois = np.concatenate([xy, xy + wh], 1)
    feats = {f"feat_{i}": rng.standard_normal((N, C, max(1, H >> i), max(1, W >> i)))
             .astype(dtype) for i in range(L)}
    a = dict(min_level=min_level, max_level=min_level + L - 1, refer_level=4, refer_scale=224,
             pixel_offset=0, pooled_height=7, pooled_width=7, sampling_ratio=0, aligned=1,
             **{f"spatial_scale_{i}": 1.0 / 2 ** (min_level + i) for i in range(L)})
    a.update(attrs)
    return dict(name=name, op=f"DistributeRoIAlign_L{L}",
                inputs=dict(fpn_rois=rois.astype(dtype),
                            rois_num=np.asarray(nums, count_dtype), **feats), attrs=a)


def cases() -> list[dict]:
    out = [
        stage("ppdet_two_images", [23, 17]),
        stage("three_images_one_empty", [9, 0, 14], seed=1),
        stage("small_only_levels_empty", [12, 6], sizes=(2.0, 60.0), seed=2),
        stage("no_rois", [0, 0], seed=3),
        stage("float64_legacy_fixed", [8, 11], dtype=np.float64, count_dtype=np.int64,
              aligned=0, sampling_ratio=2, seed=4),
        stage("pixel_offset_5x3", [15], pixel_offset=1, pooled_height=5, pooled_width=3,
              refer_scale=112, refer_level=3, seed=5),
    ]
    for L in range(1, MAX_LEVELS + 1):
        if L != 4:
            out.append(stage(f"levels_{L}", [7, 6], L=L, min_level=2 if L < 6 else 1,
                             H=64, W=64, seed=10 + L))
    return out
