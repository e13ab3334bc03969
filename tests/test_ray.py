"""ort_roi inside Ray (ort_roi.scale): batch inference with Ray Data over 2 actors and HTTP
serving with Ray Serve over 2 replicas, on a bounded local cluster (2 CPUs, every server on
127.0.0.1) started once for the module and shut down at its end. Results are held to the same
model run in this process, bit for bit; bad rows and requests get the RoiOpError message (or
the cap they are over) and the workers go on.

Serving that survives and serving under pressure, on ``scale.application`` (an ingress and 2
predictor replicas): hostile bodies, caps, slow clients, overload, a replica killed and one
frozen mid-load. Every load is bounded in requests and time. The tests that need no cluster
(the callables, the body checks, the client) run without Ray.
"""

from __future__ import annotations

import asyncio
import http.client
import http.server
import json
import os
import pathlib
import re
import select
import signal
import socket
import subprocess
import sys
import threading
import time
import tracemalloc
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import numpy as np
import onnx
import pytest

from ort_roi import scale
from ort_roi.graph.inputs import generate_inputs
from ort_roi.scale import BatchPredictor, HttpPredictor, Limits, Runner
from ort_roi.scale import client as _client
from tests.work import python_lines

ROOT = pathlib.Path(__file__).resolve().parents[1]
MODEL = str(ROOT / "models" / "fast_rcnn_head.onnx")  # features [1,16,24,32], rois [R,5]


def _good(i: int) -> dict[str, np.ndarray]:
    """Row i: one image's features and 1-6 boxes (a varying number of boxes per row)."""
    return generate_inputs(onnx.load(MODEL), r=1 + i % 6, seed=i)


def _bad(i: int) -> tuple[dict[str, np.ndarray], str]:
    """A bad variant of row i and what is wrong with it."""
    feed = _good(i)
    kind = ("nan box", "wrong shape", "nan image")[i % 3]
    if kind == "nan box":
        feed["rois"][0, 3] = np.nan
    elif kind == "wrong shape":
        feed["rois"] = feed["rois"][:, 1:]
    else:
        feed["features"][0, 2, 5, 7] = np.nan
    return feed, kind


BAD = {3, 7, 8}  # ids of bad rows: a NaN box, a wrong shape, a NaN image; good rows follow


def _rows(n: int = 12) -> list[dict]:
    return [dict(id=i, **(_bad(i)[0] if i in BAD else _good(i))) for i in range(n)]


def _expected(rows: list[dict], cast: bool = False) -> dict[int, dict | str]:
    """id -> outputs, or the RoiOpError message, of the model run in this process."""
    runner, out = Runner(MODEL), {}
    for row in rows:
        try:
            out[row["id"]] = runner.run(row, cast=cast)
        except Exception as e:  # noqa: BLE001 - RoiOpError; checked below
            out[row["id"]] = str(e)
    return out


# --- in this process (no Ray) -------------------------------------------------------------

def test_batch_predictor_reports_bad_rows_per_row():
    rows = _rows()
    rois = np.empty(len(rows), object)
    rois[:] = [r["rois"] for r in rows]
    batch = {"id": np.arange(len(rows)), "features": np.stack([r["features"] for r in rows]),
             "rois": rois}
    got = BatchPredictor(MODEL)(batch)
    expected = _expected(rows)
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
    feed, _ = _bad(8)
    runner = Runner(MODEL, check_finite=False)
    assert np.isfinite(runner.run(feed)["cls_prob"]).all()  # what would pass as valid
    with pytest.raises(Exception, match="'features' holds 1 NaN or Inf values"):
        Runner(MODEL).run(feed)


def test_http_predictor_answers_400_with_the_message_then_serves():
    h = HttpPredictor(MODEL)
    feed, _ = _bad(7)  # a wrong shape: the front door's message
    status, body = h.respond(json.dumps({k: v.tolist() for k, v in feed.items()}).encode())
    assert (status, body) == (400, _expected([dict(id=0, **feed)])[0])
    feed, _ = _bad(3)  # a NaN box: JSON has no NaN (Python writes one); refused as it is read
    status, body = h.respond(json.dumps({k: v.tolist() for k, v in feed.items()}).encode())
    assert status == 400 and "'NaN' at byte" in body and "is not a number" in body
    assert h.respond(b"[1, 2]")[0] == 400
    assert "not JSON" in h.respond(b'{"features": [1')[1]
    assert "unknown graph inputs ['boxes']" in h.respond(b'{"boxes": [[1, 2, 3, 4]]}')[1]
    good = _good(0)
    status, body = h.respond(json.dumps({k: v.tolist() for k, v in good.items()}).encode())
    assert status == 200
    ref = Runner(MODEL).run(good)
    for k, v in json.loads(body).items():
        np.testing.assert_array_equal(np.array(v, np.float32), ref[k])  # exact through JSON


def test_import_ort_roi_does_not_import_ray():
    code = "import sys, ort_roi, ort_roi.scale; print('ray' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.stdout.split() == ["False"], r.stderr


def _body(feed: dict) -> bytes:
    return json.dumps({k: np.asarray(v).tolist() if not isinstance(v, (dict, list)) else v
                       for k, v in feed.items()}).encode()


def _assert_exact(text: str, want: dict[str, np.ndarray]) -> None:
    got = json.loads(text)
    assert set(got) == set(want)
    for k, v in got.items():
        np.testing.assert_array_equal(np.array(v, np.float32).reshape(want[k].shape), want[k])


def _hostile() -> dict[str, tuple[bytes, str]]:
    """name -> (body, what its 400 says): every kind of malformed body."""
    feats = json.dumps(_good(0)["features"].tolist())
    box = "[0, 16, 16, 200, 180]"

    def with_rois(rois: str) -> bytes:
        return f'{{"features": {feats}, "rois": {rois}}}'.encode()

    return {
        "deep nesting": (b"[" * 100000, "nests deeper than the cap max_depth=32"),
        "deep in a value": (b'{"rois": ' + b"[" * 100000 + b"]" * 100000 + b"}",
                            "max_depth=32"),
        "over-size": (b"[" + b"0, " * (6 << 20) + b"0]", "over the cap max_body_bytes"),
        "a million lists": (b'{"features": [' + b"[], " * 100000 + b"[]]}",
                            "holds 100002 arrays; the model's inputs hold at most"),
        "a million numbers": (b'{"features": [' + b"1.5," * 200000 + b"1]}",
                              "holds 200001 values; the model's inputs hold at most"),
        "strings": (with_rois('[["0", 16, 16, 200, 180]]'),
                    "'rois' is not numeric (got strings)"),
        "a long string": (b'{"features": "' + b"a" * (600 << 10) + b'"}',
                          "the JSON string at byte 13 holds at least 614400 bytes, over the "
                          "cap max_string_bytes=1024"),
        "a long key": (b'{"' + b"\\\"" * 600 + b'": 1}',  # escaped quotes
                       "the JSON string at byte 1 holds at least 1025 bytes, over the cap "
                       "max_string_bytes=1024"),
        "many strings": (b'{"features": [' + b'"", ' * 1100 + b'""]}',
                         "the JSON holds 2204 quote characters, over the 1024 strings"),
        "unterminated": (b'{"features": "' + b"b" * 2000, "holds 2000 bytes (unterminated)"),
        "NaN": (with_rois("[[0, 16, 16, NaN, 180]]"), "'NaN' at byte"),
        "Infinity": (with_rois("[[0, 16, -Infinity, 200, 180]]"), "'Infinity' at byte"),
        "boolean": (with_rois("[[0, true, 16, 200, 180]]"), "'true' at byte"),
        "null": (with_rois("null"), "'null' at byte"),
        "missing": (f'{{"features": {feats}}}'.encode(), "graph input 'rois' is missing"),
        "duplicate keys": (f'{{"features": {feats}, "rois": [{box}], "rois": [{box}]}}'
                           .encode(), "the key 'rois' appears twice"),
        "empty": (b"", "the body is empty"),
        "not JSON": (b"features=1&rois=2", "is not a number"),
        "cut short": (b'{"features": [1', "not JSON"),
        "not UTF-8": (b'{"f\xe9": 1}', "not UTF-8"),
        "not an object": (b"[1, 2]", "must be a JSON object"),
        "unknown input": (b'{"boxes": [[1, 2, 3, 4]]}', "unknown graph inputs ['boxes']"),
        "beyond float32": (with_rois("[[0, 16, 16, 1e39, 180]]"), "beyond float32's range"),
        "shape and data disagree": (with_rois('{"shape": [2, 5], "data": [1]}'),
                                    "shape [2, 5] holds 10 values, data has 1"),
        "ragged": (with_rois(f"[{box}, [0, 1]]"), "'rois' is not an array"),
    }


def test_hostile_bodies_get_400_with_a_message_in_bounded_time_and_memory():
    """Each malformed body: 400 and a message saying what is wrong, within 15,000 lines of
    ort_roi's Python (no loop over the body's values: a million numbers take 59; the most is
    the string check's walk over the quotes, at most 2 x MAX_STRINGS of them, ~5 lines each:
    3,100 for the key of 600 escaped quotes) and 16 MiB of Python allocations (the over-size
    body is refused on its length, unread), and the next request is answered exactly."""
    h = HttpPredictor(MODEL, limits={"max_body_bytes": 4 << 20})
    good = _good(1)
    want = Runner(MODEL).run(good)
    for name, (body, says) in _hostile().items():
        tracemalloc.start()
        try:
            with python_lines(15_000):
                status, text = h.respond(body)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert status == 400 and says in text, (name, status, text)
        assert peak < 16 << 20, (name, peak)
        status, text = h.respond(_body(good))
        assert status == 200, (name, text)
        _assert_exact(text, want)


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
    good = _good(0)
    status, text = h.respond(_body(good))  # keys are strings under the cap
    _assert_exact(text, Runner(MODEL).run(good))


def test_an_image_with_no_boxes_says_its_shape():
    h = HttpPredictor(MODEL)
    feats = _good(0)["features"]
    for rois in ({"shape": [0, 5], "data": []}, []):
        status, text = h.respond(_body({"features": feats, "rois": rois}))
        assert status == 200, text
        assert json.loads(text) == {"cls_prob": [], "bbox_pred": []}
    rois = _good(0)["rois"]
    status, text = h.respond(_body({"features": feats, "rois": {
        "shape": list(rois.shape), "data": rois.ravel().tolist()}}))
    _assert_exact(text, Runner(MODEL).run(_good(0)))


def test_each_cap_is_a_400_naming_it_before_the_work():
    """max_body_bytes before parsing, max_depth on the bytes, max_boxes before any array,
    max_output_bytes (as declared, [R, 5] + [R, 20]) before the model runs: the session is
    never called."""
    h = HttpPredictor(MODEL, limits=Limits(max_body_bytes=300_000, max_depth=8, max_boxes=8,
                                           max_output_bytes=500))
    calls = []
    run = h.session.run
    h.session.run = lambda *a, **k: calls.append(1) or run(*a, **k)
    feed = _good(0)
    many = dict(feed, rois=np.tile(feed["rois"][:1], (9, 1)))
    five = dict(feed, rois=np.tile(feed["rois"][:1], (5, 1)))  # 5 x 25 x 4 = 500 bytes: ok
    six = dict(feed, rois=np.tile(feed["rois"][:1], (6, 1)))
    cases = [(b" " * 300_001, "over the cap max_body_bytes=300000"),
             (b"[" * 9, "max_depth=8"),
             (_body(many), "'rois' holds 9 boxes, over the cap max_boxes=8"),
             (_body(six), "outputs would be 600 bytes (as declared, before the run), over the "
                          "cap max_output_bytes=500")]
    for body, says in cases:
        status, text = h.respond(body)
        assert status == 400 and says in text, text
    assert calls == []
    assert h.respond(_body(five))[0] == 200 and calls == [1]


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
    good = [dict(id=i, **_good(i)) for i in range(4)]
    rows = [dict(r, rois=r["rois"].astype(np.float64)) for r in good]  # as Ray hands them
    rows[2]["rois"][0, 3] = 1e39
    rois = np.empty(4, object)
    rois[:] = [r["rois"] for r in rows]
    got = BatchPredictor(MODEL)({"id": np.arange(4), "features": np.stack(
        [r["features"] for r in rows]), "rois": rois})
    assert "beyond float32's range" in got["error"][2]
    for i in (0, 1, 3):
        assert got["error"][i] is None
        np.testing.assert_array_equal(got["cls_prob"][i], _expected(good)[i]["cls_prob"])


def test_an_error_column_of_none_made_nan_fails_no_row():
    """Ray hands a batch's error column whose every value is None over as float NaN: no row
    of it is refused (every row ran 'ort_roi: feed: nan' before); a message (a string) is."""
    rows = [dict(id=i, **_good(i)) for i in range(4)]
    rois = np.empty(4, object)
    rois[:] = [r["rois"] for r in rows]
    batch = {"id": np.arange(4), "features": np.stack([r["features"] for r in rows]),
             "rois": rois}
    expected = _expected(rows)
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


# --- on a local Ray cluster -----------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="needs ray: pip install '.[ray]'")
    pytest.importorskip("ray.data", reason="needs ray: pip install '.[ray]'")
    pytest.importorskip("ray.serve", reason="needs ray: pip install '.[ray]'")
    # every server on 127.0.0.1; a connection to Serve's proxy sends its headers within 2 s
    scale.start_local(num_cpus=2, header_timeout_s=2, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


def test_ray_data_two_actors_equal_one_process_bad_rows_per_row(ray_cluster):
    """predict_batches: a fixed pool of 2 actors (compute=ActorPoolStrategy, not the
    deprecated concurrency=); a float64 row among float32 ones (Ray makes its block's column
    float64) runs exactly, a row float32 cannot hold fails alone, as the bad rows do."""
    ray = ray_cluster
    rows = _rows(16)
    rows[5]["rois"] = rows[5]["rois"].astype(np.float64)
    rows[9]["rois"] = rows[9]["rois"].astype(np.float64)
    rows[9]["rois"][0, 3] = 1e39
    ds = ray.data.from_items(rows, override_num_blocks=4)
    out = scale.predict_batches(ds, MODEL, actors=2, batch_size=2, num_cpus=1).take_all()
    expected = _expected(rows)
    expected[5] = _expected([dict(rows[5], rois=rows[5]["rois"].astype(np.float32))])[5]
    assert sorted(r["id"] for r in out) == list(range(16))  # every row back: no actor lost
    expected[9] = "ort_roi: feed: graph input 'rois' holds 1 values beyond float32's range"
    for r in out:
        want = expected[r["id"]]
        if r["id"] in BAD | {9}:
            assert r["error"].startswith(want)  # the message; outputs empty, never NaN
            assert r["cls_prob"].shape == (0, 5) and r["bbox_pred"].shape == (0, 20)
        else:
            assert r["error"] is None, r["error"]
            for k in ("cls_prob", "bbox_pred"):
                np.testing.assert_array_equal(r[k], want[k])


def _mixed(n: int = 12) -> list[dict]:
    """n rows of 4 boxes: row 5's rois float64 (float32 values), row 6's nested lists, row 9's
    booleans, row 10's features strings, row 11's rois one box of rank 1: in batches of 4,
    rows 0-3 and 4-7 hold no bad row."""
    rows = [dict(id=i, **generate_inputs(onnx.load(MODEL), r=4, seed=i)) for i in range(n)]
    rows[5]["rois"] = rows[5]["rois"].astype(np.float64)
    rows[6]["rois"] = rows[6]["rois"].tolist()
    rows[9]["rois"] = rows[9]["rois"] > 5
    rows[10]["features"] = rows[10]["features"].astype(str)
    rows[11]["rois"] = rows[11]["rois"][0]
    return rows


MIXED_ERRORS = {9: "ort_roi: feed: graph input 'rois' holds booleans; it takes numbers "
                   "(float32)",
                10: "ort_roi: feed: graph input 'features' is not numeric (got strings)",
                11: "ort_roi: feed: graph input 'rois' is declared [R, 5], got shape [5]"}


def _check_mixed(out: list[dict], bad: dict[int, str]) -> None:
    """Every row back; the bad ones with their message and empty outputs, every other row
    (a float64 row and a nested-list row among them) exact."""
    rows = _mixed()
    assert sorted(r["id"] for r in out) == list(range(len(rows)))
    expected = _expected([r for r in rows if r["id"] not in bad], cast=True)
    for r in out:
        if r["id"] in bad:
            assert r["error"] == bad[r["id"]], r
            assert r["cls_prob"].shape == (0, 5) and r["bbox_pred"].shape == (0, 20)
        else:
            assert r["error"] is None, (r["id"], r["error"])  # never 'ort_roi: feed: nan'
            for k in ("cls_prob", "bbox_pred"):
                np.testing.assert_array_equal(r[k], expected[r["id"]][k])


def test_ray_data_rows_of_other_types_fail_alone_and_no_good_row_fails(ray_cluster):
    """Given as rows (each normalised before ``ray.data.from_items`` types a column), in
    batches of 4 (rows 0-3 and 4-7 without a bad row): a float64 row and a nested-list row
    run exactly, booleans, strings and a wrong rank fail alone, every good row has
    ``error`` None (Ray hands a batch's column of None alone as NaN: that failed every good
    row of it, 'ort_roi: feed: nan'; a float64 or nested-list row failed the whole dataset,
    "Can't unify tensor types with divergent scalar types"). The issue's case too: 8 rows,
    row 2 of booleans."""
    out = scale.predict_batches(_mixed(), MODEL, actors=2, batch_size=4, num_cpus=1)
    _check_mixed(out.take_all(), MIXED_ERRORS)
    rows = [dict(id=i, **generate_inputs(onnx.load(MODEL), r=4, seed=i)) for i in range(8)]
    rows[2]["rois"] = rows[2]["rois"] > 5
    out = scale.predict_batches(rows, MODEL, actors=2, batch_size=4, num_cpus=1).take_all()
    assert sorted(r["id"] for r in out) == list(range(8))
    expected = _expected([r for r in rows if r["id"] != 2])
    for r in out:
        if r["id"] == 2:
            assert r["error"] == MIXED_ERRORS[9] and r["cls_prob"].shape == (0, 5)
        else:
            assert r["error"] is None, (r["id"], r["error"])
            np.testing.assert_array_equal(r["cls_prob"], expected[r["id"]]["cls_prob"])


def test_ray_data_a_dataset_of_blocks_of_other_types_runs_row_by_row(ray_cluster):
    """A Dataset the user built, one row a block (``override_num_blocks=12``): each block
    keeps its row's type, and a batch of 4 put a float64 or a nested-list block beside
    float32 ones (the whole dataset failed). Each row is normalised (``ds.map``) before the
    batches: the same answers as given as rows. A boolean row in a block of float rows is
    already 0.0 / 1.0 when Ray builds the dataset (out of reach: it runs as boxes)."""
    ray = ray_cluster
    ds = ray.data.from_items(_mixed(), override_num_blocks=12)
    out = scale.predict_batches(ds, MODEL, actors=2, batch_size=4, num_cpus=1)
    _check_mixed(out.take_all(), MIXED_ERRORS)
    rows = [dict(id=i, **_good(i)) for i in range(4)]
    rows[2]["rois"] = rows[2]["rois"] > 5
    merged = ray.data.from_items(rows[2:4], override_num_blocks=1).take_all()
    assert merged[0]["rois"].dtype == np.float32 and set(np.unique(merged[0]["rois"])) <= {0, 1}


def test_slowest_ray_data_a_row_that_kills_its_worker_is_retried_boundedly(
        ray_cluster, tmp_path):
    """Ray Data's default retries a batch whose actor died without end; predict_batches
    bounds it (max_restarts=1, max_task_retries=1: the row kills 2 workers, then its block
    fails) and max_errored_blocks=1 drops that block: the other rows come back exact."""
    ray = ray_cluster
    log = tmp_path / "kills"
    log.write_text("")

    class Crashing(BatchPredictor):
        def __call__(self, batch):
            if 5 in list(batch["id"]):  # native code crashing on this row, say
                with open(log, "a") as f:
                    f.write(f"{os.getpid()}\n")
                os._exit(1)
            return super().__call__(batch)

    rows = [dict(id=i, **_good(i)) for i in range(16)]
    context = ray.data.DataContext.get_current()
    before = context.max_errored_blocks
    context.max_errored_blocks = 1
    try:
        ds = ray.data.from_items(rows, override_num_blocks=4)
        out = scale.predict_batches(ds, MODEL, actors=2, batch_size=2, num_cpus=1,
                                    max_restarts=1, max_task_retries=1,
                                    predictor=Crashing).take_all()
    finally:
        context.max_errored_blocks = before
    assert len(log.read_text().split()) == 2  # the first try and one retry
    ids = sorted(r["id"] for r in out)
    assert 5 not in ids and len(ids) == 12  # the crashing row's block (4 rows) dropped
    expected = _expected(rows)
    for r in out:
        assert r["error"] is None
        np.testing.assert_array_equal(r["cls_prob"], expected[r["id"]]["cls_prob"])


def test_slowest_ray_data_an_actor_killed_mid_dataset_is_restarted(ray_cluster, tmp_path):
    """Ray logs "... has constructor arguments in the object store and max_restarts > 0 ...
    the actor restart will fail" for every predict_batches: Ray Data hands its actors their
    DataContext and map function as object refs. The driver holds them while the dataset
    runs, so a restart finds them: SIGKILL of one of the 2 actors while it runs a batch, and
    that actor is restarted (a new process), its batch retried, every row back exact."""
    ray = ray_cluster
    log = tmp_path / "pids"
    log.write_text("")

    class Slow(BatchPredictor):
        def __call__(self, batch):
            with open(log, "a") as f:
                f.write(f"{os.getpid()}\n")
            time.sleep(0.5)  # long enough to be killed inside
            return super().__call__(batch)

    rows = [dict(id=i, **_good(i)) for i in range(16)]
    ds = ray.data.from_items(rows, override_num_blocks=8)
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(lambda: scale.predict_batches(
            ds, MODEL, actors=2, batch_size=2, num_cpus=1, predictor=Slow).take_all())
        stop = time.monotonic() + 120
        while not log.read_text().split() and time.monotonic() < stop and not run.done():
            time.sleep(0.05)
        victim = int(log.read_text().split()[0])
        os.kill(victim, signal.SIGKILL)
        out = run.result(timeout=300)
    assert sorted(r["id"] for r in out) == list(range(16))
    expected = _expected(rows)
    for r in out:
        assert r["error"] is None
        np.testing.assert_array_equal(r["cls_prob"], expected[r["id"]]["cls_prob"])
    import ray._private.state

    actors = [a for a in ray._private.state.actors().values()
              if "MapBatches(Slow)" in a.get("ActorClassName", "")]
    assert sorted(a["NumRestarts"] for a in actors) == [0, 1], actors
    pids = log.read_text().split()
    assert len(set(pids)) == 3  # the 2 actors, then the killed one restarted: a new process


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _post(port: int, feed: dict) -> tuple[int, str]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        body = json.dumps({k: np.asarray(v).tolist() for k, v in feed.items()})
        conn.request("POST", "/roi", body, {"Content-Type": "application/json"})
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


@pytest.fixture(scope="module")
def serve_port(ray_cluster) -> int:
    """Serve's proxy on 127.0.0.1, every request bounded to 30 s (then 408)."""
    from ray import serve

    port = _free_port()
    serve.start(http_options=scale.http_options(port=port, request_timeout_s=30,
                                                keep_alive_timeout_s=2))
    return port


def test_ray_serve_two_replicas_equal_one_process_bad_request_4xx(serve_port):
    from ray import serve

    port = serve_port
    app = serve.deployment(HttpPredictor, num_replicas=2,
                           ray_actor_options={"num_cpus": 0.5}).bind(MODEL)
    serve.run(app, name="roi", route_prefix="/roi")
    feeds = [_good(i) for i in range(6)]
    expected = _expected([dict(id=i, **f) for i, f in enumerate(feeds)])
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: _post(port, feeds[i % 6]), range(24)))
    for i, (status, body) in enumerate(answers):
        assert status == 200, body
        for k, v in json.loads(body).items():
            np.testing.assert_array_equal(np.array(v, np.float32), expected[i % 6][k])

    here = HttpPredictor(MODEL)
    for i in (3, 7, 8):  # a NaN box, a wrong shape, a NaN image; each time a good one after
        bad, _ = _bad(i)
        status, body = _post(port, bad)
        assert (status, body) == here.respond(_body(bad))
        assert body == _expected([dict(id=i, **bad)])[i] if i == 7 else "'NaN' at" in body
        status, body = _post(port, feeds[1])
        assert status == 200
        np.testing.assert_array_equal(np.array(json.loads(body)["cls_prob"], np.float32),
                                      expected[1]["cls_prob"])
    assert "ROIPooling (node 'roi_pooling'): input 'rois'" in _post(port, _bad(7)[0])[1]
    app_status = serve.status().applications["roi"]
    assert app_status.status == "RUNNING"
    assert app_status.deployments["HttpPredictor"].replica_states == {"RUNNING": 2}
    serve.delete("roi")


def _descendants(root: int) -> set[int]:
    """root and every process below it (from /proc's parent ids)."""
    kids: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        try:
            with open(f"/proc/{d}/stat") as f:
                kids.setdefault(int(f.read().rsplit(")", 1)[1].split()[1]), []).append(int(d))
        except (OSError, ValueError, IndexError):
            continue
    out, todo = set(), [root]
    while todo:
        pid = todo.pop()
        out.add(pid)
        todo += kids.get(pid, [])
    return out


def _listening(pids: set[int]) -> list[tuple[str, int, int, str]]:
    """(address, port, pid, process name) of each TCP socket in LISTEN that ``pids`` hold,
    read from /proc/net/tcp{,6} and /proc/<pid>/fd (what ``ss -ltnp`` lists)."""
    where = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        with open(f"/proc/net/{table}") as f:
            for line in list(f)[1:]:
                cols = line.split()
                if cols[3] != "0A":  # LISTEN
                    continue
                ip, port = cols[1].split(":")
                raw = bytes.fromhex(ip)
                raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
                where[cols[9]] = (socket.inet_ntop(family, raw), int(port, 16))
    found = []
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            name = pathlib.Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            continue
        for fd in fds:
            try:
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if link.startswith("socket:[") and link[8:-1] in where:
                found.append((*where[link[8:-1]], pid, name))
    return found


def test_the_cluster_listens_on_loopback_only_while_replicas_run(prod):
    """Every listening socket of this test's Ray processes (GCS, raylet, agents, Serve's
    controller and proxy, the ingress and predictor replicas while they run, each one's
    inter-deployment gRPC server included: Ray binds it to [::], scale rebinds it to the
    node's address) is on 127.0.0.1."""
    if not os.path.exists("/proc/net/tcp"):
        pytest.skip("reads Linux's /proc")
    port = int(prod.split(":")[2].split("/")[0])
    assert _raw(prod, _body(_good(0)))[0] == 200  # the replicas run
    listening = _listening(_descendants(os.getpid()))
    replicas = {pid for _, _, pid, name in listening if name.startswith("ray::ServeRepli")}
    assert set(_predictor_pids()) <= replicas and len(replicas) >= 3  # + the ingress
    assert port in {p for _, p, _, _ in listening}
    assert {ip for ip, _, _, _ in listening} <= {"127.0.0.1", "::ffff:127.0.0.1", "::1"}, \
        [x for x in listening if x[0] not in ("127.0.0.1", "::ffff:127.0.0.1")]


def test_check_listening_names_a_socket_beyond_the_node_address():
    """check_listening reads this process's listening sockets: one on 0.0.0.0 or [::] (every
    interface) is refused naming its address and port; loopback and the node's address pass."""
    if not os.path.exists("/proc/self/net/tcp"):
        pytest.skip("reads Linux's /proc")
    scale.check_listening("127.0.0.1")  # whatever this process holds is on loopback
    for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
        with socket.socket(family) as s:
            s.bind((host, 0))
            s.listen()
            port = s.getsockname()[1]
            shown = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
            with pytest.raises(RuntimeError, match=rf"listens on .*{re.escape(shown)}.* "
                                                   r"\(every interface\), beyond the node's "
                                                   "address 127.0.0.1: refusing to serve"):
                scale.check_listening("127.0.0.1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        scale.check_listening("127.0.0.1")


def test_a_replica_that_listens_on_every_interface_refuses_to_serve(serve_port):
    """A simulated drift of Ray (its replica module's helper back in place after the
    constructor, as if Ray had renamed it or stopped calling ort_roi's: the replica's gRPC
    server on [::]): the replica fails its first health check, which Serve runs before any
    request, naming the address; ``serve.run`` raises instead of serving."""
    from ray import serve

    class Drifted(HttpPredictor):
        def __init__(self, *args):
            super().__init__(*args)
            import ray.serve._private.replica as replica

            replica.add_port_to_grpc_server = replica.add_port_to_grpc_server.ort_roi_bind

    app = serve.deployment(Drifted, num_replicas=1, ray_actor_options={"num_cpus": 0},
                           health_check_period_s=0.5).bind(MODEL)
    try:
        with pytest.raises(RuntimeError, match="Deploying application drift failed"):
            serve.run(app, name="drift", route_prefix="/drift")
        status = serve.status().applications["drift"]
        says = status.deployments["Drifted"].message
        assert status.status == "DEPLOY_FAILED"
        assert re.search(r"listens on [^\n]*\[::\]:\d+ \(every interface\), beyond the node's "
                         r"address 127.0.0.1: refusing to serve", says), says
    finally:
        serve.delete("drift")


def test_an_upload_aborted_early_never_reaches_a_replica(serve_port):
    """200 uploads that send their headers (Content-Length 100000) and 1000 bytes, then
    close: Serve's proxy, set up by worker_setup, hands a request on once its body (or 64
    KiB of it) has come, so none of them reaches the deployment: a valid request after them
    is its first call, its body whole (before, each was routed to a replica and cancelled:
    1000 of them kept the service busy for 5 s)."""
    from ray import serve
    from starlette.responses import Response

    class Counting:
        def __init__(self):
            self.calls = 0

        async def __call__(self, request):
            self.calls += 1
            body = await scale.read_body(request)
            return Response(json.dumps({"calls": self.calls, "bytes": len(body)}),
                            media_type="application/json")

    serve.run(serve.deployment(Counting, ray_actor_options={"num_cpus": 0}).bind(),
              name="abort", route_prefix="/abort")
    try:
        for _ in range(200):
            with socket.create_connection(("127.0.0.1", serve_port), timeout=30) as s:
                s.sendall(b"POST /abort HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                          b"application/json\r\nContent-Length: 100000\r\n\r\n" + b" " * 1000)
        body = _body(_good(0))
        url = f"http://127.0.0.1:{serve_port}/abort"
        status, _, text = _raw(url, body)
        assert status == 200 and json.loads(text) == {"calls": 1, "bytes": len(body)}
        status, _, text = _raw(url, body)
        assert status == 200 and json.loads(text) == {"calls": 2, "bytes": len(body)}
    finally:
        serve.delete("abort")


def test_application_refuses_replicas_the_cluster_cannot_hold(ray_cluster):
    """On the 2-CPU test cluster, 3 replicas of 1 CPU (Serve waited for the third without a
    word: serve.run blocked for 17 minutes and more) or 2 of 1.5 CPUs: a ValueError naming
    them and what the cluster holds, before anything is deployed; what fits is built."""
    for replicas, cpus, says in [(3, 1.0, "3 predictor replicas of 1 CPU each "
                                          "(cpus_per_replica) need 3 CPUs, each replica's on "
                                          "one node; the cluster's nodes hold 2 CPUs: room "
                                          "for 2"),
                                 (2, 1.5, "2 predictor replicas of 1.5 CPU each "
                                          "(cpus_per_replica) need 3 CPUs, each replica's on "
                                          "one node; the cluster's nodes hold 2 CPUs: room "
                                          "for 1")]:
        with pytest.raises(ValueError, match=re.escape(says)):
            scale.application(MODEL, replicas=replicas, cpus_per_replica=cpus)
    assert scale.application(MODEL, replicas=2) is not None
    assert scale.application(MODEL, replicas=3, check_resources=False) is not None


# --- serving that survives, serving under pressure (scale.application) ---------------------

LIMITS = Limits(max_body_bytes=1 << 20, max_depth=32, max_boxes=64, max_output_bytes=2000,
                read_timeout_s=10.0)
#: How long a wait for the cluster (a replacement replica, a load's last request) may last
#: before the test calls it a hang: seconds when all goes well, minutes on a loaded machine
HANG_S = 300


def _predictor_pids(app: str = "prod", deployment: str = "HttpPredictor") -> list[int]:
    import ray._private.state

    return sorted(a["Pid"] for a in ray._private.state.actors().values()
                  if a.get("ActorClassName") == f"ServeReplica:{app}:{deployment}"
                  and a.get("State") == "ALIVE")


def _recovered(victim: int, limit_s: float = HANG_S, app: str = "prod",
               deployment: str = "HttpPredictor") -> None:
    """Wait until 2 replicas of ``deployment`` run and ``victim`` is not one of them
    (limit_s: a hang guard)."""
    from ray import serve

    t = time.monotonic()
    while time.monotonic() - t < limit_s:
        dep = serve.status().applications[app].deployments[deployment]
        pids = _predictor_pids(app, deployment)
        if dep.replica_states == {"RUNNING": 2} and len(pids) == 2 and victim not in pids:
            return
        time.sleep(0.25)
    raise AssertionError(f"not recovered in {limit_s} s: {dep.replica_states}, {pids}")


@pytest.fixture(scope="module")
def prod(serve_port):
    """scale.application: an ingress and 2 predictor replicas (half a CPU each), small caps,
    2 requests a replica and 2 queued (so overload comes soon), health checked every 0.5 s."""
    from ray import serve

    app = scale.application(MODEL, replicas=2, cpus_per_replica=0.5, limits=LIMITS,
                            max_ongoing_requests=2, max_queued_requests=2,
                            health_check_period_s=0.5, health_check_timeout_s=1.0)
    serve.run(app, name="prod", route_prefix="/prod")
    yield f"http://127.0.0.1:{serve_port}/prod"
    serve.delete("prod")


def _raw(url: str, body: bytes, headers: dict | None = None, method: str = "POST",
         send: bytes | None = None) -> tuple[int, dict, str]:
    """One request on its own connection: (status, headers, text). ``send``: the bytes that
    actually go after the headers (fewer than Content-Length says)."""
    u = url.split("/", 3)
    host, port = u[2].split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.putrequest(method, "/" + u[3])
        for k, v in {"Content-Type": "application/json", "Content-Length": str(len(body)),
                     **(headers or {})}.items():
            conn.putheader(k, v)
        conn.endheaders(body if send is None else send)
        r = conn.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read().decode()
    finally:
        conn.close()


def test_serving_hostile_bodies_get_400s_then_an_exact_200(prod):
    """Over HTTP, through the ingress: each malformed body a 400 with its message (a 50 MB
    Content-Length refused before a byte of it is read; a chunked body stopped at the cap),
    405 / 415 for the method and content type, and each time the next request exact."""
    good = _good(2)
    want = Runner(MODEL).run(good)
    cases = [(body, {}, "POST", None, 400, says) for body, says in _hostile().values()]
    cases += [(b'{"features": ', {"Content-Length": str(50 << 20)}, "POST", b'{"features": ',
               400, "52428800 bytes (Content-Length), over the cap max_body_bytes=1048576"),
              (b"{}", {}, "GET", None, 405, "method GET is not allowed"),
              (b"{}", {"Content-Type": "text/plain"}, "POST", None, 415,
               "must be application/json, got 'text/plain'")]
    for body, headers, method, send, status, says in cases:
        got, h, text = _raw(prod, body, headers, method, send)
        assert got == status and says in text, (says, got, text)
        assert h[scale.ERROR_HEADER.lower()] in ("bad-request", "method", "content-type")
        got, _, text = _raw(prod, _body(good))
        assert got == 200, text
        _assert_exact(text, want)
    u = prod.split("/", 3)
    conn = http.client.HTTPConnection(*u[2].split(":"), timeout=30)
    conn.putrequest("POST", "/" + u[3])
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    try:
        for _ in range(40):  # 2.5 MB in chunks, no Content-Length
            conn.send(b"10000\r\n" + b" " * 0x10000 + b"\r\n")
        conn.send(b"0\r\n\r\n")
    except OSError:
        pass  # the server may stop reading once it answered
    r = conn.getresponse()
    assert r.status == 400 and b"grew over the cap max_body_bytes=1048576" in r.read()
    conn.close()


def test_serving_caps_each_give_a_400_naming_the_cap(prod):
    feed = _good(0)
    box = feed["rois"][:1]
    for rois, says in [(np.tile(box, (65, 1)), "holds 65 boxes, over the cap max_boxes=64"),
                       (np.tile(box, (21, 1)), "outputs would be 2100 bytes (as declared, "
                                               "before the run), over the cap "
                                               "max_output_bytes=2000")]:
        status, _, text = _raw(prod, _body(dict(feed, rois=rois)))
        assert status == 400 and says in text, text
    status, _, text = _raw(prod, _body(dict(feed, rois=np.tile(box, (20, 1)))))
    assert status == 200
    _assert_exact(text, Runner(MODEL).run(dict(feed, rois=np.tile(box, (20, 1)))))


def test_clients_sending_slowly_do_not_block_a_valid_request(prod):
    """6 connections (more than the predictors' 4 slots) send their headers and a few bytes
    of body, then nothing: a valid request meanwhile is answered before any slow one (not
    after them); each slow one gets 408 after read_timeout_s (10 s: room for the valid
    request on a loaded machine), not before, and the service goes on."""
    port = int(prod.split(":")[2].split("/")[0])
    slow = []
    t0 = time.monotonic()
    for _ in range(6):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /prod HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/"
                  b"json\r\nContent-Length: 100000\r\n\r\n{\"features\": [[[")
        slow.append(s)
    time.sleep(0.5)
    good = _good(3)
    status, _, text = _raw(prod, _body(good))
    assert status == 200 and select.select(slow, [], [], 0)[0] == []  # none answered yet
    _assert_exact(text, Runner(MODEL).run(good))
    for s in slow:
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 408"), head[:200]
        assert b"did not arrive within read_timeout_s=10.0" in head + s.recv(4096)
        s.close()
    assert time.monotonic() - t0 >= LIMITS.read_timeout_s  # not before the timeout
    assert _raw(prod, _body(good))[0] == 200


def _established(port: int) -> int:
    """Server-side TCP connections on 127.0.0.1:port that are ESTABLISHED (/proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        return sum(1 for line in list(f)[1:] if line.split()[3] == "01"
                   and line.split()[1] == f"0100007F:{port:04X}")


def test_idle_connections_are_closed_by_the_proxy(prod):
    """10 connections that send nothing, 5 that stop inside their headers and one idle
    after an answer (keep-alive): the proxy closes each of them (header_timeout_s=2 from
    start_local, keep_alive_timeout_s=2 from http_options; before, they stayed open for as
    long as was watched). A valid request meanwhile is answered exactly; the proxy holds no
    connection to them afterwards."""
    if not os.path.exists("/proc/net/tcp"):
        pytest.skip("reads Linux's /proc")
    port = int(prod.split(":")[2].split("/")[0])
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(10)]
    cut = []
    for _ in range(5):
        s = socket.create_connection(("127.0.0.1", port), timeout=30)
        s.sendall(b"POST /prod HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Ty")
        cut.append(s)
    assert _established(port) >= 15  # the proxy's ends of them (2 s to send headers)
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    good = _good(4)
    kept.request("POST", "/prod", _body(good), {"Content-Type": "application/json"})
    r = kept.getresponse()
    assert r.status == 200 and r.getheader("connection", "keep-alive") != "close"
    _assert_exact(r.read().decode(), Runner(MODEL).run(good))
    status, _, text = _raw(prod, _body(good))
    assert status == 200
    _assert_exact(text, Runner(MODEL).run(good))
    for s in idle + cut + [kept.sock]:
        assert s.recv(4096) == b""  # closed by the proxy (a 30 s socket timeout bounds it)
        s.close()
    assert _established(port) == 0


def test_overload_is_503_with_retry_after_and_latency_stays_bounded(prod):
    """32 clients at once, each request sent once: the predictors hold 4 and queue 2; the
    rest is answered 503 with Retry-After at once. Every 200 exact; no answer waits past
    Serve's request timeout (it would be answered 408 by Serve)."""
    client = scale.Client(prod, attempts=1)
    feeds = [_good(i) for i in range(4)]
    bodies = [_body(f) for f in feeds]
    wants = [Runner(MODEL).run(f) for f in feeds]

    def one(i: int) -> tuple[int, dict, str]:
        status, headers, data = client.send(bodies[i % 4])
        return status, headers, data.decode()

    with ThreadPoolExecutor(32) as pool:
        answers = list(pool.map(one, range(64)))
    statuses = [a[0] for a in answers]
    assert set(statuses) == {200, 503}, statuses
    for i, (status, headers, text) in enumerate(answers):
        if status == 503:
            assert headers["retry-after"] == "1" and "overloaded" in text
            assert headers[scale.ERROR_HEADER.lower()] == "overloaded"
        else:
            _assert_exact(text, wants[i % 4])


def _load(url: str, n: int, workers: int, during, limit_s: float = HANG_S):
    """n requests by ``workers`` threads through scale.Client (bounded retries), none started
    after limit_s (a hang guard); ``during()`` runs in the main thread meanwhile. The
    replies, in order."""
    client = scale.Client(url, timeout_s=30, deadline_s=40)
    feeds = [_good(i) for i in range(6)]
    bodies = [_body(f) for f in feeds]
    stop = time.monotonic() + limit_s
    with ThreadPoolExecutor(workers) as pool:
        futures = [pool.submit(lambda i=i: client.post(bodies[i % 6])
                               if time.monotonic() < stop else None) for i in range(n)]
        during()
        replies = [f.result() for f in futures]
    assert None not in replies, "the load did not finish in time"
    wants = [Runner(MODEL).run(f) for f in feeds]
    for i, r in enumerate(replies):
        assert r.status == 200, (i, r)
        _assert_exact(r.text, wants[i % 6])
    return replies


def test_killing_one_of_two_replicas_mid_load_loses_no_request(prod):
    """SIGKILL of one predictor replica's worker process while 8 clients send 160 requests:
    every answer exact (the ingress retries the lost replica's requests on the other; any
    503 the client retries); Serve starts a replacement."""
    pids = _predictor_pids()
    assert len(pids) == 2

    def kill() -> None:
        time.sleep(1.5)
        os.kill(pids[0], signal.SIGKILL)

    _load(prod, 160, 8, kill)
    _recovered(pids[0])


def test_killing_one_of_two_ingress_replicas_mid_load_loses_no_request(prod):
    """application's default is 2 ingress replicas: SIGKILL of one while 8 clients send 160
    requests through scale.Client: every answer exact (Serve's proxy sends the next ones to
    the other; the few the lost one held are Serve's own 500s, which the client retries);
    Serve starts a replacement."""
    pids = _predictor_pids(deployment="HttpIngress")
    assert len(pids) == 2

    def kill() -> None:
        time.sleep(1.5)
        os.kill(pids[0], signal.SIGKILL)

    client = scale.Client(prod, attempts=1)
    plain = []

    def kill_and_send() -> None:  # 40 plain requests, each sent once, around the kill
        with ThreadPoolExecutor(4) as pool:
            sent = pool.map(lambda i: client.send(_body(_good(i % 6))), range(40))
            kill()
            plain.extend(sent)

    replies = _load(prod, 160, 8, kill_and_send)
    _recovered(pids[0], deployment="HttpIngress")
    # what was retried: 503s only: the requests the lost ingress held (Serve's proxy got no
    # answer; uvicorn answered a bare 500, 4 of 160 once), and the small queue of this fixture
    assert all(set(r.history) <= {503} for r in replies), [r.history for r in replies]
    # a plain client, each request sent once, can tell what to retry: every answer is a 200
    # or a 503 with Retry-After and the kind of error
    for status, headers, data in plain:
        assert status == 200 or (status == 503 and headers["retry-after"] == "1" and headers[
            scale.ERROR_HEADER.lower()] in ("overloaded", "unavailable")), (status, headers, data)


def test_slowest_a_frozen_replica_is_replaced_and_its_requests_answered(prod):
    """SIGSTOP of one predictor replica while 8 clients send: its health check (the model on
    one box, every 0.5 s, 1 s to answer) fails, Serve replaces it; the requests it held are
    retried by the ingress (or 503 / 408, retried by the client): every answer exact."""
    pids = _predictor_pids()
    assert len(pids) == 2

    def freeze() -> None:
        time.sleep(1.0)
        os.kill(pids[0], signal.SIGSTOP)

    try:
        _load(prod, 200, 8, freeze)
        _recovered(pids[0])
    finally:
        try:
            os.kill(pids[0], signal.SIGCONT)
        except ProcessLookupError:
            pass
