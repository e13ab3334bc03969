"""HeatmapsToKeypoints: torchvision's keypoint decoding (roi_heads.heatmaps_to_keypoints) in one
op, with onnxruntime's cubic Resize bit for bit, so that a converted Keypoint R-CNN gives the
native graph's keypoints exactly while skipping its per-box Loop (ort-roi convert,
ort_roi.torch_export)."""

from __future__ import annotations

import numpy as np

from ..definitions.torchvision import heatmaps_to_keypoints as definition
from ..errors import RoiOpError
from ..kernels.checks import check_boxes, check_features, quiet
from ..kernels.dispatch import compute, steps
from ..spec import DOMAIN, Input, NodeForm, Op, OpSpec, Output

#: The largest roi map HeatmapsToKeypoints upsamples one box's heatmaps to (ceil(w) * ceil(h)
#: pixels; 8192 x 8192): time grows with it, and onnxruntime's Resize would allocate K of them.
MAX_KEYPOINT_MAP = 1 << 26


def keypoint_shapes(spec: OpSpec, dims, attrs, values) -> list[list]:
    """[R, K, 3] and [R, K]: R the rows of rois, K the maps' channels."""
    maps, rois = dims
    r = rois[0] if rois is not None and len(rois) == 2 else None
    k = maps[1] if maps is not None and len(maps) == 4 else None
    return [[r, k, 3], [r, k]]


SPEC = OpSpec(
    name="HeatmapsToKeypoints",
    source="torchvision heatmaps_to_keypoints (Keypoint R-CNN's decoding, one fused op: "
           "ort-roi convert, ort_roi.torch_export)",
    doc="Keypoints from per-box heatmaps, as torchvision's exported graph computes them: box r "
        "[x1, y1, x2, y2] has w = max(x2 - x1, 1), h = max(y2 - y1, 1); its K heatmaps are "
        "resized to ceil(h) x ceil(w) with onnxruntime's Resize (cubic, cubic_coeff_a -0.75, "
        "half_pixel; bit for bit); keypoint k is the first maximum of map k at (x_int, y_int): "
        "x = (x_int + 0.5) * (w / ceil(w)) + x1, y likewise, and its score is that maximum. "
        "keypoints[r, k] = (x, y, 1).",
    inputs=(Input("maps", "T", "[R, K, H, W]", "heatmaps, one set per box"),
            Input("rois", "T", "[R, 4]", "the boxes [x1, y1, x2, y2] in image coordinates")),
    attrs=(),
    outputs=(Output("keypoints", "[R, K, 3] (x, y, 1)"), Output("scores", "[R, K]")),
    shapes=keypoint_shapes,
    same_types=True,
    per_box=True,
)


def keypoint_boxes(op: str, rois: np.ndarray):
    """torchvision's box terms: w = max(x2 - x1, 1), h likewise, in T, and the size of the
    roi map, (ceil(h), ceil(w)), checked against MAX_KEYPOINT_MAP."""
    t = rois.dtype.type
    w = np.maximum(rois[:, 2] - rois[:, 0], t(1))
    h = np.maximum(rois[:, 3] - rois[:, 1], t(1))
    wc, hc = np.ceil(w), np.ceil(h)
    big = wc.astype(np.float64) * hc > MAX_KEYPOINT_MAP
    if big.any():
        r = int(np.flatnonzero(big)[0])
        raise RoiOpError(op, "input 'rois'",
                         f"row {r} {rois[r].tolist()} asks for a {int(hc[r])} x {int(wc[r])} "
                         f"roi map, over the limit of {MAX_KEYPOINT_MAP} pixels")
    return w, h, wc, hc


@quiet
def heatmaps_to_keypoints(maps: np.ndarray, rois: np.ndarray):
    """Keypoints of each box from its heatmaps, as torchvision's exported Keypoint R-CNN
    computes them (HeatmapsToKeypoints in docs/semantics.md). Computed on the host (CuPy
    input is copied).

    Args:
        maps: [R, K, H, W] float32 or float64, the heatmaps of each box.
        rois: [R, 4] rows [x1, y1, x2, y2] in image coordinates, maps' dtype.

    Returns:
        (keypoints [R, K, 3] = (x, y, 1), scores [R, K]), of maps' dtype.
    """
    op = SPEC.name
    X = check_features(op, maps, "maps")
    rois = check_boxes(op, "rois", rois, X, 4)
    if rois.shape[0] != X.shape[0]:
        raise RoiOpError(op, "input 'rois'",
                         f"must have one row per box of maps (R = {X.shape[0]}), got "
                         f"{rois.shape[0]}")
    w, h, wc, hc = keypoint_boxes(op, rois)
    return compute(steps.keypoints, X, rois=rois, w=w, h=h, wc=wc, hc=hc)


ENTRY = Op(
    specs=(SPEC,), kernel=heatmaps_to_keypoints, definition=definition, steps=(steps.keypoints,),
    forms=(NodeForm(DOMAIN, SPEC.name, SPEC,
                    "ort-roi convert (torchvision's exported keypoint decoding Loop), "
                    "ort_roi.torch_export", "onnxruntime's Resize + ArgMax (torchvision's "
                    "exported Loop, bit for bit); eager torchvision heatmaps_to_keypoints"),),
)
