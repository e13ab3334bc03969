"""GenerateProposals and DistributeFpnProposals_L{L}: Paddle's generate_proposals and
distribute_fpn_proposals bit for bit. The readable definitions against Paddle (committed
goldens from tools/make_proposal_goldens.py; live with the parity extra), the NumPy kernels
against the definitions (random and tied scores, libstdc++'s orders, glibc's expf / log2f),
the ops in real onnxruntime sessions, and the bad-input catalogue."""

from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

from tests import proposal_cases as P
from tests.versions import needs_numpy_2
from tests.work import python_lines
from ort_roi import RoiOpError
from ort_roi.definitions import cxx
from ort_roi.definitions import proposals as D
from ort_roi.kernels.cpu import proposals as K
from ort_roi.kernels.cpu.proposals import blocks, common, fixed, generate, grid, sparse

GOLDEN = os.path.join(os.path.dirname(__file__), "goldens", "proposals.npz")


def _paddle():
    try:
        import paddle  # noqa: F401
        return True
    except Exception:  # noqa: BLE001 - not installed, or broken
        return False


needs_paddle = pytest.mark.skipif(not _paddle(),
                                  reason="needs paddle: pip install '.[parity]'")


def _registered() -> bool:
    from ort_roi import ops
    from ort_roi.kernels.dispatch import TABLE

    names = {s.name for s in ops.all_specs()}
    return ("GenerateProposals" in names and "DistributeFpnProposals_L4" in names
            and "generate_proposals" in TABLE)


needs_entry = pytest.mark.skipif(not _registered(), reason="GenerateProposals / "
                                 "DistributeFpnProposals are not in ops.ENTRIES and the "
                                 "dispatch table yet")


GOLDENS = P.load_goldens(GOLDEN)


def _definition(case):
    x = list(case["inputs"].values())
    if case["op"] == "GenerateProposals":
        return list(D.generate_proposals(*x, **case["attrs"]))
    return list(D.distribute_fpn_proposals_outputs(*x, **case["attrs"]))


def _step(case):
    """The NumPy compute step, as the op entry calls it."""
    x = case["inputs"]
    a = case["attrs"]
    if case["op"] == "GenerateProposals":
        return list(K.generate_proposals(
            x["scores"], x["bbox_deltas"], x["im_shape"], x["anchors"].reshape(-1, 4),
            x["variances"].reshape(-1, 4), a["pre_nms_top_n"], a["post_nms_top_n"],
            float(np.float32(a["nms_thresh"])), float(np.float32(a["min_size"])),
            float(np.float32(a["eta"])), bool(a["pixel_offset"])))
    rois, counts, restore = K.distribute_fpn_proposals(
        x["fpn_rois"], x["rois_num"].astype(np.int64), a["min_level"], a["max_level"],
        a["refer_level"], a["refer_scale"], bool(a["pixel_offset"]))
    return list(rois) + list(counts) + [restore]


def _same(got, want, name=""):
    assert len(got) == len(want), name
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (name, i, g.dtype, w.dtype, g.shape,
                                                           w.shape)
        assert np.array_equal(np.ascontiguousarray(g).view(np.uint8),
                              np.ascontiguousarray(w).view(np.uint8)), (name, i)


# --- the definitions against Paddle ----------------------------------------------------------

@needs_numpy_2
@pytest.mark.parametrize("case", GOLDENS, ids=[c["name"] for c in GOLDENS])
def test_definition_equals_paddle_golden(case):
    _same(_definition(case), case["expected"], case["name"])


def test_goldens_cover_ties_empty_images_and_expf():
    names = {c["name"] for c in GOLDENS}
    assert {"generate_all_too_small", "generate_no_nms_ties", "generate_hard_expf",
            "distribute_no_rois", "distribute_L6"} <= names
    small = next(c for c in GOLDENS if c["name"] == "generate_all_too_small")
    assert small["expected"][2].tolist() == [1, 1]  # Paddle's stand-in: one zero box
    assert not small["expected"][0].any()
    hard = next(c for c in GOLDENS if c["name"] == "generate_hard_expf")
    assert hard["expected"][0].shape[0] >= 16  # arguments glibc's expf rounds its own way


@pytest.mark.parity
@needs_paddle
@pytest.mark.parametrize("seed", [21, 22, 23])
def test_definition_equals_paddle_live(seed):
    from tests.oracles import paddle_proposals as paddle_outputs

    rng = np.random.default_rng(seed)
    cases = [P.generate(f"live_{seed}_{i}", N=int(rng.integers(1, 4)), A=int(rng.integers(1, 4)),
                        H=int(rng.integers(3, 12)), W=int(rng.integers(3, 12)),
                        ties=bool(i % 2), seed=seed * 10 + i,
                        dtype=(np.float32, np.float64)[i % 3 == 2],
                        pre_nms_top_n=int(rng.choice([0, 30, 100, 5000])),
                        post_nms_top_n=int(rng.choice([0, 10, 60])),
                        nms_thresh=float(rng.choice([0.0, 0.3, 0.7, 0.95])),
                        eta=float(rng.choice([1.0, 0.8])), pixel_offset=i % 2,
                        min_size=float(rng.choice([0.0, 4.0, 20.0])))
             for i in range(6)]
    cases += [P.distribute(f"live_d{seed}_{i}", rng.integers(0, 25, int(rng.integers(1, 4))),
                           min_level=m, max_level=m + int(rng.integers(1, 5)),
                           pixel_offset=i % 2, seed=seed * 10 + i,
                           dtype=(np.float32, np.float64)[i % 2])
              for i, m in enumerate((1, 2, 2, 3))]
    for case in cases:
        _same(_definition(case), paddle_outputs(case), case["name"])


# --- the kernels against the definitions -----------------------------------------------------

@pytest.mark.parametrize("case", GOLDENS, ids=[c["name"] for c in GOLDENS])
def test_step_equals_golden(case):
    _same(_step(case), case["expected"], case["name"])


@needs_numpy_2
@pytest.mark.parametrize("seed", range(6))
def test_step_equals_definition_random(seed):
    rng = np.random.default_rng(100 + seed)
    for i in range(4):
        case = P.generate(f"r{seed}_{i}", N=int(rng.integers(1, 4)), A=int(rng.integers(1, 5)),
                          H=int(rng.integers(1, 14)), W=int(rng.integers(1, 14)),
                          ties=bool(rng.integers(0, 2)), seed=1000 * seed + i,
                          dtype=(np.float32, np.float64)[int(rng.integers(0, 2))],
                          pre_nms_top_n=int(rng.choice([-1, 0, 7, 50, 200, 10000])),
                          post_nms_top_n=int(rng.choice([-1, 0, 5, 40])),
                          nms_thresh=float(rng.choice([-1.0, 0.0, 0.3, 0.5, 0.7, 1.0])),
                          eta=float(rng.choice([1.0, 0.9, 0.5])),
                          min_size=float(rng.choice([0.0, 1.0, 8.0])),
                          pixel_offset=int(rng.integers(0, 2)))
        case["attrs"] = {k: (float(np.float32(v)) if isinstance(v, float) else v)
                         for k, v in case["attrs"].items()}
        _same(_step(case), _definition(case), case["name"])


@pytest.mark.parametrize("case", P.definition_only_cases(),
                         ids=[c["name"] for c in P.definition_only_cases()])
def test_step_equals_definition_where_paddle_refuses(case):
    _same(_step(case), _definition(case), case["name"])


def test_distribute_step_equals_definition_random():
    rng = np.random.default_rng(7)
    for t in range(60):
        lo = int(rng.integers(-1, 4))
        case = P.distribute(f"d{t}", rng.integers(0, 30, int(rng.integers(1, 4))),
                            min_level=lo, max_level=lo + int(rng.integers(0, 6)),
                            refer_level=int(rng.integers(2, 6)),
                            refer_scale=int(rng.choice([1, 56, 224])),
                            pixel_offset=t % 2, seed=t, dtype=(np.float32, np.float64)[t % 2])
        _same(_step(case), _definition(case), case["name"])


@pytest.mark.parametrize("seed", range(4))
def test_libstdcxx_orders_equal_the_literal_transcription(seed):
    rng = np.random.default_rng(seed)
    for _ in range(40):
        M = int(rng.integers(1, 2500))
        s = (np.round(rng.random(M) * rng.integers(1, 60)) / 7).astype(np.float32)
        vals = s.tolist()
        comp = lambda i, j: vals[i] > vals[j]  # noqa: E731
        v = list(range(M))
        cxx.std_sort(v, comp)
        assert np.array_equal(K.order_sort(s), v)
        nth = int(rng.integers(0, M + 1))
        v = list(range(M))
        cxx.std_nth_element(v, nth, comp)
        assert np.array_equal(K.order_nth_element(s, nth), v)


def test_libstdcxx_all_equal_and_sorted_inputs():
    for s in (np.ones(1000, np.float32), np.arange(1000, dtype=np.float32),
              np.arange(1000, dtype=np.float32)[::-1].copy()):
        vals = s.tolist()
        for nth in (0, 1, 500, 999):
            v = list(range(s.size))
            cxx.std_nth_element(v, nth, lambda i, j: vals[i] > vals[j])
            assert np.array_equal(K.order_nth_element(s, nth), v)
        v = list(range(s.size))
        cxx.std_sort(v, lambda i, j: vals[i] > vals[j])
        assert np.array_equal(K.order_sort(s), v)


def _nms_work(monkeypatch, bound: int) -> dict:
    """The NMS's work, counted: {"pairs": the box pairs whose IoU the sparse and the grid
    searches compute (common.suppressing, called by both)}; the block NMS's and the adaptive
    steps' comparisons (the count the kernel keeps) held to ``bound``: past it NmsTooCostly (a
    RoiOpError from generate_proposals)."""
    seen = {"pairs": 0}
    real = common.suppressing

    def counted(*args):
        seen["pairs"] += args[-1].size
        return real(*args)

    for module in (sparse, grid):
        monkeypatch.setattr(module, "suppressing", counted)
    monkeypatch.setattr(common, "NMS_MAX_COMPARISONS", bound)
    return seen


def test_nms_of_6000_boxes_is_vectorised(monkeypatch):
    """NMS over 6000 candidates (Paddle's default pre_nms_top_n) keeps the first 1000 in a
    few vectorised steps and equals the literal loop: 104 lines of ort_roi's Python and 0.12 M
    box pairs here (the literal loop: 700,000 lines for 500 boxes; every pair: 18 M)."""
    rng = np.random.default_rng(3)
    xy = rng.uniform(0, 1000, (6000, 2)).astype(np.float32)
    wh = rng.uniform(4, 200, (6000, 2)).astype(np.float32)
    boxes = np.concatenate([xy, xy + wh], 1)
    scores = rng.random(6000).astype(np.float32)
    work = _nms_work(monkeypatch, 1 << 20)
    with python_lines(2000, entered=K.nms):
        kept = K.nms(boxes, scores, 0.7, 1.0, False, 1000)
    want = D.nms(np.float32, [list(b) for b in boxes], list(scores), np.float32(0.7), 1.0,
                 False)[:1000]
    assert np.array_equal(kept, want)
    assert 0 < work["pairs"] <= 1 << 20, work


@needs_numpy_2
@pytest.mark.parametrize("thr", [0.05, 0.5, 0.7, 0.999, 1.0])
@pytest.mark.parametrize("pixel_offset", [False, True])
def test_nms_sparse_and_block_paths_equal_the_literal_loop(monkeypatch, thr, pixel_offset):
    """Dense (all boxes overlapping) and sparse sets, equal and nested boxes, near-duplicates:
    the pair search (its thr * side reach), the fixed point, and the block NMS it falls back to
    (too many pairs, too long a chain) keep what Paddle's loop keeps."""
    rng = np.random.default_rng(int(thr * 1000) + pixel_offset)
    xy = np.concatenate([rng.uniform(0, 60, (300, 2)), rng.uniform(0, 2000, (300, 2))])
    wh = np.concatenate([rng.uniform(100, 140, (300, 2)), rng.uniform(1, 50, (300, 2))])
    boxes = np.concatenate([xy, xy + wh], 1).astype(np.float32)
    boxes[10:20] = boxes[5]  # duplicates
    boxes[20:30] = boxes[5] + np.float32(0.5)  # near-duplicates
    boxes[30:40] = np.round(boxes[30:40])
    scores = np.round(rng.random(600) * 50).astype(np.float32)  # ties
    want = D.nms(np.float32, [list(b) for b in boxes], list(scores), np.float32(thr), 1.0,
                 pixel_offset)
    for limit in (len(boxes), 7):
        assert np.array_equal(K.nms(boxes, scores, thr, 1.0, pixel_offset, limit), want[:limit])
    monkeypatch.setattr(fixed, "NMS_PAIR_COST", 0)  # the sparse path wherever it can
    for limit in (len(boxes), 7):
        assert np.array_equal(K.nms(boxes, scores, thr, 1.0, pixel_offset, limit), want[:limit])
    monkeypatch.setattr(common, "NMS_ROUNDS", 1)
    assert np.array_equal(K.nms(boxes, scores, thr, 1.0, pixel_offset, 600), want)
    monkeypatch.setattr(sparse, "NMS_PAIRS", 0)
    assert np.array_equal(K.nms(boxes, scores, thr, 1.0, pixel_offset, 600), want)


def rpn_all_anchors(n: int, seed: int = 0, dtype=np.float32, stride: int = 16) -> dict:
    """A GenerateProposals case of about ``n`` anchors, one image, all of them taken
    (pre_nms_top_n = post_nms_top_n = 0): an RPN's 15 anchors (ratios 0.5, 1, 2 x sizes 32 to
    512) at each place of a stride-16 map, deltas N(0, 0.3), uniform scores."""
    base = []
    for size in (32, 64, 128, 256, 512):
        for r in (0.5, 1.0, 2.0):
            aw = np.round(np.sqrt(size * size / r))
            ah = np.round(aw * r)
            base.append([-aw / 2, -ah / 2, aw / 2, ah / 2])
    places = n // 15
    h = int(round(np.sqrt(places * 0.6)))
    w = -(-places // h)
    ys, xs = np.meshgrid(np.arange(h) * stride, np.arange(w) * stride, indexing="ij")
    shift = np.stack([xs, ys, xs, ys], -1).astype(np.float32)
    an = (shift[:, :, None, :] + np.array(base, np.float32)[None, None]).astype(dtype)
    rng = np.random.default_rng(seed)
    return dict(name=f"rpn_all_{n}", op="GenerateProposals",
                inputs=dict(scores=rng.random((1, 15, h, w)).astype(dtype),
                            bbox_deltas=rng.normal(0, 0.3, (1, 60, h, w)).astype(dtype),
                            im_shape=np.array([[h * stride, w * stride]], dtype),
                            anchors=an, variances=np.ones_like(an)),
                attrs=dict(pre_nms_top_n=0, post_nms_top_n=0, nms_thresh=0.7, min_size=0.0,
                           eta=1.0, pixel_offset=0))


def _nms_boxes(rng, m: int, dtype, zero_size: bool = False):
    """Boxes of every kind NMS meets: RPN-like clusters of log-uniform sizes, duplicates,
    near-duplicates (half a pixel, a ULP or so), integer corners, nested and thin boxes,
    tied scores; with zero_size some boxes of zero width or height."""
    c = rng.uniform(0, 400, (m, 2))
    s = np.exp(rng.uniform(np.log(2), np.log(300), (m, 2)))
    boxes = np.concatenate([c - s / 2, c + s / 2], 1)
    k = m // 8
    boxes[k:2 * k] = boxes[:k] + rng.normal(0, 3, (k, 4))  # clusters
    boxes[2 * k:2 * k + 10] = boxes[5]  # duplicates
    boxes[2 * k + 10:2 * k + 20] = boxes[6] + 0.5
    boxes[2 * k + 20:2 * k + 30] = boxes[7] * (1 + 1e-6)
    boxes[3 * k:4 * k] = np.round(boxes[3 * k:4 * k])
    boxes[4 * k:4 * k + 10] = boxes[8] + [2, 2, -2, -2]  # nested
    boxes[4 * k + 10:4 * k + 20, 2] = boxes[4 * k + 10:4 * k + 20, 0] + 0.25  # thin
    boxes = boxes.astype(dtype)
    boxes[:, 2:] = np.maximum(boxes[:, 2:], boxes[:, :2])
    if zero_size:
        boxes[5 * k:5 * k + 20, 2] = boxes[5 * k:5 * k + 20, 0]
        boxes[5 * k + 20:5 * k + 30, 3] = boxes[5 * k + 20:5 * k + 30, 1]
        boxes[5 * k + 30:5 * k + 35] = boxes[5 * k]
    scores = (np.round(rng.random(m) * 40) / 40).astype(dtype)  # ties
    return boxes, scores


def _literal_nms(boxes, scores, thr, eta, pixel_offset):
    T = boxes.dtype.type
    return D.nms(T, [list(b) for b in boxes], list(scores), T(thr), eta, pixel_offset)


@needs_numpy_2
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nms_grid_equals_the_literal_loop(monkeypatch, seed, dtype):
    """The grid search (forced: NMS_GRID_FROM 0, the sparse search off), in small chunks and
    blocks, keeps what Paddle's loop keeps: thresholds from 0.05 to 1 and above, both pixel
    offsets, ties, duplicates, near-duplicates, nested and thin boxes, zero-size boxes (the
    grid declines them: the block NMS), eta < 1 (the adaptive steps, then the grid), limits."""
    monkeypatch.setattr(fixed, "NMS_GRID_FROM", 0)
    monkeypatch.setattr(sparse, "NMS_PAIRS", 0)
    monkeypatch.setattr(grid, "NMS_GRID_CHUNK", 97)
    monkeypatch.setattr(common, "NMS_SETTLE_BLOCK", 64)
    rng = np.random.default_rng(seed)
    for i, thr in enumerate((0.05, 0.3, 0.5, 0.7, 0.95, 0.999, 1.0, 1.5)):
        pixel_offset = bool((i + seed) % 2)
        boxes, scores = _nms_boxes(rng, 400, dtype, zero_size=(i == 3 and not pixel_offset))
        for eta in (1.0, 0.9):
            want = _literal_nms(boxes, scores, thr, eta, pixel_offset)
            for limit in (len(boxes), 25):
                got = K.nms(boxes, scores, thr, eta, pixel_offset, limit)
                assert np.array_equal(got, want[:limit]), (thr, eta, pixel_offset, limit)


def test_nms_grid_settles_long_chains_one_box_at_a_time(monkeypatch):
    """A chain of boxes each suppressing the next (shifted by a tenth of their side, scores
    falling along it): the fixed point of a block stops after NMS_ROUNDS, the block is
    settled one box at a time, and the keeps are the loop's (every other box)."""
    monkeypatch.setattr(fixed, "NMS_GRID_FROM", 0)
    monkeypatch.setattr(sparse, "NMS_PAIRS", 0)
    monkeypatch.setattr(common, "NMS_ROUNDS", 3)
    x = np.arange(300, dtype=np.float32) * 10
    boxes = np.stack([x, np.zeros_like(x), x + 100, np.full_like(x, 100)], 1)
    scores = np.linspace(1, 0, 300).astype(np.float32)
    want = _literal_nms(boxes, scores, 0.7, 1.0, False)
    assert np.array_equal(K.nms(boxes, scores, 0.7, 1.0, False, 300), want)
    assert len(want) == 150 and want[:3] == [0, 2, 4]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_nms_grid_equals_block_nms_on_rpn_boxes(dtype):
    """All anchors of an RPN-like map (12,000 boxes, every size and ratio, decoded and
    clipped): the grid search's pairs settle to the block NMS's keeps, at 0.5, 0.7 and 0.9,
    both pixel offsets."""
    case = rpn_all_anchors(12000, seed=5, dtype=dtype)
    captured = []

    def grab(boxes, scores, *args):
        captured.append((boxes, scores))
        return np.arange(len(boxes))

    x = case["inputs"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(generate, "nms", grab)
        K.generate_proposals(x["scores"], x["bbox_deltas"], x["im_shape"],
                             x["anchors"].reshape(-1, 4), x["variances"].reshape(-1, 4), 0, 0,
                             0.7, 0.0, 1.0, False)
    boxes, scores = captured[0]
    T = boxes.dtype.type
    order = np.argsort(scores, kind="stable")[::-1]
    b = boxes[order]
    x1, y1, x2, y2 = (np.ascontiguousarray(b[:, i]) for i in range(4))
    for norm in (T(0), T(1)):
        area = (x2 - x1 + norm) * (y2 - y1 + norm)
        for thr in (T(0.5), T(0.7), T(0.9)):
            want = blocks.nms_blocks(x1, y1, x2, y2, area, thr, norm, len(b))
            got = grid.nms_grid(x1, y1, x2, y2, area, thr, norm, len(b))
            assert np.array_equal(got, want), (norm, thr)


@needs_numpy_2
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_step_equals_definition_all_anchors_through_the_grid(monkeypatch, dtype):
    """GenerateProposals with every anchor taken (pre/post_nms_top_n 0) through the grid
    search, eta 1 and 0.9, both pixel offsets: the step equals the definition."""
    monkeypatch.setattr(fixed, "NMS_GRID_FROM", 0)
    for i, (eta, offset) in enumerate(((1.0, 0), (0.9, 1), (1.0, 1))):
        case = rpn_all_anchors(1500, seed=i, dtype=dtype)
        case["attrs"].update(eta=eta, pixel_offset=offset)
        case["attrs"] = {k: (float(np.float32(v)) if isinstance(v, float) else v)
                         for k, v in case["attrs"].items()}
        _same(_step(case), _definition(case), case["name"])


def test_all_anchors_nms_is_not_quadratic(monkeypatch):
    """100,000 anchors of one image, all taken: work in proportion to the boxes, at most 400
    box pairs or comparisons a box (14.4 M pairs here, 144 a box; the block NMS's
    comparisons of every kept box with every box left, 54,016 x 100,000 / 2 = 2.7 G, took
    26 s; 200,000 anchors took 126 s)."""
    case = rpn_all_anchors(100000)
    x = case["inputs"]
    bound = 400 * 100000
    work = _nms_work(monkeypatch, bound)
    rois, _, num = K.generate_proposals(x["scores"], x["bbox_deltas"], x["im_shape"],
                                        x["anchors"].reshape(-1, 4),
                                        x["variances"].reshape(-1, 4), 0, 0, 0.7, 0.0, 1.0,
                                        False)
    assert num.tolist() == [54016] and rois.shape == (54016, 4)
    assert 0 < work["pairs"] <= bound, work


@pytest.mark.parity
@needs_paddle
@pytest.mark.parametrize("n, dtype, eta, offset", [(25000, np.float32, 1.0, 0),
                                                   (12000, np.float64, 0.9, 1)])
def test_all_anchors_equal_paddle_live(n, dtype, eta, offset):
    """Every anchor of an RPN-like map taken (pre_nms_top_n = post_nms_top_n = 0; Paddle's
    NMS compares each box with every kept one: ~1 s for it at 25,000): the step, through the
    grid search, equals live Paddle; eta 0.9 with pixel_offset hands the adaptive steps over
    to the grid."""
    from tests.oracles import paddle_proposals as paddle_outputs

    case = rpn_all_anchors(n, seed=n, dtype=dtype)
    case["attrs"].update(eta=eta, pixel_offset=offset)
    _same(_step(case), paddle_outputs(case), case["name"])


@pytest.mark.parametrize("eta", [1.0, 0.99999])
def test_nms_past_its_comparison_budget_is_a_roi_op_error(monkeypatch, eta):
    """Boxes too dense for the grid and too many kept for the block NMS (here: a budget of
    10,000 comparisons), or an eta so close to 1 that the threshold falls for thousands of
    keeps: RoiOpError naming the op, input 'scores', the image and the box count, not minutes
    in a Python op that cannot be interrupted."""
    from ort_roi.ops.generate_proposals import generate_proposals

    monkeypatch.setattr(common, "NMS_MAX_COMPARISONS", 10000)
    monkeypatch.setattr(sparse, "NMS_PAIRS", 0)  # the sparse search and the grid decline
    monkeypatch.setattr(fixed, "NMS_GRID_FROM", 0)
    monkeypatch.setattr(grid, "NMS_GRID_PAIRS", 0)
    case = rpn_all_anchors(3000)
    x = case["inputs"]
    with pytest.raises(RoiOpError, match=r"GenerateProposals: input 'scores': image 0: NMS "
                                         r"over \d+ boxes \(of 3135 anchors"):
        generate_proposals(*x.values(), **dict(case["attrs"], eta=eta))


def _eta_case(dtype, eta: float, huge: bool) -> dict:
    """Issue 51's case: 12,001 anchors taken (pre/post_nms_top_n 0), nms_thresh 0.7: an
    isolated box of the best score, then 12,000 boxes that all overlap one another (sides 50
    to 150 about the origin; too many pairs for the sparse search, so the fixed-threshold
    NMS after the first keep asks the grid). With ``huge`` one of the 12,000 (score 0) is
    1e300 wide instead, far past the others: sides 1e298 times apart."""
    m = 12001
    rng = np.random.default_rng(51)
    an = np.zeros((m, 4))
    an[0] = [5000, 5000, 5100, 5100]
    xy = rng.uniform(0, 50, (m - 1, 2))
    an[1:, :2], an[1:, 2:] = xy, xy + rng.uniform(50, 100, (m - 1, 2))
    scores = rng.uniform(0.1, 0.9, m)
    scores[0] = 1.0
    im = 6000.0
    if huge:
        an[m - 1] = [200, 200, 1e300, 300]
        scores[m - 1] = 0.0
        im = 2e300
    an = an.astype(dtype)
    return dict(name=f"eta_{eta:g}_{np.dtype(dtype).name}{'_huge' * huge}",
                op="GenerateProposals",
                inputs=dict(scores=scores.astype(dtype).reshape(1, 1, 1, m),
                            bbox_deltas=np.zeros((1, 4, 1, m), dtype),
                            im_shape=np.array([[im, im]], dtype),
                            anchors=an.reshape(1, m, 1, 4),
                            variances=np.ones((1, m, 1, 4), dtype)),
                attrs=dict(pre_nms_top_n=0, post_nms_top_n=0, nms_thresh=0.7, min_size=0.0,
                           eta=eta, pixel_offset=0))


def _session_outputs(case):
    import onnxruntime as ort

    import ort_roi
    from ort_roi.graph.builders import single_op_model

    x = list(case["inputs"].values())
    m = single_op_model(case["op"], x[0].dtype, np.int32, **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, dict(zip([i.name for i in sess.get_inputs()], x)))


ETA_CASES = [(np.float32, 0.0, False), (np.float64, 0.0, False), (np.float32, -0.5, False),
             (np.float64, 1e-45, True)]


@needs_entry
@pytest.mark.parametrize("dtype, eta, huge", ETA_CASES)
def test_eta_at_or_near_zero_keeps_what_paddle_keeps(dtype, eta, huge):
    """Issue 51: eta 0 makes the threshold 0 after the first keep (Paddle: while it is
    > 0.5 it is multiplied by eta), and every later box overlapping a kept one by more than 0
    is suppressed: the isolated best box and the best of the 12,000 overlapping ones are kept
    (the grid search divided by the threshold: ZeroDivisionError). eta < 0: a negative
    threshold suppresses every box after the first (IoU 0 is not <= it). eta 1e-45 in
    float64 with sides 1e298 times apart: the grid's size classes overflowed float64
    (OverflowError); the huge box overlaps the others by less than 1e-45 and is kept too.
    In a real onnxruntime session; equal to the literal definition (test_eta_..._live:
    to Paddle)."""
    case = _eta_case(dtype, eta, huge)
    got = _session_outputs(case)
    x = case["inputs"]
    s = x["scores"].ravel()
    want = [0] if eta < 0 else [0, 1 + int(np.argmax(s[1:]))] + [len(s) - 1] * huge
    assert got[2].tolist() == [len(want)] and np.array_equal(got[1][:, 0], s[want])
    assert np.array_equal(got[0][0], x["anchors"].reshape(-1, 4)[0])  # decoded exactly
    _same(got, _definition(case), case["name"])


@pytest.mark.parity
@needs_paddle
@pytest.mark.parametrize("dtype, eta, huge", ETA_CASES)
def test_eta_at_or_near_zero_equals_paddle_live(dtype, eta, huge):
    from tests.oracles import paddle_proposals as paddle_outputs

    case = _eta_case(dtype, eta, huge)
    _same(_session_outputs(case), paddle_outputs(case), case["name"])


# --- the ops: entries, sessions, bad inputs ---------------------------------------------------

@needs_entry
@pytest.mark.parametrize("case", GOLDENS, ids=[c["name"] for c in GOLDENS])
def test_op_equals_golden(case):
    from ort_roi import ops

    got = ops.kernel(("ort_roi", case["op"]))(*case["inputs"].values(), **case["attrs"])
    _same(list(got), case["expected"], case["name"])


@needs_entry
@pytest.mark.parametrize("case", GOLDENS[::3], ids=[c["name"] for c in GOLDENS[::3]])
def test_op_in_a_plain_onnxruntime_session_equals_paddle(case):
    import onnxruntime as ort

    import ort_roi
    from ort_roi.graph.builders import single_op_model

    x = list(case["inputs"].values())
    m = single_op_model(case["op"], x[0].dtype, np.int32, **case["attrs"])
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    got = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], x)))
    _same(got, case["expected"], case["name"])


@needs_entry
def test_distribute_node_with_levels_that_disagree_with_its_attributes():
    from ort_roi import ops

    spec = ops.spec("DistributeFpnProposals_L3")
    with pytest.raises(RoiOpError, match="max_level - min_level \\+ 1 must be 3"):
        spec.output_shapes([[5, 4], [1]], spec.resolve(dict(min_level=2, max_level=5)))


def _rpn_graph():
    """scores, deltas -> GenerateProposals (anchors, variances, image shape constant) ->
    DistributeFpnProposals_L4, as export-paddle writes PaddleDetection's RPN stage."""
    from onnx import TensorProto, helper, numpy_helper

    from ort_roi.graph import builders

    H, W, A = 8, 10, 3
    rng = np.random.default_rng(0)
    anchors = np.concatenate([rng.uniform(0, 60, (H, W, A, 2)),
                              rng.uniform(60, 120, (H, W, A, 2))], -1).astype(np.float32)
    weights = [numpy_helper.from_array(anchors, "anchors"),
               numpy_helper.from_array(np.ones((H, W, A, 4), np.float32), "variances"),
               numpy_helper.from_array(np.array([[120, 128]], np.float32), "im_shape")]
    gp = builders.make_node("GenerateProposals",
                            ["scores", "deltas", "im_shape", "anchors", "variances"],
                            ["rois", "probs", "num"], name="rpn", pre_nms_top_n=200,
                            post_nms_top_n=50, nms_thresh=0.7, min_size=0.0, pixel_offset=0)
    levels = [f"rois{i}" for i in range(2, 6)]
    dist = builders.make_node("DistributeFpnProposals_L4", ["rois", "num"],
                              levels + [f"num{i}" for i in range(2, 6)] + ["restore"],
                              name="levels", min_level=2, max_level=5, refer_level=4,
                              refer_scale=224, pixel_offset=0)
    return builders.make_model(
        [gp, dist], [builders.tensor("scores", "float32", [1, A, H, W]),
                     builders.tensor("deltas", "float32", [1, 4 * A, H, W])],
        [builders.tensor(x, "float32", ["R", 4]) for x in levels] +
        [builders.tensor("restore", "int32", ["R", 1])], initializers=weights)


@needs_numpy_2
@needs_entry
def test_validate_compares_proposal_stages_whole(tmp_path, capsys):
    """A proposal stage's rows are not its inputs' rows (it selects and reorders boxes):
    validate compares each node's outputs whole with its definition, and says where one
    differs."""
    import onnx

    from ort_roi.cli import main as cli
    from ort_roi.cli.compare import compare_node

    path = str(tmp_path / "rpn.onnx")
    onnx.save(_rpn_graph(), path)
    assert cli.main(["validate", path]) == 0
    out = capsys.readouterr().out
    for name in ("GenerateProposals", "DistributeFpnProposals_L4"):
        assert (f"(ort_roi::{name}): OK: all its outputs equal its definition (whole) "
                f"(within 0.0001 + 0.0001 x |value|), max |diff| 0") in out, out
    m = _rpn_graph()
    node = m.graph.node[0]
    x = {"scores": np.random.default_rng(1).standard_normal((1, 3, 8, 10)).astype(np.float32),
         "deltas": np.zeros((1, 12, 8, 10), np.float32)}
    seen = dict(x, **{w.name: onnx.numpy_helper.to_array(w) for w in m.graph.initializer})
    seen.update(zip(node.output, ops_kernel("GenerateProposals")(
        *(seen[i] for i in node.input), **{a.name: onnx.helper.get_attribute_value(a)
                                           for a in node.attribute})))
    ok, line = compare_node(node, seen, 17, 8, 10.0)
    assert ok, line
    seen["probs"] = seen["probs"].copy()
    seen["probs"][3, 0] += 0.01
    ok, line = compare_node(node, seen, 17, 8, 10.0)
    assert not ok and ("output 'probs' differs from its definition at (3, 0): 2.05277 vs 2.04277, |diff| 0.01"
                      in line), line


@needs_numpy_2
@needs_entry
def test_validate_generates_rois_for_a_distribute_node_fed_by_the_graph(tmp_path, capsys):
    """DistributeFpnProposals' rois are its boxes and its first input: validate generates
    boxes for them (it once made a [1, 4] feature map, and the run failed)."""
    import onnx

    from ort_roi.cli import main as cli
    from ort_roi.graph import builders

    levels = [f"rois{i}" for i in range(2, 6)]
    node = builders.make_node("DistributeFpnProposals_L4", ["rois", "num"],
                              levels + [f"num{i}" for i in range(2, 6)] + ["restore"],
                              name="levels", min_level=2, max_level=5)
    m = builders.make_model([node], [builders.tensor("rois", "float32", ["R", 4]),
                                     builders.tensor("num", "int32", [2])],
                            [builders.tensor(x, "float32", ["R", 4]) for x in levels] +
                            [builders.tensor("restore", "int32", ["R", 1])])
    path = str(tmp_path / "levels.onnx")
    onnx.save(m, path)
    assert cli.main(["validate", path, "--rois", "40"]) == 0
    out = capsys.readouterr().out
    assert "generated inputs (rois [40, 4], num [2])" in out, out
    assert "(ort_roi::DistributeFpnProposals_L4): OK: all its outputs equal its definition " \
        "(whole) (within 0.0001 + 0.0001 x |value|), max |diff| 0" in out, out


def ops_kernel(name):
    from ort_roi import ops

    return ops.kernel(("ort_roi", name))


def _gp_args():
    c = P.generate("bad", N=2, A=2, H=4, W=5)
    return list(c["inputs"].values())


BAD_GENERATE = [
    ("scores rank", lambda a: a.__setitem__(0, a[0][0]), "input 'scores'", "rank 4"),
    ("scores int", lambda a: a.__setitem__(0, a[0].astype(np.int32)), "input 'scores'",
     "float32 or float64"),
    ("deltas shape", lambda a: a.__setitem__(1, a[1][:, :4]), "input 'bbox_deltas'",
     "[N, 4A, H, W]"),
    ("deltas dtype", lambda a: a.__setitem__(1, a[1].astype(np.float64)), "input 'bbox_deltas'",
     "dtype of scores"),
    ("im_shape shape", lambda a: a.__setitem__(2, a[2][:1]), "input 'im_shape'", "[N, 2]"),
    ("im_shape negative", lambda a: a[2].__setitem__((1, 0), -5), "input 'im_shape'",
     "negative size"),
    ("im_shape inf", lambda a: a[2].__setitem__((0, 1), np.inf), "input 'im_shape'",
     "not finite"),
    ("anchors count", lambda a: a.__setitem__(3, a[3][:, :3]), "input 'anchors'",
     "[H, W, A, 4]"),
    ("anchors nan", lambda a: a[3].__setitem__((0, 0, 0, 0), np.nan), "input 'anchors'",
     "not finite"),
    ("variances shape", lambda a: a.__setitem__(4, a[4][..., :2]), "input 'variances'",
     "anchors' shape"),
    ("scores nan", lambda a: a[0].__setitem__((1, 0, 2, 2), np.nan), "input 'scores'",
     "[1, 0, 2, 2] is NaN"),
    ("deltas nan", lambda a: a[1].__setitem__((0, 3, 1, 1), np.nan), "input 'bbox_deltas'",
     "is NaN"),
]


@needs_entry
@pytest.mark.parametrize("name,change,where,what", BAD_GENERATE,
                         ids=[b[0] for b in BAD_GENERATE])
def test_generate_bad_inputs(name, change, where, what):
    from ort_roi.ops import generate_proposals

    a = _gp_args()
    change(a)
    with pytest.raises(RoiOpError) as e:
        generate_proposals(*a)
    assert e.value.op == "GenerateProposals" and e.value.name == where
    assert what in str(e.value), str(e.value)


@needs_entry
@pytest.mark.parametrize("attrs,where", [(dict(pixel_offset=2), "attribute 'pixel_offset'"),
                                         (dict(nms_thresh=float("nan")), "attribute 'nms_thresh'"),
                                         (dict(pre_nms_top_n=1.5), "attribute 'pre_nms_top_n'")])
def test_generate_bad_attributes(attrs, where):
    from ort_roi.ops import generate_proposals

    with pytest.raises(RoiOpError) as e:
        generate_proposals(*_gp_args(), **attrs)
    assert e.value.name == where


@needs_entry
def test_generate_huge_top_n_allocates_by_the_data():
    from ort_roi.ops import generate_proposals

    rois, probs, num = generate_proposals(*_gp_args(), pre_nms_top_n=(1 << 62),
                                          post_nms_top_n=(1 << 62))
    assert rois.shape[0] == num.sum() <= 2 * 4 * 5 * 2


BAD_DISTRIBUTE = [
    (dict(min_level=2, max_level=9), "attribute 'max_level'", "1 to 6"),
    (dict(min_level=3, max_level=2), "attribute 'max_level'", "1 to 6"),
    (dict(refer_scale=0), "attribute 'refer_scale'", ">= 1"),
    (dict(fpn_rois=np.zeros((3, 5), np.float32)), "input 'fpn_rois'", "[R, 4]"),
    (dict(fpn_rois=np.zeros((3, 4), np.int64)), "input 'fpn_rois'", "float32 or float64"),
    (dict(fpn_rois=np.full((3, 4), np.nan, np.float32)), "input 'fpn_rois'", "NaN"),
    (dict(rois_num=np.array([1, 1], np.int32)), "input 'rois_num'", "must sum to R = 3"),
    (dict(rois_num=np.array([4, -1], np.int32)), "input 'rois_num'", "negative"),
    (dict(rois_num=np.array([3.0], np.float32)), "input 'rois_num'", "int32 or int64"),
    (dict(rois_num=np.array([[3]], np.int32)), "input 'rois_num'", "[N]"),
]


@needs_entry
@pytest.mark.parametrize("change,where,what", BAD_DISTRIBUTE,
                         ids=[f"{b[1]}-{b[2]}" for b in BAD_DISTRIBUTE])
def test_distribute_bad_inputs(change, where, what):
    from ort_roi.ops import distribute_fpn_proposals

    kw = dict(fpn_rois=np.array([[0, 0, 10, 10], [0, 0, 100, 100], [5, 5, 900, 900]],
                                np.float32), rois_num=np.array([2, 1], np.int32),
              min_level=2, max_level=5)
    kw.update(change)
    with pytest.raises(RoiOpError) as e:
        distribute_fpn_proposals(kw.pop("fpn_rois"), kw.pop("rois_num"), **kw)
    assert e.value.name == where and what in str(e.value), str(e.value)


@pytest.mark.parametrize("path", ["sparse", "blocks", "adaptive"])
def test_nms_of_touching_zero_area_boxes_without_warnings(monkeypatch, path):
    """Two zero-area boxes that touch (pixel_offset 0) have IoU 0 / 0 = NaN, not <= the
    threshold: the later one is suppressed, as by Paddle's loop (the definition), on every
    path (the sparse pairs, the block NMS, the adaptive steps) and with no RuntimeWarning
    (the kernel warned "invalid value encountered in divide")."""
    if path == "blocks":
        monkeypatch.setattr(sparse, "NMS_PAIRS", 0)
    eta = 0.9 if path == "adaptive" else 1.0
    boxes = np.array([[5, 5, 5, 5], [5, 5, 5, 5], [0, 0, 10, 10], [5, 5, 5, 5], [20, 20, 20, 20]],
                     np.float32)
    scores = np.array([0.9, 0.8, 0.7, 0.6, 0.5], np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = K.nms(boxes, scores, 0.7, eta, False, 5)
        want = _literal_nms(boxes, scores, 0.7, eta, False)
    assert got.tolist() == want == [0, 2, 4]
