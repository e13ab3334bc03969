"""ort_roi.scale without a Ray cluster: the callables Ray Data and Ray Serve run
(BatchPredictor, HttpPredictor), the request body checks, the ingress, the client and the
runner's casts, each in this process, held to the model run here bit for bit."""

from __future__ import annotations

import asyncio
import http.client
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import tracemalloc
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from ort_roi import scale
from ort_roi.graph.inputs import generate_inputs
from ort_roi.scale import BatchPredictor, HttpPredictor, Limits, Runner
from ort_roi.scale import client as _client
from tests.ray_helpers import (BAD, MODEL, ROOT, assert_exact, bad_feed,
                               expected_of, feed_rows, good_feed, hostile_bodies, json_body)
from tests.work import python_lines


def test_batch_predictor_reports_bad_rows_per_row():
    rows = feed_rows()
    rois = np.empty(len(rows), object)
    rois[:] = [r["rois"] for r in rows]
    batch = {"id": np.arange(len(rows)), "features": np.stack([r["features"] for r in rows]),
             "rois": rois}
    got = BatchPredictor(MODEL)(batch)
    expected = expected_of(rows)
    assert list(got["id"]) == list(range(len(rows)))
    for i in range(len(rows)):
        if i in BAD:
            assert got["error"][i] == expected[i] and got["cls_prob"][i].shape == (0, 5)
        else:
            assert got["error"][i] is None
            for k in ("cls_prob", "bbox_pred"):
                np.testing.assert_array_equal(got[k][i], expected[i][k])
    assert "non-finite coordinate nan" in got["error"][3]            # the op's message
    assert "declared [R, 5], got shape [2, 4]" in got["error"][7]      # the front door's
    assert "graph input 'features' holds 1 NaN or Inf" in got["error"][8]


def test_nan_image_is_an_error_even_when_the_model_swallows_it():
    """The head's Relu and max pooling turn a NaN pixel into finite outputs: still no result."""
    feed, _ = bad_feed(8)
    runner = Runner(MODEL, check_finite=False)
    assert np.isfinite(runner.run(feed)["cls_prob"]).all()  # what would pass as valid
    with pytest.raises(Exception, match="'features' holds 1 NaN or Inf values"):
        Runner(MODEL).run(feed)


def test_http_predictor_answers_400_with_the_message_then_serves():
    h = HttpPredictor(MODEL)
    feed, _ = bad_feed(7)  # a wrong shape: the front door's message
    status, body = h.respond(json.dumps({k: v.tolist() for k, v in feed.items()}).encode())
    assert (status, body) == (400, expected_of([dict(id=0, **feed)])[0])
    feed, _ = bad_feed(3)  # a NaN box: JSON has no NaN (Python writes one); refused as it is read
    status, body = h.respond(json.dumps({k: v.tolist() for k, v in feed.items()}).encode())
    assert status == 400 and "'NaN' at byte" in body and "is not a number" in body
    assert h.respond(b"[1, 2]")[0] == 400
    assert "not JSON" in h.respond(b'{"features": [1')[1]
    assert "unknown graph inputs ['boxes']" in h.respond(b'{"boxes": [[1, 2, 3, 4]]}')[1]
    good = good_feed(0)
    status, body = h.respond(json.dumps({k: v.tolist() for k, v in good.items()}).encode())
    assert status == 200
    ref = Runner(MODEL).run(good)
    for k, v in json.loads(body).items():
        np.testing.assert_array_equal(np.array(v, np.float32), ref[k])  # exact through JSON


def test_import_ort_roi_does_not_import_ray():
    code = "import sys, ort_roi, ort_roi.scale; print('ray' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["False"], r.stderr








def test_hostile_bodies_get_400_with_a_message_in_bounded_time_and_memory():
    """Each malformed body: 400 and a message saying what is wrong, within 15,000 lines of
    ort_roi's Python (no loop over the body's values: a million numbers take 59; the most is
    the string check's walk over the quotes, at most 2 x MAX_STRINGS of them, ~5 lines each:
    3,100 for the key of 600 escaped quotes) and 16 MiB of Python allocations (the over-size
    body is refused on its length, unread), and the next request is answered exactly."""
    h = HttpPredictor(MODEL, limits={"max_body_bytes": 4 << 20})
    good = good_feed(1)
    want = Runner(MODEL).run(good)
    for name, (body, says) in hostile_bodies().items():
        tracemalloc.start()
        try:
            with python_lines(15_000):
                status, text = h.respond(body)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert status == 400 and says in text, (name, status, text)
        assert peak < 16 << 20, (name, peak)
        status, text = h.respond(json_body(good))
        assert status == 200, (name, text)
        assert_exact(text, want)


def test_a_long_string_is_refused_on_the_bytes_in_bounded_memory():
    """A 15 MiB string (under max_body_bytes) as a value or a key: 400 naming the cap
    max_string_bytes, found on the bytes before any parsing, with under 64 KiB of Python
    allocations (it cost the replica 282 MB when it was parsed)."""
    h = HttpPredictor(MODEL)
    for body in (b'{"features": "' + b"a" * (15 << 20) + b'"}',
                 b'{"' + b"\\u00e9" * (2 << 20) + b'": 1}'):
        tracemalloc.start()
        status, text = h.respond(body)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert status == 400 and "over the cap max_string_bytes=1024" in text, text
        assert peak < 64 << 10, peak
    good = good_feed(0)
    status, text = h.respond(json_body(good))  # keys are strings under the cap
    assert_exact(text, Runner(MODEL).run(good))


def test_an_image_with_no_boxes_says_its_shape():
    h = HttpPredictor(MODEL)
    feats = good_feed(0)["features"]
    for rois in ({"shape": [0, 5], "data": []}, []):
        status, text = h.respond(json_body({"features": feats, "rois": rois}))
        assert status == 200, text
        assert json.loads(text) == {"cls_prob": [], "bbox_pred": []}
    rois = good_feed(0)["rois"]
    status, text = h.respond(json_body({"features": feats, "rois": {
        "shape": list(rois.shape), "data": rois.ravel().tolist()}}))
    assert_exact(text, Runner(MODEL).run(good_feed(0)))


def test_each_cap_is_a_400_naming_it_before_the_work():
    """max_body_bytes before parsing, max_depth on the bytes, max_boxes before any array,
    max_output_bytes (as declared, [R, 5] + [R, 20]) before the model runs: the session is
    never called."""
    h = HttpPredictor(MODEL, limits=Limits(max_body_bytes=300_000, max_depth=8, max_boxes=8,
                                           max_output_bytes=500))
    calls = []
    run = h.session.run
    h.session.run = lambda *a, **k: calls.append(1) or run(*a, **k)
    feed = good_feed(0)
    many = dict(feed, rois=np.tile(feed["rois"][:1], (9, 1)))
    five = dict(feed, rois=np.tile(feed["rois"][:1], (5, 1)))  # 5 x 25 x 4 = 500 bytes: ok
    six = dict(feed, rois=np.tile(feed["rois"][:1], (6, 1)))
    cases = [(b" " * 300_001, "over the cap max_body_bytes=300000"),
             (b"[" * 9, "max_depth=8"),
             (json_body(many), "'rois' holds 9 boxes, over the cap max_boxes=8"),
             (json_body(six), "outputs would be 600 bytes (as declared, before the run), over the "
                          "cap max_output_bytes=500")]
    for body, says in cases:
        status, text = h.respond(body)
        assert status == 400 and says in text, text
    assert calls == []
    assert h.respond(json_body(five))[0] == 200 and calls == [1]


def test_runner_casts_or_refuses_each_value():
    r = Runner(ROOT / "models" / "mask_rcnn_head.onnx")  # boxes_num: int64
    feed = generate_inputs(onnx.load(ROOT / "models" / "mask_rcnn_head.onnx"), r=2)
    want = r.run(feed)
    as64 = {k: v.astype(np.float64) if v.dtype == np.float32 else v for k, v in feed.items()}
    got = r.run(as64, cast=True)  # float32 values in float64: exact
    np.testing.assert_array_equal(got["masks"], want["masks"])
    for bad, says in [(dict(feed, boxes_num=feed["boxes_num"] + 0.5), "must hold integers"),
                      (dict(feed, boxes_num=np.array([True])), "holds booleans"),
                      (dict(feed, boxes=feed["boxes"].astype(np.float64) * 1e300),
                       "beyond float32's range")]:
        with pytest.raises(Exception, match=says):
            r.run(bad, cast=True)
    r32 = Runner(ROOT / "models" / "rfcn_head.onnx")  # rois_num: int32
    feed = generate_inputs(onnx.load(ROOT / "models" / "rfcn_head.onnx"), r=2)
    with pytest.raises(Exception, match="outside int32's range"):
        r32.run(dict(feed, rois_num=np.array([2**40])), cast=True)


def test_a_float64_row_does_not_fail_its_batch():
    """Ray turns a column float64 for the whole block when one row is; each row is cast on
    its own: the float32 rows and the float64 row holding float32 values run exactly, a row
    whose values float32 cannot hold fails alone."""
    good = [dict(id=i, **good_feed(i)) for i in range(4)]
    rows = [dict(r, rois=r["rois"].astype(np.float64)) for r in good]  # as Ray hands them
    rows[2]["rois"][0, 3] = 1e39
    rois = np.empty(4, object)
    rois[:] = [r["rois"] for r in rows]
    got = BatchPredictor(MODEL)({"id": np.arange(4), "features": np.stack(
        [r["features"] for r in rows]), "rois": rois})
    assert "beyond float32's range" in got["error"][2]
    for i in (0, 1, 3):
        assert got["error"][i] is None
        np.testing.assert_array_equal(got["cls_prob"][i], expected_of(good)[i]["cls_prob"])


def test_an_error_column_of_none_made_nan_fails_no_row():
    """Ray hands a batch's error column whose every value is None over as float NaN: no row
    of it is refused (every row ran 'ort_roi: feed: nan' before); a message (a string) is."""
    rows = [dict(id=i, **good_feed(i)) for i in range(4)]
    rois = np.empty(4, object)
    rois[:] = [r["rois"] for r in rows]
    batch = {"id": np.arange(4), "features": np.stack([r["features"] for r in rows]),
             "rois": rois}
    expected = expected_of(rows)
    for column in (np.full(4, np.nan, np.float32), np.array([None] * 4, object),
                   np.array([None, None, "ort_roi: feed: refused before", None], object)):
        got = BatchPredictor(MODEL)(dict(batch, error=column))
        for i in range(4):
            if isinstance(column[i], str):
                assert got["error"][i] == column[i] and got["cls_prob"][i].shape == (0, 5)
                continue
            assert got["error"][i] is None, (column, got["error"][i])
            for k in ("cls_prob", "bbox_pred"):
                np.testing.assert_array_equal(got[k][i], expected[i][k])


def test_large_requests_leave_a_replica_no_larger_than_the_first_did():
    """Requests of 10,000 boxes (the default max_boxes): onnxruntime's arena grew to each
    run's peak and kept it (a replica's RSS +213 MB in this process, +400 MB in Serve, kept
    while idle); over SHRINK_BOXES the run gives the arena's growth back and the C heap is
    trimmed. In a process of its own: after the first large request, 8 more leave its RSS
    within 32 MiB of where the first left it (measured: +3 to +7 MB; +67 MB before), a
    small request's answer unchanged."""
    code = f"""if True:
        import json, onnx
        from ort_roi.scale import HttpPredictor
        from ort_roi.graph.inputs import generate_inputs
        def rss():
            return next(int(l.split()[1]) << 10 for l in open("/proc/self/status")
                        if l.startswith("VmRSS"))
        model = {MODEL!r}
        h = HttpPredictor(model)
        def body(r, seed):
            return json.dumps({{k: v.tolist() for k, v in
                               generate_inputs(onnx.load(model), r=r, seed=seed).items()}}).encode()
        big, small = body(10000, 99), body(16, 1)
        first = h.respond(small)
        assert h.respond(big)[0] == 200
        after_one = rss()
        for _ in range(8):
            assert h.respond(big)[0] == 200
        print(rss() - after_one, h.respond(small) == first)
    """
    if not os.path.exists("/proc/self/status"):
        pytest.skip("reads Linux's /proc")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr[-2000:]
    grew, same = r.stdout.split()
    assert int(grew) < 32 << 20 and same == "True", r.stdout


class _Request:
    """A Starlette request as far as ``scale.read_body`` reads one."""

    def __init__(self, body: bytes = b"{}", method: str = "POST", chunk: int = 1 << 16,
                 delay: float = 0.0, headers: dict | None = None, length: bool = True):
        self.method, self.body, self.chunk, self.delay = method, body, chunk, delay
        self.headers = {"content-type": "application/json", **(headers or {})}
        if length:
            self.headers.setdefault("content-length", str(len(body)))
        self.read = 0

    async def stream(self):
        for i in range(0, len(self.body), self.chunk):
            await asyncio.sleep(self.delay)
            self.read += self.chunk
            yield self.body[i:i + self.chunk]


def test_read_body_checks_method_type_length_and_time():
    """(The bodies read in time get a minute: a loaded machine does not make them late.)"""
    lim = Limits(max_body_bytes=1000, read_timeout_s=60)

    def status(req: _Request, lim: Limits = lim) -> tuple[int, str]:
        try:
            asyncio.run(scale.read_body(req, lim))
        except scale.HttpError as e:
            return e.status, e.message
        return 200, ""

    assert status(_Request(b"{}")) == (200, "")
    assert status(_Request(method="GET"))[0] == 405
    assert status(_Request(headers={"content-type": "text/plain"}))[0] == 415
    assert status(_Request(headers={"content-type": "application/json; charset=utf-8"}))[0] \
        == 200
    big = _Request(b"x" * 5000, chunk=100)
    assert "Content-Length), over the cap max_body_bytes=1000" in status(big)[1]
    assert big.read == 0  # refused on its length, unread
    streamed = _Request(b"x" * 5000, chunk=100, length=False)
    assert "grew over the cap max_body_bytes=1000" in status(streamed)[1]
    assert streamed.read <= 1100  # reading stopped at the cap
    slow = _Request(b"x" * 900, chunk=100, delay=0.1)  # 0.9 s at least
    late = Limits(max_body_bytes=1000, read_timeout_s=0.3)
    assert status(slow, late)[0] == 408 and "read_timeout_s=0.3" in status(slow, late)[1]


class _Handle:
    """A deployment handle whose ``respond.remote`` raises the given errors in turn."""

    def __init__(self, *errors):
        self.errors, self.calls = list(errors), 0
        self.respond = self

    def remote(self, body: bytes):
        async def answer():
            self.calls += 1
            if self.errors:
                raise self.errors.pop(0)
            return 200, "{}"
        return answer()


def test_ingress_retries_a_lost_replica_and_answers_what_it_cannot_503():
    pytest.importorskip("ray.serve", reason="needs ray: pip install '.[ray]'")
    from ray.exceptions import ActorDiedError, ActorUnavailableError, RayTaskError
    from ray.serve.exceptions import BackPressureError

    def forward(*errors, attempts=4):
        handle = _Handle(*errors)
        ingress = scale.HttpIngress(handle, attempts=attempts, backoff_s=0.001)
        return asyncio.run(ingress.forward(b"{}")), handle.calls

    assert forward(ActorDiedError(), ActorUnavailableError("x", None)) == ((200, "{}", {}), 3)
    (status, text, headers), calls = forward(*[ActorDiedError()] * 4)
    assert (status, headers, calls) == (503, {"Retry-After": "1"}, 4)
    assert "4 attempts each found the model's replica lost (ActorDiedError)" in text
    (status, text, headers), calls = forward(BackPressureError(num_queued_requests=2,
                                                               max_queued_requests=2))
    assert (status, headers["Retry-After"], headers[scale.ERROR_HEADER], calls) == \
        (503, "1", "overloaded", 1)  # not retried here: the client waits Retry-After
    (status, text, _), calls = forward(RayTaskError("respond", "tb", ValueError("bug")))
    assert status == 500 and calls == 1 and "model error" in text


def test_ingress_sheds_before_reading_a_body_when_the_predictors_are_full():
    """shed_at=2: while 2 requests wait on the predictors, a third is answered 503 with
    Retry-After and the kind, its body unread (under overload each body cost the proxy and
    the ingress seconds before the predictors' full queue refused it); once one is answered,
    the next is read and forwarded."""
    pytest.importorskip("ray.serve", reason="needs ray: pip install '.[ray]'")

    class Waiting:
        def __init__(self):
            self.release, self.two, self.calls = asyncio.Event(), asyncio.Event(), 0
            self.respond = self

        def remote(self, body: bytes):
            async def answer():
                self.calls += 1
                if self.calls == 2:
                    self.two.set()
                await self.release.wait()
                return 200, "{}"
            return answer()

    async def scenario():
        handle = Waiting()
        ingress = scale.HttpIngress(handle, shed_at=2)
        held = [asyncio.create_task(ingress(_Request(b"{}"))) for _ in range(2)]
        await handle.two.wait()  # the two reached the predictors' handle
        third = _Request(b'{"x": 1}')
        shed = await ingress(third)
        handle.release.set()
        answered = [await t for t in held]
        fourth = await ingress(_Request(b"{}"))
        return shed, third.read, answered, fourth, handle.calls, ingress.waiting

    shed, read, answered, fourth, calls, waiting = asyncio.run(scenario())
    assert shed.status_code == 503 and read == 0 and calls == 3 and waiting == 0
    assert shed.headers["retry-after"] == "1" and shed.headers[scale.ERROR_HEADER] == "overloaded"
    assert b"2 requests wait on the model's replicas (shed_at=2); refused before its body " \
        b"was read" in shed.body
    assert [a.status_code for a in answered] == [200, 200] and fourth.status_code == 200


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers POSTs from a script: (status, headers) in turn, then 200."""

    script: list = []
    seen: list = []

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        status, headers = self.script.pop(0) if self.script else (200, {})
        self.seen.append(status)
        body = b'{"ok": 1}' if status == 200 else b"message"
        self.send_response(status)
        for k, v in {"Content-Length": str(len(body)), **headers}.items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_client_retries_what_may_be_retried_and_no_more(monkeypatch):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/roi"
    try:
        client = scale.Client(url, attempts=5, backoff_s=0.01)
        _Flaky.script[:] = [(503, {"Retry-After": "0"}), (408, {}), (500, {}), (502, {})]
        r = client.post(b"{}")  # overloaded, timed out, Serve's own 500 / 502: retried
        assert (r.status, r.attempts, r.history) == (200, 5, (503, 408, 500, 502))
        for status, headers in [(400, {scale.ERROR_HEADER: "bad-request"}),
                                (500, {scale.ERROR_HEADER: "model-error"}), (415, {})]:
            _Flaky.script[:] = [(status, headers)]
            _Flaky.seen.clear()
            r = client.post(b"{}")  # an answer: never sent again
            assert (r.status, r.attempts, _Flaky.seen) == (status, 1, [status])
        _Flaky.script[:] = [(503, {"Retry-After": "0"})] * 9
        r = client.post(b"{}")
        assert (r.status, r.attempts) == (503, 5) and len(_Flaky.script) == 4  # bounded
        _Flaky.script[:] = [(503, {"Retry-After": "30"})] * 2
        waits = []

        def sleep(s: float) -> None:  # the client's waits, recorded (and waited)
            waits.append(s)
            time.sleep(s)

        monkeypatch.setattr(_client, "time", SimpleNamespace(sleep=sleep,
                                                             monotonic=time.monotonic))
        r = scale.Client(url, attempts=3, max_wait_s=0.2).post(b"{}")
        assert r.status == 200 and waits == [0.2, 0.2]  # the waits are capped
    finally:
        server.shutdown()
        server.server_close()
    r = scale.Client(url, attempts=2, backoff_s=0.01).post(b"{}")  # nobody listens
    assert r.status == 0 and r.attempts == 2 and "ConnectionRefusedError" in r.history
