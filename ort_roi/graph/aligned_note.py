"""torch.onnx's lost ``aligned=True``: torch.onnx writes RoIAlign's ``aligned=True``
(detectron2's ROIAlignV2, torchvision's ``roi_align(aligned=True)``) as plain RoiAlign below
opset 16, where ONNX has no half-pixel mode, so the exported graph computes aligned=False;
``torch_aligned_note`` says so (convert computes what the graph says, and changes nothing)."""

from __future__ import annotations

import onnx

from ..errors import node_label
from . import scatter_nd_pad as pad
from .toolkit import GraphIndex, indexed, is_default


def _torchvision_merged(g: GraphIndex, ra: onnx.NodeProto) -> bool:
    """The RoiAlign's result goes only into torchvision's ScatterElements merge (through a
    Cast; Shapes and unfuse's CastLike read it too): torchvision's MultiScaleRoIAlign, which
    pools with aligned=False."""
    users = g.consumers.get(ra.output[0], [])
    users = [v for u in users for v in (g.consumers.get(u.output[0], []) if u.op_type == "Cast"
                                        else [u])]
    return any(u.op_type == "ScatterElements" for u in users) and all(
        u.op_type in ("ScatterElements", "Shape", "CastLike") for u in users)


def torch_aligned_note(model: onnx.ModelProto, g: GraphIndex | None = None
                       ) -> tuple[list, list[str]]:
    """A note where torch.onnx (producer_name "pytorch") wrote RoiAligns below opset 16 (other
    than torchvision's MultiScaleRoIAlign's, aligned=False by design): RoIAlign's aligned=True
    is lost there. Returns ([], notes); changes nothing."""
    g = indexed(model, "torch.onnx", g)
    if model.producer_name != "pytorch" or g.opset is None or g.opset >= 16:
        return [], []
    ras = [n for n in model.graph.node if n.op_type == "RoiAlign" and is_default(n)
           and not _torchvision_merged(g, n) and not pad.offset_aligned(g, n)]
    if not ras:
        return [], []
    shown = ", ".join(repr(node_label(n)) for n in ras[:4])
    shown += ", ..." if len(ras) > 4 else ""
    note = (f"{len(ras)} RoiAlign node(s) ({shown}): torch.onnx wrote this model at opset "
            f"{g.opset}, where ONNX RoiAlign has no half-pixel mode, and exports RoIAlign's "
            f"aligned=True (detectron2's ROIAlignV2, torchvision's roi_align(aligned=True)) "
            f"there as aligned=False: if the model pools with aligned=True, this graph "
            f"computes otherwise than PyTorch (ort_roi computes what the graph says); "
            f"exporting at opset_version >= 16 keeps aligned=True "
            f"(coordinate_transformation_mode half_pixel)")
    return [], [note]
