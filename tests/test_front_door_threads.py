"""The front door under concurrency: a bad input raises RoiOpError naming op, node and input
in the run that fed it, under both executors, while other threads run other sessions (and
the same one); and its float tokens are released with the session."""

import gc
import threading

import numpy as np
import onnxruntime as ort
import pytest

import ort_roi
from ort_roi import builders, ops
from ort_roi.runtime import attributes
from tests.test_errors import EXPECT, feed, two_level_graph

MODES = {"parallel": ort.ExecutionMode.ORT_PARALLEL,
         "sequential": ort.ExecutionMode.ORT_SEQUENTIAL}


def options(mode: str) -> ort.SessionOptions:
    so = ort.SessionOptions()
    so.execution_mode = MODES[mode]
    return so


def paste_masks_graph():
    """Two PasteMasks nodes (an op with no attribute at all), 'paste_a' and 'paste_b'."""
    nodes = [builders.make_node("PasteMasks", [f"masks_{k}", f"boxes_{k}", f"size_{k}"],
                                [f"image_{k}"], name=f"paste_{k}") for k in "ab"]
    inputs = [builders.tensor(f"{n}_{k}", t, None) for k in "ab"
              for n, t in (("masks", "float32"), ("boxes", "int64"), ("size", "int64"))]
    return builders.make_model(nodes, inputs, [builders.tensor(f"image_{k}", "float32", None)
                                               for k in "ab"])


def paste_feed(bad_b=False):
    rng = np.random.default_rng(5)
    out = {}
    for k in "ab":
        out[f"masks_{k}"] = rng.random((2, 1, 6, 6)).astype(np.float32)
        out[f"boxes_{k}"] = np.array([[1, 1, 8, 9], [3, 0, 12, 6]], np.int64)
        out[f"size_{k}"] = np.array([12, 14], np.int64)
    if bad_b:
        out["size_b"] = np.array([-1, 14], np.int64)
    return out


class Others:
    """Threads that run valid feeds through sessions continuously and record every result
    that differs from the single-threaded one."""

    def __init__(self, jobs):
        self.jobs = [(run, f, run(f)) for run, f in jobs]  # expected: single-threaded
        self.stop = threading.Event()
        self.runs = [0] * len(jobs)
        self.wrong: list = []
        self.threads = [threading.Thread(target=self._loop, args=(i,))
                        for i in range(len(jobs))]

    def _loop(self, i):
        run, f, expected = self.jobs[i]
        while not self.stop.is_set():
            try:
                got = run(f)
                same = all(np.array_equal(a, b) for a, b in zip(got, expected))
            except Exception as e:  # noqa: BLE001 - recorded, the test fails on it
                got, same = repr(e), False
            if not same:
                self.wrong.append((i, got))
            self.runs[i] += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()


def _runner(sess):
    return lambda f: sess.run(None, f)


@pytest.mark.parametrize("mode", MODES)
def test_bad_input_raises_while_four_threads_run_other_sessions(mode):
    sess = ort_roi.InferenceSession(two_level_graph(), options(mode))
    other = ort_roi.InferenceSession(two_level_graph(same_attrs=True), options(mode))
    masks = ort_roi.InferenceSession(paste_masks_graph(), options(mode))
    plain = ort.InferenceSession(ort_roi.convert(two_level_graph()).SerializeToString(),
                                 ort_roi.session_options(options(mode)),
                                 providers=["CPUExecutionProvider"])
    good = feed(bad_b2=1)
    with Others([(_runner(sess), good), (_runner(other), good), (_runner(masks), paste_feed()),
                 (_runner(plain), good)]) as others:
        for _ in range(20):
            with pytest.raises(ort_roi.RoiOpError) as e:
                sess.run(None, feed())
            for fragment in EXPECT:
                assert fragment in str(e.value), (fragment, str(e.value))
            assert (e.value.op, e.value.node, e.value.tensor) == ("RoiAlign", "level_p3", "b2")
            with pytest.raises(ort_roi.RoiOpError) as e:
                masks.run(None, paste_feed(bad_b=True))
            assert (e.value.op, e.value.node, e.value.input, e.value.tensor) == (
                "PasteMasks", "paste_b", "image_size", "size_b"), str(e.value)
    assert others.wrong == []
    assert min(others.runs) > 0, others.runs


@pytest.mark.parametrize("mode", MODES)
def test_the_error_goes_to_the_run_that_fed_it(mode):
    """Threads share one session, half of them feeding bad input: each bad run raises, each
    good run returns the single-threaded values."""
    sess = ort_roi.InferenceSession(two_level_graph(), options(mode))
    good = feed(bad_b2=1)
    expected = sess.run(None, good)
    wrong = []

    def work(bad):
        for _ in range(20):
            try:
                got = sess.run(None, feed() if bad else good)
                if bad or not all(np.array_equal(a, b) for a, b in zip(got, expected)):
                    wrong.append(("returned", bad))
            except ort_roi.RoiOpError as e:
                if not bad or (e.node, e.tensor) != ("level_p3", "b2"):
                    wrong.append((str(e), bad))

    threads = [threading.Thread(target=work, args=(i % 2 == 0,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_front_door_leaves_the_callers_executor_alone():
    so = options("parallel")
    sess = ort_roi.InferenceSession(two_level_graph(), so)
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    sequential = ort.ExecutionMode.ORT_SEQUENTIAL
    assert sess.get_session_options().execution_mode == sequential  # what the session runs
    sess.set_providers(["CPUExecutionProvider"])  # onnxruntime makes the session again
    assert so.execution_mode == ort.ExecutionMode.ORT_PARALLEL
    assert sess.get_session_options().execution_mode == sequential
    with Others([(_runner(sess), feed(bad_b2=1))] * 2):
        for _ in range(5):
            with pytest.raises(ort_roi.RoiOpError, match="level_p3"):
                sess.run(None, feed())


# --- float tokens: held by live sessions only ------------------------------------------------

X64 = np.random.default_rng(1).standard_normal((1, 2, 64, 64))
B64 = np.array([[30, 40, 400, 380]], np.float64)


def _scale(i: int) -> float:
    """Distinct float32 scales that 6 printed digits do not identify."""
    return float(np.float32(0.123456789 + 3e-8 * i))


_SO = ort_roi.session_options()  # registered once: the 1000 sessions are made faster


def _session(scale: float):
    return ort_roi.InferenceSession(builders.single_op_model(
        "RoIAlign", np.float64, pooled_height=3, pooled_width=3, spatial_scale=scale,
        sampling_ratio=2), _SO)


def _check_exact(sess, scale):
    y = sess.run(None, {"X": X64, "boxes": B64, "boxes_num": np.array([1], np.int32)})[0]
    exact = ops.roi_align(X64, B64, np.array([1]), pooled_height=3, pooled_width=3,
                              spatial_scale=scale, sampling_ratio=2)
    np.testing.assert_array_equal(y, exact)
    rounded = float(attributes.parse_float("%g" % scale))
    assert rounded != np.float32(scale)
    assert not np.array_equal(y, ops.roi_align(
        X64, B64, np.array([1]), pooled_height=3, pooled_width=3, spatial_scale=rounded,
        sampling_ratio=2))


def test_float_tokens_are_released_with_their_sessions():
    gc.collect()
    baseline = attributes.tokens_held()
    kept = {i: _session(_scale(i)) for i in (0, 1, 2)}  # live throughout: never reused
    assert attributes.tokens_held() == baseline + 3
    for i in range(3, 1003):
        sess = _session(_scale(i))
        if i % 250 == 0:
            _check_exact(sess, _scale(i))
        del sess
    gc.collect()
    assert attributes.tokens_held() == baseline + 3
    for i in kept:
        _check_exact(kept[i], _scale(i))
    late = _session(_scale(5000))
    _check_exact(late, _scale(5000))
    del kept, late
    gc.collect()
    assert attributes.tokens_held() == baseline
