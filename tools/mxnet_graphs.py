#!/usr/bin/env python3
"""MXNet's exported RoI graphs and MXNet's own outputs: the goldens of tests/test_mxnet.py, and
GluonCV's Faster R-CNN (and FPN) for the end-to-end numbers.

    /tmp/mxvenv/bin/python -m tools.mxnet_graphs ops [--out tests/goldens/mxnet]
    /tmp/mxvenv/bin/python -m tools.mxnet_graphs gluoncv [--out /tmp/mxnet_e2e]
    python -m tools.mxnet_graphs compare [--out /tmp/mxnet_e2e]     # the dev venv (ort_roi)
    MXNET_PYTHON=/tmp/mxvenv/bin/python python -m tools.mxnet_graphs precision  # the dev venv

Runs in an MXNet venv (MXNet needs NumPy < 1.24; ort_roi is not imported here):

    python3 -m venv /tmp/mxvenv
    /tmp/mxvenv/bin/pip install mxnet==1.9.1 numpy==1.23.5 onnx==1.14.1
    /tmp/mxvenv/bin/pip install gluoncv==0.10.5.post0 -c <(echo numpy==1.23.5)   # gluoncv part

``mx.onnx.export_model`` (MXNet 1.9.1) has no opset argument: it translates with its opset-12
table below opset 13 and its opset-13 table from 13 on, and stamps the model with
``onnx.defs.onnx_opset_version()`` of the installed onnx (onnx 1.10.2 -> 15, 1.11 -> 16, 1.14
-> 19). ``ops`` exports each graph once per stamp 12 .. 19 by answering that call with the
stamp (what an older onnx answers), so the graph is the one MXNet writes with that onnx.

``ops`` writes ``mx2onnx.npz``: per case (contrib.ROIAlign with pooled sizes 7x7, 14x14
and 2x3, sample_ratio 2, -1 and 0, rows whose batch index is -1, boxes off the map, tiny and
inverted; ROIPooling; GluonCV's FPN RoI stage, ``FasterRCNN._pyramid_roi_feats`` itself, over
4 levels of a 256 x 256 image), its inputs "<case>:<input>", MXNet's output "<case>:expected"
and the graph at each stamp "<case>:opset<k>" (a serialized ModelProto). MXNet's CPU ROIAlign
does not write a row whose batch index is negative (it keeps what the output memory held) and
zeroes element n of the whole output instead (``top_data[n] = 0``: in row 0, racing with row
0's own write); the exporter's graph zeroes such rows (Less / Where), as MXNet's GPU kernel
does. So the expected output is MXNet's run with those indices set to 0, then those rows zero
("<case>:stale" counts the values where MXNet's CPU run of the rois as they are differs). For
the FPN stage the expected output is MXNet's ROIAlign of each box at its level (``roi_level``
as MXNet computes it), zero where the batch index is negative.

``gluoncv`` exports faster_rcnn_resnet50_v1b_voc and faster_rcnn_fpn_resnet50_v1b_coco
(pretrained=False, pretrained_base=False, seeded initialisation, a 384 x 512 image) with the
installed onnx's stamp to ``<out>/<model>.onnx`` and writes ``<out>/<model>.npz``: the image,
MXNet's RoI features ("roi": each ROIAlign as above, summed where GluonCV's FPN sums them;
"roi_name" its ONNX tensor; "mxnet_cpu_roi" MXNet's CPU run of that node, stale rows and
all), the RoI stage's inputs as MXNet computes them ("stage:<ONNX name>": the rois and the
feature maps) and MXNet's detections ("ids", "scores", "bboxes").

``compare`` (the dev venv) runs each exported model and its RoI stage alone (fed MXNet's rois
and maps) in onnxruntime: natively restamped 15 (what onnx 1.10.2 gives) and 16, natively at
its own stamp, and converted by ort_roi; it prints the RoI features' and detections'
differences from MXNet's and the median time of 5 runs.

``precision`` (the dev venv; it runs ``precision-mxnet`` in the MXNet venv named by
``--mxnet-python`` / MXNET_PYTHON) measures the converted graphs against MXNet at realistic
magnitudes: contrib.ROIAlign as GluonCV's Faster R-CNN C4 head uses it (a 38 x 50 map at
stride 16, 14 x 14, sample_ratio 2, 300 proposals of 16 .. 600 px) and GluonCV's FPN stage (two
512 x 640 images, strides 4 .. 32, 7 x 7, 400 proposals), feature maps N(0, 1) and N(0, 100);
it prints max |diff|, max |MXNet|, their ratio and the difference in float32 ulps.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os

import numpy as np

#: The stamps ``ops`` exports each graph at.
STAMPS = tuple(range(12, 20))
#: The IR version of the onnx release whose newest opset is the key (1.7 .. 1.14).
IR_VERSIONS = {12: 7, 13: 7, 14: 7, 15: 8, 16: 8, 17: 8, 18: 8, 19: 9}


@contextlib.contextmanager
def stamped(opset: int | None):
    """mx.onnx.export_model as an onnx whose newest opset is ``opset`` runs it."""
    import onnx.checker
    import onnx.defs

    real, checks = onnx.defs.onnx_opset_version, onnx.checker.DEFAULT_CONTEXT.opset_imports
    if opset is not None:  # (the checker's default context is made at import)
        onnx.defs.onnx_opset_version = lambda: opset
        onnx.checker.DEFAULT_CONTEXT.opset_imports = {"": opset}
    try:
        yield
    finally:
        onnx.defs.onnx_opset_version = real
        onnx.checker.DEFAULT_CONTEXT.opset_imports = checks


def export(sym, shapes: dict, path: str, opset: int | None = None, params=None) -> bytes:
    """mx.onnx.export_model of ``sym`` (inputs in ``shapes``) at stamp ``opset``."""
    import mxnet as mx

    args = sym.list_arguments()
    import onnx

    with stamped(opset):
        mx.onnx.export_model(sym, params or {}, [shapes[a] for a in args], np.float32, path)
    model = onnx.load(path)
    if opset is not None:  # the IR version the onnx release of that opset writes
        model.ir_version = IR_VERSIONS[opset]
    return model.SerializeToString()


def _boxes(rng, n: int, size: float) -> np.ndarray:
    """n boxes [x1, y1, x2, y2] in an image of side ``size``, sizes from tiny to the image."""
    c = rng.uniform(-0.1 * size, 1.1 * size, (n, 2))
    wh = np.exp(rng.uniform(np.log(0.2), np.log(size), (n, 2)))
    return np.concatenate([c - wh / 2, c + wh / 2], 1)


def _rois(rng, n: int, size: float, images: int, specials: bool = True) -> np.ndarray:
    b = _boxes(rng, n, size)
    batch = rng.integers(0, images, (n, 1)).astype(np.float64)
    if specials:
        batch[1] = -1  # masked: the exporter's zero row
        b[2] = [3.0, 4.0, 3.2, 4.1]  # smaller than a pixel at any scale
        b[3] = [0.8 * size, 0.7 * size, 0.2 * size, 0.1 * size]  # inverted
        b[4] = [-3.0 * size, -2.0 * size, -1.5 * size, -1.2 * size]  # off the map
        b[5] = [0.0, 0.0, size, size]  # the whole image
    return np.concatenate([batch, b], 1).astype(np.float32)


#: contrib.ROIAlign cases: (name, N, C, H, W, image side, spatial_scale, pooled, sample_ratio).
ALIGN = (("align7", 2, 3, 10, 12, 24.0, 0.5, (7, 7), 2),
         ("align14", 1, 4, 8, 10, 160.0, 1 / 16, (14, 14), -1),
         ("align23", 2, 2, 9, 7, 9.0, 1.0, (2, 3), 0))


def _mx_roi_align(x, rois, pooled, scale, sample_ratio):
    """MXNet's ROIAlign with rows whose batch index is negative zero, as the exporter's graph
    and MXNet's GPU kernel make them; and how many values MXNet's CPU run of the same rois
    has otherwise. (Its CPU kernel writes ``top_data[n] = 0`` for such a row n: element n of
    the whole output, in row 0, racing with row 0's own write; the row itself is left as the
    memory was.) The other rows are MXNet's, computed with the negative indices set to 0."""
    import mxnet as mx

    neg = rois[:, 0] < 0
    safe = rois.copy()
    safe[neg, 0] = 0
    out = mx.nd.contrib.ROIAlign(mx.nd.array(x), mx.nd.array(safe), pooled, scale,
                                 sample_ratio=sample_ratio).asnumpy()
    out[neg] = 0
    raw = mx.nd.contrib.ROIAlign(mx.nd.array(x), mx.nd.array(rois), pooled, scale,
                                 sample_ratio=sample_ratio).asnumpy()
    return out, int(np.count_nonzero(raw != out))


def ops(out_dir: str) -> None:
    """The ``ops`` part (see the module)."""
    import mxnet as mx
    import onnx

    rng = np.random.default_rng(20261125)
    data: dict[str, np.ndarray] = {}
    tmp = os.path.join(out_dir, "_tmp.onnx")

    def graphs(case: str, sym, shapes: dict) -> None:
        for k in STAMPS:
            data[f"{case}:opset{k}"] = np.frombuffer(export(sym, shapes, tmp, k), np.uint8)

    for name, n, c, h, w, size, scale, pooled, sr in ALIGN:
        x = rng.standard_normal((n, c, h, w)).astype(np.float32)
        rois = _rois(rng, 12, size, n)
        sym = mx.sym.contrib.ROIAlign(mx.sym.var("x"), mx.sym.var("rois"), pooled, scale,
                                      sample_ratio=sr, name="roialign0")
        data[f"{name}:x"], data[f"{name}:rois"] = x, rois
        data[f"{name}:expected"], stale = _mx_roi_align(x, rois, pooled, scale, sr)
        data[f"{name}:stale"] = np.array(stale)
        graphs(name, sym, {"x": x.shape, "rois": rois.shape})
    # ROIPooling -> MaxRoiPool
    x = rng.standard_normal((2, 3, 10, 12)).astype(np.float32)
    rois = _rois(rng, 10, 24.0, 2, specials=False)
    sym = mx.sym.ROIPooling(mx.sym.var("x"), mx.sym.var("rois"), (3, 3), 0.5, name="roipool0")
    data["pool:x"], data["pool:rois"] = x, rois
    data["pool:expected"] = mx.nd.ROIPooling(mx.nd.array(x), mx.nd.array(rois), (3, 3),
                                             0.5).asnumpy()
    graphs("pool", sym, {"x": x.shape, "rois": rois.shape})
    # GluonCV's FPN RoI stage, 4 levels (strides 4 .. 32 over a 256 x 256 image)
    fpn_sym, fpn_data = _fpn(rng)
    data.update(fpn_data)
    graphs("fpn", fpn_sym, {k[4:]: v.shape for k, v in fpn_data.items()
                            if k.count(":") == 1 and k[4:] in fpn_sym.list_arguments()})
    os.remove(tmp)
    data["meta"] = np.array(json.dumps(dict(mxnet=mx.__version__, onnx=onnx.__version__,
                                            stamps=list(STAMPS))))
    path = os.path.join(out_dir, "mx2onnx.npz")
    np.savez_compressed(path, **data)
    print(f"wrote {path} ({os.path.getsize(path)} bytes)")


def _fpn(rng):
    """GluonCV's ``_pyramid_roi_feats`` as a symbol over 4 levels, its inputs and the
    expected output (see the module)."""
    import mxnet as mx
    from gluoncv.model_zoo.rcnn.faster_rcnn.faster_rcnn import FasterRCNN

    class Stage:  # what _pyramid_roi_feats reads of the network
        _min_stage, _max_stage = 2, 5

    strides = (4, 8, 16, 32)
    feats = [mx.sym.var(f"feat{i}") for i in range(4)]
    rois_var = mx.sym.var("rois")
    sym = FasterRCNN._pyramid_roi_feats(Stage(), mx.sym, feats, rois_var, (7, 7), strides)
    side = 256.0
    rois = _rois(rng, 24, side, 2)
    rois[6:, 3:] = np.maximum(rois[6:, 3:], rois[6:, 1:3] + 1)  # most upright
    rois[10:18, 1:] = [[0, 0, 40, 40], [0, 0, 130, 110], [10, 20, 250, 230], [0, 0, 255, 255],
                       [-100, -80, 400, 380], [30, -50, 600, 500], [5, 5, 117, 117],
                       [5, 5, 116.5, 116.5]]  # levels 2 .. 5, the last two about a boundary
    x = [rng.standard_normal((2, 2, int(side) // s, int(side) // s)).astype(np.float32)
         for s in strides]
    data = {"fpn:rois": rois, **{f"fpn:feat{i}": v for i, v in enumerate(x)}}
    expected, level, whole = _fpn_expected(sym, rois, x, strides)
    data["fpn:expected"] = expected
    data["fpn:levels"] = level
    data["fpn:stale"] = np.array(int(np.count_nonzero(whole != expected)))
    print("fpn levels:", np.unique(level, return_counts=True),
          "MXNet's whole-stage run differs in", int(data["fpn:stale"]), "values")
    return sym, data


def _fpn_expected(sym, rois: np.ndarray, x: list, strides) -> tuple:
    """(MXNet's ROIAlign of each box at its level (``roi_level`` as MXNet computes it, the
    internal squeeze), zero where the batch index is negative; the levels; MXNet's run of the
    whole stage)."""
    import mxnet as mx

    level_sym = sym.get_internals()["squeeze0_output"]
    args = {"rois": mx.nd.array(rois), **{f"feat{i}": mx.nd.array(v) for i, v in enumerate(x)}}
    level = level_sym.eval(ctx=mx.cpu(), **{k: v for k, v in args.items()
                                            if k in level_sym.list_arguments()})[0].asnumpy()
    expected = np.zeros((len(rois), x[0].shape[1], 7, 7), np.float32)
    for i, s in enumerate(strides):
        pooled, _ = _mx_roi_align(x[i], rois, (7, 7), 1.0 / s, 2)
        expected[level == i + 2] = pooled[level == i + 2]
    return expected, level, sym.eval(ctx=mx.cpu(), **args)[0].asnumpy()


# -- precision at realistic magnitudes ----------------------------------------------------------

#: The feature scales ``precision`` measures at: N(0, 1) (the goldens' maps) and N(0, 100) (a
#: detector's maps after ReLU stages reach |x| of several hundred).
PRECISION_STDS = (1.0, 100.0)


def _proposals(rng, n: int, images: int, h: float, w: float) -> np.ndarray:
    """n rois [batch, x1, y1, x2, y2] as a detector's proposals: sides 16 .. 600 px
    (log-uniform), clipped to an h x w image."""
    c = rng.uniform(0, 1, (n, 2)) * [w, h]
    wh = np.exp(rng.uniform(np.log(16), np.log(600), (n, 2)))
    b = np.concatenate([c - wh / 2, c + wh / 2], 1)
    b = np.clip(b, 0, [w - 1, h - 1, w - 1, h - 1])
    return np.concatenate([rng.integers(0, images, (n, 1)), b], 1).astype(np.float32)


def precision_mxnet(out_dir: str) -> None:
    """``precision-mxnet`` (the MXNet venv): MXNet's contrib.ROIAlign and GluonCV's FPN stage
    at realistic magnitudes, their mx2onnx graphs (stamp 19) into ``<out>/precision.npz``."""
    import mxnet as mx
    from gluoncv.model_zoo.rcnn.faster_rcnn.faster_rcnn import FasterRCNN

    rng = np.random.default_rng(20261126)
    data: dict[str, np.ndarray] = {}
    tmp = os.path.join(out_dir, "_tmp.onnx")
    for std in PRECISION_STDS:
        # GluonCV's Faster R-CNN C4 head: one 600 x 800 image at stride 16, 14 x 14,
        # sample_ratio 2, 300 proposals
        case = f"c4_std{std:g}"
        x = (rng.standard_normal((1, 32, 38, 50)) * std).astype(np.float32)
        rois = _proposals(rng, 300, 1, 600, 800)
        sym = mx.sym.contrib.ROIAlign(mx.sym.var("x"), mx.sym.var("rois"), (14, 14), 1 / 16,
                                      sample_ratio=2, name="roialign0")
        data[f"{case}:x"], data[f"{case}:rois"] = x, rois
        data[f"{case}:expected"], _ = _mx_roi_align(x, rois, (14, 14), 1 / 16, 2)
        shapes = {"x": x.shape, "rois": rois.shape}
        for k in (15, 19):
            data[f"{case}:opset{k}"] = np.frombuffer(export(sym, shapes, tmp, k), np.uint8)
        # GluonCV's FPN RoI stage: two 512 x 640 images, strides 4 .. 32, 7 x 7, 400 proposals

        class Stage:  # what _pyramid_roi_feats reads of the network
            _min_stage, _max_stage = 2, 5

        case, strides = f"fpn_std{std:g}", (4, 8, 16, 32)
        with mx.name.NameManager():  # (names counted afresh: _fpn_expected reads squeeze0)
            sym = FasterRCNN._pyramid_roi_feats(Stage(), mx.sym, [mx.sym.var(f"feat{i}")
                                                                  for i in range(4)],
                                                mx.sym.var("rois"), (7, 7), strides)
        x = [(rng.standard_normal((2, 16, 512 // s, 640 // s)) * std).astype(np.float32)
             for s in strides]
        rois = _proposals(rng, 400, 2, 512, 640)
        data[f"{case}:rois"] = rois
        data.update({f"{case}:feat{i}": v for i, v in enumerate(x)})
        data[f"{case}:expected"], data[f"{case}:levels"], _ = _fpn_expected(sym, rois, x,
                                                                             strides)
        shapes = {"rois": rois.shape, **{f"feat{i}": v.shape for i, v in enumerate(x)}}
        for k in (15, 19):
            data[f"{case}:opset{k}"] = np.frombuffer(
                export(sym, {a: shapes[a] for a in sym.list_arguments()}, tmp, k), np.uint8)
    os.remove(tmp)
    np.savez_compressed(os.path.join(out_dir, "precision.npz"), **data)


def ulps(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How many float32 values lie between a and b (elementwise; 0: equal)."""
    def ordered(v):
        i = np.ascontiguousarray(v, np.float32).view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)
    return np.abs(ordered(a) - ordered(b))


def precision(out_dir: str, mxnet_python: str) -> None:
    """``precision`` (the dev venv): runs ``precision-mxnet`` in the MXNet venv, then converts
    each graph with ort_roi and prints its difference from MXNet: max |diff|, max |MXNet|,
    their ratio, max |diff| in float32 ulps of max |MXNet| (the spacing of the largest
    value), and the largest elementwise ulp distance among the values of at least 1 % of max
    |MXNet| (near zero an absolute difference of one rounding of a large term is many ulps of
    a small result). Also onnxruntime's own RoiAlign (stamp 15: MXNet's geometry) for scale."""
    import subprocess
    import warnings

    import onnx
    import onnxruntime as ort

    import ort_roi

    os.makedirs(out_dir, exist_ok=True)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    subprocess.run([mxnet_python, "-m", "tools.mxnet_graphs", "precision-mxnet", "--out",
                    os.path.abspath(out_dir)], check=True, cwd=root)
    with np.load(os.path.join(out_dir, "precision.npz")) as d:
        data = {k: d[k] for k in d.files}
    so = ort.SessionOptions()
    so.log_severity_level = 3
    cases = sorted({k.split(":")[0] for k in data})
    print(f"ort_roi {ort_roi.__version__}, onnxruntime {ort.__version__}; MXNet 1.9.1 "
          f"contrib.ROIAlign / GluonCV _pyramid_roi_feats (CPU)")
    print(f"{'case':>12} {'runner':>22} {'max|MXNet|':>11} {'max|diff|':>10} {'rel':>9} "
          f"{'ulps@max':>9} {'ulps>=1%':>9}")
    for case in cases:
        want = data[f"{case}:expected"]
        for label, stamp, convert in (("ort_roi (converted)", 19, True),
                                      ("onnxruntime (stamp 15)", 15, False)):
            m = onnx.load_from_string(data[f"{case}:opset{stamp}"].tobytes())
            if convert:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    m = ort_roi.convert(m)
            feed = {i.name: data[f"{case}:{i.name}"] for i in m.graph.input
                    if f"{case}:{i.name}" in data}
            sess = ort.InferenceSession(m.SerializeToString(),
                                        ort_roi.session_options(so) if convert else so,
                                        providers=["CPUExecutionProvider"])
            got = sess.run(None, feed)[0]
            diff = np.abs(got.astype(np.float64) - want)
            top = float(np.abs(want).max())
            big = np.abs(want) >= 0.01 * top
            print(f"{case:>12} {label:>22} {top:11.4g} {diff.max():10.3g} "
                  f"{diff.max() / top:9.2g} {diff.max() / np.spacing(np.float32(top)):9.2f} "
                  f"{int(ulps(got[big], want[big]).max()):9d}")


#: The GluonCV models of the end-to-end check, with the image they are run on (H, W).
MODELS = (("faster_rcnn_resnet50_v1b_voc", (384, 512)),
          ("faster_rcnn_fpn_resnet50_v1b_coco", (384, 512)))


def gluoncv(out_dir: str, models=MODELS) -> None:
    """The ``gluoncv`` part (see the module)."""
    import mxnet as mx
    import onnx
    from gluoncv import model_zoo

    os.makedirs(out_dir, exist_ok=True)
    for name, (h, w) in models:
        mx.random.seed(7)
        np.random.seed(7)
        net = model_zoo.get_model(name, pretrained=False, pretrained_base=False)
        net.initialize()
        net.hybridize()
        image = np.random.default_rng(7).uniform(-2, 2, (1, 3, h, w)).astype(np.float32)
        ids, scores, bboxes = net(mx.nd.array(image))
        prefix = os.path.join(out_dir, name)
        net.export(prefix)
        sym_file, params_file = prefix + "-symbol.json", prefix + "-0000.params"
        onnx_path = prefix + ".onnx"
        mx.onnx.export_model(sym_file, params_file, [(1, 3, h, w)], np.float32, onnx_path)
        roi, pooled, raw, stage = _roi_features(sym_file, params_file, image)
        np.savez_compressed(prefix + ".npz", image=image, roi=pooled, mxnet_cpu_roi=raw,
                            stage_inputs=np.array(list(stage)),
                            **{f"stage:{k}": v for k, v in stage.items()},
                            roi_name=np.array(roi[:-len("_output")]), ids=ids.asnumpy(),
                            scores=scores.asnumpy(), bboxes=bboxes.asnumpy(),
                            meta=np.array(json.dumps(dict(
                                mxnet=mx.__version__, onnx=onnx.__version__,
                                stamp=onnx.defs.onnx_opset_version()))))
        print(f"{name}: {onnx_path}, RoI features {roi} {pooled.shape}, |roi| max "
              f"{np.abs(pooled).max():.3g}; MXNet's CPU run of the graph differs from them in "
              f"{np.count_nonzero(raw != pooled)} values (max {np.abs(raw - pooled).max():.3g})")


def _roi_features(sym_file: str, params_file: str, image: np.ndarray):
    """(the RoI features' node output name, MXNet's RoI features, MXNet's CPU run of that
    node as it is, the RoI stage's inputs by their ONNX names: the rois and the feature
    maps, as MXNet computes them). The features: each ROIAlign of the model run by MXNet on
    its own inputs as the graph computes them (``_mx_roi_align``: rows with a negative batch
    index zero, as the exporter's graph makes them; MXNet's CPU kernel leaves them stale,
    which GluonCV's FPN stage then sums), summed where the model sums them (its FPN stage)."""
    import re

    import mxnet as mx

    internals = mx.sym.load(sym_file).get_internals()
    names = internals.list_outputs()
    aligns = [o for o in names if re.search(r"roialign\d+_output$", o)]
    summed = [o for o in names if re.search(r"elementwisesum\d+_output$", o)]
    target = summed[0] if summed else aligns[0]
    kids = [internals[a].get_children() for a in aligns]
    rois = kids[0][1]  # the rois, or GluonCV's FPN masking where(level == l, rois, -1)
    if summed:
        rois = rois.get_children()[1]
    stage = [rois] + [k[0] for k in kids]
    group = mx.sym.Group([k[i] for k in kids for i in (0, 1)] + [internals[target]] + stage)
    params = {k.split(":", 1)[1]: v for k, v in mx.nd.load(params_file).items()}
    args = {k: params[k] for k in group.list_arguments() if k in params}
    args["data"] = mx.nd.array(image)
    aux = {k: params[k] for k in group.list_auxiliary_states()}
    outs = [o.asnumpy() for o in group.bind(mx.cpu(), args, aux_states=aux).forward()]
    names = [sym.list_outputs()[0][:-len("_output")] for sym in stage]
    inputs = dict(zip(names, outs[-len(stage):]))
    outs = outs[:-len(stage)]
    total = None
    for k, a in enumerate(aligns):
        at = internals[a].list_attr()
        pooled = tuple(int(v) for v in re.findall(r"\d+", at["pooled_size"]))
        out, _ = _mx_roi_align(outs[2 * k], outs[2 * k + 1], pooled, float(at["spatial_scale"]),
                               int(at.get("sample_ratio", -1)))
        total = out if total is None else total + out
    return target, total, outs[-1], inputs


def _restamped(model, opset: int):
    """The model as mx2onnx writes it with an onnx whose newest opset is ``opset`` (>= 13: the
    same opset-13 table's nodes, another stamp)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o in m.opset_import:
        if o.domain in ("", "ai.onnx"):
            o.version = opset
    return m


def _with_output(model, name: str):
    """The model with tensor ``name`` as an extra graph output (the RoI features)."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    m.graph.output.append(onnx.ValueInfoProto(name=name))
    return m


def _stage(model, inputs: list, output: str):
    """The subgraph of ``model`` computing ``output`` from the tensors ``inputs`` (float32
    graph inputs) and initializers: the RoI stage on its own."""
    import onnx
    from onnx import helper

    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name: t for t in model.graph.initializer}
    keep, seen, todo = set(), set(inputs), [output]
    while todo:
        t = todo.pop()
        if t in seen:
            continue
        seen.add(t)
        n = producer.get(t)
        if n is None:
            assert t in inits, f"the stage reads {t!r}, neither an input nor a constant"
            continue
        keep.add(id(n))
        todo.extend(i for i in n.input if i)
    g = helper.make_graph(
        [n for n in model.graph.node if id(n) in keep], "stage",
        [helper.make_tensor_value_info(i, onnx.TensorProto.FLOAT, None) for i in inputs],
        [onnx.ValueInfoProto(name=output)],
        [t for name, t in inits.items() if name in seen])
    m = helper.make_model(g, opset_imports=list(model.opset_import))
    m.ir_version = model.ir_version
    return m


def compare(out_dir: str, models=MODELS, runs: int = 5) -> None:
    """The ``compare`` part (the dev venv: ort_roi and onnxruntime, no MXNet): each exported
    model run by onnxruntime natively (restamped 15: exact; 16: loads; its own stamp) and
    converted by ort_roi (its own stamp), against MXNet's RoI features and detections."""
    import functools
    import warnings

    import onnx
    import onnxruntime as ort

    import ort_roi
    from ort_roi.cli.bench_timing import time_together

    def session(model, ours: bool):
        so = ort_roi.session_options() if ours else ort.SessionOptions()
        so.log_severity_level = 3
        return ort.InferenceSession(model.SerializeToString(), so,
                                    providers=["CPUExecutionProvider"])

    for name, _ in models:
        prefix = os.path.join(out_dir, name)
        d = np.load(prefix + ".npz")
        roi_name = str(d["roi_name"])
        names = [str(v) for v in d["stage_inputs"]]
        model = onnx.load(prefix + ".onnx")
        for extra in [*names, roi_name]:  # the RoI stage's inputs and output: outputs too
            model = _with_output(model, extra)
        stamp = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
        mx_dets = [d["ids"], d["scores"], d["bboxes"]]
        print(f"{name} (stamped {stamp}; RoI features {roi_name} {d['roi'].shape}; MXNet's "
              f"CPU run of them off by {np.abs(d['mxnet_cpu_roi'] - d['roi']).max():.3g})")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conv, done = ort_roi.convert(model, report=True)
        print("  convert:", done.summary())
        for note in done.notes:
            print("   note:", note[:160] + ("..." if len(note) > 160 else ""))
        variants = [(f"native, restamped {k}", _restamped(model, k), False) for k in (15, 16)]
        variants += [(f"native, stamped {stamp}", model, False),
                     (f"converted, stamped {stamp}", conv, True)]
        stage = _stage(model, names, roi_name)
        feed = {k: d[f"stage:{k}"] for k in names}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            conv_stage = ort_roi.convert(stage)
        print(f"  the RoI stage alone ({len(stage.graph.node)} nodes; MXNet's rois and feature "
              f"maps {', '.join(f'{k} {list(v.shape)}' for k, v in feed.items())}):")
        for label, m, ours in [(f"native, restamped {k}", _restamped(stage, k), False)
                               for k in (15, 16)] + [
                (f"native, stamped {stamp}", stage, False),
                (f"converted, stamped {stamp} ({len(conv_stage.graph.node)} nodes)", conv_stage,
                 True)]:
            try:
                sess = session(m, ours)
            except Exception as e:  # noqa: BLE001 - the model does not load: say so
                print(f"    {label}: does not load: {str(e).splitlines()[0][:150]}")
                continue
            got = sess.run(None, feed)[0]
            times = time_together({label: functools.partial(sess.run, None, feed)}, runs,
                                  min_sample_s=0, warmup=False)[label][2]
            print(f"    {label}: max |diff| from MXNet {np.abs(got - d['roi']).max():.3g}; "
                  f"median {np.median(times) * 1e3:.0f} ms ({runs} runs)")
        print("  the whole model:")
        first = None
        for label, m, ours in variants:
            try:
                sess = session(m, ours)
            except Exception as e:  # noqa: BLE001 - the model does not load: say so
                print(f"    {label}: does not load: {str(e).splitlines()[0][:150]}")
                continue
            outs = sess.run(None, {"data": d["image"]})
            times = time_together({label: functools.partial(sess.run, None, {"data": d["image"]})},
                                  runs, min_sample_s=0, warmup=False)[label][2]
            roi, dets = outs[-1], outs[:3]
            ins = dict(zip(names, outs[3:-1]))
            print(f"    {label}: the RoI stage's inputs vs MXNet's: " + ", ".join(
                f"{k} {np.abs(v - d[f'stage:{k}']).max():.3g}" for k, v in ins.items()))
            if first is None:
                first = (label, dets)
            else:
                print(f"    {label}: detections vs {first[0]}'s: " + ", ".join(
                    f"{k} max |diff| {np.abs(a - b).max():.3g}"
                    for k, a, b in zip(("ids", "scores", "boxes"), dets, first[1])))
            same_ids = np.mean(dets[0] == mx_dets[0])
            valid = (mx_dets[0] >= 0) & (dets[0] >= 0)
            print(f"    {label}: RoI features max |diff| {np.abs(roi - d['roi']).max():.3g}; "
                  f"detections vs MXNet: ids equal {same_ids:.1%}, scores max |diff| "
                  f"{np.abs(dets[1] - mx_dets[1]).max():.3g}, boxes max |diff| "
                  f"{np.abs(np.where(valid, dets[2] - mx_dets[2], 0)).max():.3g}; "
                  f"median {np.median(times) * 1e3:.0f} ms ({runs} runs)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("part", choices=("ops", "gluoncv", "compare", "precision",
                                    "precision-mxnet"))
    p.add_argument("--out", default=None)
    p.add_argument("--mxnet-python", default=os.environ.get("MXNET_PYTHON",
                                                            "/tmp/mxvenv/bin/python"),
                   help="the MXNet venv's python (precision; default $MXNET_PYTHON)")
    a = p.parse_args()
    if a.part == "ops":
        out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                    "goldens", "mxnet")
        os.makedirs(out, exist_ok=True)
        ops(out)
    elif a.part == "gluoncv":
        gluoncv(a.out or "/tmp/mxnet_e2e")
    elif a.part == "precision-mxnet":
        precision_mxnet(a.out or "/tmp/mxnet_precision")
    elif a.part == "precision":
        precision(a.out or "/tmp/mxnet_precision", a.mxnet_python)
    else:
        compare(a.out or "/tmp/mxnet_e2e")


if __name__ == "__main__":
    main()
