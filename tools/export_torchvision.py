#!/usr/bin/env python3
"""The graphs the project ships that torch exports (torch 2.14.1, torchvision 0.29.1).

    pip install '.[torchvision]' && python -m tools.export_torchvision

1. models/torchvision_rfcn_head.onnx: an R-FCN head written with torchvision's
   position-sensitive ops and exported by ``ort_roi.torch_export`` (TorchScript, opset 17):
   ``ps_roi_align`` for the class scores, ``ps_roi_pool`` for the box regression (see
   ``RFCNHead``); a plain onnxruntime session with ``ort_roi.session_options()`` runs it
   (tests/test_models.py holds it to eager torchvision).
2. ort_roi/data/torchvision_stage_{7,14}.onnx, torchvision's RoI stage alone, as its
detection models' exporter writes it: ``torchvision.ops.MultiScaleRoIAlign``
over four FPN maps (strides 4 to 32, names "0" to "3"), output 7 x 7 (the box head's) and
14 x 14 (the mask head's), sampling ratio 2, one image, exported by ``torch.onnx.export(...,
opset_version=17, dynamo=False)`` with the box count and the maps' sizes dynamic. The graph
holds what Faster / Mask R-CNN's exported heads hold: the boxes to rois, the LevelMapper, per
level an Equal / Where / Gather / RoiAlign and a ScatterElements merge. ``ort-roi bench W8``
runs it natively against its fused form (``ort_roi.convert``). torch 2.14.1, torchvision 0.29.1.
3. ort_roi/data/torchvision_loops.json: the bodies of the Loops torch.onnx writes for
   ``roi_heads.heatmaps_to_keypoints`` (Keypoint R-CNN's decoding) and
   ``roi_heads.paste_masks_in_image`` (Mask R-CNN's mask pasting) at opsets 11 to 17,
   canonical (``ort_roi.graph.loops.body_lines``; the image size that the mask Loop holds as
   constants written as the placeholders {height} and {width}): what ``ort_roi.convert``
   recognises them by.
"""

from __future__ import annotations

import io
import os
import warnings
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ort_roi", "data")
MODELS = os.path.join(HERE, "..", "models")
IMAGE = (320, 320)  # the scales follow from the maps' sizes against it: 1/4 .. 1/32
#: The R-FCN head's features: the example graphs' (a stride-16 map of a 384 x 512 image).
FEATURES, STRIDE, CLASSES, K = (1, 16, 24, 32), 16, 4, 3


def rfcn_head():
    """R-FCN's head on a stride-16 map: 1x1 convs to K*K*classes class score maps and K*K*4
    box maps; ``ps_roi_align`` (sampling 2) pools the class maps, ``ps_roi_pool`` the box
    maps, each bin from its own channel group; a vote (the mean over the K x K bins) gives
    the class probabilities (softmax) and the box deltas. rois are ``[R, 5]`` rows
    ``[batch, x1, y1, x2, y2]`` in image pixels (torchvision's)."""
    import torch
    from torchvision import ops

    class RFCNHead(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.cls = torch.nn.Conv2d(FEATURES[1], K * K * CLASSES, 1)
            self.box = torch.nn.Conv2d(FEATURES[1], K * K * 4, 1)

        def forward(self, features, rois):
            scores = ops.ps_roi_align(self.cls(features), rois, K, 1 / STRIDE, 2)
            deltas = ops.ps_roi_pool(self.box(features), rois, K, 1 / STRIDE)
            return torch.softmax(scores.mean((2, 3)), 1), deltas.mean((2, 3))

    torch.manual_seed(0)
    return RFCNHead().eval()


def export_rfcn_head() -> bytes:
    import torch

    import ort_roi

    g = torch.Generator().manual_seed(0)
    features = torch.randn(*FEATURES, generator=g)
    xy = torch.rand(8, 2, generator=g) * 300
    rois = torch.cat([torch.zeros(8, 1), xy, xy + 40 + torch.rand(8, 2, generator=g) * 150], 1)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_roi.torch_export(rfcn_head(), (features, rois), buf, opset_version=17,
                             dynamo=False, input_names=["features", "rois"],
                             output_names=["cls_prob", "bbox_pred"],
                             dynamic_axes={"rois": {0: "R"}, "cls_prob": {0: "R"},
                                           "bbox_pred": {0: "R"}})
    return buf.getvalue()


def export(pooled: int) -> bytes:
    import torch
    from torchvision.ops import MultiScaleRoIAlign

    class Stage(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.pool = MultiScaleRoIAlign(["0", "1", "2", "3"], pooled, 2)

        def forward(self, p2, p3, p4, p5, boxes):
            feats = OrderedDict(zip(["0", "1", "2", "3"], (p2, p3, p4, p5)))
            return self.pool(feats, [boxes], [IMAGE])

    g = torch.Generator().manual_seed(0)
    maps = [torch.randn(1, 256, IMAGE[0] // s, IMAGE[1] // s, generator=g)
            for s in (4, 8, 16, 32)]
    xy = torch.rand(50, 2, generator=g) * 300
    boxes = torch.cat([xy, xy + torch.rand(50, 2, generator=g) * 300 + 8], 1)
    names = ["p2", "p3", "p4", "p5"]
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Stage().eval(), (*maps, boxes), buf, opset_version=17, dynamo=False,
                          input_names=names + ["boxes"], output_names=["pooled"],
                          dynamic_axes={"boxes": {0: "R"}, "pooled": {0: "R"},
                                        **{n: {2: f"{n}_h", 3: f"{n}_w"} for n in names}})
    return buf.getvalue()


def keypoint_loop_bodies() -> dict:
    """torchvision's keypoint-decoding Loop as torch.onnx writes it, per opset: the boxes'
    count dynamic (a Keypoint R-CNN's are)."""
    import torch
    from torchvision.models.detection import roi_heads

    from ort_roi.graph.loops import ROLES

    class Decode(torch.nn.Module):
        def forward(self, maps, rois):
            return roi_heads.heatmaps_to_keypoints(maps, rois)

    maps, rois = torch.rand(3, 17, 56, 56), torch.tensor([[1.0, 2, 40, 60]]).repeat(3, 1)
    bodies = _loop_bodies(Decode().eval(), (maps, rois), {"maps": {0: "R"}, "rois": {0: "R"}},
                          ROLES)
    return {"heatmaps_to_keypoints": {"source": _source(), "roles": list(ROLES),
                                      "bodies": bodies}}


def _loop_bodies(module, args, dynamic: dict, roles: tuple) -> dict:
    """The canonical body of the one Loop of ``module``'s export, per opset 11-17."""
    import onnx
    import torch

    from ort_roi.graph.toolkit import GraphIndex
    from ort_roi.graph.loops import body_lines

    bodies = {}
    for opset in range(11, 18):
        buf = io.BytesIO()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, buf, opset_version=opset, dynamo=False,
                              input_names=list(dynamic), dynamic_axes=dynamic)
        model = onnx.load_from_string(buf.getvalue())
        loop = next(n for n in model.graph.node if n.op_type == "Loop")
        lines, outer = body_lines(loop, GraphIndex(model.graph).const)
        assert len(outer) == len(roles), (opset, outer)
        bodies[f"opset {opset}"] = lines
    return bodies


def mask_loop_bodies() -> dict:
    """torchvision's mask-pasting Loop as torch.onnx writes it, per opset: the boxes' count
    dynamic, the image size a constant (Mask R-CNN's exports hold it so), written as
    placeholders; checked by exporting at a second size."""
    import re

    import torch
    from torchvision.models.detection import roi_heads

    from ort_roi.graph.loops import MASK_ROLES, unify

    class Paste(torch.nn.Module):
        def __init__(self, size):
            super().__init__()
            self.size = size

        def forward(self, masks, boxes):
            return roi_heads.paste_masks_in_image(masks, boxes, self.size)

    masks = torch.rand(3, 1, 28, 28)
    boxes = torch.tensor([[1.0, 2, 30, 40]]).repeat(3, 1)
    dynamic = {"masks": {0: "R"}, "boxes": {0: "R"}}
    size, check = (37, 53), (41, 59)  # values no other constant of the body has
    bodies = _loop_bodies(Paste(size), (masks, boxes), dynamic, MASK_ROLES)
    for key, lines in bodies.items():
        assert not any(re.search(r"=(41|59)\b", ln) for ln in lines), key
        bodies[key] = [re.sub(r"=37\b", "={height}", re.sub(r"=53\b", "={width}", ln))
                       for ln in lines]
    again = _loop_bodies(Paste(check), (masks, boxes), dynamic, MASK_ROLES)
    for key, lines in again.items():  # every constant of the size is a placeholder
        assert unify(lines, bodies[key]) == dict(zip(("height", "width"), check)), key
    return {"source": _source(), "roles": list(MASK_ROLES), "params": ["height", "width"],
            "bodies": bodies}


def _source() -> str:
    import torch
    import torchvision

    return (f"torch {torch.__version__.split('+')[0]}, torchvision "
            f"{torchvision.__version__.split('+')[0]}, torch.onnx.export(dynamo=False), "
            "tools/export_torchvision.py")


def loop_bodies() -> dict:
    """Every Loop ``ort_roi.convert`` fuses, as torchvision_loops.json holds them."""
    return {**keypoint_loop_bodies(), "paste_masks_in_image": mask_loop_bodies()}


def main() -> None:
    import json

    import onnx

    path = os.path.join(OUT, "torchvision_loops.json")
    with open(path, "w") as f:
        json.dump(loop_bodies(), f, indent=0)
        f.write("\n")
    print(f"{path}: {os.path.getsize(path)} bytes")

    written = [(os.path.join(MODELS, "torchvision_rfcn_head.onnx"), export_rfcn_head(),
                "ort_roi.torch_export")]
    written += [(os.path.join(OUT, f"torchvision_stage_{p}.onnx"), export(p), "torch.onnx")
                for p in (7, 14)]
    for path, data, how in written:
        model = onnx.load_from_string(data)
        model.producer_name = f"tools/export_torchvision.py ({how}, TorchScript, opset 17)"
        onnx.save(model, path)
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"{path}: {len(model.graph.node)} nodes ({', '.join(ops)}), "
              f"{os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
