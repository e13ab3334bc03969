"""An R-FCN-style Paddle detector (ppdet ResNet-18 C4, RPNHead, a position-sensitive head with
psroi_pool 7x7, ppdet's BBoxPostProcess; random seeded weights with a trained model's load:
tests/paddle_models.py) through ort_roi.paddle_export into a plain onnxruntime session: its
detections equal Paddle Inference's on the same images, its proposals too, and each exported
psroi_pool node fed Paddle's maps gives Paddle's output bit for bit."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest

import ort_roi
from tests import paddle_models as models

pytestmark = models.needs_paddledet("GenerateProposals", "PSROIPool")
IMAGES = (((256, 320), 0), ((224, 288), 1))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The detector and its probe, saved, exported, and each with a session and a Paddle
    Inference predictor."""
    prefix = str(tmp_path_factory.mktemp("rfcn") / "rfcn_r18_k7")
    out = {}
    for name, path in zip(("detector", "probe"), models.build_rfcn(prefix, depth=18, k=7,
                                                                   calibrate=IMAGES[0][0])):
        model = ort_roi.paddle_export(path, path + ".onnx")
        run, why = models.paddle_predictor(path, mkldnn=False, threads=1)
        assert run is not None, why
        out[name] = (path, model, ort.InferenceSession(path + ".onnx",
                                                       ort_roi.session_options()), run)
    return out


def test_exported_nodes(exported):
    for _, model, _, _ in exported.values():
        kinds = sorted(n.op_type for n in model.graph.node if n.domain == ort_roi.DOMAIN)
        assert kinds == ["GenerateProposals", "PSROIPool", "PSROIPool"]
        # multiclass_nms3: boxes of positive area, then those of zero area (Paddle's IoU 0 / 0)
        assert sum(n.op_type == "NonMaxSuppression" for n in model.graph.node) == 2
        assert not any(n.op_type == "RoiAlign" for n in model.graph.node)  # no stand-in left


@pytest.mark.parametrize("size,seed", IMAGES)
def test_rfcn_detections_equal_paddle_inference(exported, size, seed):
    f = models.feeds(size, seed)
    for name in ("detector", "probe"):
        _, _, sess, run = exported[name]
        got, want = sess.run(None, f), run(f)
        assert len(got) == len(want) == (2 if name == "detector" else 2 + len(models.PROBE))
        assert got[1].dtype == want[1].dtype == np.int32
        assert got[0].shape == want[0].shape and got[0].shape[0] > 50
        models.assert_detections_equal(got, want)
        assert len(np.unique(want[0][:, 0])) > 1  # more than one class wins


@pytest.mark.parametrize("size,seed", IMAGES)
def test_rfcn_proposals_and_psroi_pool(exported, size, seed):
    from tools.paddle_rfcn_e2e import compare_probe, psroi_alone

    path, _, sess, run = exported["probe"]
    f = models.feeds(size, seed)
    got, want = sess.run(None, f), run(f)
    res = compare_probe(got, want)
    assert res["equal"], res
    n = int(want[2 + models.PROBE.index("rois_num")].sum())
    assert n == want[2 + models.PROBE.index("rois")].shape[0] == 300
    # the maps psroi_pool reads: the backbone's float32 roundings apart, no more
    assert res["cls_maps"]["max_diff"] < 1e-3 and res["box_maps"]["max_diff"] < 1e-3
    alone = psroi_alone(path + ".onnx", want)
    assert sorted(alone) == ["psroi_box", "psroi_cls"]
    for name, r in alone.items():
        assert r["bitwise_equal"], (name, r)
    ps = want[2 + models.PROBE.index("psroi_cls")]
    assert ps.shape == (300, 81, 7, 7) and np.count_nonzero(ps) > ps.size // 2


def test_rfcn_has_no_standard_form(exported):
    path = exported["detector"][0]
    with pytest.raises(ort_roi.RoiOpError, match="has no standard ONNX form"):
        ort_roi.paddle_export(path, standard=True)
