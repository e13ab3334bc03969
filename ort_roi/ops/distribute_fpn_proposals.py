"""DistributeFpnProposals_L{L}: Paddle's distribute_fpn_proposals, the FPN level assignment of
PaddleDetection's RoI extractor, exact to Paddle's CPU kernel (ort-roi export-paddle writes it).
One op per number of levels L = max_level - min_level + 1 (1 to MAX_LEVELS): the bridge
declares no variable number of outputs."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..definitions.proposals import distribute_fpn_proposals_outputs as definition
from ..errors import RoiOpError
from ..kernels.checks import check_finite, check_level_count, float_input, image_counts, quiet
from ..kernels.dispatch import compute, host, steps
from ..spec import COUNTS_DOC, MAX_LEVELS, Attr, Dims, Input, Op, OpSpec, Output, level_forms


def _level_count(spec: OpSpec) -> int:
    return (len(spec.outputs) - 1) // 2


def level_shapes(spec: OpSpec, dims: Sequence[Dims], attrs: Mapping[str, Any],
                 values: Mapping[int, np.ndarray]) -> list[list]:
    """L x [R_l, 4], L x [N], [R, 1]; RoiOpError where known shapes or the levels contradict
    the op."""
    L = _level_count(spec)
    if attrs.get("min_level") is not None and attrs.get("max_level") is not None:
        check_level_count(spec.name, attrs["min_level"], attrs["max_level"], L)
    rois, num = dims[0], dims[1]
    if rois is not None and (len(rois) != 2 or (isinstance(rois[1], int) and rois[1] != 4)):
        raise RoiOpError(spec.name, "input 'fpn_rois'",
                         f"must have shape [R, 4], got "
                         f"{[d if d is not None else '?' for d in rois]}")
    if num is not None and len(num) != 1:
        raise RoiOpError(spec.name, "input 'rois_num'",
                         f"must have rank 1 [N], got rank {len(num)}")
    r = rois[0] if rois is not None else None
    n = num[0] if num is not None else None
    return [[None, 4]] * L + [[n]] * L + [[r, 1]]


def _spec(L: int) -> OpSpec:
    return OpSpec(
        name=f"DistributeFpnProposals_L{L}",
        source="Paddle distribute_fpn_proposals (paddle.vision.ops.distribute_fpn_proposals, "
               "CPU kernel)",
        doc=f"Each roi to level floor(log2(sqrt(area) / refer_scale + 1e-6) + refer_level) "
            f"clamped to [min_level, max_level] ({L} levels; area (w + 1) * (h + 1) with "
            "pixel_offset, else w * h; 0 for an inverted box; in the rois' float type, log2f as "
            "the C library rounds it); per level its rois (image by image, in order) and their "
            "count per image; restore_index[r] is roi r's row in the levels' concatenation.",
        inputs=(Input("fpn_rois", "T", "[R, 4]", "rois [x1, y1, x2, y2], image by image"),
                Input("rois_num", "I", "[N]", COUNTS_DOC)),
        attrs=(Attr("min_level", int, None, doc="the finest level (rois_0)"),
               Attr("max_level", int, None, doc=f"the coarsest level: min_level + {L - 1}"),
               Attr("refer_level", int, 4, doc="the level of a roi of side refer_scale"),
               Attr("refer_scale", int, 224, min=1, doc="the side of a roi of refer_level"),
               Attr("pixel_offset", int, 0, choices=(0, 1),
                    doc="1: areas count +1 pixel per side")),
        outputs=tuple(Output(f"rois_{i}", f"[R_{i}, 4]", doc=f"the rois of level min_level + {i}")
                      for i in range(L))
        + tuple(Output(f"rois_num_{i}", "[N]", "int32",
                       doc=f"rois of level min_level + {i} per image")
                for i in range(L))
        + (Output("restore_index", "[R, 1]", "int32",
                  doc="each input roi's row in the levels' concatenation"),),
        shapes=level_shapes,
        boxes_input=0,
        rowwise=False,
        same_types=True,
    )


#: One spec per number of levels.
SPECS = {L: _spec(L) for L in range(1, MAX_LEVELS + 1)}


@quiet
def distribute_fpn_proposals(fpn_rois: np.ndarray, rois_num: np.ndarray, *, min_level: int,
                             max_level: int, refer_level: int = 4, refer_scale: int = 224,
                             pixel_offset: int = 0) -> tuple:
    """Paddle's distribute_fpn_proposals, bit for bit (its CPU kernel): DistributeFpnProposals
    in docs/semantics.md. Computed on the host (CuPy input is copied).

    Args:
        fpn_rois: [R, 4] float32 or float64 rows [x1, y1, x2, y2], image by image (no NaN).
        rois_num: [N] int32 or int64, the rois of each image (>= 0, sums to R).
        min_level: the first level (max_level - min_level + 1 = L in 1 .. MAX_LEVELS).
        max_level: the last level.
        refer_level: the level a roi of side refer_scale goes to.
        refer_scale: that side (>= 1).
        pixel_offset: 1: areas count +1 pixel per side (PaddleDetection passes 0).

    Returns:
        (rois_0 .. rois_{L-1} [R_l, 4] of fpn_rois' dtype, rois_num_0 .. rois_num_{L-1} [N]
        int32, restore_index [R, 1] int32), a tuple of 2L + 1 arrays. Raises RoiOpError on bad
        input.
    """
    L = check_level_count("DistributeFpnProposals", int(min_level), int(max_level))
    spec = SPECS[L]
    op = spec.name
    a = spec.resolve(dict(min_level=min_level, max_level=max_level, refer_level=refer_level,
                          refer_scale=refer_scale, pixel_offset=pixel_offset))
    rois = float_input(op, "fpn_rois", fpn_rois)
    if rois.ndim != 2 or rois.shape[1] != 4:
        raise RoiOpError(op, "input 'fpn_rois'", f"must have shape [R, 4], got {list(rois.shape)}")
    check_finite(op, "fpn_rois", rois, nan_only=True, unit="row")
    num = np.asarray(host(rois_num))
    counts = image_counts(op, "rois_num", num, num.shape[0] if num.ndim == 1 else -1,
                          rois.shape[0], "[N] (one count per image)",
                          "R = {} (the rows of fpn_rois)")
    rois_l, counts_l, restore = compute(
        steps.distribute_fpn_proposals, np.ascontiguousarray(rois),
        rois_num=counts.astype(np.int64), min_level=a["min_level"], max_level=a["max_level"],
        refer_level=a["refer_level"], refer_scale=a["refer_scale"],
        pixel_offset=bool(a["pixel_offset"]))
    return tuple(rois_l) + tuple(counts_l) + (restore,)


ENTRY = Op(
    specs=tuple(SPECS.values()), kernel=distribute_fpn_proposals, definition=definition,
    steps=(steps.distribute_fpn_proposals,),
    forms=level_forms(SPECS, "ort-roi export-paddle (Paddle distribute_fpn_proposals)",
                      "Paddle distribute_fpn_proposals"),
)
