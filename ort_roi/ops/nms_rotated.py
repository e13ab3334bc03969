"""NMSRotated: mmdeploy's multiclass rotated NMS node (mmdeploy::NMSRotated), as its onnxruntime
kernel computes it (MMDeploy v1.3.1, csrc/mmdeploy/backend_ops/onnxruntime/nms_rotated/
nms_rotated.cpp; written by mmdeploy/mmcv/ops/nms_rotated.py, ONNXNMSRotatedOp, in the
export of MMRotate's oriented detectors: Oriented R-CNN, RoI Transformer, rotated RTMDet).

Per image and class, in float32: the boxes by descending score (libstdc++'s std::sort: where
scores tie, its own order), greedy NMS over every box (those under score_threshold suppress
too: the threshold applies to the kept boxes afterwards, unlike the PyTorch forward mmdeploy
traces, which filters first), IoU by the kernel's polygon clipping in float32; the kept boxes
with score > score_threshold, rows [image, class, box]. Exact: the same float32 steps in the
same order (definitions/nms_rotated.py one pair at a time, kernels/cpu/nms_rotated.py
vectorised over pairs).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from ..definitions.nms_rotated import nms_rotated as definition
from ..errors import RoiOpError
from ..kernels.checks import check_finite, quiet
from ..kernels.dispatch import compute, host, steps
from ..spec import Attr, Dims, Input, NodeForm, Op, OpSpec, Output

_OP = "NMSRotated"


def _show(d) -> list:
    return [v if v is not None else "?" for v in d]


def nms_shapes(spec: OpSpec, dims: Sequence[Dims], attrs: Mapping[str, Any],
               values: Mapping[int, np.ndarray]) -> list[list]:
    """[S, 3] (S: the kept boxes, known only when there can be none: N, C or B is 0);
    RoiOpError where known shapes contradict the op (boxes not [N, B, 5], scores not
    [N, C, B], N or B not the same in both)."""
    b, s = dims[0], dims[1]
    if b is not None and (len(b) != 3 or (isinstance(b[2], int) and b[2] != 5)):
        raise RoiOpError(spec.name, "input 'boxes'",
                         f"must have shape [N, B, 5] (cx, cy, w, h, theta), got {_show(b)}")
    if s is not None and len(s) != 3:
        raise RoiOpError(spec.name, "input 'scores'",
                         f"must have shape [N, C, B] (rank 3), got {_show(s)}")
    if b is not None and s is not None:
        for name, i, j in (("N", 0, 0), ("B", 1, 2)):
            if isinstance(b[i], int) and isinstance(s[j], int) and b[i] != s[j]:
                raise RoiOpError(spec.name, "input 'scores'",
                                 f"must have shape [N, C, B] = [{b[0]}, C, {b[1]}] (the "
                                 f"boxes' N and B), got {_show(s)}: {name} differs")
    sizes = ([b[0], b[1]] if b is not None else []) + (list(s) if s is not None else [])
    return [[0 if 0 in sizes else None, 3]]


SPEC = OpSpec(
    name=_OP,
    source="mmdeploy NMSRotated (onnxruntime custom op of MMDeploy's op library; "
           "mmrotate's multiclass_nms_rotated through mmdeploy)",
    doc="Per image and class: the boxes by descending score (std::sort's order where "
        "scores tie), greedy NMS over every box (IoU > iou_threshold suppresses; boxes "
        "under score_threshold suppress too), then the kept boxes with score > "
        "score_threshold: rows [image, class, box], image by image, class by class, by "
        "score. IoU of the rotated boxes by mmdeploy's polygon clipping, in float32.",
    inputs=(Input("boxes", "T", "[N, B, 5]", "rows [cx, cy, w, h, theta] (theta in "
                  "radians), float32"),
            Input("scores", "T", "[N, C, B]", "each class's score of each box, float32, no "
                  "NaN")),
    attrs=(Attr("iou_threshold", float, None, doc="a box whose IoU with a kept, higher-"
                "scored one is greater is suppressed"),
           Attr("score_threshold", float, None, doc="kept boxes with a score greater are "
                "output")),
    outputs=(Output("indices", "[S, 3]", "int64", doc="rows [image, class, box index]"),),
    shapes=nms_shapes,
    box_cols=5,
    domain="mmdeploy",
    features=(0,),
    boxes_input=0,
    rowwise=False,
    same_types=True,
)


def _float32(name: str, a) -> np.ndarray:
    a = np.asarray(host(a))
    if a.dtype != np.float32:
        raise RoiOpError(_OP, f"input '{name}'",
                         f"must be float32 (mmdeploy's NMSRotated takes float only), got "
                         f"{a.dtype}")
    return a


@quiet
def nms_rotated(boxes: np.ndarray, scores: np.ndarray, *, iou_threshold: float,
                score_threshold: float) -> np.ndarray:
    """mmdeploy's NMSRotated, bit for bit (its onnxruntime kernel): multiclass NMS of rotated
    boxes. Computed on the host (CuPy input is copied).

    Args:
        boxes: [N, B, 5] float32 rows [cx, cy, w, h, theta] (theta in radians; any values:
            NaN or infinite boxes compute as the C++ does, overlapping nothing).
        scores: [N, C, B] float32, no NaN (std::sort has no order for them).
        iou_threshold: a box whose IoU with a kept, higher-scored box of its class is
            greater is suppressed.
        score_threshold: the kept boxes with a score greater are output.

    Returns:
        [S, 3] int64 rows [image, class, box index]: image by image, class by class, by
        descending score (equal scores in libstdc++'s std::sort order). Raises RoiOpError on
        bad input.
    """
    a = SPEC.resolve(dict(iou_threshold=iou_threshold, score_threshold=score_threshold))
    b = _float32("boxes", boxes)
    s = _float32("scores", scores)
    SPEC.output_shapes([list(b.shape), list(s.shape)], a)  # ranks, N, B: named
    check_finite(_OP, "scores", s, nan_only=True)
    return compute(steps.nms_rotated, np.ascontiguousarray(b),
                   scores=np.ascontiguousarray(s), iou_threshold=a["iou_threshold"],
                   score_threshold=a["score_threshold"])


ENTRY = Op(
    specs=(SPEC,), kernel=nms_rotated, definition=definition, steps=(steps.nms_rotated,),
    forms=(NodeForm("mmdeploy", _OP, SPEC, "mmrotate through mmdeploy "
                    "(multiclass_nms_rotated: ONNXNMSRotatedOp)",
                    "a literal loop of mmdeploy's onnxruntime kernel (tests/literal.py); "
                    "OpenVINO's NMSRotated (IoU)"),),
)
