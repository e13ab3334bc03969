"""The catalogue of bad inputs: each entry through the front door (RoiOpError naming the op, the
input or attribute, and the value) and through a plain onnxruntime session (the process
survives, the error is logged on the ``ort_roi`` logger, the session keeps working)."""

import gc
import logging
import multiprocessing
import threading
from dataclasses import dataclass, field

import numpy as np
import onnxruntime as ort
import pytest
from onnx import helper

import ort_roi
from ort_roi import builders
from ort_roi.kernels.checks import check_output_size
from ort_roi.kernels.cpu import parallel
from ort_roi.spec import OpSpec
from tests.work import python_lines

#: How long a wait on a child process or a thread may last before the test calls it a hang:
#: the waits end in seconds when all goes well (minutes on a loaded machine); what these
#: timeouts catch is a wait that never ends (a lock held at the fork), not a slow one
HANG_S = 300

ATTRS = {
    "ROIPooling": dict(pooled_h=2, pooled_w=2, spatial_scale=1.0),
    "RoIPool": dict(pooled_height=2, pooled_width=2),
    "PSROIPool": dict(output_channels=2, pooled_height=2, pooled_width=2),
    "RoIAlign": dict(pooled_height=2, pooled_width=2, sampling_ratio=2),
    # the nodes other exporters write (and ONNX RoiAlign as convert writes it)
    "MMCVRoIAlignRotated": dict(output_height=2, output_width=2, sampling_ratio=2),
    "Caffe2 RoIAlign": dict(pooled_h=2, pooled_w=2, sampling_ratio=2),
    "RoiAlign": dict(output_height=2, output_width=2, sampling_ratio=2),
    "TorchvisionPSRoIAlign": dict(pooled_height=2, pooled_width=2, sampling_ratio=2),
    "TorchvisionPSRoIPool": dict(pooled_height=2, pooled_width=2),
}
#: catalogue key -> (op, domain) of the node
NODE = {"MMCVRoIAlignRotated": ("MMCVRoIAlignRotated", "mmdeploy"),
        "Caffe2 RoIAlign": ("RoIAlign", "org.pytorch._caffe2")}
#: columns of each key's boxes input, and its name
COLS = {"ROIPooling": 5, "MMCVRoIAlignRotated": 6, "Caffe2 RoIAlign": 5,
        "TorchvisionPSRoIAlign": 5, "TorchvisionPSRoIPool": 5}
ROWS5 = ("ROIPooling", "Caffe2 RoIAlign", "TorchvisionPSRoIAlign", "TorchvisionPSRoIPool")
BOXES = {"RoIPool": "boxes", "RoIAlign": "boxes"}
#: the attribute that gives the output height
POOLED = {"ROIPooling": "pooled_h", "Caffe2 RoIAlign": "pooled_h",
          "MMCVRoIAlignRotated": "output_height", "RoiAlign": "output_height"}


def node_of(key):
    return NODE.get(key, (key, "ort_roi"))


def good_feed(op, dtype=np.float32):
    """A valid feed: 2 images, 2 boxes (one per image)."""
    X = np.arange(2 * 8 * 5 * 6, dtype=dtype).reshape(2, 8, 5, 6) / 10
    boxes = np.array([[0, 0, 3, 3], [1, 1, 4, 3]], dtype)
    batch = np.array([[0], [1]], dtype)
    if op in ROWS5:
        return [X, np.concatenate([batch, boxes], 1)]
    if op == "MMCVRoIAlignRotated":
        return [X, np.array([[0, 2, 2, 3, 3, 0.5], [1, 2, 3, 2, 1, -1]], dtype)]
    if op == "RoiAlign":
        return [X, boxes, np.array([0, 1], np.int64)]
    return [X, boxes, np.array([1, 1], np.int64)]


@dataclass
class Bad:
    id: str
    op: str
    change: object  # feed -> feed, or None for an attribute change
    expect: tuple  # fragments the message must contain
    attrs: dict = field(default_factory=dict)


def _set(i, fn):
    def change(feed):
        feed = list(feed)
        feed[i] = fn(feed[i])
        return feed
    return change


def _rois_cell(r, c, v):
    def fn(a):
        a = a.copy()
        a[r, c] = v
        return a
    return fn


CATALOGUE = []
for op in ATTRS:
    box = BOXES.get(op, "rois")
    X = "input" if op == "MMCVRoIAlignRotated" else "X"
    cols = COLS.get(op, 4)
    first = 1 if cols > 4 else 0  # the first coordinate column
    trailing = ((f"'{box}'", "4 columns", "N = 2") if op == "Caffe2 RoIAlign"  # [K, 4]: N = 1
                else (f"'{box}'", f"[R, {cols}]", f"[2, {cols - 1}]"))
    CATALOGUE += [
        Bad("X rank 3", op, _set(0, lambda a: a[0]), (f"'{X}'", "rank 4", "[8, 5, 6]")),
        Bad("boxes trailing dim", op, _set(1, lambda a: a[:, :-1]), trailing),
        Bad("boxes rank 1", op, _set(1, lambda a: a.ravel()), (f"'{box}'", f"[R, {cols}]")),
        Bad("dtype mismatch", op, _set(1, lambda a: a.astype(np.float64)),
            (f"'{box}'", "float32", "float64")),
        Bad("NaN coordinate", op, _set(1, _rois_cell(1, first + 2, np.nan)),
            (f"'{box}'", "row 1", "nan")),
        Bad("Inf coordinate", op, _set(1, _rois_cell(0, first, -np.inf)),
            (f"'{box}'", "row 0", "-inf")),
        Bad("empty X (H = 0)", op, _set(0, lambda a: a[:, :, :0]), (f"'{X}'", "H >= 1", "0")),
        Bad("empty X (W = 0)", op, _set(0, lambda a: a[:, :, :, :0]),
            (f"'{X}'", "W >= 1", "0")),
    ]
    pooled = POOLED.get(op, "pooled_height")
    CATALOGUE += [
        Bad("pooled size 0", op, None, (pooled, ">= 1", "0"), {pooled: 0}),
        Bad("pooled size negative", op, None, (pooled, ">= 1", "-3"), {pooled: -3}),
        Bad("spatial_scale 0", op, None, ("spatial_scale", "> 0", "0"), {"spatial_scale": 0.0}),
        Bad("spatial_scale negative", op, None, ("spatial_scale", "> 0", "-0.5"),
            {"spatial_scale": -0.5}),
    ]
    if op == "MMCVRoIAlignRotated":
        CATALOGUE += [
            Bad("negative size, aligned", op, _set(1, _rois_cell(1, 3, -2)),
                ("'rois'", "row 1", "-2.0", "negative")),
            Bad("clockwise not 0/1", op, None, ("clockwise", "[0, 1]", "2"), {"clockwise": 2}),
        ]
    if op == "Caffe2 RoIAlign":
        CATALOGUE += [Bad("order NHWC", op, None, ("order", "NCHW", "NHWC"), {"order": "NHWC"})]
    if op == "RoiAlign":
        CATALOGUE += [
            Bad("batch index out of range", op, _set(2, lambda a: np.array([0, 2], a.dtype)),
                ("'batch_indices'", "box 1", "2", "[0, 2)")),
            Bad("batch indices wrong length", op, _set(2, lambda a: a[:1]),
                ("'batch_indices'", "[R] = [2]", "[1]")),
            Bad("unknown mode", op, None, ("mode", "avg", "sum"), {"mode": "sum"}),
            Bad("unknown coordinate mode", op, None,
                ("coordinate_transformation_mode", "output_half_pixel", "asymmetric"),
                {"coordinate_transformation_mode": "asymmetric"}),
        ]
    if op in ("TorchvisionPSRoIAlign", "TorchvisionPSRoIPool"):
        CATALOGUE += [
            Bad("channels not a multiple of PH*PW", op, None,
                ("'X'", "multiple of pooled_height*pooled_width", "3*2 = 6", "got 8"),
                {"pooled_height": 3}),
        ]
    if op in ("MMCVRoIAlignRotated", "Caffe2 RoIAlign", "TorchvisionPSRoIAlign",
              "TorchvisionPSRoIPool"):
        CATALOGUE += [
            Bad("batch index out of range", op, _set(1, _rois_cell(1, 0, 2)),
                ("'rois'", "row 1", "2.0", "[0, 2)")),
            Bad("batch index negative", op, _set(1, _rois_cell(0, 0, -1)),
                ("'rois'", "row 0", "-1.0")),
        ]
    if op == "ROIPooling":
        CATALOGUE += [
            Bad("batch index out of range", op, _set(1, _rois_cell(1, 0, 2)),
                ("'rois'", "row 1", "2.0", "[0, 2)")),
            Bad("batch index negative", op, _set(1, _rois_cell(0, 0, -1)),
                ("'rois'", "row 0", "-1.0")),
            Bad("batch index not an integer", op, _set(1, _rois_cell(0, 0, 0.5)),
                ("'rois'", "row 0", "0.5", "not an integer")),
            Bad("unknown method", op, None, ("method", "avg"), {"method": "avg"}),
        ]
    elif op in ("RoIPool", "PSROIPool", "RoIAlign"):
        counts = "rois_num" if op == "PSROIPool" else "boxes_num"
        CATALOGUE += [
            Bad("counts wrong length", op, _set(2, lambda a: np.array([1, 1, 0], a.dtype)),
                (f"'{counts}'", "[N] = [2]", "[3]")),
            Bad("counts negative", op, _set(2, lambda a: np.array([-1, 3], a.dtype)),
                (f"'{counts}'", "negative", "-1")),
            Bad("counts not summing to R", op, _set(2, lambda a: np.array([2, 1], a.dtype)),
                (f"'{counts}'", "R = 2", "[2, 1]")),
            Bad("counts huge, cancelling", op,
                _set(2, lambda a: np.array([2**63 - 1, 2**63 - 1], np.int64)),
                (f"'{counts}'", "R = 2", str(2**63 - 1))),
            Bad("counts int32 overflow", op,
                _set(2, lambda a: np.array([2**31 - 1, 2**31 - 1], np.int32)),
                (f"'{counts}'", "R = 2", str(2**31 - 1))),
        ]
    if op == "PSROIPool":
        CATALOGUE += [
            Bad("channels != output_channels*PH*PW", op, None,
                ("'X'", "output_channels*pooled_height*pooled_width", "3*2*2 = 12", "got 8"),
                {"output_channels": 3}),
        ]


# the multi-level ops that convert writes (two levels here): their own entries
ATTRS["MultiLevelRoiAlign_L2"] = dict(output_height=2, output_width=2, stride_0=4.0,
                                      stride_1=8.0)
ATTRS["ROIFeatureExtractor_L2"] = dict(output_size=2, scale_0=4, scale_1=8)
ATTRS["PyramidRoIAlign_L2"] = dict(output_height=2, output_width=2, spatial_scale_0=0.25,
                                   spatial_scale_1=0.125)
ATTRS["CollectFpnProposals_L2"] = dict(post_nms_topN=3)
ATTRS["MultiLevelRotatedRoiAlign_L2"] = dict(output_height=2, output_width=2, stride_0=4.0,
                                             stride_1=8.0)


def _two_levels(op, dtype=np.float32):
    if op == "CollectFpnProposals_L2":  # rois_0, rois_1, scores_0, scores_1, the counts
        return [np.array([[0, 0, 12, 12], [4, 4, 40, 30], [1, 2, 3, 4]], dtype),
                np.array([[0, 0, 50, 60], [8, 8, 9, 9]], dtype),
                np.array([[0.5], [0.25], [0.75]], dtype), np.array([[0.5], [1.0]], dtype),
                np.array([2, 1], np.int64), np.array([1, 1], np.int64)]
    X = np.arange(2 * 8 * 8 * 10, dtype=dtype).reshape(2, 8, 8, 10) / 10
    boxes = np.array([[0, 0, 12, 12], [4, 4, 40, 30]], dtype)
    if op == "MultiLevelRoiAlign_L2":
        return [np.concatenate([np.array([[0], [1]], dtype), boxes], 1), X, X[:, :, :4, :5]]
    if op == "PyramidRoIAlign_L2":
        return [np.concatenate([np.array([[0], [1]], dtype), boxes], 1),
                np.array([0, 1], np.int64), X, X[:, :, :4, :5]]
    if op == "MultiLevelRotatedRoiAlign_L2":  # rows [batch, cx, cy, w, h, theta]
        return [np.array([[0, 6, 6, 12, 12, 0.3], [1, 22, 17, 36, 26, -1.0]], dtype), X,
                X[:, :, :4, :5]]
    return [boxes, X[:1], X[:1, :, :4, :5]]


_good_feed = good_feed


def good_feed(op, dtype=np.float32):  # noqa: F811 - the catalogue's feeds, multi-level too
    return _two_levels(op, dtype) if op.endswith("_L2") else _good_feed(op, dtype)


for op in ("MultiLevelRoiAlign_L2", "ROIFeatureExtractor_L2", "PyramidRoIAlign_L2",
           "MultiLevelRotatedRoiAlign_L2"):
    f0 = 2 if op.startswith("Pyramid") else 1  # the input of feat_0
    CATALOGUE += [
        Bad("levels with different C", op, _set(f0 + 1, lambda a: a[:, :5]),
            ("'feat_1'", "N and C", "[1, 5, 4, 5]" if op.startswith("ROI") else "[2, 5, 4, 5]")),
        Bad("feature map rank 3", op, _set(f0, lambda a: a[0]), ("'feat_0'", "rank 4")),
        Bad("NaN coordinate", op, _set(0, _rois_cell(1, 2, np.nan)), ("'rois'", "row 1", "nan")),
    ]
CATALOGUE += [
    Bad("batch index out of range", "MultiLevelRoiAlign_L2", _set(0, _rois_cell(1, 0, 2)),
        ("'rois'", "row 1", "2.0", "[0, 2)")),
    Bad("stride 0", "MultiLevelRoiAlign_L2", None, ("stride_1", "> 0", "0"), {"stride_1": 0.0}),
    Bad("stride negative", "MultiLevelRoiAlign_L2", None, ("stride_0", "> 0", "-4"),
        {"stride_0": -4.0}),
    Bad("scale 0", "ROIFeatureExtractor_L2", None, ("scale_0", ">= 1", "0"), {"scale_0": 0}),
    Bad("two images", "ROIFeatureExtractor_L2",
        _set(1, lambda a: np.concatenate([a, a])), ("'feat_0'", "one image")),
    Bad("batch index out of range", "PyramidRoIAlign_L2", _set(0, _rois_cell(1, 0, 2)),
        ("'rois'", "row 1", "2.0", "[0, 2)")),
    Bad("batch index out of range", "MultiLevelRotatedRoiAlign_L2",
        _set(0, _rois_cell(1, 0, 2)), ("'rois'", "row 1", "2.0", "[0, 2)")),
    Bad("rows of 5 columns", "MultiLevelRotatedRoiAlign_L2", _set(0, lambda a: a[:, :5]),
        ("'rois'", "[R, 6]", "[2, 5]")),
    Bad("stride 0", "MultiLevelRotatedRoiAlign_L2", None, ("stride_1", "> 0", "0"),
        {"stride_1": 0.0}),
    Bad("clockwise 2", "MultiLevelRotatedRoiAlign_L2", None, ("clockwise", "2"),
        {"clockwise": 2}),
    Bad("levels of the wrong length", "PyramidRoIAlign_L2",
        _set(1, lambda a: np.array([0, 1, 1], a.dtype)), ("'levels'", "[R] = [2]", "[3]")),
    Bad("spatial_scale 0", "PyramidRoIAlign_L2", None, ("spatial_scale_1", "> 0", "0"),
        {"spatial_scale_1": 0.0}),
]
# Paddle's collect_fpn_proposals (what export-paddle writes), two levels
CATALOGUE += [
    Bad("rois trailing dim", "CollectFpnProposals_L2", _set(1, lambda a: a[:, :3]),
        ("'rois_1'", "[R_1, 4]", "[2, 3]")),
    Bad("rois rank 1", "CollectFpnProposals_L2", _set(0, lambda a: a.ravel()),
        ("'rois_0'", "[R_0, 4]", "[12]")),
    Bad("scores of the wrong length", "CollectFpnProposals_L2", _set(3, lambda a: a[:1]),
        ("'scores_1'", "[R_1, 1] = [2, 1]", "[1, 1]")),
    Bad("scores [R]", "CollectFpnProposals_L2", _set(2, lambda a: a.ravel()),
        ("'scores_0'", "[R_0, 1] = [3, 1]", "[3]")),
    Bad("NaN score", "CollectFpnProposals_L2", _set(3, _rois_cell(1, 0, np.nan)),
        ("'scores_1'", "score 1 is NaN")),
    Bad("counts wrong length", "CollectFpnProposals_L2",
        _set(5, lambda a: np.array([1, 1, 0], a.dtype)), ("'rois_num_1'", "[N] = [2]", "[3]")),
    Bad("counts negative", "CollectFpnProposals_L2",
        _set(4, lambda a: np.array([-1, 4], a.dtype)), ("'rois_num_0'", "negative", "-1")),
    Bad("counts not summing to R", "CollectFpnProposals_L2",
        _set(4, lambda a: np.array([2, 2], a.dtype)), ("'rois_num_0'", "R_0 = 3", "[2, 2]")),
    Bad("counts huge, cancelling", "CollectFpnProposals_L2",
        _set(5, lambda a: np.array([2**63 - 1, 2**63 - 1], np.int64)),
        ("'rois_num_1'", "R_1 = 2", str(2**63 - 1))),
    Bad("post_nms_topN negative", "CollectFpnProposals_L2", None,
        ("post_nms_topN", ">= 0", "-1"), {"post_nms_topN": -1}),
]


def _model(case):
    feed = good_feed(case.op)
    count_dtype = np.int32 if case.id == "counts int32 overflow" else np.int64
    op, domain = node_of(case.op)
    m = builders.single_op_model(op, dtype=np.float32, count_dtype=count_dtype, domain=domain,
                                 **ATTRS[case.op])
    node = m.graph.node[0]  # bad attribute values, written past the builder's checks
    for name, value in case.attrs.items():
        kept = [a for a in node.attribute if a.name != name]
        del node.attribute[:]
        node.attribute.extend(kept + [helper.make_attribute(name, value)])
    if case.change is not None:
        feed = case.change(feed)
    for value, inp in zip(feed, m.graph.input):  # declare what is fed (dtype cases)
        inp.type.tensor_type.elem_type = helper.np_dtype_to_tensor_dtype(value.dtype)
    return m, feed


def _names(sess):
    return [i.name for i in sess.get_inputs()]


#: The ops whose catalogue entries their family's test template runs (tests/roi_op_tester.py,
#: its subclasses in tests/test_roi_align_family.py), not this module.
BY_TEMPLATE = {"RoIAlign", "RoiAlign", "Caffe2 RoIAlign", "MMCVRoIAlignRotated",
               "TorchvisionPSRoIAlign"}
HERE = [c for c in CATALOGUE if c.op not in BY_TEMPLATE]


@pytest.mark.parametrize("case", HERE, ids=lambda c: f"{c.op}: {c.id}")
def test_front_door_raises_roi_op_error(case):
    front_door_raises(case)


@pytest.mark.parametrize("case", HERE, ids=lambda c: f"{c.op}: {c.id}")
def test_plain_session_survives_and_logs(case, caplog):
    plain_session_survives(case, caplog)


def front_door_raises(case):
    """A catalogue entry through the front door: RoiOpError naming the op and the entry's
    fragments (the input or attribute, the value)."""
    m, feed = _model(case)
    with pytest.raises(ort_roi.RoiOpError) as e:
        sess = ort_roi.InferenceSession(m)
        sess.run(None, dict(zip(_names(sess), feed)))
    msg = str(e.value)
    op = node_of(case.op)[0]
    assert e.value.op == op and op in msg
    for fragment in case.expect:
        assert fragment in msg, (fragment, msg)


def plain_session_survives(case, caplog):
    """A catalogue entry through a plain session: the process survives, the error is logged
    on the ``ort_roi`` logger, and the session still computes a good feed."""
    m, feed = _model(case)
    sess = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])
    with caplog.at_level(logging.ERROR, logger="ort_roi"):
        y = sess.run(None, dict(zip(_names(sess), feed)))[0]
    assert y.size == 0 or np.isnan(y).all()
    assert node_of(case.op)[0] in caplog.text
    for fragment in case.expect:
        assert fragment in caplog.text, (fragment, caplog.text)
    # the same session still computes a good feed (not for attribute errors, which are the
    # model's, nor for the dtype case, whose graph declares the mismatched types)
    if case.change is not None and case.id != "dtype mismatch":
        good = good_feed(case.op)
        if case.id == "counts int32 overflow":
            good[2] = good[2].astype(np.int32)
        assert np.isfinite(sess.run(None, dict(zip(_names(sess), good)))[0]).all()


def test_front_door_explains_a_graph_onnxruntime_rejects():
    """float16 X: onnxruntime finds no kernel at session creation; the front door says why."""
    m = builders.single_op_model("RoIAlign", dtype=np.float16)
    with pytest.raises(Exception):
        ort.InferenceSession(m.SerializeToString(), ort_roi.session_options())
    with pytest.raises(ort_roi.RoiOpError) as e:
        ort_roi.InferenceSession(m)
    msg = str(e.value)
    assert "RoIAlign" in msg and "'X'" in msg and "float16" in msg


def test_front_door_names_the_input_of_a_wrongly_typed_feed():
    sess = ort_roi.InferenceSession(builders.single_op_model("RoIAlign", **ATTRS["RoIAlign"]))
    X, boxes, counts = good_feed("RoIAlign")
    with pytest.raises(ort_roi.RoiOpError) as e:
        sess.run(None, {"X": X, "boxes": boxes.astype(np.float64), "boxes_num": counts})
    assert "RoIAlign" in str(e.value) and "'boxes'" in str(e.value) and "double" in str(e.value)


def test_integer_batch_values_far_beyond_int_range():
    """A batch index like 1e30 is rejected, not cast to a wrapped integer."""
    X, rois = good_feed("ROIPooling")
    rois[0, 0] = 1e30
    with pytest.raises(ort_roi.RoiOpError, match="e\\+30"):
        ort_roi.ops.roi_pooling(X, rois, **ATTRS["ROIPooling"])


# -- processes -------------------------------------------------------------------------------

def _run_in_child(queue):
    try:
        sess = ort_roi.InferenceSession(builders.single_op_model(
            "RoIAlign", count_dtype=np.int64, **ATTRS["RoIAlign"]))
        feed = good_feed("RoIAlign")
        queue.put(sess.run(None, dict(zip(_names(sess), feed)))[0])
    except BaseException as e:  # noqa: BLE001 - report anything to the parent
        queue.put(repr(e))


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_sessions_work_in_child_processes(method):
    if method not in multiprocessing.get_all_start_methods():
        pytest.skip(f"{method} not available")
    feed = good_feed("RoIAlign")
    # warm this process's worker threads first: a forked child must not inherit them broken
    ort_roi.ops.roi_align(*feed, **ATTRS["RoIAlign"])
    want = ort_roi.ops.roi_align(*feed, **ATTRS["RoIAlign"])
    # onnxruntime cannot free in a forked child a session made before the fork (a plain
    # Relu session: SIGSEGV; ours: a hang), and pytest's tracebacks keep earlier tests'
    # sessions in reference cycles that the child's garbage collector would free.
    gc.collect()
    np.testing.assert_array_equal(_child_result(method), want)


def _child_result(method):
    ctx = multiprocessing.get_context(method)
    q = ctx.Queue()
    p = ctx.Process(target=_run_in_child, args=(q,))
    p.start()
    try:
        got = q.get(timeout=HANG_S)
    finally:
        p.join(HANG_S)
        if p.exitcode is None:
            p.kill()
    assert p.exitcode == 0
    assert isinstance(got, np.ndarray), got
    return got


def _blas_threads_in_child(queue):
    try:
        ort_roi.ops.roi_align(*good_feed("RoIAlign"), **ATTRS["RoIAlign"])
        queue.put(parallel.blas_threads())
    except BaseException as e:  # noqa: BLE001 - report anything to the parent
        queue.put(repr(e))


def test_fork_while_another_thread_runs_a_kernel():
    """A thread inside a kernel at the fork does not exist in the child: the child gets
    OpenBLAS's threads back and its locks free (every fork here lands while another thread
    is inside a kernel, and while a third one runs kernels over and over)."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available")
    before = parallel.blas_threads()
    feed = good_feed("RoIAlign")
    want = ort_roi.ops.roi_align(*feed, **ATTRS["RoIAlign"])
    inside, stop = threading.Event(), threading.Event()

    def held(a, b):
        inside.set()
        stop.wait(HANG_S)

    def busy():
        while not stop.is_set():
            ort_roi.ops.roi_align(*feed, **ATTRS["RoIAlign"])

    threads = [threading.Thread(target=parallel.for_ranges, args=(64, held)),
               threading.Thread(target=busy)]
    gc.collect()
    for t in threads:
        t.start()
    try:
        assert inside.wait(HANG_S)
        if before is not None:
            assert parallel.blas_threads() == 1  # held at one while a kernel runs
        for _ in range(4):
            np.testing.assert_array_equal(_child_result("fork"), want)
        ctx = multiprocessing.get_context("fork")
        q = ctx.Queue()
        p = ctx.Process(target=_blas_threads_in_child, args=(q,))
        p.start()
        got = q.get(timeout=HANG_S)
        p.join(HANG_S)
        assert got == before
    finally:
        stop.set()
        for t in threads:
            t.join()
    assert parallel.blas_threads() == before


@pytest.mark.parametrize("R", [0, 2])
def test_paste_masks_without_channels_is_refused_naming_op_input_and_shape(R, caplog):
    """Issue 32 (5): masks [R, 0, M, M] (no channel 0 to paste; torchvision's
    paste_masks_in_image raises IndexError too) gave an IndexError from the kernel."""
    from ort_roi.graph.builders import single_op_model

    feed = {"masks": np.zeros((R, 0, 4, 4), np.float32), "boxes": np.zeros((R, 4), np.int64),
            "image_size": np.array([5, 6], np.int64)}
    message = (f"PasteMasks.*input 'masks'.*at least one channel.*got shape \\[{R}, 0, 4, 4\\]")
    model = single_op_model("PasteMasks", count_dtype=np.int64)
    with pytest.raises(ort_roi.RoiOpError, match=message):
        ort_roi.InferenceSession(model).run(None, feed)
    with pytest.raises(ort_roi.RoiOpError, match=message):
        ort_roi.ops.paste_masks(*feed.values())
    plain = ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                 providers=["CPUExecutionProvider"])
    with caplog.at_level(logging.ERROR, logger="ort_roi"):
        y = plain.run(None, feed)[0]  # logged, the output NaN (as every bad input)
    assert y.shape[0] == R and (y.size == 0 or np.isnan(y).all())
    assert "input 'masks'" in caplog.text and "at least one channel" in caplog.text
    ok = dict(feed, masks=np.ones((R, 1, 4, 4), np.float32))
    assert plain.run(None, ok)[0].shape == (R, 5, 6)  # and the session keeps working


# -- attributes that size the output or its work: refused before anything is allocated -------

def _forms():
    from ort_roi.ops import FORMS

    return [f for f in FORMS if f.registered]


def _made_with(spec):
    """Attributes a node of ``spec`` is valid with: its required ones filled, its levels
    (min_level .. max_level) as many as the op has."""
    from ort_roi.spec import MAX_LEVELS

    values = {a.name: a.choices[0] if a.choices else {int: 2, float: 0.25, str: "x"}[a.type]
              for a in spec.attrs if a.required}
    for k in range(MAX_LEVELS):
        if "max_level" in values:
            values["max_level"] = values["min_level"] + k
        try:
            spec.output_shapes([None] * len(spec.inputs), spec.resolve(values))
            return values
        except ort_roi.RoiOpError:
            continue
    raise AssertionError(f"no valid attributes for {spec.name}")


def _bounded(spec):
    """(attribute, its limit) for every attribute of ``spec`` that sizes its output or work."""
    from ort_roi.spec import MAX_OUTPUT_SIDE

    out = {name: MAX_OUTPUT_SIDE for name in spec.output_size_attrs()}
    out.update({a.name: a.max for a in spec.attrs if a.max is not None})
    return sorted(out.items())


HUGE = [(f, name, limit) for f in _forms() for name, limit in _bounded(f.spec)]


def test_every_op_that_pools_has_bounded_attributes():
    """The audit's reach: every registered op with an output grid (or channels, or a fixed
    sampling grid) has its bounded attributes; the ops without any size their outputs from
    their inputs alone."""
    bounded = {f.spec.name for f, _, _ in HUGE}
    for f in _forms():
        if f.spec.pooled:
            assert f.spec.name in bounded, f.spec.name
    assert {"CropAndResize", "PSROIPool", "DistributeRoIAlign_L2", "RoIAlign",
            "MMCVRoIAlignRotated", "ROIFeatureExtractor_L6"} <= bounded


@pytest.mark.parametrize("form, name, limit", HUGE,
                         ids=[f"{f.domain}::{f.op_type}.{n}" for f, n, _ in HUGE])
def test_huge_attributes_are_refused_at_creation_naming_them(form, name, limit):
    """Trust, round 3 (3): DistributeRoIAlign with pooled 100000 x 100000 failed at run with
    "kernel: internal error MemoryError: Unable to allocate 745. GiB". Every op's attribute
    that sizes the output or multiplies the work is bounded: the front door refuses the node
    at creation, naming the attribute and its value, before anything large is allocated
    or computed (at most 524 lines of ort_roi's Python here)."""
    import tracemalloc

    m = builders.single_op_model(form.op_type, domain=form.domain, **_made_with(form.spec))
    m.graph.node[0].name = "huge"
    for value in (limit + 1, 2**31 - 1):
        for a in m.graph.node[0].attribute:
            if a.name == name:
                a.i = value
        tracemalloc.start()
        try:
            with python_lines(5000, entered=OpSpec.resolve), \
                    pytest.raises(ort_roi.RoiOpError) as e:
                ort_roi.InferenceSession(m)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        msg = str(e.value)
        assert f"{form.spec.name} (node 'huge'): attribute '{name}'" in msg, msg
        assert f"must be <= {limit}, got {value}" in msg, msg
        assert peak < 64 << 20, peak


PAIRS = [f for f in _forms() if f.spec.pooled and f.spec.pooled[0] != f.spec.pooled[1]]


@pytest.mark.parametrize("form", PAIRS, ids=[f"{f.domain}::{f.op_type}" for f in PAIRS])
def test_pooled_sizes_whose_product_is_huge_are_refused_naming_both(form):
    """Each side within its limit, one box's output [PH, PW] (times output_channels) past
    MAX_OUTPUT_ELEMENTS: refused at creation naming both attributes and their values."""
    h, w = form.spec.pooled
    m = builders.single_op_model(form.op_type, domain=form.domain, **_made_with(form.spec))
    for a in m.graph.node[0].attribute:
        if a.name in (h, w):
            a.i = 50000
    with pytest.raises(ort_roi.RoiOpError) as e:
        ort_roi.InferenceSession(m)
    msg = str(e.value)
    for fragment in (f"attribute '{h}'", f"{h} * {w}", "50000 * 50000", "output elements a box",
                     "more than 2147483647"):
        assert fragment in msg, (fragment, msg)


TOTAL = [k for k in ATTRS if k in POOLED or k.startswith(("RoI", "ROIPooling"))
         or k.endswith("RoiAlign_L2") or k.startswith(("ROIFeatureExtractor", "Pyramid"))]
TOTAL += ["MMCVRoiAlign", "DistributeRoIAlign_L2"]  # (not in the catalogue)


def _total_case(key):
    """(op, domain, attributes, a valid feed: 2 boxes, 8 channels) of a TOTAL entry."""
    if key == "MMCVRoiAlign":
        return key, "mmdeploy", dict(output_height=2, output_width=2), good_feed("ROIPooling")
    if key == "DistributeRoIAlign_L2":
        X = np.arange(2 * 8 * 8 * 10, dtype=np.float32).reshape(2, 8, 8, 10) / 10
        feed = [np.array([[0, 0, 12, 12], [4, 4, 40, 30]], np.float32),
                np.array([1, 1], np.int64), X, X[:, :, :4, :5]]
        return key, "ort_roi", dict(min_level=2, max_level=3, spatial_scale_0=0.25,
                                    spatial_scale_1=0.125), feed
    return (*node_of(key), ATTRS[key], good_feed(key))


@pytest.mark.parametrize("side", [16000, 40000])
@pytest.mark.parametrize("key", TOTAL)
def test_an_output_too_large_for_its_boxes_and_channels_is_refused_before_allocating(
        key, side, caplog):
    """Each box and channel's [PH, PW] within the limit, the output [R, C, PH, PW] past it:
    the kernel refuses it before allocating, naming the boxes (side 16000: one box's C
    channels fit) or the attribute (40000: one box is already too large) and the shape; a
    plain session logs it and returns an empty output at once; the front door raises it, and
    both sessions keep working (at most 3,546 lines of ort_roi's Python here)."""
    import tracemalloc

    op, domain, attrs, feed = _total_case(key)
    spec = ort_roi.ops.form(domain, op).spec
    sides = dict.fromkeys(spec.pooled, side)  # 2 boxes, 8 channels
    m = builders.single_op_model(op, dtype=np.float32, count_dtype=np.int64, domain=domain,
                                 **attrs)
    for a in m.graph.node[0].attribute:
        if a.name in sides:
            a.i = sides[a.name]
    where = f"input '{spec.boxes.name}'" if side == 16000 else f"attribute '{spec.pooled[0]}'"
    n = 2 * 8 * side * side
    good = builders.single_op_model(op, dtype=np.float32, count_dtype=np.int64, domain=domain,
                                    **attrs)
    ort_roi.InferenceSession(good)  # the ops registered, outside the measurement
    tracemalloc.start()
    try:
        with python_lines(30000, entered=check_output_size):
            with pytest.raises(ort_roi.RoiOpError) as e:
                sess = ort_roi.InferenceSession(m)
                sess.run(None, dict(zip(_names(sess), feed)))
            plain = ort.InferenceSession(m.SerializeToString(), ort_roi.session_options(),
                                         providers=["CPUExecutionProvider"])
            with caplog.at_level(logging.ERROR, logger="ort_roi"):
                y = plain.run(None, dict(zip(_names(plain), feed)))[0]
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak
    assert y.size == 0 and f"{op} (node" in str(e.value)
    with pytest.raises(ort_roi.RoiOpError) as direct:  # the kernel called without ONNX
        ort_roi.ops.kernel(spec)(*feed, **{**attrs, **sides})
    for text in (str(e.value), caplog.text, str(direct.value)):
        for fragment in (f"{op}", where, f"[2, 8, {side}, {side}]", f"{n} elements",
                         "more than 2147483647"):
            assert fragment in text, (fragment, text)
    sess = ort_roi.InferenceSession(good)  # a new session of good attributes answers
    assert np.isfinite(sess.run(None, dict(zip(_names(sess), feed)))[0]).all()


# -- a fork while another thread creates a front-door session ----------------------------------

def _parallel_options():
    so = ort.SessionOptions()
    so.execution_mode = ort.ExecutionMode.ORT_PARALLEL
    return so


def _create_and_run_in_child(queue):
    try:
        sess = ort_roi.InferenceSession(builders.single_op_model(
            "RoIAlign", count_dtype=np.int64, **ATTRS["RoIAlign"]), _parallel_options())
        queue.put(sess.run(None, dict(zip(_names(sess), good_feed("RoIAlign"))))[0])
    except BaseException as e:  # noqa: BLE001 - report anything to the parent
        queue.put(repr(e))


def _forked_creation():
    """A forked child's front-door session made and run: its output. (The timeout only
    stops a child blocked for good on a lock held at the fork: it waits forever.)"""
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_create_and_run_in_child, args=(q,))
    p.start()
    try:
        got = q.get(timeout=HANG_S)
    finally:
        p.join(HANG_S)
        if p.exitcode is None:
            p.kill()
    assert p.exitcode == 0 and isinstance(got, np.ndarray), got
    return got


@pytest.mark.parametrize("how", ["inside onnxruntime's creation", "creating in a loop"])
def test_fork_while_another_thread_creates_a_front_door_session(how, monkeypatch):
    """Trust, round 3 (5): the front door held a plain threading.Lock for the whole creation
    of a session (its SessionOptions switched to the sequential executor): a child forked
    meanwhile never made a front-door session (blocked for good). The lock is fork safe and
    held only while the mode is switched: the child makes one and runs it."""
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("fork not available")
    want = ort_roi.ops.roi_align(*good_feed("RoIAlign"), **ATTRS["RoIAlign"])
    model = builders.single_op_model("RoIAlign", count_dtype=np.int64, **ATTRS["RoIAlign"])
    so = _parallel_options()
    inside, stop, creator = threading.Event(), threading.Event(), []
    if how == "inside onnxruntime's creation":  # the creating thread waits in there
        real = ort.InferenceSession

        def held(*args, **kwargs):
            if threading.get_ident() in creator:
                inside.set()
                stop.wait(HANG_S)
            return real(*args, **kwargs)

        monkeypatch.setattr(ort, "InferenceSession", held)

    def create():
        creator.append(threading.get_ident())
        while not stop.is_set():
            ort_roi.InferenceSession(model, so)
            inside.set()

    thread = threading.Thread(target=create)
    gc.collect()  # (see test_sessions_work_in_child_processes)
    thread.start()
    try:
        assert inside.wait(HANG_S)
        for _ in range(1 if how == "inside onnxruntime's creation" else 4):
            np.testing.assert_array_equal(_forked_creation(), want)
    finally:
        stop.set()
        thread.join(HANG_S)
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL  # given back
