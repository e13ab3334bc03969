"""ort_roi inside Ray (ort_roi.scale): batch inference with Ray Data over 2 actors and HTTP
serving with Ray Serve over 2 replicas, on a bounded local cluster (2 CPUs) started once for
the module and shut down at its end. Results are held to the same model run in this process,
bit for bit; bad rows and requests get the RoiOpError message and the workers go on.

The tests that need no cluster (the callables themselves, in this process) run without Ray.
"""

from __future__ import annotations

import http.client
import json
import pathlib
import socket
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest

from ort_roi.graph.inputs import generate_inputs
from ort_roi.scale import BatchPredictor, HttpPredictor, Runner

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


def _expected(rows: list[dict]) -> dict[int, dict | str]:
    """id -> outputs, or the RoiOpError message, of the model run in this process."""
    runner, out = Runner(MODEL), {}
    for row in rows:
        try:
            out[row["id"]] = runner.run(row)
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
    feed, _ = _bad(3)
    status, body = h.respond(json.dumps({k: v.tolist() for k, v in feed.items()}).encode())
    assert (status, body) == (400, _expected([dict(id=0, **feed)])[0])
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


# --- on a local Ray cluster -----------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="needs ray: pip install 'ort-roi[ray]'")
    pytest.importorskip("ray.data", reason="needs ray: pip install 'ort-roi[ray]'")
    pytest.importorskip("ray.serve", reason="needs ray: pip install 'ort-roi[ray]'")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        yield ray
    finally:
        from ray import serve

        serve.shutdown()
        ray.shutdown()


def test_ray_data_two_actors_equal_one_process_bad_rows_per_row(ray_cluster):
    ray = ray_cluster
    rows = _rows(16)
    ds = ray.data.from_items(rows, override_num_blocks=4)
    out = ds.map_batches(BatchPredictor, fn_constructor_kwargs={"model": MODEL},
                         concurrency=2, batch_size=2, num_cpus=1).take_all()
    expected = _expected(rows)
    assert sorted(r["id"] for r in out) == list(range(16))  # every row back: no actor lost
    for r in out:
        want = expected[r["id"]]
        if r["id"] in BAD:
            assert r["error"] == want  # the message; outputs empty, never NaN
            assert r["cls_prob"].shape == (0, 5) and r["bbox_pred"].shape == (0, 20)
        else:
            assert r["error"] is None, r["error"]
            for k in ("cls_prob", "bbox_pred"):
                np.testing.assert_array_equal(r[k], want[k])


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


def test_ray_serve_two_replicas_equal_one_process_bad_request_4xx(ray_cluster):
    from ray import serve

    port = _free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
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

    for i in (3, 7, 8):  # a NaN box, a wrong shape, a NaN image; each time a good one after
        bad, _ = _bad(i)
        status, body = _post(port, bad)
        assert status == 400 and body == _expected([dict(id=i, **bad)])[i]
        status, body = _post(port, feeds[1])
        assert status == 200
        np.testing.assert_array_equal(np.array(json.loads(body)["cls_prob"], np.float32),
                                      expected[1]["cls_prob"])
    assert "ROIPooling (node 'roi_pooling'): input 'rois'" in _post(port, _bad(3)[0])[1]
    app_status = serve.status().applications["roi"]
    assert app_status.status == "RUNNING"
    assert app_status.deployments["HttpPredictor"].replica_states == {"RUNNING": 2}
    serve.delete("roi")
