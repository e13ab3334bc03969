"""mmdeploy::NMSRotated (ort_roi/ops/nms_rotated.py), exact to MMDeploy's onnxruntime kernel.

No runnable mmdeploy op library here: the oracle is tests/literal.py's line-by-line
transcription of nms_rotated.cpp (MMDeploy v1.3.1). The kernel (kernels/cpu/nms_rotated.py,
vectorised over pairs) and the readable definition are held to it on random and degenerate
inputs, whole NMS runs and single pairs; a graph holding the node runs through a plain
onnxruntime session and the front door; OpenVINO's NMSRotated (opset 13) checks the IoU where
its semantics align (see test_openvino_agrees_where_aligned).
"""

from __future__ import annotations

import importlib
import math

import numpy as np
import pytest
from onnx import TensorProto, helper

import ort_roi
from ort_roi import RoiOpError
from ort_roi.definitions.nms_rotated import nms_rotated as definition
from ort_roi.definitions.nms_rotated import rotated_iou
from ort_roi.ops import nms_rotated

from . import literal
from .oracles import openvino_available

K = importlib.import_module("ort_roi.kernels.cpu.nms_rotated")
F = np.float32
HALF_PI = float(F(math.pi / 2))


def _boxes(rng, n, B, kind):
    """[n, B, 5] float32 boxes of one kind of scene."""
    b = np.zeros((n, B, 5), F)
    centres = rng.uniform(0, 60, (n, max(1, B // 5), 2))
    pick = rng.integers(0, centres.shape[1], (n, B))
    b[..., :2] = np.take_along_axis(centres, pick[..., None], 1) + rng.normal(0, 2, (n, B, 2))
    b[..., 2:4] = rng.uniform(2, 16, (n, B, 2))
    b[..., 4] = rng.uniform(-math.pi, math.pi, (n, B))
    if kind == "identical" and B > 1:
        b[:, 1::2] = b[:, 0::2][:, :b[:, 1::2].shape[1]]
    elif kind == "rows" and B:  # DOTA-like parked cars: one angle, centres along the long side
        th = rng.uniform(-1.5, 1.5)
        step = rng.uniform(3, 12)
        b[..., 4] = th
        b[..., 3] = 4.0
        b[..., 2] = step * rng.choice([0.8, 1.0, 1.2], (n, B))
        t = np.arange(B) * step
        b[..., 0] = 30 + t * math.cos(th)
        b[..., 1] = 30 + t * math.sin(th)
    elif kind == "degenerate" and B:
        m = rng.integers(0, 8, (n, B))
        b[..., 2] = np.where(m == 0, 0, b[..., 2])
        b[..., 3] = np.where(m == 1, 0, b[..., 3])
        b[..., 4] = np.where(m == 2, HALF_PI, np.where(m == 3, -HALF_PI, b[..., 4]))
        b[..., 2:4] = np.where((m == 4)[..., None], b[..., 2:4] * F(1e6), b[..., 2:4])
        b[..., :2] = np.where((m == 5)[..., None], b[..., :2] * F(1e7), b[..., :2])
        b[..., 4] = np.where(m == 6, F(1e4), b[..., 4])
        b[..., 2] = np.where(m == 7, F(np.inf), b[..., 2])
    elif kind == "nan" and B:
        b[0, rng.integers(0, B), rng.integers(0, 5)] = np.nan
    elif kind == "axis" and B:  # theta 0 / +-pi/2 exactly, integer boxes: shared edges
        b[..., :4] = np.round(b[..., :4])
        b[..., 4] = rng.choice(F([0, HALF_PI, -HALF_PI]), (n, B))
    return b


def _scores(rng, n, C, B, ties):
    if ties:
        return rng.choice(F([0.05, 0.3, 0.3, 0.7, 1.0]), (n, C, B))
    s = rng.random((n, C, B), F)
    if B:
        s[0, 0, rng.integers(0, B)] = np.inf
    return s


KINDS = ("random", "identical", "rows", "degenerate", "nan", "axis")


def nms_cases(seed: int, count: int, max_boxes: int = 36) -> list[dict]:
    """Random NMSRotated inputs: every kind of scene, tied and untied scores, thresholds
    at, just below and just above a pair's own IoU."""
    rng = np.random.default_rng(seed)
    cases = []
    for c in range(count):
        kind = KINDS[c % len(KINDS)]
        n, C = int(rng.integers(1, 3)), int(rng.integers(1, 4))
        B = int(rng.integers(0, max_boxes + 1)) if c % 9 else max_boxes
        boxes = _boxes(rng, n, B, kind)
        scores = _scores(rng, n, C, B, ties=bool(c % 2))
        iou = float(rng.choice([0.1, 0.3, 0.5, 0.0, -0.5, 0.9]))
        if c % 4 == 3 and B > 1:  # a threshold equal to a pair's IoU, or 1 ulp either side
            with np.errstate(all="ignore"):
                v = rotated_iou(tuple(boxes[0, 0]), tuple(boxes[0, 1]))
            if np.isfinite(v):
                iou = float(np.nextafter(v, F(rng.choice([-1, 1]) * 9)) if c % 8 == 7 else v)
        cases.append(dict(boxes=boxes, scores=scores, iou_threshold=iou,
                          score_threshold=float(rng.choice([0.05, 0.3, -1.0, 0.0])),
                          kind=kind))
    return cases


def _run(f, case):
    return f(case["boxes"], case["scores"], iou_threshold=case["iou_threshold"],
             score_threshold=case["score_threshold"])


CASES = nms_cases(66, 96)


@pytest.mark.parametrize("i", range(len(CASES)))
def test_kernel_equals_literal(i):
    case = CASES[i]
    want = _run(literal.mmdeploy_nms_rotated, case)
    got = _run(nms_rotated, case)
    assert got.dtype == np.int64 and got.shape[1:] == (3,)
    np.testing.assert_array_equal(got, want, err_msg=case["kind"])
    np.testing.assert_array_equal(_run(definition, case), want, err_msg=case["kind"])


def _pairs(seed, P):
    rng = np.random.default_rng(seed)
    out = []
    for kind in KINDS:
        b = _boxes(rng, 1, 2 * P, kind)[0]
        out.append((b[0::2], b[1::2]))
    a = _boxes(rng, 1, P, "random")[0]
    b = a.copy()  # near copies: many crossings, hull ranges past 16 points
    b[:, 4] += rng.choice(F([0, 1e-7, 1e-4, math.pi, math.pi / 2]), P)
    b[:, :2] += rng.choice(F([0, 1e-6, 0.5]), (P, 2))
    out.append((a, b))
    return np.concatenate([p[0] for p in out]), np.concatenate([p[1] for p in out])


def test_pair_ious_equal_the_literal_bit_for_bit():
    b1, b2 = _pairs(7, 400)
    with np.errstate(all="ignore"):
        got = K.pair_ious(b1, b2, K.half_cos_sin(b1[:, 4]), K.half_cos_sin(b2[:, 4]))
        want = np.array([literal.mmdeploy_nms_rotated_ovr(list(p), list(q))
                         for p, q in zip(b1, b2)], F)
    same = (got.view(np.int32) == want.view(np.int32)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), np.flatnonzero(~same)[:10]
    assert (got > 0).sum() > 1000  # overlapping pairs, not just zeros


def _near_copies(seed, P):
    """Pairs of a box and a near copy of itself (moved along its side by up to 1e-3 of it, a
    quarter / half / whole turn, sides swapped and a quarter turn, 1 ulp off): the crossings
    that coincide at corners give hulls of up to 19 points."""
    rng = np.random.default_rng(seed)
    a = np.zeros((P, 5), F)
    a[:, :2] = rng.uniform(-50, 50, (P, 2))
    a[:, 2:4] = rng.uniform(1, 30, (P, 2))
    a[:, 4] = rng.uniform(-4, 4, P)
    th, b = a[:, 4], a.copy()
    mode = rng.integers(0, 4, P)
    d = rng.choice(F([1e-6, 1e-5, 1e-4, 1e-3, 0]), P) * a[:, 2]
    b[:, 0] += np.where(mode == 0, d * np.cos(th), 0)
    b[:, 1] += np.where(mode == 0, d * np.sin(th), 0)
    b[:, 4] += np.where(mode == 1, rng.choice(F([np.pi, np.pi / 2, -np.pi / 2, 2 * np.pi]), P),
                        0)
    sw = mode == 2
    b[sw, 2], b[sw, 3], b[sw, 4] = a[sw, 3], a[sw, 2], a[sw, 4] + F(np.pi / 2)
    b[:, 0] = np.where(mode == 3, np.nextafter(a[:, 0], F(1e9)), b[:, 0])
    return a, b


def test_hulls_past_sixteen_points_equal_the_literal(monkeypatch):
    """std::sort's introsort path (more than 16 points after the first: the kernel's literal
    fallback) is reached, and its hull areas equal the transcription's; so do the rest."""
    a, b = _near_copies(1, 200000)
    seen = []
    orig = K._hull_area

    def spy(X, Y, num):
        out = orig(X.copy(), Y.copy(), num)
        seen.append((X, Y, num, out))
        return out

    monkeypatch.setattr(K, "_hull_area", spy)
    with np.errstate(all="ignore"):
        K.pair_ious(a, b, K.half_cos_sin(a[:, 4]), K.half_cos_sin(b[:, 4]))
    X, Y, num, area = seen[0]
    big = np.flatnonzero(num > K.THRESHOLD)  # 16 points to sort (the boundary) and more
    rest = np.random.default_rng(2).choice(np.flatnonzero(num <= K.THRESHOLD), 3000,
                                           replace=False)
    assert (num > K.THRESHOLD + 1).sum() >= 5 and big.size >= 50
    with np.errstate(all="ignore"):
        for r in np.concatenate([big, rest]).tolist():
            p = [[X[r, i], Y[r, i]] for i in range(num[r])]
            q = [[F(0), F(0)] for _ in range(24)]
            m = literal._nmsr_convex_hull_graham(p, int(num[r]), q)
            want = literal._nmsr_polygon_area(q, m)
            assert area[r].view(np.int32) == F(want).view(np.int32), (r, num[r])


def test_rotation_by_half_turn_and_identical_boxes():
    box = F([10, 20, 8, 4, 0.3])
    assert literal.mmdeploy_nms_rotated_ovr(list(box), list(box)) == F(1)
    turned = box.copy()
    turned[4] += F(math.pi)
    with np.errstate(all="ignore"):
        v = K.pair_ious(box[None], turned[None], K.half_cos_sin(box[None, 4]),
                        K.half_cos_sin(turned[None, 4]))
    assert v[0] == literal.mmdeploy_nms_rotated_ovr(list(box), list(turned))
    assert abs(float(v[0]) - 1) < 1e-5


def test_scores_under_the_threshold_still_suppress():
    """The C++ runs NMS over every box and filters by score afterwards (the PyTorch forward
    mmdeploy traces filters first): a low-scored box suppresses an overlapping lower one."""
    boxes = F([[[0, 0, 10, 10, 0], [1, 0, 10, 10, 0], [50, 50, 4, 4, 0]]])
    scores = F([[[0.01, 0.009, 0.5]]])
    got = nms_rotated(boxes, scores, iou_threshold=0.5, score_threshold=0.005)
    np.testing.assert_array_equal(got, [[0, 0, 2], [0, 0, 0]])
    got = nms_rotated(boxes, scores, iou_threshold=0.5, score_threshold=0.0095)
    np.testing.assert_array_equal(got, [[0, 0, 2], [0, 0, 0]])


def test_threshold_compares_strictly():
    boxes = F([[[0, 0, 10, 10, 0], [5, 0, 10, 10, 0]]])  # IoU 50 / 150 in float32
    v = literal.mmdeploy_nms_rotated_ovr(list(boxes[0, 0]), list(boxes[0, 1]))
    scores = F([[[0.9, 0.8]]])
    at = nms_rotated(boxes, scores, iou_threshold=float(v), score_threshold=0.8)
    np.testing.assert_array_equal(at, [[0, 0, 0]])  # score 0.8 is not > 0.8
    at = nms_rotated(boxes, scores, iou_threshold=float(v), score_threshold=0.1)
    np.testing.assert_array_equal(at, [[0, 0, 0], [0, 0, 1]])  # ovr == threshold: kept
    below = nms_rotated(boxes, scores, iou_threshold=float(np.nextafter(v, F(0))),
                        score_threshold=0.1)
    np.testing.assert_array_equal(below, [[0, 0, 0]])


@pytest.mark.parametrize("shape", [(1, 0, 3), (1, 5, 0), (0, 5, 2), (2, 0, 0)])
def test_empty_inputs(shape):
    N, B, C = shape
    got = nms_rotated(np.zeros((N, B, 5), F), np.zeros((N, C, B), F), iou_threshold=0.1,
                      score_threshold=0.05)
    assert got.shape == (0, 3) and got.dtype == np.int64
    assert definition(np.zeros((N, B, 5), F), np.zeros((N, C, B), F), iou_threshold=0.1,
                      score_threshold=0.05).shape == (0, 3)


def test_all_scores_under_the_threshold():
    case = nms_cases(3, 1, 12)[0]
    got = nms_rotated(case["boxes"], np.full_like(case["scores"], 0.01), iou_threshold=0.5,
                      score_threshold=0.05)
    assert got.shape == (0, 3)


def test_nan_and_infinite_boxes_overlap_nothing():
    boxes = F([[[0, 0, 10, 10, 0], [0, 0, 10, 10, np.nan], [np.nan, 0, 10, 10, 0],
                [0, 0, np.inf, 10, 0], [0, 0, 10, 10, np.inf], [1, 0, 10, 10, 0]]])
    scores = F([[[0.9, 0.8, 0.7, 0.6, 0.5, 0.4]]])
    want = literal.mmdeploy_nms_rotated(boxes, scores, iou_threshold=0.3, score_threshold=0.0)
    got = nms_rotated(boxes, scores, iou_threshold=0.3, score_threshold=0.0)
    np.testing.assert_array_equal(got, want)
    assert 1 in got[:, 2] and 2 in got[:, 2] and 5 not in got[:, 2]


def test_large_inputs_are_computed_in_bounded_chunks(monkeypatch):
    """Pairs go through pair_ious at most PAIR_CHUNK at a time (a row of more boxes in
    parts): work arrays bounded whatever the number of boxes."""
    rng = np.random.default_rng(5)
    boxes = _boxes(rng, 1, 300, "random")
    boxes[0, :, :2] *= 30  # spread: few suppressed, rows of ~300 pairs
    scores = rng.random((1, 2, 300), F)
    sizes = []
    orig = K.pair_ious
    monkeypatch.setattr(K, "PAIR_CHUNK", 200)
    monkeypatch.setattr(K, "pair_ious", lambda b1, *a: sizes.append(len(b1)) or orig(b1, *a))
    got = nms_rotated(boxes, scores, iou_threshold=0.2, score_threshold=0.1)
    assert max(sizes) == 200
    monkeypatch.undo()
    np.testing.assert_array_equal(got, nms_rotated(boxes, scores, iou_threshold=0.2,
                                                   score_threshold=0.1))
    np.testing.assert_array_equal(got, definition(boxes, scores, iou_threshold=0.2,
                                                  score_threshold=0.1))


def test_classes_sharing_pair_answers_change_nothing(monkeypatch):
    """An image's classes share each ordered pair's answer (KNOWN_PAIRS): the same output as
    every class computing its own, and as the literal transcription."""
    rng = np.random.default_rng(9)
    boxes = _boxes(rng, 2, 60, "random")
    scores = _scores(rng, 2, 4, 60, ties=True)
    shared = nms_rotated(boxes, scores, iou_threshold=0.2, score_threshold=0.1)
    monkeypatch.setattr(K, "KNOWN_PAIRS", 0)
    np.testing.assert_array_equal(nms_rotated(boxes, scores, iou_threshold=0.2,
                                              score_threshold=0.1), shared)
    np.testing.assert_array_equal(literal.mmdeploy_nms_rotated(
        boxes, scores, iou_threshold=0.2, score_threshold=0.1), shared)


# --- through onnxruntime --------------------------------------------------------------------

def _model(iou=0.1, score=0.05, **attrs):
    node = helper.make_node("NMSRotated", ["boxes", "scores"], ["indices"], domain="mmdeploy",
                            **({"iou_threshold": iou, "score_threshold": score} | attrs))
    graph = helper.make_graph(
        [node], "nms_rotated",
        [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, ["N", "B", 5]),
         helper.make_tensor_value_info("scores", TensorProto.FLOAT, ["N", "C", "B"])],
        [helper.make_tensor_value_info("indices", TensorProto.INT64, ["S", 3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                   helper.make_opsetid("mmdeploy", 1)],
                             ir_version=9)  # (onnxruntime 1.17, the floor, reads up to 9)


SESSION_CASES = [c for c in nms_cases(67, 24) if c["kind"] != "nan"]


@pytest.mark.parametrize("front_door", [False, True])
def test_graph_runs_as_exported(front_door):
    """mmdeploy::NMSRotated nodes run as MMDeploy writes them, through a plain session
    (registered op) and the front door, equal to the literal transcription."""
    import onnxruntime as ort

    for case in SESSION_CASES:
        m = _model(case["iou_threshold"], case["score_threshold"]).SerializeToString()
        sess = (ort_roi.InferenceSession(m) if front_door
                else ort.InferenceSession(m, ort_roi.session_options()))
        feed = {"boxes": case["boxes"], "scores": case["scores"]}
        got = sess.run(None, feed)[0]
        want = _run(literal.mmdeploy_nms_rotated, case)
        if not front_door:  # a plain session reads float attributes back from 6 digits
            want = literal.mmdeploy_nms_rotated(
                case["boxes"], case["scores"],
                iou_threshold=_six_digits(case["iou_threshold"]),
                score_threshold=_six_digits(case["score_threshold"]))
        np.testing.assert_array_equal(got, want, err_msg=case["kind"])


def _six_digits(v: float) -> float:
    from ort_roi.runtime.attributes import parse_float

    return float(parse_float(f"{F(v):f}"))


def test_empty_graph_outputs():
    sess = ort_roi.InferenceSession(_model().SerializeToString())
    for B, C in ((0, 3), (4, 0)):
        out = sess.run(None, {"boxes": np.zeros((1, B, 5), F),
                              "scores": np.zeros((1, C, B), F)})[0]
        assert out.shape == (0, 3) and out.dtype == np.int64


def test_non_contiguous_inputs_compute_as_their_contiguous_copies():
    """Boxes Fortran-ordered and scores a strided view give what their copies give, called
    directly and through a plain session. (Not through tests/roi_op_tester.py's template:
    this op takes float32 only and pools nothing.)"""
    import onnxruntime as ort

    case = next(c for c in CASES if c["boxes"].shape[1] > 10 and c["kind"] == "random")
    boxes = np.asfortranarray(case["boxes"])
    wide = np.zeros(case["scores"].shape[:2] + (2 * case["scores"].shape[2],), F)
    wide[..., ::2] = case["scores"]
    scores = wide[..., ::2]
    assert not boxes.flags.c_contiguous and not scores.flags.c_contiguous
    attrs = dict(iou_threshold=0.3, score_threshold=0.05)
    want = nms_rotated(case["boxes"], case["scores"], **attrs)
    np.testing.assert_array_equal(nms_rotated(boxes, scores, **attrs), want)
    sess = ort.InferenceSession(_model(0.3, 0.05).SerializeToString(),
                                ort_roi.session_options())
    np.testing.assert_array_equal(sess.run(None, {"boxes": boxes, "scores": scores})[0], want)


# --- bad inputs ----------------------------------------------------------------------------

GOOD = dict(boxes=np.zeros((1, 4, 5), F), scores=np.zeros((1, 2, 4), F))


@pytest.mark.parametrize("boxes,scores,name,words", [
    (np.zeros((4, 5), F), GOOD["scores"], "boxes", "[N, B, 5]"),
    (np.zeros((1, 4, 4), F), GOOD["scores"], "boxes", "[N, B, 5]"),
    (GOOD["boxes"], np.zeros((2, 4), F), "scores", "rank 3"),
    (GOOD["boxes"], np.zeros((2, 2, 4), F), "scores", "N differs"),
    (GOOD["boxes"], np.zeros((1, 2, 5), F), "scores", "B differs"),
    (GOOD["boxes"].astype(np.float64), GOOD["scores"], "boxes", "float32"),
    (GOOD["boxes"], GOOD["scores"].astype(np.float64), "scores", "float32"),
    (GOOD["boxes"], np.array([[[0, np.nan, 0, 0]] * 2], F), "scores", "NaN"),
])
def test_bad_inputs_name_the_op_and_input(boxes, scores, name, words):
    with pytest.raises(RoiOpError) as e:
        nms_rotated(boxes, scores, iou_threshold=0.1, score_threshold=0.05)
    msg = str(e.value)
    assert "NMSRotated" in msg and f"'{name}'" in msg and words in msg, msg


def test_bad_inputs_through_the_front_door_and_a_plain_session():
    import onnxruntime as ort

    m = _model().SerializeToString()
    feed = {"boxes": GOOD["boxes"], "scores": np.zeros((1, 2, 5), F)}
    with pytest.raises(RoiOpError, match="NMSRotated.*'scores'"):
        ort_roi.InferenceSession(m).run(None, feed)
    # a plain session: logged, an empty output (nothing leaves a kernel; shapes that
    # contradict the op give the bridge no output shape: [0])
    out = ort.InferenceSession(m, ort_roi.session_options()).run(None, feed)[0]
    assert out.size == 0 and out.dtype == np.int64
    nan = {"boxes": GOOD["boxes"], "scores": np.full((1, 2, 4), np.nan, F)}
    with pytest.raises(RoiOpError, match="NaN"):
        ort_roi.InferenceSession(m).run(None, nan)


def test_missing_attribute():
    with pytest.raises(RoiOpError, match="iou_threshold"):
        nms_rotated(GOOD["boxes"], GOOD["scores"], iou_threshold=None, score_threshold=0.1)


# --- OpenVINO's NMSRotated: a second reading of the IoU --------------------------------------

@pytest.mark.skipif(not openvino_available(), reason="needs openvino: pip install '.[parity]'")
def test_openvino_agrees_where_aligned():
    """OpenVINO's NMSRotated (opset 13) differs from mmdeploy's: it drops boxes with score
    <= score_threshold before NMS (mmdeploy: after, so low boxes suppress too), takes at
    most max_output_boxes_per_class, computes the IoU with its own rotated-box intersection
    (float, another polygon routine); its clockwise=True (its default: clockwise in image
    coordinates, y down) turns theta the way mmdeploy's corners do (clockwise=False keeps
    other boxes on about half these cases). Aligned (scores all above the threshold,
    distinct; a cap of B; clockwise=True)
    and away from the threshold (no pair's IoU within 1e-4 of it), both keep the same boxes
    in the same order."""
    import openvino as ov
    import openvino.opset13 as ops

    from .oracles import openvino_compile

    rng = np.random.default_rng(13)
    checked = 0
    for c in range(30):
        B, C = int(rng.integers(2, 40)), int(rng.integers(1, 3))
        boxes = _boxes(rng, 1, B, "random")
        scores = (rng.permutation(B * C).reshape(1, C, B).astype(F) + 1) / F(B * C + 1)
        iou = float(rng.choice([0.1, 0.3, 0.5]))
        with np.errstate(all="ignore"):
            ious = np.array([[literal.mmdeploy_nms_rotated_ovr(list(p), list(q))
                              for q in boxes[0]] for p in boxes[0]])
        if np.any(np.abs(ious - iou) < 1e-4):
            continue
        pb = ops.parameter([1, B, 5], ov.Type.f32)
        ps = ops.parameter([1, C, B], ov.Type.f32)
        node = ops.nms_rotated(pb, ps, np.array([B], np.int64), np.array([iou], F),
                               np.array([0.0], F), sort_result_descending=False,
                               output_type="i64", clockwise=True)
        out = openvino_compile(ov.Model([node.output(0)], [pb, ps]))([boxes, scores])[0]
        theirs = np.asarray(out)
        theirs = theirs[theirs[:, 0] >= 0]
        ours = nms_rotated(boxes, scores, iou_threshold=iou, score_threshold=0.0)
        np.testing.assert_array_equal(ours, theirs)
        checked += 1
    assert checked >= 20
