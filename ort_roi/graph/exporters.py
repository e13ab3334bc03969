"""Who wrote a graph, and what convert does for each exporter: the one table.

``rewrite`` (``ort-roi convert``, ``ort_roi.convert``, the front door) indexes a graph once
(``toolkit.GraphIndex``), tells its exporter once (``identify``: from what each exporter writes
into every model it makes, its producer_name and graph name) and runs the passes of
``EXPORTERS`` on that one index, indexing the graph afresh only after a pass changed it. A pass
is of one of two kinds:

- exact (``repair=False``): it rewrites a subgraph into nodes computing what onnxruntime
  computes from that subgraph (torchvision's MultiScaleRoIAlign stage and per-box Loops,
  export-paddle's FPN RoI stage, and back with ``to="onnx"``). It runs on every graph holding
  the ops it needs, whoever wrote it: it cannot change what the graph computes.
- a repair (``repair=True``): it gives a graph what its exporter meant where ONNX's reading of
  what the exporter wrote differs (mx2onnx's RoiAlign without coordinate_transformation_mode
  at stamps >= 16, its Splits without num_outputs, tf2onnx's crop_and_resize that onnxruntime
  computes otherwise than TensorFlow). It runs only on a graph told (or, with ``exporter=``,
  said) to come from that exporter. On any other graph what it would change stays as ONNX
  reads it, and a note names the nodes and how to ask for the repair.

The passes of each exporter live in its module (fusion.py, scatter_nd.py and loops.py: torch.onnx;
tensorflow/: tf2onnx; mxnet.py: mx2onnx; paddle.py: paddle2onnx through export-paddle);
this table is the one place that says which runs when.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import onnx

from ..spec import DOMAIN, MAX_LEVELS
from . import aligned_note, every_level_note, fusion, loops, mxnet, paddle, scatter_nd, tensorflow
from .nodes import iter_nodes, opset
from .toolkit import GraphIndex

Moved = list[tuple[str, str, str]]
#: A pass: (model, the graph's index as it is now) -> (moved, notes); changes model in place.
Run = Callable[[onnx.ModelProto, GraphIndex], tuple[Moved, list[str]]]
#: What a repair would change, left as it is: the labels of its nodes.
Find = Callable[[onnx.ModelProto, GraphIndex], list[str]]
#: ``exporter=`` for a graph to be taken as no exporter's: ONNX's meaning throughout.
NONE = "none"


@dataclass(frozen=True)
class Pass:
    """One rewrite of one exporter's forms.

    Args:
        what: the form it rewrites, as notes name it.
        run: the pass (``Run``).
        needs: op types one of which the graph must hold for the pass to run (it is skipped
            otherwise, without a look at the graph).
        to: the ``rewrite`` directions it runs in.
        fusion: skipped with ``fuse=False``.
        repair: it changes what ONNX's reading of the graph computes: run only on its
            exporter's graphs.
        find: (a repair) the nodes it would change, on a graph it does not run on.
        left: (a repair) what such nodes are, left as they are.
        gives: (a repair) what it gives them.
    """

    what: str
    run: Run
    needs: frozenset[str]
    to: tuple[str, ...] = ("ort_roi",)
    fusion: bool = True
    repair: bool = False
    find: Find | None = None
    left: str = ""
    gives: str = ""


@dataclass(frozen=True)
class Exporter:
    """An exporter: how a graph it wrote is told (``told``: the evidence, else None) and the
    passes convert runs for its forms, in order.

    Args:
        name: its name (``exporter=`` takes it).
        told: model -> why the model is this exporter's, else None.
        passes: its passes.
    """

    name: str
    told: Callable[[onnx.ModelProto], str | None]
    passes: tuple[Pass, ...] = ()


@dataclass(frozen=True)
class Origin:
    """Who wrote a graph, as convert took it: ``exporter`` (a name of ``EXPORTERS``, None when
    it cannot be told or ``exporter="none"`` was given), ``evidence`` (why), ``given`` (the
    caller named it)."""

    exporter: str | None
    evidence: str
    given: bool = False

    def __str__(self) -> str:
        return f"{self.exporter or 'unknown'} ({self.evidence})"


def _named(model: onnx.ModelProto) -> str:
    return f"producer_name {model.producer_name!r}, graph name {model.graph.name!r}"


def _tf2onnx(model: onnx.ModelProto) -> str | None:
    if model.producer_name == "tf2onnx":
        return f"producer_name 'tf2onnx' {model.producer_version}".rstrip()
    return None


def _torch(model: onnx.ModelProto) -> str | None:
    if model.producer_name == "pytorch":
        return f"producer_name 'pytorch' {model.producer_version}".rstrip()
    if model.graph.name == "main_graph":  # every graph torch.onnx writes, both exporters
        return (f"graph name 'main_graph', as torch.onnx names its graphs (producer_name "
                f"{model.producer_name!r})")
    return None


def _mx2onnx(model: onnx.ModelProto) -> str | None:
    if model.graph.name == "mxnet_converted_model":
        return (f"graph name 'mxnet_converted_model', as mx.onnx.export_model names its graphs "
                f"(producer_name {model.producer_name!r})")
    return None


def _paddle2onnx(model: onnx.ModelProto) -> str | None:
    if not (model.graph.name.startswith("PaddlePaddle Graph")
            or model.producer_name in ("PaddlePaddle", "paddle2onnx")):
        return None
    why = f"{_named(model)}, as paddle2onnx writes them"
    if any(n.domain == DOMAIN for n in model.graph.node):
        why += "; with ort_roi nodes: through ort-roi export-paddle"
    return why


def _ort_roi(model: onnx.ModelProto) -> str | None:
    if model.producer_name == "ort_roi":
        return "producer_name 'ort_roi': ort_roi.builders"
    return None


def _torchvision_stages(model: onnx.ModelProto, g: GraphIndex) -> tuple[Moved, list[str]]:
    fused, notes = fusion.fuse(model, g)
    return [(name, f"torchvision MultiScaleRoIAlign stage ({n} nodes)",
             f"{DOMAIN}::PyramidRoIAlign") for name, n in fused], notes


def _scatter_nd_stages(model: onnx.ModelProto, g: GraphIndex) -> tuple[Moved, list[str]]:
    fused, notes = scatter_nd.fuse(model, g)  # (name: .../PyramidRoIAlign_L4, ...)
    return [(name, f"ScatterND-merged RoI stage ({n} nodes)",
             f"{DOMAIN}::{name.rsplit('/', 1)[-1].rsplit('_L', 1)[0]}")
            for name, n in fused], notes


def _unfuse(model: onnx.ModelProto, g: GraphIndex) -> tuple[Moved, list[str]]:
    unfused, notes = fusion.unfuse_all(model)
    return [(name, f"{DOMAIN}::PyramidRoIAlign", f"standard ONNX ({n} nodes)")
            for name, n in unfused], notes


def _levels(op: str) -> frozenset[str]:
    return frozenset(f"{op}{n}" for n in range(1, MAX_LEVELS + 1))


_ONNX_MEANING = "left as ONNX reads it (what onnxruntime computes)"

#: The exporters, how each is told and the passes convert runs for it, in the order they run.
EXPORTERS: tuple[Exporter, ...] = (
    Exporter("mx2onnx", _mx2onnx, (
        Pass("a Split without num_outputs", mxnet.repair_splits, frozenset({"Split"}),
             to=("ort_roi", "onnx"), fusion=False, repair=True, find=mxnet.find_splits,
             left="left as it is (onnxruntime refuses to load it from opset 18)",
             gives="num_outputs, the equal split mx2onnx's opset-13 table means"),
        Pass("GluonCV's FPN RoI stage", mxnet.fuse_fpn, frozenset({"Sum"}),
             repair=True),  # (its RoiAligns are each found by the pass below)
        Pass("MXNet's contrib.ROIAlign", mxnet.fix_roi_aligns, frozenset({"RoiAlign"}),
             fusion=False, repair=True, find=mxnet.find_roi_aligns, left=_ONNX_MEANING,
             gives="MXNet's arithmetic (output_half_pixel, sample_ratio <= 0 adaptive)"),
    )),
    Exporter("torch.onnx", _torch, (
        Pass("torch.onnx's RoiAlign below opset 16 (aligned=True lost)",
             aligned_note.torch_aligned_note, frozenset({"RoiAlign"}), fusion=False),
        Pass("the ScatterND family of RoI stages (detectron2's ROIPooler, MMDeploy's, "
             "MMRotate's)", _scatter_nd_stages,
             frozenset({"ScatterND"})),
        Pass("torchvision's MultiScaleRoIAlign stage", _torchvision_stages,
             frozenset({"ScatterElements", "ScatterND"})),
        Pass("torchvision's keypoint and mask Loops", loops.fuse_loops, frozenset({"Loop"})),
        Pass("every roi pooled on every level (GRoIE)", every_level_note.every_level_note,
             frozenset({"RoiAlign"}), fusion=False),
        Pass("PyramidRoIAlign back to torch.onnx's stage", _unfuse,
             _levels("PyramidRoIAlign_L"), to=("onnx",), fusion=False),
    )),
    Exporter("tf2onnx", _tf2onnx, (
        Pass("tf.image.crop_and_resize", tensorflow.fuse_crop_and_resize,
             frozenset({"Loop", "CropAndResize"}), repair=True,
             find=tensorflow.find_crop_and_resize, left=_ONNX_MEANING,
             gives="TensorFlow's arithmetic (one ort_roi::CropAndResize)"),
    )),
    Exporter("paddle2onnx", _paddle2onnx, (
        Pass("PaddleDetection's FPN RoI stage", paddle.fuse_fpn_stages,
             _levels(paddle.DISTRIBUTE)),
    )),
    Exporter("ort_roi", _ort_roi),
)
#: The names ``exporter=`` (``--exporter``) takes.
NAMES: tuple[str, ...] = (*(e.name for e in EXPORTERS), NONE)


def identify(model: onnx.ModelProto, exporter: str | None = None) -> Origin:
    """Who wrote ``model``: ``exporter`` when given (a name of ``NAMES``), else the first entry
    of ``EXPORTERS`` that tells it from what the model carries, else unknown.

    Raises:
        ValueError: ``exporter`` is not one of ``NAMES``.
    """
    if exporter is not None:
        if exporter not in NAMES:
            raise ValueError(f"convert: 'exporter' must be one of {', '.join(NAMES)} (or None: "
                             f"told from the model), got {exporter!r}")
        if exporter == NONE:
            return Origin(None, "exporter='none' given: no exporter's repairs", given=True)
        return Origin(exporter, f"exporter={exporter!r} given; {_named(model)}", given=True)
    for e in EXPORTERS:
        why = e.told(model)
        if why is not None:
            return Origin(e.name, why)
    return Origin(None, f"{_named(model)}: no exporter ort_roi knows writes these")


def _op_types(model: onnx.ModelProto) -> set[str]:
    return {n.op_type for n in iter_nodes(model.graph)}


def run_passes(model: onnx.ModelProto, to: str = "ort_roi", fuse: bool = True,
               exporter: str | None = None) -> tuple[Origin, Moved, list[str], list[str]]:
    """The exporters' passes ``rewrite`` runs, in place: the graph indexed once, its exporter
    told once (``identify``), each pass of ``EXPORTERS`` whose direction, ``fuse`` and needed
    ops fit run on that index if it is exact or its exporter's repair; the other repairs only
    find what they would change, for a note.

    Returns:
        (the origin, moved: (node, from, to) per rewrite, notes, repairs: one line per repair
        pass that changed the graph, what it changed: the graph then computes otherwise
        than ONNX reads the exporter's form).

    Raises:
        ValueError: a bad ``exporter``.
    """
    origin = identify(model, exporter)
    g = GraphIndex(model.graph, opset(model) or 1)
    ops = _op_types(model)
    moved: Moved = []
    notes: list[str] = []
    repairs: list[str] = []
    for e in EXPORTERS:
        for p in e.passes:
            if to not in p.to or (p.fusion and not fuse) or not p.needs & ops:
                continue
            if p.repair and origin.exporter != e.name:
                found = [] if origin.given or p.find is None else p.find(model, g)
                if found:
                    shown = ", ".join(repr(f) for f in found[:5])
                    shown += ", ..." if len(found) > 5 else ""
                    notes.append(
                        f"node(s) {shown} look like {p.what} as {e.name} writes it (its form "
                        f"exactly), but "
                        f"nothing says {e.name} wrote this model (exporter: {origin}): "
                        f"{p.left}; pass exporter={e.name!r} (--exporter {e.name}) to treat it "
                        f"as {e.name}'s: {p.gives}")
                continue
            m, n = p.run(model, g)
            moved += m
            notes += n
            if m and p.repair:
                repairs.append(f"{len(m)} x {p.what} as {e.name} writes it: "
                               f"{p.gives or 'what ' + e.name + ' meant'}, not ONNX's reading "
                               f"of it")
            if m:  # the graph changed: one new index for the passes after
                g = GraphIndex(model.graph, opset(model) or 1)
                ops = _op_types(model)
    return origin, moved, notes, repairs
