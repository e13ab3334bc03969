"""CollectFpnProposals_L{L}: Paddle's collect_fpn_proposals bit for bit. The readable definition
and the NumPy kernel against Paddle (committed goldens from tools/make_proposal_goldens.py
collect; live with the parity extra: ties within and across levels and images, empty levels,
several images, post_nms_topN below and above the total, float32 and float64), libstdc++'s
std::stable_sort transcribed, the op in real onnxruntime sessions, its spec, and export-paddle
on a Paddle program generate_proposals per level -> collect_fpn_proposals ->
distribute_fpn_proposals -> roi_align, against Paddle."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest

import ort_roi
from tests import proposal_cases as P
from tests.versions import needs_shape_inference
from tests.work import python_lines
from ort_roi import RoiOpError, ops
from ort_roi.definitions import collect as D
from ort_roi.definitions.cxx import std_stable_sort
from ort_roi.graph.builders import single_op_model
from ort_roi.kernels.cpu import collect as K

GOLDEN = os.path.join(os.path.dirname(__file__), "goldens", "collect_fpn_proposals.npz")


def _found(*modules) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


needs_paddle = pytest.mark.skipif(not _found("paddle"),
                                  reason="needs paddle: pip install '.[parity]'")


GOLDENS = P.load_goldens(GOLDEN)


def _definition(case) -> list:
    return list(D.collect_fpn_proposals_outputs(*case["inputs"].values(), **case["attrs"]))


def _kernel(case) -> list:
    return list(ops.collect_fpn_proposals(*case["inputs"].values(), **case["attrs"]))


def _step(case) -> list:
    """The NumPy compute step, as the op calls it."""
    rois, scores, nums = P.collect_levels(case)
    return list(K.collect_fpn_proposals(rois, scores, [n.astype(np.int64) for n in nums],
                                        case["attrs"]["post_nms_topN"]))


def _same(got, want, name=""):
    assert len(got) == len(want), name
    for i, (g, w) in enumerate(zip(got, want)):
        g = np.asarray(g)
        assert g.dtype == w.dtype and g.shape == w.shape, (name, i, g.dtype, w.dtype, g.shape,
                                                           w.shape)
        assert np.array_equal(np.ascontiguousarray(g).view(np.uint8),
                              np.ascontiguousarray(w).view(np.uint8)), (name, i)


def _paddle_outputs(case) -> list:
    from tests.oracles import paddle_proposals

    return paddle_proposals(case)


def random_case(rng, name: str, *, paddle_safe: bool) -> dict:
    """1-6 levels, 0-3 images, 0-9 rois per image and level, scores with many ties (or
    none), float32 / float64, post_nms_topN from 0 to above the total. ``paddle_safe``: no
    empty image before a non-empty one in a level (Paddle's kernel misplaces its rois)."""
    L = int(rng.integers(1, 7))
    N = int(rng.integers(1, 4)) if paddle_safe else int(rng.integers(0, 4))
    counts = []
    for _ in range(L):
        if rng.random() < 0.15:
            c = [0] * N  # an empty level
        elif paddle_safe:
            c = [int(v) for v in rng.integers(1, 10, N)]
            if N and rng.random() < 0.3:
                c[0] = 0  # image 0 empty in this level: Paddle steps over it
        else:
            c = [int(v) for v in rng.integers(0, 10, N)]
        counts.append(c)
    total = sum(map(sum, counts))
    top = int(rng.choice([0, 1, max(total // 3, 1), total, total + 5, 2000]))
    return P.collect(name, counts, top, dtype=(np.float32, np.float64)[int(rng.integers(2))],
                     ties=bool(rng.integers(2)), seed=int(rng.integers(1 << 30)))


# --- the definition and the kernel against Paddle --------------------------------------------

@pytest.mark.parametrize("case", GOLDENS, ids=[c["name"] for c in GOLDENS])
def test_definition_equals_paddle_golden(case):
    _same(_definition(case), case["expected"], case["name"])


@pytest.mark.parametrize("case", GOLDENS, ids=[c["name"] for c in GOLDENS])
def test_kernel_and_step_equal_paddle_golden(case):
    _same(_kernel(case), case["expected"], case["name"])
    _same(_step(case), case["expected"], case["name"])


def test_goldens_cover_ties_empty_levels_images_and_top_n():
    by = {c["name"]: c for c in GOLDENS}
    assert {c["name"] for c in P.collect_cases()} == set(by)
    ops_ = {c["op"] for c in GOLDENS}
    assert {f"CollectFpnProposals_L{L}" for L in range(1, 7)} <= ops_
    assert {c["inputs"]["rois_0"].dtype for c in GOLDENS} == {np.dtype(np.float32),
                                                              np.dtype(np.float64)}
    ties = by["collect_equal_across_levels"]
    # equal scores across levels come out the later level first, then the later row
    assert ties["expected"][1].tolist() == [1, 5]
    top = by["collect_L4_topn_above_total"]
    assert top["expected"][0].shape[0] == sum(int(n.sum()) for n in P.collect_levels(top)[2])
    assert by["collect_topn_0"]["expected"][0].shape == (0, 4)
    assert by["collect_no_image"]["expected"][1].shape == (0,)
    assert all(c["expected"][1].dtype == np.int32 for c in GOLDENS)  # Paddle's rois_num


@pytest.mark.parity
@needs_paddle
@pytest.mark.parametrize("seed", [31, 32, 33])
def test_definition_and_kernel_equal_paddle_live(seed):
    rng = np.random.default_rng(seed)
    done = 0
    for i in range(30):
        case = random_case(rng, f"live_{seed}_{i}", paddle_safe=True)
        if not P.paddle_defined(case):  # an image with none kept: Paddle reads past its counts
            continue
        want = _paddle_outputs(case)
        _same(_definition(case), want, case["name"])
        _same(_kernel(case), want, case["name"])
        done += 1
    assert done >= 15


@pytest.mark.parity
@needs_paddle
def test_where_paddle_diverges():
    """The deliberate divergences (docs/semantics.md): an empty image before others in a level
    gets a roi of the next image in Paddle; an image with none kept gets garbage in Paddle's
    rois_num (read past its count vector). ort_roi gives each image its own rois, and 0."""
    middle, none_kept = (next(c for c in P.collect_definition_only_cases() if c["name"] == n)
                         for n in ("collect_middle_image_empty_in_a_level",
                                   "collect_second_image_none_kept"))
    want = _paddle_outputs(middle)
    got = _kernel(middle)
    assert want[1].tolist() == [3, 2, 2] and got[1].tolist() == [3, 1, 3]
    assert sorted(map(tuple, want[0].tolist())) == sorted(map(tuple, got[0].tolist()))
    want = _paddle_outputs(none_kept)
    got = _kernel(none_kept)
    _same(got[:1], want[:1])  # the rois are Paddle's
    assert got[1].tolist() == [3, 0] and want[1][0] == 3


# --- the kernel against the definition ---------------------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_kernel_equals_definition_random(seed):
    rng = np.random.default_rng(100 + seed)
    for i in range(50):
        case = random_case(rng, f"r{seed}_{i}", paddle_safe=bool(i % 2))
        _same(_kernel(case), _definition(case), case["name"])


@pytest.mark.parametrize("case", P.collect_definition_only_cases(),
                         ids=[c["name"] for c in P.collect_definition_only_cases()])
def test_kernel_equals_definition_where_paddle_is_not_defined(case):
    assert not P.paddle_defined(case)
    got = _kernel(case)
    _same(got, _definition(case), case["name"])
    # each image its own rois: the counts sum to the kept rois
    assert int(got[1].sum()) == got[0].shape[0]


def test_std_stable_sort_transcription():
    """libstdc++'s std::stable_sort, transcribed: a strict comparator sorts stably (every
    length around its chunks of 7 and its halves); Paddle's ``>=`` puts equal keys latest
    first."""
    rng = np.random.default_rng(5)
    for n in list(range(0, 60)) + [97, 112, 113, 255, 448, 1001]:
        keys = rng.integers(0, max(n // 4, 2), n).tolist()
        v = list(range(n))
        std_stable_sort(v, lambda a, b: keys[a] < keys[b])
        assert v == sorted(range(n), key=lambda i: keys[i]), n
        v = list(range(n))
        std_stable_sort(v, lambda a, b: keys[a] >= keys[b])
        assert v == sorted(range(n), key=lambda i: (-keys[i], -i)), n


def test_many_rois_are_vectorised():
    """5 levels x 2 images x 2000 proposals (PaddleDetection's post_nms_top_n per level):
    one argsort: 369 lines of ort_roi's Python here, whatever the count (a loop over the
    20,000 rois would run one at least each)."""
    case = P.collect("big", [[2000, 2000]] * 5, 2000, ties=True, seed=3)
    with python_lines(2000, entered=ops.collect_fpn_proposals):
        got = _kernel(case)
    assert got[0].shape == (2000, 4) and int(got[1].sum()) == 2000


# --- the op: sessions, spec, bad inputs --------------------------------------------------------

def _session(model):
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


@pytest.mark.parametrize("case", GOLDENS[::2], ids=[c["name"] for c in GOLDENS[::2]])
def test_op_in_a_plain_session_and_the_front_door_equals_paddle(case):
    x = list(case["inputs"].values())
    m = single_op_model(case["op"], x[0].dtype, np.int32, **case["attrs"])
    sess = _session(m)
    feed = dict(zip([i.name for i in sess.get_inputs()], x))
    _same(sess.run(None, feed), case["expected"], case["name"])
    _same(ort_roi.InferenceSession(m).run(None, feed), case["expected"], case["name"])


def test_int64_counts_and_several_images_in_a_session():
    case = next(c for c in GOLDENS if c["name"] == "collect_L3_three_images_float64")
    x = [a.astype(np.int64) if a.dtype.kind == "i" else a for a in case["inputs"].values()]
    m = single_op_model(case["op"], np.float64, np.int64, **case["attrs"])
    sess = _session(m)
    _same(sess.run(None, dict(zip([i.name for i in sess.get_inputs()], x))), case["expected"])


@needs_shape_inference
def test_schema_and_shape_inference():
    from ort_roi.graph.builders import tensor

    m = single_op_model("CollectFpnProposals_L2", post_nms_topN=50)
    assert onnx.defs.has("CollectFpnProposals_L2", ort_roi.DOMAIN)
    for i, (name, shape) in enumerate([("rois_0", [30, 4]), ("rois_1", [12, 4]),
                                       ("scores_0", [30, 1]), ("scores_1", [12, 1]),
                                       ("rois_num_0", [2]), ("rois_num_1", [2])]):
        m.graph.input[i].CopyFrom(tensor(name, np.int32 if "num" in name else np.float32,
                                         shape))
    for o in m.graph.output:
        o.type.tensor_type.ClearField("shape")
    out = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    dims = [[d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
            for o in out.graph.output]
    assert dims == [[42, 4], [2]]
    spec = ops.spec("CollectFpnProposals_L2")
    a = spec.resolve(dict(post_nms_topN=20))
    assert spec.output_shapes([[30, 4], [12, 4], None, None, ["N"]], a) == [[20, 4], ["N"]]
    assert spec.output_shapes([["R0", 4]], a) == [[None, 4], [None]]
    with pytest.raises(RoiOpError, match="input 'scores_1'.*\\[R_1, 1\\]"):
        spec.output_shapes([None, None, None, [12, 2]], a)
    with pytest.raises(RoiOpError, match="input 'rois_num_0'.*rank 1"):
        spec.output_shapes([None] * 4 + [[2, 1]], a)


def test_info_lists_every_arity():
    out = subprocess.run([sys.executable, "-m", "ort_roi", "info"], capture_output=True,
                         text=True, check=True).stdout
    for L in range(1, 7):
        assert f"ort_roi::CollectFpnProposals_L{L}" in out


def test_validate_compares_it_whole(tmp_path, capsys):
    """validate generates rois, scores and counts that fit the node and compares its outputs
    whole with the definition (it selects and reorders rois: no row is its input's)."""
    from ort_roi.cli import main as cli
    from ort_roi.graph import builders

    L = 3
    ins = ([f"rois_{i}" for i in range(L)] + [f"scores_{i}" for i in range(L)]
           + [f"rois_num_{i}" for i in range(L)])
    node = builders.make_node(f"CollectFpnProposals_L{L}", ins, ["fpn_rois", "rois_num"],
                              name="collect", post_nms_topN=7)
    inputs = ([builders.tensor(f"rois_{i}", "float32", [f"R_{i}", 4]) for i in range(L)]
              + [builders.tensor(f"scores_{i}", "float32", [f"R_{i}", 1]) for i in range(L)]
              + [builders.tensor(f"rois_num_{i}", "int32", [2]) for i in range(L)])
    m = builders.make_model([node], inputs, [builders.tensor("fpn_rois", "float32", ["K", 4]),
                                             builders.tensor("rois_num", "int32", [2])])
    path = str(tmp_path / "collect.onnx")
    onnx.save(m, path)
    assert cli.main(["validate", path]) == 0
    out = capsys.readouterr().out
    assert (f"(ort_roi::CollectFpnProposals_L{L}): OK: all its outputs equal its definition "
            "(whole) (within 0.0001 + 0.0001 x |value|), max |diff| 0") in out, out


def _good():
    return P.collect("good", [[3, 2], [1, 2]], 4, seed=1)


BAD = [
    ("levels", lambda a: a[:-1], {}, "inputs", "3L arrays"),
    ("rois shape", lambda a: [a[0][:, :3]] + a[1:], {}, "input 'rois_0'", "[R_0, 4]"),
    ("rois int", lambda a: [a[0].astype(np.int32)] + a[1:], {}, "input 'rois_0'",
     "float32 or float64"),
    ("rois dtype", lambda a: a[:1] + [a[1].astype(np.float64)] + a[2:], {}, "input 'rois_1'",
     "dtype of rois_0 (float32)"),
    ("scores dtype", lambda a: a[:2] + [a[2].astype(np.float64)] + a[3:], {},
     "input 'scores_0'", "dtype of rois_0"),
    ("scores shape", lambda a: a[:3] + [a[3].ravel()] + a[4:], {}, "input 'scores_1'",
     "[R_1, 1] = [3, 1]"),
    ("scores nan", lambda a: a[:2] + [np.where(np.arange(5)[:, None] == 3, np.nan, a[2])]
     + a[3:], {}, "input 'scores_0'", "score 3 is NaN"),
    ("counts float", lambda a: a[:4] + [a[4].astype(np.float32)] + a[5:], {},
     "input 'rois_num_0'", "int32 or int64"),
    ("counts length", lambda a: a[:5] + [np.array([1, 1, 1], np.int32)], {},
     "input 'rois_num_1'", "[N] = [2]"),
    ("counts negative", lambda a: a[:4] + [np.array([6, -1], np.int32)] + a[5:], {},
     "input 'rois_num_0'", "count 1 is negative"),
    ("counts sum", lambda a: a[:4] + [np.array([3, 3], np.int32)] + a[5:], {},
     "input 'rois_num_0'", "must sum to R_0 = 5"),
    ("top_n negative", lambda a: a, dict(post_nms_topN=-1), "attribute 'post_nms_topN'",
     ">= 0"),
    ("top_n float", lambda a: a, dict(post_nms_topN=1.5), "attribute 'post_nms_topN'",
     "must be int"),
]


@pytest.mark.parametrize("change,attrs,where,what", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_inputs(change, attrs, where, what):
    case = _good()
    args = change(list(case["inputs"].values()))
    with pytest.raises(RoiOpError) as e:
        ops.collect_fpn_proposals(*args, **dict(case["attrs"], **attrs))
    assert e.value.name == where and what in str(e.value), str(e.value)
    assert e.value.op.startswith("CollectFpnProposals"), e.value.op


def test_seven_levels_are_refused():
    case = P.collect("seven", [[1]] * 7, 3)
    with pytest.raises(RoiOpError, match="1 to 6 levels"):
        ops.collect_fpn_proposals(*case["inputs"].values(), post_nms_topN=3)


# --- export-paddle -----------------------------------------------------------------------------

EXPORTER = _found("paddle", "paddle2onnx")
STRIDES = (4, 8, 16, 32)
A, C, IMAGE = 3, 8, (64, 80)


def _fpn_layer(post_nms_topN: int):
    """An FPN RPN as Paddle's static-graph detectors wrote it: generate_proposals per level,
    collect_fpn_proposals over the batch, distribute_fpn_proposals, roi_align per level,
    concat, gather by restore_index; outputs the pooled rois, the collected rois and their
    counts."""
    import paddle
    from paddle import _C_ops
    from paddle.vision import ops as V

    class FpnRpn(paddle.nn.Layer):
        def forward(self, im_shape, s2, d2, a2, s3, d3, a3, s4, d4, a4, s5, d5, a5,
                    f2, f3, f4, f5):
            rois, probs, nums = [], [], []
            for s, d, a in ((s2, d2, a2), (s3, d3, a3), (s4, d4, a4), (s5, d5, a5)):
                r, p, n = V.generate_proposals(s, d, im_shape, a, paddle.ones_like(a),
                                               pre_nms_top_n=60, post_nms_top_n=30,
                                               nms_thresh=0.7, min_size=0.0, eta=1.0,
                                               pixel_offset=False, return_rois_num=True)
                rois.append(r)
                probs.append(p)
                nums.append(n)
            fpn_rois, rois_num = _C_ops.collect_fpn_proposals(rois, probs, nums, post_nms_topN)
            multi, restore, multi_num = V.distribute_fpn_proposals(
                fpn_rois, 2, 5, 4, 224, pixel_offset=False, rois_num=rois_num)
            pooled = [V.roi_align(f, r, n, 7, 1.0 / st, sampling_ratio=2, aligned=True)
                      for f, r, n, st in zip((f2, f3, f4, f5), multi, multi_num, STRIDES)]
            return paddle.gather(paddle.concat(pooled), restore), fpn_rois, rois_num

    return FpnRpn()


def _fpn_spec():
    import paddle

    S = paddle.static.InputSpec
    spec = [S([None, 2], "float32", "im_shape")]
    for lvl in range(2, 6):
        spec += [S([None, A, None, None], "float32", f"s{lvl}"),
                 S([None, 4 * A, None, None], "float32", f"d{lvl}"),
                 S([None, None, A, 4], "float32", f"a{lvl}")]
    return spec + [S([None, C, None, None], "float32", f"f{lvl}") for lvl in range(2, 6)]


def _fpn_feed(n: int, seed: int) -> dict:
    """n images; RPN scores on a grid of 1/8 (ties within and across levels)."""
    rng = np.random.default_rng(seed)
    H, W = IMAGE
    feed = {"im_shape": np.array([[H, W]] * n, np.float32)}
    maps = {}
    for lvl, st in zip(range(2, 6), STRIDES):
        h, w = -(-H // st), -(-W // st)
        feed[f"s{lvl}"] = (np.round(rng.random((n, A, h, w)) * 8) / 8).astype(np.float32)
        feed[f"d{lvl}"] = rng.normal(0, 0.3, (n, 4 * A, h, w)).astype(np.float32)
        ys, xs = np.meshgrid(np.arange(h) * st, np.arange(w) * st, indexing="ij")
        anchors = np.zeros((h, w, A, 4))
        for a in range(A):
            half = st * 2 ** a
            anchors[:, :, a] = np.stack([xs - half, ys - half, xs + half, ys + half], -1)
        feed[f"a{lvl}"] = anchors.astype(np.float32)
        maps[f"f{lvl}"] = rng.standard_normal((n, C, h, w)).astype(np.float32)
    return {**feed, **maps}


@pytest.mark.skipif(not EXPORTER, reason="needs paddle2onnx: pip install '.[paddle]'")
@pytest.mark.parametrize("post_nms_topN", [50, 1000])
def test_export_paddle_fpn_rpn_equals_paddle(tmp_path, post_nms_topN):
    """paddle2onnx aborts on collect_fpn_proposals; export-paddle cuts it like the other
    proposal ops: CollectFpnProposals_L4 between the four GenerateProposals and the fused
    DistributeRoIAlign_L4 (or DistributeFpnProposals_L4 and RoIAlign unfused). The collected
    rois and counts equal Paddle's bit for bit, the pooled rois within RoIAlign's rounding."""
    import paddle

    prefix = str(tmp_path / "fpn_rpn")
    paddle.jit.save(_fpn_layer(post_nms_topN), prefix, input_spec=_fpn_spec())
    fused = ort_roi.paddle_export(prefix)
    unfused = ort_roi.paddle_export(prefix, fuse=False)
    kinds = sorted(n.op_type for n in fused.graph.node if n.domain == ort_roi.DOMAIN)
    assert kinds == ["CollectFpnProposals_L4", "DistributeRoIAlign_L4"] + [
        "GenerateProposals"] * 4
    assert {"CollectFpnProposals_L4", "DistributeFpnProposals_L4", "RoIAlign"} <= {
        n.op_type for n in unfused.graph.node if n.domain == ort_roi.DOMAIN}
    layer = paddle.jit.load(prefix)
    sessions = [_session(fused), _session(unfused)]
    for n, seed in ((1, 0), (2, 1), (3, 2)):
        feed = _fpn_feed(n, seed)
        want = [t.numpy() for t in layer(*(paddle.to_tensor(feed[s.name])
                                           for s in _fpn_spec()))]
        kept = want[1].shape[0]
        assert kept == 50 if post_nms_topN == 50 else kept < 1000  # below / above the total
        assert want[2].min() > 0 and want[2].sum() == kept  # every image has some
        for sess in sessions:
            got = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})
            _same(got[1:], want[1:], f"{n} images")
            assert got[0].shape == want[0].shape
            np.testing.assert_allclose(got[0], want[0], rtol=0, atol=1e-5)
