"""ort_roi inside Ray (ort_roi.scale): batch inference with Ray Data over 2 actors and HTTP
serving with Ray Serve over 2 replicas, on a bounded local cluster (2 CPUs, every server on
127.0.0.1) started once for the module and shut down at its end. Results are held to the same
model run in this process, bit for bit; bad rows and requests get the RoiOpError message (or
the cap they are over) and the workers go on.

Serving that survives and serving under pressure, on ``scale.application`` (an ingress and 2
predictor replicas): hostile bodies, caps, slow clients, overload, a replica killed and one
frozen mid-load. Every load is bounded in requests and time. The tests that need no cluster
(the callables, the body checks, the client) are tests/test_ray_local.py.
"""

from __future__ import annotations

import http.client
import http.server
import json
import os
import pathlib
import re
import select
import signal
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx
import pytest

from ort_roi import scale
from ort_roi.graph.inputs import generate_inputs
from ort_roi.scale import BatchPredictor, HttpPredictor, Limits, Runner
from tests.ray_helpers import (BAD, MODEL, assert_exact, bad_feed, expected_of, feed_rows,
                               good_feed, hostile_bodies, json_body)


# --- on a local Ray cluster -----------------------------------------------------------------

@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray", reason="needs ray: pip install '.[ray]'")
    pytest.importorskip("ray.data", reason="needs ray: pip install '.[ray]'")
    pytest.importorskip("ray.serve", reason="needs ray: pip install '.[ray]'")
    # every server on 127.0.0.1; a connection to Serve's proxy sends its headers within 5 s
    # (the tests' clients send theirs with the connect; idle ones are closed then)
    scale.start_local(num_cpus=2, header_timeout_s=5, log_to_driver=False)
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
    rows = feed_rows(16)
    rows[5]["rois"] = rows[5]["rois"].astype(np.float64)
    rows[9]["rois"] = rows[9]["rois"].astype(np.float64)
    rows[9]["rois"][0, 3] = 1e39
    ds = ray.data.from_items(rows, override_num_blocks=4)
    out = scale.predict_batches(ds, MODEL, actors=2, batch_size=2, num_cpus=1).take_all()
    expected = expected_of(rows)
    expected[5] = expected_of([dict(rows[5], rois=rows[5]["rois"].astype(np.float32))])[5]
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
    expected = expected_of([r for r in rows if r["id"] not in bad], cast=True)
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
    expected = expected_of([r for r in rows if r["id"] != 2])
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
    rows = [dict(id=i, **good_feed(i)) for i in range(4)]
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

    rows = [dict(id=i, **good_feed(i)) for i in range(16)]
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
    expected = expected_of(rows)
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

    rows = [dict(id=i, **good_feed(i)) for i in range(16)]
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
    expected = expected_of(rows)
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
    """Serve's proxy on 127.0.0.1, every request bounded to 60 s (then 408: past the
    ingress's read_timeout_s of 30 s, which the slow-client test waits for)."""
    from ray import serve

    port = _free_port()
    serve.start(http_options=scale.http_options(port=port, request_timeout_s=60,
                                                keep_alive_timeout_s=2))
    return port


def test_ray_serve_two_replicas_equal_one_process_bad_request_4xx(serve_port):
    from ray import serve

    port = serve_port
    app = serve.deployment(HttpPredictor, num_replicas=2,
                           ray_actor_options={"num_cpus": 0.5}).bind(MODEL)
    serve.run(app, name="roi", route_prefix="/roi")
    feeds = [good_feed(i) for i in range(6)]
    expected = expected_of([dict(id=i, **f) for i, f in enumerate(feeds)])
    with ThreadPoolExecutor(4) as pool:
        answers = list(pool.map(lambda i: _post(port, feeds[i % 6]), range(24)))
    for i, (status, body) in enumerate(answers):
        assert status == 200, body
        for k, v in json.loads(body).items():
            np.testing.assert_array_equal(np.array(v, np.float32), expected[i % 6][k])

    here = HttpPredictor(MODEL)
    for i in (3, 7, 8):  # a NaN box, a wrong shape, a NaN image; each time a good one after
        bad, _ = bad_feed(i)
        status, body = _post(port, bad)
        assert (status, body) == here.respond(json_body(bad))
        assert body == expected_of([dict(id=i, **bad)])[i] if i == 7 else "'NaN' at" in body
        status, body = _post(port, feeds[1])
        assert status == 200
        np.testing.assert_array_equal(np.array(json.loads(body)["cls_prob"], np.float32),
                                      expected[1]["cls_prob"])
    assert "ROIPooling (node 'roi_pooling'): input 'rois'" in _post(port, bad_feed(7)[0])[1]
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
    assert _raw(prod, json_body(good_feed(0)))[0] == 200  # the replicas run
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
    is its first call, its body whole (routed and cancelled instead, 1000 of them would keep
    the service busy for seconds)."""
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
        body = json_body(good_feed(0))
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
                read_timeout_s=30.0)
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
                            health_check_period_s=0.5, health_check_timeout_s=10.0)
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
    good = good_feed(2)
    want = Runner(MODEL).run(good)
    cases = [(body, {}, "POST", None, 400, says) for body, says in hostile_bodies().values()]
    cases += [(b'{"features": ', {"Content-Length": str(50 << 20)}, "POST", b'{"features": ',
               400, "52428800 bytes (Content-Length), over the cap max_body_bytes=1048576"),
              (b"{}", {}, "GET", None, 405, "method GET is not allowed"),
              (b"{}", {"Content-Type": "text/plain"}, "POST", None, 415,
               "must be application/json, got 'text/plain'")]
    for body, headers, method, send, status, says in cases:
        got, h, text = _raw(prod, body, headers, method, send)
        assert got == status and says in text, (says, got, text)
        assert h[scale.ERROR_HEADER.lower()] in ("bad-request", "method", "content-type")
        got, _, text = _raw(prod, json_body(good))
        assert got == 200, text
        assert_exact(text, want)
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
    feed = good_feed(0)
    box = feed["rois"][:1]
    for rois, says in [(np.tile(box, (65, 1)), "holds 65 boxes, over the cap max_boxes=64"),
                       (np.tile(box, (21, 1)), "outputs would be 2100 bytes (as declared, "
                                               "before the run), over the cap "
                                               "max_output_bytes=2000")]:
        status, _, text = _raw(prod, json_body(dict(feed, rois=rois)))
        assert status == 400 and says in text, text
    status, _, text = _raw(prod, json_body(dict(feed, rois=np.tile(box, (20, 1)))))
    assert status == 200
    assert_exact(text, Runner(MODEL).run(dict(feed, rois=np.tile(box, (20, 1)))))


def test_clients_sending_slowly_do_not_block_a_valid_request(prod):
    """6 connections (more than the predictors' 4 slots) send their headers and a few bytes
    of body, then nothing: a valid request meanwhile is answered before any slow one (not
    after them); each slow one gets 408 after read_timeout_s (30 s: room for the valid
    request on a loaded machine), not before, and the service goes on."""
    port = int(prod.split(":")[2].split("/")[0])
    slow = []
    t0 = time.monotonic()
    for _ in range(6):
        s = socket.create_connection(("127.0.0.1", port), timeout=HANG_S)
        s.sendall(b"POST /prod HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/"
                  b"json\r\nContent-Length: 100000\r\n\r\n{\"features\": [[[")
        slow.append(s)
    time.sleep(0.5)
    good = good_feed(3)
    status, _, text = _raw(prod, json_body(good))
    assert status == 200 and select.select(slow, [], [], 0)[0] == []  # none answered yet
    assert_exact(text, Runner(MODEL).run(good))
    for s in slow:
        head = s.recv(4096)
        assert head.startswith(b"HTTP/1.1 408"), head[:200]
        assert b"did not arrive within read_timeout_s=30.0" in head + s.recv(4096)
        s.close()
    assert time.monotonic() - t0 >= LIMITS.read_timeout_s  # not before the timeout
    assert _raw(prod, json_body(good))[0] == 200


def _established(port: int) -> int:
    """Server-side TCP connections on 127.0.0.1:port that are ESTABLISHED (/proc/net/tcp)."""
    with open("/proc/net/tcp") as f:
        return sum(1 for line in list(f)[1:] if line.split()[3] == "01"
                   and line.split()[1] == f"0100007F:{port:04X}")


def test_idle_connections_are_closed_by_the_proxy(prod):
    """10 connections that send nothing, 5 that stop inside their headers and one idle
    after an answer (keep-alive): the proxy closes each of them (header_timeout_s=5 from
    start_local, keep_alive_timeout_s=2 from http_options). A valid request meanwhile is answered exactly; the proxy holds no
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
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    good = good_feed(4)
    kept.request("POST", "/prod", json_body(good), {"Content-Type": "application/json"})
    r = kept.getresponse()
    assert r.status == 200 and r.getheader("connection", "keep-alive") != "close"
    assert_exact(r.read().decode(), Runner(MODEL).run(good))
    status, _, text = _raw(prod, json_body(good))
    assert status == 200
    assert_exact(text, Runner(MODEL).run(good))
    for s in idle + cut + [kept.sock]:
        assert s.recv(4096) == b""  # closed by the proxy (a 30 s socket timeout bounds it)
        s.close()
    assert _established(port) == 0


def test_overload_is_503_with_retry_after_and_latency_stays_bounded(prod):
    """32 clients at once, each request sent once: the predictors hold 4 and queue 2; the
    rest is answered 503 with Retry-After at once. Every 200 exact; no answer waits past
    Serve's request timeout (it would be answered 408 by Serve)."""
    client = scale.Client(prod, attempts=1)
    feeds = [good_feed(i) for i in range(4)]
    bodies = [json_body(f) for f in feeds]
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
            assert_exact(text, wants[i % 4])


def _load(url: str, n: int, workers: int, during, limit_s: float = HANG_S):
    """n requests by ``workers`` threads through scale.Client (bounded retries), none started
    after limit_s (a hang guard); ``during()`` runs in the main thread meanwhile. The
    replies, in order."""
    client = scale.Client(url, timeout_s=30, deadline_s=40)
    feeds = [good_feed(i) for i in range(6)]
    bodies = [json_body(f) for f in feeds]
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
        assert_exact(r.text, wants[i % 6])
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
            sent = pool.map(lambda i: client.send(json_body(good_feed(i % 6))), range(40))
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
    one box, every 0.5 s, 10 s to answer) fails, Serve replaces it; the requests it held are
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
