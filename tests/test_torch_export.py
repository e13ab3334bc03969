"""ort_roi.torch_export: torchvision's RoI ops and MultiScaleRoIAlign exported as ort_roi
nodes through both of torch's exporters (TorchScript and dynamo), run by a plain onnxruntime
session with ort_roi.session_options(), equal to eager torchvision: max pooling bit for bit,
the averaging ops to float rounding (1e-5). Skipped without torch, torchvision and onnxscript
(pip install '.[torchvision]')."""

import io
import subprocess
import sys
import warnings

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import ort_roi

torch = pytest.importorskip("torch", reason="needs torchvision: pip install '.[torchvision]'")
pytest.importorskip("torchvision", reason="needs torchvision: pip install '.[torchvision]'")
pytest.importorskip("onnxscript", reason="needs torchvision: pip install '.[torchvision]'")
from torchvision import ops  # noqa: E402

EXPORTERS = {"torchscript": False, "dynamo": True}
H, W, SCALE = 20, 24, 0.5


class Op(torch.nn.Module):
    """One torchvision RoI op; returns its pooled output only."""

    def __init__(self, name, **kw):
        super().__init__()
        self.name, self.kw = name, kw

    def forward(self, x, rois):
        out = getattr(ops, self.name)(x, rois, **self.kw)
        return out[0] if isinstance(out, tuple) else out


def _rois(n, dtype, edge_boxes=True, seed=0):
    """[n, 5] rois over two images (in image pixels, spatial scale SCALE): the first ones off
    the map, of zero size and inverted when ``edge_boxes``."""
    g = torch.Generator().manual_seed(seed)
    r = torch.rand(n, 5, generator=g) * torch.tensor([2, W / SCALE, H / SCALE, W / SCALE,
                                                      H / SCALE])
    r[:, 0] = torch.floor(r[:, 0])
    lo, hi = torch.minimum(r[:, 1:3], r[:, 3:5]), torch.maximum(r[:, 1:3], r[:, 3:5])
    r[:, 1:3], r[:, 3:5] = lo, hi
    if edge_boxes:
        r[0, 1:] = torch.tensor([-20.0, -20.0, -5.0, -5.0])  # off the map
        r[1, 1:] = torch.tensor([10.0, 10.0, 10.0, 10.0])  # zero size
        r[2, 1:] = torch.tensor([30.0, 30.0, 10.0, 10.0])  # inverted
    return r.to(dtype)


def _export(module, args, names, dynamic, dynamo, **kw):
    buf = io.BytesIO()
    if dynamo:
        kw["dynamic_shapes"] = {n: ({0: torch.export.Dim(f"n_{n}")} if n in dynamic else None)
                                for n in names}
    else:
        kw["dynamic_axes"] = {n: [0] for n in dynamic}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ort_roi.torch_export(module, args, buf, dynamo=dynamo, input_names=names,
                             verbose=False, **kw)
    return onnx.load_from_string(buf.getvalue())


def _run(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {k: v.numpy() for k, v in feed.items()})[0]


def _ours(model):
    return sorted(n.op_type for n in model.graph.node if n.domain == ort_roi.DOMAIN)


OP_CASES = {
    "roi_align": ("RoiAlign", 3, dict(output_size=(3, 4), spatial_scale=SCALE,
                                      sampling_ratio=2, aligned=False)),
    # torchvision itself cannot run inverted boxes with aligned=True and adaptive sampling
    # (a negative grid: "cannot create std::vector larger than max_size()")
    "roi_align_aligned_adaptive": ("RoiAlign", 3, dict(output_size=(2, 3), spatial_scale=SCALE,
                                                       sampling_ratio=-1, aligned=True)),
    "roi_pool": ("ROIPooling", 3, dict(output_size=(3, 4), spatial_scale=SCALE)),
    "ps_roi_align": ("TorchvisionPSRoIAlign", 8, dict(output_size=2, spatial_scale=SCALE,
                                                      sampling_ratio=-1)),
    "ps_roi_pool": ("TorchvisionPSRoIPool", 12, dict(output_size=(2, 3), spatial_scale=SCALE)),
}


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("case", OP_CASES)
def test_op_exports_as_ort_roi_node_equal_to_eager(case, exporter):
    node, C, kw = OP_CASES[case]
    name = case.split("_aligned")[0]
    module = Op(name, **kw).eval()
    edge = case != "roi_align_aligned_adaptive"
    x = torch.randn(2, C, H, W, generator=torch.Generator().manual_seed(1))
    model = _export(module, (x, _rois(9, torch.float32, edge)), ["x", "rois"], ["rois"],
                    EXPORTERS[exporter])
    assert _ours(model) == [node]
    for dtype in (torch.float32, torch.float64) if exporter == "torchscript" else (
            torch.float32,):
        if dtype == torch.float64:  # the same module exported with double inputs
            x = x.double()
            model = _export(module, (x, _rois(9, dtype, edge)), ["x", "rois"], ["rois"], False)
        for n in (9, 1, 23):  # the box count is dynamic
            rois = _rois(n, dtype, edge and n > 3, seed=n)
            with torch.no_grad():
                want = module(x, rois).numpy()
            got = _run(model, {"x": x, "rois": rois})
            assert got.dtype == want.dtype and got.shape == want.shape
            if "pool" in name:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
            assert np.isfinite(got).any() and np.abs(np.nan_to_num(got)).sum() > 0


def test_ps_roi_align_keeps_torchvisions_nan_for_an_empty_adaptive_grid():
    """torchvision's ps_roi_align divides by a zero sample count for a zero-size box with
    adaptive sampling: NaN, and the exported graph gives the same."""
    module = Op("ps_roi_align", output_size=2, spatial_scale=1.0, sampling_ratio=-1).eval()
    x = torch.randn(1, 8, H, W)
    rois = torch.tensor([[0.0, 5.0, 5.0, 5.0, 5.0], [0.0, 1.0, 2.0, 9.0, 7.0]])
    model = _export(module, (x, rois), ["x", "rois"], ["rois"], False)
    with torch.no_grad():
        want = module(x, rois).numpy()
    got = _run(model, {"x": x, "rois": rois})
    assert np.isnan(want[0]).all() and np.isnan(got[0]).all()
    np.testing.assert_allclose(got[1], want[1], rtol=1e-5, atol=1e-6)


class Pooler(torch.nn.Module):
    """MultiScaleRoIAlign over ``levels`` maps (strides 4, 8, ...) of two images."""

    def __init__(self, levels, output_size=7, sampling_ratio=2):
        super().__init__()
        self.levels = levels
        self.pool = ops.MultiScaleRoIAlign([f"f{i}" for i in range(levels)], output_size,
                                           sampling_ratio)

    def forward(self, boxes_a, boxes_b, f0, f1, f2=None, f3=None, f4=None, f5=None):
        feats = [f for f in (f0, f1, f2, f3, f4, f5) if f is not None]
        return self.pool({f"f{i}": f for i, f in enumerate(feats)}, [boxes_a, boxes_b],
                         [(128, 160), (128, 160)])


def _boxes(n, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    xy = torch.rand(n, 2, generator=g) * torch.tensor([160.0, 128.0])
    wh = torch.exp(torch.rand(n, 2, generator=g) * 6) + 1  # 2 .. 400 px: every level
    b = torch.cat([xy, xy + wh], 1)
    if n > 2:
        b[0] = torch.tensor([-50.0, -50.0, -10.0, -10.0])  # off the image
        b[1] = torch.tensor([5.0, 5.0, 5.0, 5.0])  # zero size
    return b.to(dtype)


@pytest.mark.parametrize("exporter", EXPORTERS)
@pytest.mark.parametrize("levels,dtype", [(2, torch.float64), (4, torch.float32),
                                          (6, torch.float32)])
def test_multiscale_roi_align_exports_as_one_fused_node(levels, dtype, exporter):
    g = torch.Generator().manual_seed(levels)
    feats = [torch.randn(2, 3, 32 >> i, 40 >> i, generator=g, dtype=dtype)
             for i in range(levels)]
    module = Pooler(levels).eval()
    names = ["boxes_a", "boxes_b"] + [f"f{i}" for i in range(levels)]
    model = _export(module, (_boxes(30, dtype, 0), _boxes(5, dtype, 1), *feats), names,
                    ["boxes_a", "boxes_b"], EXPORTERS[exporter])
    assert _ours(model) == [f"PyramidRoIAlign_L{levels}"]
    assert not [n for n in model.graph.node if n.op_type in ("RoiAlign", "ScatterElements")]
    for n_a, n_b in ((30, 5), (0, 11), (64, 1)):  # box counts differ from the export's
        a, b = _boxes(n_a, dtype, n_a + 7), _boxes(n_b, dtype, n_b + 9)
        with torch.no_grad():
            want = module(a, b, *feats).numpy()
        got = _run(model, dict(zip(names, (a, b, *feats))))
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


class PSHead(torch.nn.Module):
    """An R-FCN head: a 1x1 conv to k*k*(classes) score maps, ps_roi_align over the boxes,
    a vote (mean over the bins), softmax."""

    def __init__(self, classes=3, k=3):
        super().__init__()
        self.conv = torch.nn.Conv2d(8, k * k * classes, 1)
        self.k = k

    def forward(self, feat, rois):
        maps = self.conv(feat)
        pooled = ops.ps_roi_align(maps, rois, self.k, spatial_scale=SCALE, sampling_ratio=2)
        return torch.softmax(pooled.mean((2, 3)), 1)


@pytest.mark.parametrize("exporter", EXPORTERS)
def test_rfcn_style_head_exports_and_runs_equal_to_eager(exporter):
    torch.manual_seed(0)
    module = PSHead().eval()
    feat = torch.randn(2, 8, H, W)
    model = _export(module, (feat, _rois(12, torch.float32, False)), ["feat", "rois"],
                    ["rois"], EXPORTERS[exporter])
    assert _ours(model) == ["TorchvisionPSRoIAlign"]
    rois = _rois(40, torch.float32, False, seed=5)
    with torch.no_grad():
        want = module(feat, rois).numpy()
    np.testing.assert_allclose(_run(model, {"feat": feat, "rois": rois}), want, rtol=1e-5,
                               atol=1e-6)


def test_torchvisions_own_export_is_back_afterwards():
    """The symbolics and the stage are installed for one torch_export call only."""
    module = Op("roi_align", output_size=2, spatial_scale=1.0, sampling_ratio=2).eval()
    args = (torch.randn(1, 2, 8, 8), torch.tensor([[0.0, 1.0, 1.0, 6.0, 6.0]]))
    ours = _export(module, args, ["x", "rois"], [], False, opset_version=16)
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=16)
    theirs = onnx.load_from_string(buf.getvalue())
    assert _ours(ours) == ["RoiAlign"] and _ours(theirs) == []
    assert [n.op_type for n in theirs.graph.node if n.op_type == "RoiAlign"] == ["RoiAlign"]
    from torchvision.ops import poolers

    assert not hasattr(poolers._multiscale_roi_align, "original")  # noqa: SLF001


def test_import_ort_roi_does_not_import_torch():
    code = "import sys, ort_roi; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
