"""``ort-roi bench``'s workloads and rows: ``workloads()`` reads ort_roi/data/workloads.json,
``make_inputs`` / ``make_fpn_inputs`` / ``make_level_inputs`` make each kind's arrays (seeded,
float32; the CropAndResize ones are bench_crop's), and ``plan`` expands the workloads into
the rows the bench times (also what tools/gpu_bench.py times)."""

from __future__ import annotations

import json
from importlib import resources

import numpy as np

from . import bench_crop


def workloads() -> dict:
    with resources.files("ort_roi").joinpath("data/workloads.json").open() as f:
        return {k: v for k, v in json.load(f).items() if not k.startswith("_")}


def make_fpn_inputs(w: dict, seed: int = 0):
    """The FPN workload: levels [N, C, ceil(H/s), ceil(W/s)] and boxes [R, 4] in image
    pixels (sides uniform in [16, 600], so that every level gets boxes), float32."""
    rng = np.random.default_rng(seed)
    (H, W), r = w["image"], w["R"]
    feats = [rng.standard_normal((w["N"], w["C"], -(-H // s), -(-W // s)), dtype=np.float32)
             for s in w["strides"]]
    ctr = rng.uniform(0, 1, (r, 2)) * [W, H]
    side = rng.uniform(16, 600, (r, 2))
    boxes = np.concatenate([ctr - side / 2, ctr + side / 2], 1).astype(np.float32)
    return feats, boxes


#: sqrt(area) of the boxes made for each FPN level (image pixels), inside torchvision's
#: LevelMapper ranges (P2 < 112, P3 112-224, P4 224-448, P5 >= 448) with a margin.
LEVEL_SIDES = {2: (8.0, 104.0), 3: (118.0, 212.0), 4: (236.0, 424.0), 5: (470.0, 900.0)}


def make_level_inputs(w: dict, seed: int = 0):
    """A per-level workload (W8): the FPN maps {level: [N, C, ceil(H/s), ceil(W/s)]} and per
    row (pooler, level) its R boxes [R, 4] (image pixels, float32), each of the level's size
    (sqrt(area) in LEVEL_SIDES, aspect ratio 1/2 to 2) and, as a model's clipped proposals
    are, inside the image where its size allows (a box larger than the image is clipped to
    it only if it would still have its level's size)."""
    rng = np.random.default_rng(seed)
    (H, W), N, C = w["image"], w["N"], w["C"]
    maps = {r["level"]: None for r in w["rows"]}
    for r in w["rows"]:
        if maps[r["level"]] is None:
            s = r["stride"]
            maps[r["level"]] = rng.standard_normal((N, C, -(-H // s), -(-W // s)),
                                                   dtype=np.float32)
    boxes = {}
    for r in w["rows"]:
        lo, hi = LEVEL_SIDES[r["level"]]
        side = rng.uniform(lo, hi, r["R"])
        ratio = np.exp(rng.uniform(np.log(0.5), np.log(2.0), r["R"]))
        bw, bh = side * np.sqrt(ratio), side / np.sqrt(ratio)
        x0 = rng.uniform(0, 1, r["R"]) * np.maximum(W - bw, 0) + np.minimum(W - bw, 0) / 2
        y0 = rng.uniform(0, 1, r["R"]) * np.maximum(H - bh, 0) + np.minimum(H - bh, 0) / 2
        boxes[(r["pooler"], r["level"])] = np.stack([x0, y0, x0 + bw, y0 + bh], 1).astype(
            np.float32)
    return maps, boxes


def make_inputs(w: dict, seed: int = 0, normalized: bool = False):
    """X and boxes as the workloads file describes them (float32)."""
    rng = np.random.default_rng(seed)
    n, c, h, wd, r, s = w["N"], w["C"], w["H"], w["W"], w["R"], w["spatial_scale"]
    if "output_channels" in w:
        c = w["output_channels"] * w["pooled"] ** 2
    X = rng.standard_normal((n, c, h, wd), dtype=np.float32)
    hi, wi = h / s, wd / s
    ctr = rng.uniform(0, 1, (r, 2)) * [wi, hi]
    side = rng.uniform(16, 300, (r, 2))
    boxes = np.concatenate([ctr - side / 2, ctr + side / 2], 1)
    if normalized:
        boxes = boxes / [wi, hi, wi, hi]
    counts = np.full(n, r // n, np.int32)
    counts[: r % n] += 1
    return X, boxes.astype(np.float32), counts


def plan(names: list[str] | None = None, scaling: bool = False) -> list[tuple[str, dict, str]]:
    """The bench's rows: every (workload, op) pair of workloads.json, expanded as timed.

    Args:
        names: workloads by W number or full name, any case (None or empty: all).
        scaling: also W2 with R = 100, 1000, 4000.

    Returns:
        ``(row name, workload, op)`` per row, what ``bench_cases.cases(workload, op)``
        takes: the CropAndResize workloads a row per (R, crop side), the per-level ones (W8)
        a row per level (op "RoiAlign", the workload's ``row`` the level's) and a stage per
        pooler (the workload's ``pooler``).

    Raises:
        ValueError: an unknown workload name.
    """
    ws = workloads()

    def named(k: str, name: str) -> bool:  # W1 or W1_faster_rcnn_c4, any case
        return name.lower() in (k.lower(), k.split("_")[0].lower())
    unknown = [n for n in names or [] if not any(named(k, n) for k in ws)]
    if unknown:
        raise ValueError(f"unknown workload {unknown[0]!r} (known: "
                         f"{', '.join(k.split('_')[0] for k in ws)})")
    todo = []
    for k, v in ws.items():
        if names and not any(named(k, n) for n in names):
            continue
        for op in v["ops"]:
            if op == bench_crop.OP:  # a row per (R, crop side)
                todo += bench_crop.rows(k, v)
            elif "rows" not in v:
                todo.append((k, dict(v), op))
            elif op == "RoIAlign":  # per-level workloads: a row per level (the ONNX RoiAlign
                # node torchvision writes, converted), a stage per pooler
                todo += [(f"{k} {r['pooler']} P{r['level']} ({r['R']})", dict(v, row=r),
                          "RoiAlign") for r in v["rows"]]
            else:
                todo += [(f"{k} {p}", dict(v, pooler=p), op)
                         for p in dict.fromkeys(r["pooler"] for r in v["rows"])]
    if scaling:
        for r in (100, 1000, 4000):
            todo.append((f"W2_R{r}", dict(ws["W2_mask_rcnn_p2"], R=r), "RoIAlign"))
            todo.append((f"W2_R{r}", dict(ws["W2_mask_rcnn_p2"], R=r), "ROIPooling.max"))
    return todo
