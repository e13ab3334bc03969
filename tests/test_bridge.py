"""The onnxruntime bridge: registration, the invocation hook, errors, float attributes and
the front door."""

import logging
import threading

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import helper, TensorProto

import ort_roi
from ort_roi import builders, ops
from ort_roi.runtime import attributes
from ort_roi.runtime import bridge as _bridge

X16 = np.arange(1, 17, dtype=np.float32).reshape(1, 1, 4, 4)
SEED_BOXES = np.array([[1, 1, 2, 2], [1.5, 1.5, 3, 3]], np.float32)


def plain(model):
    return ort.InferenceSession(model.SerializeToString(), ort_roi.session_options(),
                                providers=["CPUExecutionProvider"])


def test_public_names():
    assert ort_roi.DOMAIN == "ort_roi"
    assert issubclass(ort_roi.RoiOpError, ValueError)
    so = ort.SessionOptions()
    assert ort_roi.session_options(so) is so
    assert isinstance(ort_roi.session_options(), ort.SessionOptions)


def test_session_options_turn_spinning_off_unless_the_caller_chose():
    """onnxruntime's intra-op threads busy-wait on the cores our kernels run on: off by
    default on our options, the caller's choice kept."""
    key = "session.intra_op.allow_spinning"
    assert ort_roi.session_options().get_session_config_entry(key) == "0"
    so = ort.SessionOptions()
    so.add_session_config_entry(key, "1")
    assert ort_roi.session_options(so).get_session_config_entry(key) == "1"


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("count_dtype", [np.int32, np.int64])
def test_seed_example_plain_session(dtype, count_dtype):
    sess = plain(builders.single_op_model("RoIPool", dtype, count_dtype))
    y = sess.run(None, {"X": X16.astype(dtype), "boxes": SEED_BOXES.astype(dtype),
                        "boxes_num": np.array([2], count_dtype)})[0]
    assert y.dtype == dtype and y.shape == (2, 1, 1, 1)
    np.testing.assert_array_equal(y.ravel(), [11, 16])


def test_outputs_come_back_as_arrays_not_lists(monkeypatch):
    """Our hook hands arrays over: the stock handler's .tolist() is never called for us."""
    from onnxruntime_extensions import _ocos
    called = []
    monkeypatch.setattr(_bridge, "_next", lambda *a: called.append(a) or _ocos._on_pyop_invocation(*a))
    sess = plain(builders.single_op_model("RoIAlign", pooled_height=7, pooled_width=7))
    X = np.random.default_rng(0).standard_normal((1, 8, 20, 20)).astype(np.float32)
    b = np.array([[1, 2, 15, 18], [0, 0, 19, 19]], np.float32)
    y = sess.run(None, {"X": X, "boxes": b, "boxes_num": np.array([2], np.int32)})[0]
    np.testing.assert_array_equal(y, ops.roi_align(X, b, np.array([2]), pooled_height=7,
                                                       pooled_width=7))
    assert called == []


def test_bridge_outputs_start_half_a_page_off_onnxruntimes_buffer(monkeypatch):
    """The bridge memcpys our output into onnxruntime's page-aligned buffer; glibc's large
    copy is slow when both start at the same page offset, so reused outputs do not."""
    from ort_roi.kernels.cpu import workspace as _workspace
    seen = []
    run = _bridge._run

    def spy(*args):
        result = run(*args)
        seen.append(result[2])  # the array handed to the bridge
        return result

    monkeypatch.setattr(_bridge, "_run", spy)
    sess = plain(builders.single_op_model("RoIAlign", pooled_height=7, pooled_width=7))
    X = np.random.default_rng(0).standard_normal((1, 64, 20, 20)).astype(np.float32)
    b = np.array([[1, 2, 15, 18], [0, 0, 19, 19]], np.float32)
    for _ in range(2):  # the second call reuses the first call's buffer
        y = sess.run(None, {"X": X, "boxes": b, "boxes_num": np.array([2], np.int32)})[0]
    assert len(seen) == 2 and seen[0].ctypes.data == seen[1].ctypes.data
    assert seen[1].ctypes.data % 4096 == _workspace.OUTPUT_PAGE_OFFSET
    np.testing.assert_array_equal(y, ops.roi_align(X, b, np.array([2]), pooled_height=7,
                                                       pooled_width=7))


def test_ops_that_are_not_ours_reach_the_stock_handler():
    from onnxruntime_extensions import PyCustomOpDef, onnx_op

    @onnx_op(op_type="ort_roi_test::Twice", inputs=[PyCustomOpDef.dt_float],
             outputs=[PyCustomOpDef.dt_float])
    def twice(x):
        return x * 2

    node = helper.make_node("Twice", ["x"], ["y"], domain="ort_roi_test")
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("ort_roi_test", 1)], ir_version=9)
    ort_roi.session_options()  # installs our hook in front
    y = plain(m).run(None, {"x": np.array([1.5, 2], np.float32)})[0]
    np.testing.assert_array_equal(y, [3, 4])


def test_bad_input_plain_session_survives_with_nan_and_log(caplog):
    sess = plain(builders.single_op_model("ROIPooling", pooled_h=2, pooled_w=3, spatial_scale=1.0))
    rois = np.array([[0, 0, 0, 2, 2], [4, 0, 0, 2, 2]], np.float32)  # batch index 4 of 1
    with caplog.at_level(logging.ERROR, logger="ort_roi"):
        y = sess.run(None, {"X": X16, "rois": rois})[0]
    assert y.shape == (2, 1, 2, 3) and np.isnan(y).all()
    assert "ROIPooling" in caplog.text and "'rois'" in caplog.text and "4.0" in caplog.text
    # and the session keeps working
    good = sess.run(None, {"X": X16, "rois": rois[:1]})[0]
    assert np.isfinite(good).all()


def test_front_door_raises_naming_op_input_and_value():
    sess = ort_roi.InferenceSession(builders.single_op_model("RoIAlign"))
    with pytest.raises(ort_roi.RoiOpError) as e:
        sess.run(None, {"X": X16, "boxes": SEED_BOXES, "boxes_num": np.array([3], np.int32)})
    msg = str(e.value)
    assert "RoIAlign" in msg and "boxes_num" in msg and "[3]" in msg
    assert e.value.op == "RoIAlign"
    # the session stays usable
    y = sess.run(None, {"X": X16, "boxes": SEED_BOXES, "boxes_num": np.array([2], np.int32)})[0]
    assert y.shape == (2, 1, 1, 1)


def test_front_door_accepts_path_bytes_and_proto(tmp_path):
    m = builders.single_op_model("RoIPool", count_dtype=np.int64)
    p = tmp_path / "m.onnx"
    onnx.save(m, p)
    feed = {"X": X16, "boxes": SEED_BOXES, "boxes_num": np.array([2], np.int64)}
    for src in (m, m.SerializeToString(), str(p), p):
        sess = ort_roi.InferenceSession(src)
        np.testing.assert_array_equal(sess.run(None, feed)[0].ravel(), [11, 16])


def test_front_door_fills_defaults():
    """A node without its optional attributes: plain onnxruntime refuses it, the front door
    fills the contract defaults."""
    node = helper.make_node("RoIAlign", ["X", "boxes", "boxes_num"], ["Y"], domain="ort_roi")
    m = builders.make_model([node], [builders.tensor("X", "float32", None),
                                     builders.tensor("boxes", "float32", None),
                                     builders.tensor("boxes_num", "int32", None)],
                            [builders.tensor("Y", "float32", None)])
    with pytest.raises(Exception, match="attribute"):
        plain(m)
    y = ort_roi.InferenceSession(m).run(None, {"X": X16, "boxes": SEED_BOXES,
                                               "boxes_num": np.array([2], np.int32)})[0]
    np.testing.assert_array_equal(y, ops.roi_align(X16, SEED_BOXES, np.array([2])))


def test_front_door_rejects_bad_attributes_at_load():
    m = builders.single_op_model("ROIPooling", pooled_h=2, pooled_w=2, spatial_scale=1.0)
    next(a for a in m.graph.node[0].attribute if a.name == "pooled_h").i = 0
    with pytest.raises(ort_roi.RoiOpError, match="pooled_h.*>= 1.*0"):
        ort_roi.InferenceSession(m)


@pytest.mark.parametrize("value,text", [(1 / 7, "0.142857"), (0.7, "0.7"), (1 / 16, "0.0625"),
                                        (1 / 3, "0.333333"), (0.25, "0.25"), (1 / 1000, "0.001"),
                                        (2.5, "2.5"), (1e-7, "1e-07"), (1 / 12, "0.0833333")])
def test_float_attribute_recovery(value, text):
    assert "%g" % np.float32(value) == text
    assert attributes.parse_float(text) == np.float32(value)


def test_exact_scale_front_door_vs_plain():
    """A scale 6 digits cannot identify: the front door still uses the model's float32."""
    scale = float(np.float32(0.123456789))
    assert attributes.parse_float("%g" % scale) != np.float32(scale)
    X = np.random.default_rng(1).standard_normal((1, 2, 64, 64))
    b = np.array([[30, 40, 400, 380]], np.float64)
    feed = {"X": X, "boxes": b, "boxes_num": np.array([1], np.int32)}
    m64 = builders.single_op_model("RoIAlign", np.float64, pooled_height=3, pooled_width=3,
                                   spatial_scale=scale, sampling_ratio=2)
    exact = ops.roi_align(X, b, np.array([1]), pooled_height=3, pooled_width=3,
                              spatial_scale=scale, sampling_ratio=2)
    np.testing.assert_array_equal(ort_roi.InferenceSession(m64).run(None, feed)[0], exact)
    assert not np.array_equal(plain(m64).run(None, feed)[0], exact)
    # the caller's model is not modified by the front door
    attr = next(a for a in m64.graph.node[0].attribute if a.name == "spatial_scale")
    assert attr.f == np.float32(scale)


@pytest.mark.parametrize("op", ["ROIPooling", "RoIPool", "PSROIPool", "RoIAlign"])
def test_zero_boxes(op):
    attrs = {"ROIPooling": dict(pooled_h=2, pooled_w=3, spatial_scale=1.0),
             "PSROIPool": dict(output_channels=1, pooled_height=2, pooled_width=3)}.get(
        op, dict(pooled_height=2, pooled_width=3))
    sess = plain(builders.single_op_model(op, count_dtype=np.int64, **attrs))
    X = np.ones((2, 6, 5, 5), np.float32)
    feed = [X, np.zeros((0, 5 if op == "ROIPooling" else 4), np.float32)]
    if op != "ROIPooling":
        feed.append(np.zeros(2, np.int64))
    y = sess.run(None, dict(zip([i.name for i in sess.get_inputs()], feed)))[0]
    assert y.shape == (0, 1 if op == "PSROIPool" else 6, 2, 3)


def test_threads_share_one_session():
    sess = ort_roi.InferenceSession(builders.single_op_model(
        "RoIAlign", pooled_height=5, pooled_width=5, sampling_ratio=2))
    rng = np.random.default_rng(3)
    X = rng.standard_normal((2, 16, 30, 30)).astype(np.float32)
    feeds = []
    for i in range(8):
        b = rng.uniform(0, 25, (6, 4)).astype(np.float32)
        b[:, 2:] += b[:, :2]
        feeds.append({"X": X, "boxes": b, "boxes_num": np.array([3, 3], np.int32)})
    serial = [sess.run(None, f)[0] for f in feeds]
    results = {}

    def work(i):
        for _ in range(25):
            results.setdefault(i, []).append(sess.run(None, feeds[i])[0])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(8):
        for y in results[i]:
            np.testing.assert_array_equal(y, serial[i])


# --- the bridge stays safe to upgrade ------------------------------------------------------

_CHAINED = """
import numpy as np, onnxruntime as ort
from onnx import helper, TensorProto
import ort_roi
from ort_roi import builders, ops
from onnxruntime_extensions import PyCustomOpDef, onnx_op, _ocos

ort_roi.session_options()  # ort_roi registered first
seen = []

def mine(k_id, feed, attributes):  # another library's invocation hook
    seen.append(k_id)
    return _ocos._on_pyop_invocation(k_id, feed, attributes)

@onnx_op(op_type="chain_test::Twice", inputs=[PyCustomOpDef.dt_float],
         outputs=[PyCustomOpDef.dt_float])
def twice(x):
    return x * 2

PyCustomOpDef.install_hooker(mine)
so = ort_roi.session_options()  # registering again must not drop it
node = helper.make_node("Twice", ["x"], ["y"], domain="chain_test")
g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                      [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                        helper.make_opsetid("chain_test", 1)], ir_version=9)
theirs = ort.InferenceSession(m.SerializeToString(), so).run(None, {"x": np.array([1.5], np.float32)})[0]
ours_m = builders.single_op_model("RoIAlign", pooled_height=2, pooled_width=2)
X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
feed = {"X": X, "boxes": np.array([[0, 0, 3, 3]], np.float32), "boxes_num": np.array([1], np.int32)}
ours = ort.InferenceSession(ours_m.SerializeToString(), so).run(None, feed)[0]
want = ops.roi_align(X, feed["boxes"], feed["boxes_num"], pooled_height=2, pooled_width=2)
print(theirs.tolist(), len(seen), bool(np.array_equal(ours, want)))
"""


def test_another_invocation_hook_is_chained_not_overwritten():
    """install_hook replaced any other hook, and every session_options() installed it again:
    a hook installed after ort_roi's lost its ops. Now it stands behind ours."""
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-c", _CHAINED], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.split() == ["[3.0]", "1", "True"]


def test_the_private_bridge_api_is_checked_with_a_clear_message(monkeypatch):
    """If onnxruntime-extensions moves the private pieces ort_roi uses, the first use of the
    bridge says so and names the tested versions, instead of an AttributeError mid-run."""
    from onnxruntime_extensions import _ocos

    monkeypatch.delattr(_ocos, "_on_pyop_invocation")
    with pytest.raises(ImportError, match=r"private API.*_on_pyop_invocation.*onnxruntime-"
                                          r"extensions>=0\.12,<0\.16,!=0\.14\.0"):
        _bridge.extensions()


def test_the_tested_range_is_what_pyproject_pins():
    import pathlib
    import re

    pyproject = (pathlib.Path(__file__).parents[1] / "pyproject.toml").read_text()
    pin = re.search(r'"onnxruntime-extensions([^"]*)"', pyproject).group(1)
    assert pin == _bridge.TESTED.replace(" ", "")
