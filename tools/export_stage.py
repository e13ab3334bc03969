#!/usr/bin/env python3
"""Export torchvision's RoI stage alone, as its detection models' exporter writes it.

    pip install -e '.[torchvision]' && python tools/export_stage.py

Writes ort_roi/data/torchvision_stage_{7,14}.onnx: ``torchvision.ops.MultiScaleRoIAlign``
over four FPN maps (strides 4 to 32, names "0" to "3"), output 7 x 7 (the box head's) and
14 x 14 (the mask head's), sampling ratio 2, one image, exported by ``torch.onnx.export(...,
opset_version=17, dynamo=False)`` with the box count and the maps' sizes dynamic. The graph
holds what Faster / Mask R-CNN's exported heads hold: the boxes to rois, the LevelMapper, per
level an Equal / Where / Gather / RoiAlign and a ScatterElements merge. ``ort-roi bench W8``
runs it natively against its fused form (``ort_roi.convert``). torch 2.14.1, torchvision 0.29.1.
"""

from __future__ import annotations

import io
import os
import warnings
from collections import OrderedDict

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.join(HERE, "..", "ort_roi", "data")
IMAGE = (320, 320)  # the scales follow from the maps' sizes against it: 1/4 .. 1/32


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


def main() -> None:
    import onnx

    for pooled in (7, 14):
        model = onnx.load_from_string(export(pooled))
        model.producer_name = "tools/export_stage.py (torch.onnx, TorchScript, opset 17)"
        path = os.path.join(OUT, f"torchvision_stage_{pooled}.onnx")
        onnx.save(model, path)
        ops = sorted({n.op_type for n in model.graph.node})
        print(f"{path}: {len(model.graph.node)} nodes ({', '.join(ops)}), "
              f"{os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
