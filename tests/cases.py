"""The parity cases: inputs and attributes shared by the golden generator
(tools/make_goldens.py), the golden tests and the live parity tests.

Each case is a dict: name, op, attrs, inputs (name -> array in ort_roi's convention),
and optional flags:
  tie        -- a box edge lands exactly on a .5 after scaling (OpenVINO's CPU plugin may
                round such ties differently, see docs/semantics.md, "Deliberate divergences")
  nan_to_zero -- Paddle returns NaN here and ort_roi deliberately returns 0
"""

from __future__ import annotations

import numpy as np

F32, F64 = np.dtype(np.float32), np.dtype(np.float64)
SCALES = (1.0, 1 / 16, 0.7, 1 / 7)
POOLED = ((1, 1), (2, 2), (3, 5), (7, 7))
N, C, H, W = 3, 3, 9, 11


def _special_boxes(scale: float, tie: bool) -> list[list[float]]:
    """Image-space boxes: negative, beyond the map, zero-size, inverted, whole map, ties."""
    hi, wi = H / scale, W / scale
    b = [[-5 / scale, -3 / scale, 2 / scale, 4 / scale],  # negative corner
         [wi + 3 / scale, hi + 2 / scale, wi + 9 / scale, hi + 7 / scale],  # beyond the map
         [2 / scale, 3 / scale, 2 / scale, 3 / scale],  # zero size
         [6 / scale, 5 / scale, 2 / scale, 1 / scale],  # inverted
         [0, 0, wi - 1, hi - 1]]  # the whole map
    if tie:  # x*scale == k + 0.5 exactly (scale 1 or a power of two)
        b.append([2.5 / scale, 1.5 / scale, 6.5 / scale, 4.5 / scale])
        b.append([-0.5 / scale, 0.5 / scale, 3.5 / scale, 7.5 / scale])
    return b


def _random_boxes(rng, n: int, scale: float, lo=-0.2, hi=1.1) -> np.ndarray:
    wi, hi_ = W / scale, H / scale
    x1 = rng.uniform(lo, hi, n) * wi
    y1 = rng.uniform(lo, hi, n) * hi_
    return np.stack([x1, y1, x1 + rng.uniform(0, 0.7, n) * wi,
                     y1 + rng.uniform(0, 0.7, n) * hi_], 1)


def _counts(r: int, dtype) -> np.ndarray:
    """Three images, the middle one without boxes."""
    return np.array([r // 2, 0, r - r // 2], dtype)


def _x(rng, channels: int, dtype) -> np.ndarray:
    return rng.standard_normal((N, channels, H, W)).astype(dtype)


def _boxes_grid(rng, scale: float, dtype, n_random: int = 6, special: bool = True):
    tie = scale in (1.0, 1 / 16)
    rows = (_special_boxes(scale, tie) if special else []) + list(_random_boxes(rng, n_random, scale))
    return np.asarray(rows, dtype), tie


def _sweep(variants=(None,)):
    """The sweep shared by the suites: dtype x scale x pooled size (x variants), with int32 and
    int64 counts alternating. Yields (i, dtype, scale, ph, pw, variant, count dtype)."""
    i = 0
    for dtype in (F32, F64):
        for scale in SCALES:
            for ph, pw in POOLED:
                for v in variants:
                    i += 1
                    yield i, dtype, scale, ph, pw, v, (np.int32 if i % 2 else np.int64)


def max_pool_cases(op: str, seed: int = 1) -> list[dict]:
    """ROIPooling(max) or RoIPool cases."""
    rng = np.random.default_rng(seed)
    cases = []
    seed_x = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    seed_b = np.array([[1, 1, 2, 2], [1.5, 1.5, 3, 3]], np.float32)
    mx_x = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    seeds = [("seed_contract", seed_x, seed_b, (1, 1), 1.0),
             ("seed_mxnet_doc_s1", mx_x, np.array([[0, 0, 4, 4]], np.float32), (2, 2), 1.0),
             ("seed_mxnet_doc_s07", mx_x, np.array([[0, 0, 4, 4]], np.float32), (2, 2), 0.7)]
    for name, x, b, (ph, pw), s in seeds:
        cases.append(_max_case(op, name, x, b, np.array([len(b)], np.int32), ph, pw, s, True))
    for _, dtype, scale, ph, pw, _, cdt in _sweep():
        boxes, tie = _boxes_grid(rng, scale, dtype)
        cases.append(_max_case(op, f"{dtype.name}_s{scale:.4g}_{ph}x{pw}", _x(rng, C, dtype),
                               boxes, _counts(len(boxes), cdt), ph, pw, scale, tie))
    cases.append(_max_case(op, "empty_R0", _x(rng, C, F32), np.zeros((0, 4), np.float32),
                           np.zeros(N, np.int64), 2, 3, 0.5, False))
    return cases


def _max_case(op, name, x, boxes, counts, ph, pw, scale, tie) -> dict:
    if op == "ROIPooling":
        batch = np.repeat(np.arange(len(counts)), counts).astype(x.dtype)[:, None]
        rois = np.concatenate([batch, boxes.astype(x.dtype)], 1)
        return dict(name=name, op=op, tie=tie, inputs=dict(X=x, rois=rois),
                    attrs=dict(pooled_h=ph, pooled_w=pw, spatial_scale=scale, method="max"))
    return dict(name=name, op=op, tie=tie, inputs=dict(X=x, boxes=boxes, boxes_num=counts),
                attrs=dict(pooled_height=ph, pooled_width=pw, spatial_scale=scale))


def bilinear_cases(seed: int = 2) -> list[dict]:
    rng = np.random.default_rng(seed)
    cases = []
    for dtype in (F32, F64):
        for ph, pw in POOLED + ((1, 4), (4, 1)):
            n = 8
            x1, y1 = rng.uniform(-0.2, 0.9, n), rng.uniform(-0.2, 0.9, n)
            boxes = np.stack([x1, y1, x1 + rng.uniform(0, 0.6, n), y1 + rng.uniform(0, 0.6, n)], 1)
            special = [[0, 0, 1, 1], [0.25, 0.5, 0.75, 1.0], [0.5, 0.5, 0.5, 0.5],
                       [0.9, 0.8, 0.1, 0.2], [1.0, 1.0, 1.2, 1.3]]
            boxes = np.concatenate([special, boxes]).astype(dtype)
            batch = np.repeat(np.arange(N), _counts(len(boxes), int)).astype(dtype)[:, None]
            cases.append(dict(name=f"{dtype.name}_{ph}x{pw}", op="ROIPooling", tie=False,
                              inputs=dict(X=_x(rng, C, dtype),
                                          rois=np.concatenate([batch, boxes], 1)),
                              attrs=dict(pooled_h=ph, pooled_w=pw, spatial_scale=1.0,
                                         method="bilinear")))
    return cases


def psroi_cases(seed: int = 3) -> list[dict]:
    rng = np.random.default_rng(seed)
    cases = []
    for i, dtype, scale, ph, pw, _, cdt in _sweep():
        oc = 2 + i % 2
        boxes, _ = _boxes_grid(rng, scale, dtype)
        cases.append(dict(name=f"{dtype.name}_s{scale:.4g}_{ph}x{pw}", op="PSROIPool",
                          inputs=dict(X=_x(rng, oc * ph * pw, dtype), rois=boxes,
                                      rois_num=_counts(len(boxes), cdt)),
                          attrs=dict(output_channels=oc, spatial_scale=scale,
                                     pooled_height=ph, pooled_width=pw)))
    cases.append(dict(name="empty_R0", op="PSROIPool",
                      inputs=dict(X=_x(rng, 8, F32), rois=np.zeros((0, 4), np.float32),
                                  rois_num=np.zeros(N, np.int32)),
                      attrs=dict(output_channels=2, spatial_scale=1.0, pooled_height=2,
                                 pooled_width=2)))
    return cases


def roi_align_cases(seed: int = 4) -> list[dict]:
    rng = np.random.default_rng(seed)
    cases = []
    variants = ((-1, 1), (2, 0), (0, 0), (3, 1))  # (sampling_ratio, aligned)
    for _, dtype, scale, ph, pw, (sampling_ratio, aligned), cdt in _sweep(variants):
        boxes, _ = _boxes_grid(rng, scale, dtype)
        if sampling_ratio <= 0 and aligned:
            boxes = np.delete(boxes, 3, 0)  # inverted: Paddle aborts (length_error)
        cases.append(dict(
            name=f"{dtype.name}_s{scale:.4g}_{ph}x{pw}_sr{sampling_ratio}_a{aligned}",
            op="RoIAlign", nan_to_zero=bool(aligned and sampling_ratio <= 0),
            inputs=dict(X=_x(rng, C, dtype), boxes=boxes, boxes_num=_counts(len(boxes), cdt)),
            attrs=dict(pooled_height=ph, pooled_width=pw, spatial_scale=scale,
                       sampling_ratio=sampling_ratio, aligned=aligned)))
    cases.append(dict(name="empty_R0", op="RoIAlign",
                      inputs=dict(X=_x(rng, C, F32), boxes=np.zeros((0, 4), np.float32),
                                  boxes_num=np.zeros(N, np.int32)),
                      attrs=dict(pooled_height=2, pooled_width=2, spatial_scale=1.0,
                                 sampling_ratio=2, aligned=1)))
    return cases


#: golden file name -> (oracle, cases)
SUITES = {
    "roi_pooling_max": ("mxnet", lambda: max_pool_cases("ROIPooling")),
    "roi_pooling_bilinear": ("openvino", bilinear_cases),
    "roi_pool": ("paddle", lambda: max_pool_cases("RoIPool")),
    "psroi_pool": ("paddle", psroi_cases),
    "roi_align": ("paddle", roi_align_cases),
    "mmcv_roi_align_rotated": ("openvino", lambda: rotated_cases(9, openvino=True)),
    "roi_feature_extractor": ("openvino", lambda: extractor_cases(12, float64=False)),
    # a third or a fourth of the torchvision cases (the live tests run them all)
    "torchvision_ps_roi_align": ("torchvision", lambda: torchvision_ps_cases(
        "TorchvisionPSRoIAlign", 15)[::4]),
    "torchvision_ps_roi_pool": ("torchvision", lambda: torchvision_ps_cases(
        "TorchvisionPSRoIPool", 16)[::3]),
    "pyramid_roi_align": ("torchvision", lambda: pyramid_cases(17)[::3]),
}


def demo_cases() -> list[dict]:
    """One tiny case per op (and method) for `ort-roi demo`, expected values from the
    frameworks (written to ort_roi/data/demo_cases.json by tools/make_goldens.py)."""
    x16 = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
    x36 = np.arange(36, dtype=np.float32).reshape(1, 1, 6, 6)
    rng = np.random.default_rng(7)
    xps = np.round(rng.uniform(0, 9, (1, 8, 5, 5))).astype(np.float32)
    return [
        dict(name="RoIPool: the contract's worked example", op="RoIPool", oracle="paddle",
             inputs=dict(X=x16, boxes=np.array([[1, 1, 2, 2], [1.5, 1.5, 3, 3]], np.float32),
                         boxes_num=np.array([2], np.int32)),
             attrs=dict(pooled_height=1, pooled_width=1, spatial_scale=1.0)),
        dict(name="ROIPooling max: MXNet's documented example, scale 0.7", op="ROIPooling",
             oracle="mxnet", inputs=dict(X=x36, rois=np.array([[0, 0, 0, 4, 4]], np.float32)),
             attrs=dict(pooled_h=2, pooled_w=2, spatial_scale=0.7, method="max")),
        dict(name="ROIPooling bilinear: normalized box", op="ROIPooling", oracle="openvino",
             inputs=dict(X=x16, rois=np.array([[0, 0.25, 0.0, 1.0, 0.5]], np.float32)),
             attrs=dict(pooled_h=2, pooled_w=2, spatial_scale=1.0, method="bilinear")),
        dict(name="PSROIPool: 2 classes, 2x2 position-sensitive bins", op="PSROIPool",
             oracle="paddle", inputs=dict(X=xps, rois=np.array([[0, 0, 3, 3]], np.float32),
                                          rois_num=np.array([1], np.int32)),
             attrs=dict(output_channels=2, spatial_scale=1.0, pooled_height=2, pooled_width=2)),
        dict(name="RoIAlign: aligned, 2x2 samples per bin", op="RoIAlign", oracle="paddle",
             inputs=dict(X=x16, boxes=np.array([[0.5, 0.5, 3.0, 2.5]], np.float32),
                         boxes_num=np.array([1], np.int32)),
             attrs=dict(pooled_height=2, pooled_width=2, spatial_scale=1.0, sampling_ratio=2,
                        aligned=1)),
    ]


# --- the nodes other exporters write, built from the RoIAlign cases ---------------------------

def _rois(case) -> np.ndarray:
    X, boxes, counts = (case["inputs"][k] for k in ("X", "boxes", "boxes_num"))
    batch = np.repeat(np.arange(X.shape[0]), counts).astype(X.dtype)
    return np.concatenate([batch[:, None], boxes], 1)


def mmcv_cases(seed: int = 5, mode: str = "avg") -> list[dict]:
    """MMCVRoiAlign: the RoIAlign cases with 5-column rois (sampling_ratio <= 0 is 0)."""
    out = []
    for c in roi_align_cases(seed):
        a = c["attrs"]
        out.append(dict(name=c["name"], op="MMCVRoiAlign", source=c,
                        inputs=dict(input=c["inputs"]["X"], rois=_rois(c)),
                        attrs=dict(output_height=a["pooled_height"],
                                   output_width=a["pooled_width"],
                                   spatial_scale=a["spatial_scale"],
                                   sampling_ratio=max(0, a["sampling_ratio"]), mode=mode,
                                   aligned=a["aligned"])))
    return out


def caffe2_cases(seed: int = 6) -> list[dict]:
    """org.pytorch._caffe2::RoIAlign: the RoIAlign cases with 5-column rois, and 4-column
    rois where X holds one image."""
    out = []
    for c in roi_align_cases(seed):
        a = c["attrs"]
        X, rois = c["inputs"]["X"], _rois(c)
        if len(out) % 3 == 2:  # one image, 4 columns
            X, rois = X[:1], rois[:, 1:]
        out.append(dict(name=c["name"], op="RoIAlign", source=c, inputs=dict(X=X, rois=rois),
                        attrs=dict(order="NCHW", spatial_scale=a["spatial_scale"],
                                   pooled_h=a["pooled_height"], pooled_w=a["pooled_width"],
                                   sampling_ratio=a["sampling_ratio"], aligned=a["aligned"])))
    return out


def onnx_roi_align_cases(seed: int = 7, mode: str = "avg") -> list[dict]:
    """ort_roi::RoiAlign (ONNX RoiAlign's inputs and attributes)."""
    out = []
    for c in roi_align_cases(seed):
        a = c["attrs"]
        X, boxes, counts = (c["inputs"][k] for k in ("X", "boxes", "boxes_num"))
        idx = np.repeat(np.arange(X.shape[0]), counts).astype(np.int64)
        out.append(dict(name=c["name"], op="RoiAlign", source=c,
                        inputs=dict(X=X, rois=boxes, batch_indices=idx),
                        attrs=dict(coordinate_transformation_mode=(
                            "half_pixel" if a["aligned"] else "output_half_pixel"), mode=mode,
                            output_height=a["pooled_height"], output_width=a["pooled_width"],
                            sampling_ratio=max(0, a["sampling_ratio"]),
                            spatial_scale=a["spatial_scale"])))
    return out


def rotated_cases(seed: int = 8, openvino: bool = False) -> list[dict]:
    """MMCVRoIAlignRotated: random rotated boxes (on, across and off the map, zero-size,
    axis-aligned), both dtypes, the sampling ratios, aligned, clockwise, several images.
    ``openvino``: only what OpenVINO 2026.4.1 computes as mmcv does (float32, aligned=1,
    clockwise=0, sampling_ratio > 0; it samples 2x2 for 0 and ignores clockwise)."""
    rng = np.random.default_rng(seed)
    if openvino:
        variants = [(sr, 1, 0) for sr in (1, 2, 3)]
    else:
        variants = [(sr, al, cw) for sr in (0, 2, -1, 3) for al in (1, 0) for cw in (0, 1)]
    out = []
    grid = [(d, s, p) for d in ((F32,) if openvino else (F32, F64)) for s in SCALES
            for p in POOLED[:3]]
    for i, (dtype, scale, (ph, pw)) in enumerate(grid):
        sr, al, cw = variants[(i * 5) % len(variants)]
        R = 9
        rois = np.stack([rng.integers(0, N, R), rng.uniform(-2, W + 2, R) / scale,
                         rng.uniform(-2, H + 2, R) / scale, rng.uniform(0, 10, R) / scale,
                         rng.uniform(0, 10, R) / scale, rng.uniform(-3.5, 3.5, R)], 1)
        rois[0, 3:5] = 0  # zero size
        rois[1, 1:3] = [(W + 30) / scale, -25 / scale]  # off the map
        rois[2, 5] = 0  # axis-aligned
        rois[3, 5] = np.pi / 2
        out.append(dict(name=f"{dtype.name}_s{scale:.4g}_{ph}x{pw}_sr{sr}_a{al}_cw{cw}",
                        op="MMCVRoIAlignRotated",
                        inputs=dict(input=_x(rng, C, dtype), rois=rois.astype(dtype)),
                        attrs=dict(output_height=ph, output_width=pw, spatial_scale=scale,
                                   sampling_ratio=sr, aligned=al, clockwise=cw)))
    return out


# --- multi-level (FPN) RoIAlign -------------------------------------------------------------

FPN_IMAGE = (256, 320)  # image pixels (H, W)
STRIDES = (4, 8, 16, 32, 64, 128)


def fpn_inputs(rng, L: int, n_images: int, dtype, R: int = 14, C: int = 3,
               strides=STRIDES) -> tuple[np.ndarray, list[np.ndarray]]:
    """Boxes [R, 4] in image pixels, sides log-uniform in [4, 900] (every level gets boxes),
    with zero-size, inverted and off-image ones; levels [N, C, ceil(H/s), ceil(W/s)]."""
    H, W = FPN_IMAGE
    side = np.exp(rng.uniform(np.log(4), np.log(900), (R, 2)))
    ctr = rng.uniform(-20, 1, (R, 2)) * 0 + rng.uniform(0, 1, (R, 2)) * [W, H]
    boxes = np.concatenate([ctr - side / 2, ctr + side / 2], 1)
    boxes[0] = [30, 40, 30, 40]  # zero size
    boxes[1] = [200, 150, 120, 90]  # inverted
    boxes[2] = [W + 50, H + 60, W + 150, H + 160]  # off the image
    feats = [rng.standard_normal((n_images, C, -(-H // s), -(-W // s))).astype(dtype)
             for s in strides[:L]]
    return boxes.astype(dtype), feats


def extractor_cases(seed: int = 10, float64: bool = True) -> list[dict]:
    """ROIFeatureExtractor_L{L} (OpenVINO's ExperimentalDetectronROIFeatureExtractor):
    1 to 6 levels, aligned 0/1, fixed and adaptive sampling, R = 0."""
    rng = np.random.default_rng(seed)
    out = []
    for i, L in enumerate([1, 2, 3, 4, 4, 5, 6]):
        for dtype in (F32, F64) if float64 else (F32,):
            boxes, feats = fpn_inputs(rng, L, 1, dtype)
            if i == 4:
                boxes = boxes[:0]  # R = 0
            attrs = dict(output_size=[7, 2, 3][i % 3], sampling_ratio=[2, 0, 1][i % 3],
                         aligned=i % 2, **{f"scale_{k}": STRIDES[k] for k in range(L)})
            out.append(dict(name=f"L{L}_{dtype.name}_{i}", op=f"ROIFeatureExtractor_L{L}",
                            inputs=dict(rois=boxes, **{f"feat_{k}": f for k, f in
                                                       enumerate(feats)}), attrs=attrs))
    return out


def multilevel_cases(seed: int = 11) -> list[dict]:
    """MultiLevelRoiAlign_L{L} (mmdeploy's MMCVMultiLevelRoiAlign): 1 to 6 levels, two
    images, avg and max, aligned 0/1, rescaled boxes, R = 0."""
    rng = np.random.default_rng(seed)
    out = []
    for i, L in enumerate([1, 2, 3, 4, 4, 4, 5, 6]):
        for dtype in (F32, F64):
            boxes, feats = fpn_inputs(rng, L, 2, dtype)
            if i == 5:
                boxes = boxes[:0]
            batch = rng.integers(0, 2, len(boxes)).astype(dtype)
            attrs = dict(output_height=[7, 2, 3][i % 3], output_width=[7, 3, 2][i % 3],
                         sampling_ratio=[2, 0, 1, 0][i % 4], pool_mode=[1, 0][i % 2],
                         aligned=[1, 1, 0][i % 3], roi_scale_factor=[-1.0, 1.5][(i // 2) % 2],
                         finest_scale=56, **{f"stride_{k}": float(STRIDES[k]) for k in range(L)})
            out.append(dict(name=f"L{L}_{dtype.name}_{i}", op=f"MultiLevelRoiAlign_L{L}",
                            inputs=dict(rois=np.concatenate([batch[:, None], boxes], 1),
                                        **{f"feat_{k}": f for k, f in enumerate(feats)}),
                            attrs=attrs))
    return out


def _rotated_rois(rng, boxes: np.ndarray) -> np.ndarray:
    """Rotated rows [batch (of 2 images), cx, cy, w, h, theta] from fpn_inputs' boxes (their
    signed sides), angles in [-pi, pi] and rows 3 and 4 at exactly pi and -pi."""
    R = len(boxes)
    rois = np.stack([rng.integers(0, 2, R), (boxes[:, 0] + boxes[:, 2]) / 2,
                     (boxes[:, 1] + boxes[:, 3]) / 2, boxes[:, 2] - boxes[:, 0],
                     boxes[:, 3] - boxes[:, 1], rng.uniform(-np.pi, np.pi, R)], 1)
    rois[3, 5], rois[4, 5] = np.pi, -np.pi
    return rois


def rotated_multilevel_cases(seed: int = 12, R: int = 14) -> list[dict]:
    """MultiLevelRotatedRoiAlign_L{L} (mmdeploy's MMCVMultiLevelRotatedRoiAlign): 1 to 6
    levels, two images, rotated boxes of every level (sides log-uniform in [4, 900], angles
    in [-pi, pi]) with zero-size, negative-size and off-image ones, aligned, clockwise,
    fixed and adaptive grids, roi_scale_factor, R = 0."""
    rng = np.random.default_rng(seed)
    out = []
    for i, L in enumerate([1, 2, 3, 4, 4, 4, 5, 6]):
        for dtype in (F32, F64):
            boxes, feats = fpn_inputs(rng, L, 2, dtype, R=R)
            rois = _rotated_rois(rng, boxes)
            rois[5, 3] = 0.5  # under a pixel on every level
            rois[6, 3] = -abs(rois[6, 3])  # one negative side: sqrtf is NaN, level 0
            if i == 5:
                rois = rois[:0]
            attrs = dict(output_height=[7, 2, 3][i % 3], output_width=[7, 3, 2][i % 3],
                         sampling_ratio=[2, 0, 1, 0][i % 4], aligned=[1, 1, 0][i % 3],
                         clockwise=[0, 1][(i // 3) % 2],
                         roi_scale_factor=[-1.0, 1.5][(i // 2) % 2], finest_scale=56,
                         **{f"stride_{k}": float(STRIDES[k]) for k in range(L)})
            out.append(dict(name=f"L{L}_{dtype.name}_{i}", op=f"MultiLevelRotatedRoiAlign_L{L}",
                            inputs=dict(rois=rois.astype(dtype),
                                        **{f"feat_{k}": f for k, f in enumerate(feats)}),
                            attrs=attrs))
    return out


# --- torchvision: ps_roi_align, ps_roi_pool, the fused MultiScaleRoIAlign stage -------------

def _tv_rois(rng, scale: float, dtype) -> np.ndarray:
    """Rows [batch, x1, y1, x2, y2] over the three images: negative, beyond the map, zero-size,
    inverted, whole-map and random boxes."""
    boxes, _ = _boxes_grid(rng, scale, dtype)
    batch = rng.integers(0, N, len(boxes)).astype(dtype)
    return np.concatenate([batch[:, None], boxes], 1)


def torchvision_ps_cases(op: str, seed: int = 13) -> list[dict]:
    """TorchvisionPSRoIAlign (sampling ratios -1, 0, 2) or TorchvisionPSRoIPool: the sweep of
    dtypes, scales and pooled sizes, 2 or 3 output channels, R = 0."""
    rng = np.random.default_rng(seed)
    align = op == "TorchvisionPSRoIAlign"
    out = []
    for i, dtype, scale, ph, pw, sr, _ in _sweep((-1, 0, 2) if align else (None,)):
        if (ph, pw) == (7, 7) and i % 3:
            continue  # 147 channels a case: a few are enough
        oc = 2 + i % 2
        attrs = dict(pooled_height=ph, pooled_width=pw, spatial_scale=scale)
        if align:
            attrs["sampling_ratio"] = sr
        out.append(dict(name=f"{dtype.name}_s{scale:.4g}_{ph}x{pw}" + (f"_sr{sr}" if align else ""),
                        op=op, inputs=dict(X=_x(rng, oc * ph * pw, dtype),
                                           rois=_tv_rois(rng, scale, dtype)), attrs=attrs))
    out.append(dict(name="empty_R0", op=op, inputs=dict(X=_x(rng, 8, F32),
                                                          rois=np.zeros((0, 5), np.float32)),
                    attrs=dict(pooled_height=2, pooled_width=2, spatial_scale=1.0,
                               **(dict(sampling_ratio=2) if align else {}))))
    return out


def pyramid_cases(seed: int = 14) -> list[dict]:
    """PyramidRoIAlign_L{L}: 1 to 6 levels, two images, levels as a graph would give them
    (and out of range: no level), aligned 0/1, fixed and adaptive sampling, R = 0."""
    rng = np.random.default_rng(seed)
    out = []
    for i, L in enumerate([1, 2, 3, 4, 4, 4, 5, 6]):
        for dtype in (F32, F64):
            boxes, feats = fpn_inputs(rng, L, 2, dtype)
            levels = rng.integers(0, L, len(boxes)).astype(np.int64 if i % 2 else np.int32)
            levels[:2] = [-1, L]  # on no level
            if i == 5:
                boxes, levels = boxes[:0], levels[:0]
            batch = rng.integers(0, 2, len(boxes)).astype(dtype)
            attrs = dict(output_height=[7, 2, 3][i % 3], output_width=[7, 3, 2][i % 3],
                         sampling_ratio=[2, 0, 1][i % 3], aligned=[0, 1][i % 2],
                         **{f"spatial_scale_{k}": 1 / STRIDES[k] for k in range(L)})
            out.append(dict(name=f"L{L}_{dtype.name}_{i}", op=f"PyramidRoIAlign_L{L}",
                            inputs=dict(rois=np.concatenate([batch[:, None], boxes], 1),
                                        levels=levels,
                                        **{f"feat_{k}": f for k, f in enumerate(feats)}),
                            attrs=attrs))
    return out


def pyramid_rotated_cases(seed: int = 15, R: int = 14) -> list[dict]:
    """PyramidRotatedRoIAlign_L{L} (MMRotate's extractor fused): 1 to 6 levels, two images,
    rotated boxes (sides log-uniform in [4, 900], angles in [-pi, pi], zero-size and off-image
    ones), levels as a graph would give them and out of range (no level: a NaN row there is
    not read), aligned 0/1, clockwise, fixed and adaptive grids, R = 0."""
    rng = np.random.default_rng(seed)
    out = []
    for i, L in enumerate([1, 2, 3, 4, 4, 4, 5, 6]):
        for dtype in (F32, F64):
            boxes, feats = fpn_inputs(rng, L, 2, dtype, R=R)
            rois = _rotated_rois(rng, boxes)
            rois[:, 3:5] = np.abs(rois[:, 3:5])
            rois[5, 3] = 0.0  # zero width
            levels = rng.integers(0, L, R).astype(np.int64 if i % 2 else np.int32)
            levels[:2] = [-1, L]  # on no level
            rois[0, 1:] = np.nan  # not read
            if i == 5:
                rois, levels = rois[:0], levels[:0]
            attrs = dict(output_height=[7, 2, 3][i % 3], output_width=[7, 3, 2][i % 3],
                         sampling_ratio=[2, 0, 1, 0][i % 4], aligned=[1, 1, 0][i % 3],
                         clockwise=[0, 1][(i // 3) % 2],
                         **{f"spatial_scale_{k}": 1 / STRIDES[k] for k in range(L)})
            out.append(dict(name=f"L{L}_{dtype.name}_{i}", op=f"PyramidRotatedRoIAlign_L{L}",
                            inputs=dict(rois=rois.astype(dtype), levels=levels,
                                        **{f"feat_{k}": f for k, f in enumerate(feats)}),
                            attrs=attrs))
    return out


def keypoint_cases(seed: int) -> list[dict]:
    """HeatmapsToKeypoints: per-box heatmaps and boxes (zero-size, inverted, thin ones too)."""
    rng = np.random.default_rng(seed)
    out = []
    for i, dtype in enumerate((np.float32, np.float64, np.float32)):
        R, K = (4, 3, 0)[i], (3, 17, 2)[i]
        maps = rng.standard_normal((R, K, 7 + i, 9)).astype(dtype)
        xy = rng.uniform(-10, 60, (R, 2))
        rois = np.concatenate([xy, xy + np.exp(rng.uniform(-1, 4, (R, 2)))], 1).astype(dtype)
        if R > 2:
            rois[:2] = [[5, 5, 5, 5], [30, 20, 10, 4]]  # zero size, inverted
        out.append(dict(name=f"keypoints_{np.dtype(dtype).name}_{i}", op="HeatmapsToKeypoints",
                        inputs=dict(maps=maps, rois=rois), attrs={}))
    return out


def mask_cases(seed: int) -> list[dict]:
    """PasteMasks: padded masks and integer boxes, inside the image, across its edges,
    beyond it, zero-size and inverted; float32 and float64, int64 and int32 boxes, R = 0."""
    rng = np.random.default_rng(seed)
    out = []
    for i, (dtype, itype) in enumerate(((np.float32, np.int64), (np.float64, np.int32),
                                        (np.float32, np.int32), (np.float64, np.int64))):
        R, M = (6, 4, 0, 3)[i], (30, 9, 30, 1)[i]
        height, width = (37, 23, 5, 8)[i], (41, 29, 6, 3)[i]
        masks = rng.random((R, 1 + i % 2, M, M)).astype(dtype)
        xy = rng.uniform(-20, 45, (R, 2))
        boxes = np.floor(np.concatenate([xy, xy + np.exp(rng.uniform(-1, 4, (R, 2)))], 1))
        if R > 3:
            boxes[:3] = [[5, 5, 5, 5], [30, 20, 10, 4], [-60, -50, -40, -45]]
        out.append(dict(name=f"masks_{np.dtype(dtype).name}_{i}", op="PasteMasks",
                        inputs=dict(masks=masks, boxes=boxes.astype(itype),
                                    image_size=np.array([height, width], itype)),
                        attrs={}))
    return out


def nms_rotated_cases(seed: int) -> list[dict]:
    """mmdeploy::NMSRotated (float32 only, as the node): overlapping rotated boxes around a few
    centres, 1-2 images, 1-3 classes, tied and untied scores; B = 0 and C = 0."""
    rng = np.random.default_rng(seed)
    out = []
    for i, (N, C, B) in enumerate(((1, 3, 24), (2, 2, 17), (1, 1, 0), (2, 0, 5))):
        centres = rng.uniform(0, 60, (N, 4, 2))
        boxes = np.zeros((N, B, 5), np.float32)
        boxes[..., :2] = (np.take_along_axis(centres, rng.integers(0, 4, (N, B, 1)), 1)
                          + rng.normal(0, 2, (N, B, 2)))
        boxes[..., 2:4] = rng.uniform(2, 16, (N, B, 2))
        boxes[..., 4] = rng.uniform(-np.pi, np.pi, (N, B))
        scores = (rng.choice(np.float32([0.05, 0.3, 0.7]), (N, C, B)) if i % 2
                  else rng.random((N, C, B), np.float32))
        out.append(dict(name=f"nms_rotated_{i}", op="NMSRotated",
                        inputs=dict(boxes=boxes, scores=scores.astype(np.float32)),
                        attrs=dict(iou_threshold=(0.1, 0.3, 0.5, 0.1)[i],
                                   score_threshold=(0.05, 0.2, 0.05, 0.0)[i])))
    return out


def form_cases() -> list[tuple[str, dict]]:
    """(domain, case) for every registered node form (a few cases each, both dtypes)."""
    from tests import crop_cases
    from ort_roi.ops import FORMS

    pick = lambda cs: [c for c in cs if "_1x1_" not in c["name"]][:: max(1, len(cs) // 6)]  # noqa: E731
    by_op = {
        "ROIPooling": max_pool_cases("ROIPooling", 21)[3::10] + bilinear_cases(22)[::5],
        "RoIPool": max_pool_cases("RoIPool", 23)[3::10],
        "PSROIPool": psroi_cases(24)[::10],
        "RoIAlign": roi_align_cases(25)[::20],
        "MMCVRoiAlign": pick(mmcv_cases(26)) + pick(mmcv_cases(27, "max")),
        "MMCVRoIAlignRotated": pick(rotated_cases(28)),
        "RoiAlign": pick(onnx_roi_align_cases(29)) + pick(onnx_roi_align_cases(30, "max")),
        "TorchvisionPSRoIAlign": pick(torchvision_ps_cases("TorchvisionPSRoIAlign", 34)),
        "TorchvisionPSRoIPool": pick(torchvision_ps_cases("TorchvisionPSRoIPool", 35)),
        "HeatmapsToKeypoints": keypoint_cases(37),
        "PasteMasks": mask_cases(38),
        "CropAndResize": crop_cases.cases()[::4],
        "NMSRotated": nms_rotated_cases(40),
    }
    out = []
    for f in FORMS:
        if not f.registered:
            continue
        if f.domain == "org.pytorch._caffe2":
            cases = caffe2_cases(31)[::20]
        elif f.op_type.startswith("ROIFeatureExtractor_L"):
            cases = [c for c in extractor_cases(32) if c["op"] == f.op_type][:2]
        elif f.op_type.startswith("MultiLevelRoiAlign_L"):
            cases = [c for c in multilevel_cases(33) if c["op"] == f.op_type][:2]
        elif f.op_type.startswith("MultiLevelRotatedRoiAlign_L"):
            cases = [c for c in rotated_multilevel_cases(39) if c["op"] == f.op_type][:2]
        elif f.op_type.startswith("PyramidRotatedRoIAlign_L"):
            cases = [c for c in pyramid_rotated_cases(41) if c["op"] == f.op_type][:2]
        elif f.op_type.startswith("PyramidRoIAlign_L"):
            cases = [c for c in pyramid_cases(36) if c["op"] == f.op_type][:2]
        elif f.op_type.startswith("DistributeRoIAlign_L"):
            from tests import paddle_stage_cases
            cases = [c for c in paddle_stage_cases.cases() if c["op"] == f.op_type][:2]
        elif f.op_type.startswith("CollectFpnProposals_L"):
            from tests import proposal_cases
            cases = [c for c in proposal_cases.collect_cases() if c["op"] == f.op_type][:2]
        elif f.op_type == "GenerateProposals" or f.op_type.startswith("DistributeFpnProposals_L"):
            from tests import proposal_cases
            cases = [c for c in proposal_cases.cases() + proposal_cases.definition_only_cases()
                     if c["op"] == f.op_type][:3]
        else:
            cases = by_op[f.op_type]
        out += [(f.domain, dict(c, op=f.op_type)) for c in cases]
    return out
