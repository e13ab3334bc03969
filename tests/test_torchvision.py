"""Live parity with torchvision.ops (CPU): RoIAlign (aligned 0/1, fixed and adaptive
sampling) and ROIPooling max against roi_align / roi_pool. Skipped without torch
(pip install '.[torchvision]'; a large install, kept out of the test extras)."""

import numpy as np
import pytest

from tests import cases as C
from tests.conftest import run_plain

torch = pytest.importorskip("torch", reason="needs torchvision: pip install '.[torchvision]'")
tv = pytest.importorskip("torchvision.ops",
                         reason="needs torchvision: pip install '.[torchvision]'")

pytestmark = pytest.mark.parity


def _f32(v: float) -> float:
    """ONNX float attributes are float32: torchvision gets the value a graph holds."""
    return float(np.float32(v))


def _rois(X, boxes, counts):
    batch = np.repeat(np.arange(X.shape[0]), counts).astype(boxes.dtype)
    return np.concatenate([batch[:, None], boxes], 1)


ALIGN = [c for c in C.roi_align_cases(401) + C.roi_align_cases(402)
         if len(c["inputs"]["boxes"])]


@pytest.mark.parametrize("case", ALIGN, ids=[c["name"] for c in ALIGN])
def test_roi_align_matches_torchvision(case):
    X, boxes, counts = (case["inputs"][k] for k in ("X", "boxes", "boxes_num"))
    a = case["attrs"]
    got = run_plain("RoIAlign", case["inputs"], a)
    want = tv.roi_align(torch.from_numpy(X), torch.from_numpy(_rois(X, boxes, counts)),
                        (a["pooled_height"], a["pooled_width"]), _f32(a["spatial_scale"]),
                        a["sampling_ratio"], aligned=bool(a["aligned"])).numpy()
    tol = 1e-5 if X.dtype == np.float32 else 1e-9
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)


MAX = [c for c in C.max_pool_cases("ROIPooling", 403) if len(c["inputs"]["rois"])
       and not c["tie"]]


@pytest.mark.parametrize("case", MAX, ids=[c["name"] for c in MAX])
def test_roi_pooling_max_matches_torchvision(case):
    """torchvision's roi_pool rounds the scaled corners with C's round, as the contract
    does (ties aside: it rounds the float product the same way, but cases with .5 ties
    are left to the MXNet goldens)."""
    X, rois = case["inputs"]["X"], case["inputs"]["rois"]
    a = case["attrs"]
    got = run_plain("ROIPooling", case["inputs"], a)
    want = tv.roi_pool(torch.from_numpy(X), torch.from_numpy(rois),
                       (a["pooled_h"], a["pooled_w"]), _f32(a["spatial_scale"])).numpy()
    np.testing.assert_array_equal(got, want)


# --- torchvision's position-sensitive ops and the MultiScaleRoIAlign stage ------------------

from tests import oracles as O  # noqa: E402
from tests.conftest import ordered, tolerance  # noqa: E402

TV_CASES = (C.torchvision_ps_cases("TorchvisionPSRoIAlign", 411)
            + C.torchvision_ps_cases("TorchvisionPSRoIPool", 412) + C.pyramid_cases(413))


@pytest.mark.parametrize("case", TV_CASES, ids=[f"{c['op']}-{c['name']}" for c in TV_CASES])
def test_torchvision_ops_match_torchvision(case):
    """A plain session on each op against eager torchvision: float32 and float64, several
    images, boxes off the map, zero-size (NaN where torchvision divides 0 by 0) and
    inverted, levels out of range (no level) for the fused stage."""
    inputs = ordered(case)
    got = run_plain(case["op"], inputs, case["attrs"])
    want = O.torchvision(case)
    assert got.shape == want.shape and got.dtype == want.dtype
    dtype = list(inputs.values())[0 if "X" in inputs else 2].dtype
    np.testing.assert_allclose(got, want, **tolerance(case["op"], case["attrs"], dtype))
    if want.size:
        assert np.nansum(np.abs(want)) > 0
