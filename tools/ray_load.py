#!/usr/bin/env python3
"""Load test of an ort_roi model served by Ray Serve (ort_roi.scale.application) on 127.0.0.1.

    python -m tools.ray_load [--requests 300 --concurrency 8 --replicas 2 --cpus 2]
    python -m tools.ray_load --fault kill      # SIGKILL one replica mid-run
    python -m tools.ray_load --fault stop      # SIGSTOP one replica mid-run (frozen)
    python -m tools.ray_load --fault kill-ingress   # SIGKILL one ingress replica mid-run
    python -m tools.ray_load --clients 32 64   # overload: 32, then 64 clients at once
    python -m tools.ray_load --aborted 1000    # aborted uploads, then a valid request
    python -m tools.ray_load --big 25          # requests of 10,000 boxes: replicas' RSS

Starts a local Ray cluster of --cpus CPUs on 127.0.0.1 only (``scale.start_local``), deploys
the model as ``scale.application`` (an ingress and --replicas predictor replicas; --single:
``ingress=False``, the predictors alone) behind Serve's proxy on 127.0.0.1, and sends JSON
requests (a dozen different images of --boxes boxes each).

- The plain run: --requests requests, --concurrency at a time after a warm-up, each sent once
  (no retry); the throughput, p50 / p99 latency, the errors and whether every answer equals
  the model run in this process (bit for bit). Then one bad request (a NaN box) must get a
  400 with the RoiOpError message, and a good one after it a 200.
- --fault kill|stop|kill-ingress: the same load through ``scale.Client`` (the documented
  client: bounded retries of 503 / 408 / Serve's own 5xx); --fault-at seconds in, one
  predictor replica's (kill-ingress: one ingress replica's)
  worker process gets SIGKILL or SIGSTOP. Reports the requests lost (no exact 200 after the
  client's retries), the answers the clients retried, the time until Serve runs --replicas
  healthy replicas again (the faulted one gone), and p50 / p99 of the requests sent meanwhile.
- --clients N ...: for each N, N clients send back to back for --duration seconds, each sent
  once; a 503 makes that client wait its Retry-After (as a client should). Reports answers
  by status, p50 / p99 of the 200s and of all answers.

Every run is bounded: by --requests and --duration (seconds of load per run). Shuts the
cluster down and exits: 0 when all of it held, 1 otherwise. Needs ``pip install '.[ray]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx

from ort_roi import scale
from ort_roi.graph.inputs import generate_inputs
from ort_roi.scale import HttpPredictor, Runner

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_FEEDS = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _equal(answer: str, expected: dict[str, np.ndarray]) -> bool:
    got = json.loads(answer)
    return set(got) == set(expected) and all(
        np.array_equal(np.array(got[k], expected[k].dtype), v) for k, v in expected.items())


def _pct(values: list[float], q: float) -> float | None:
    v = sorted(values)
    return round(v[min(len(v) - 1, int(q * len(v)))], 1) if v else None


def predictor_pids(app: str = "roi", deployment: str = "HttpPredictor") -> list[int]:
    """The pids of the live predictor replicas' worker processes (from Ray's actor table)."""
    import ray._private.state

    names = {f"ServeReplica:{app}:{deployment}"}
    return sorted(a["Pid"] for a in ray._private.state.actors().values()
                  if a.get("ActorClassName") in names and a.get("State") == "ALIVE")


def wait_recovered(replicas: int, gone: int, since: float, limit_s: float,
                   deployment: str = "HttpPredictor", app: str = "roi") -> float | None:
    """Seconds from ``since`` until ``replicas`` replicas of ``deployment`` run and ``gone``
    is not one of them; None if not within ``limit_s``."""
    from ray import serve

    while time.monotonic() - since < limit_s:
        pids = predictor_pids(app, deployment)
        try:
            states = serve.status().applications[app].deployments[deployment] \
                .replica_states
        except Exception:  # noqa: BLE001 - the controller is busy: poll again
            states = {}
        if gone not in pids and len(pids) == replicas and states == {"RUNNING": replicas}:
            return time.monotonic() - since
        time.sleep(0.2)
    return None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=str(ROOT / "models" / "fast_rcnn_head.onnx"))
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--replicas", type=int, default=2)
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    ap.add_argument("--threads", type=int, default=1,
                    help="onnxruntime intra-op threads per replica")
    ap.add_argument("--boxes", type=int, default=16, help="boxes per image")
    ap.add_argument("--timeout", type=float, default=60, help="seconds per request")
    ap.add_argument("--single", action="store_true",
                    help="application(ingress=False): the predictors alone, one hop less")
    ap.add_argument("--ingress-replicas", type=int, default=2,
                    help="HttpIngress replicas (the figures of docs/scaling.md: 1)")
    ap.add_argument("--max-ongoing", type=int, default=2, help="per predictor replica")
    ap.add_argument("--max-queued", type=int, default=16, help="queued for the predictors")
    ap.add_argument("--health-period", type=float, default=2.0)
    ap.add_argument("--health-timeout", type=float, default=2.0)
    ap.add_argument("--request-timeout", type=float, default=30.0,
                    help="Serve's request_timeout_s")
    ap.add_argument("--fault", choices=("kill", "stop", "kill-ingress"))
    ap.add_argument("--fault-at", type=float, default=3.0, help="seconds into the fault run")
    ap.add_argument("--clients", type=int, nargs="*", default=[],
                    help="overload runs: this many clients at once, one run each")
    ap.add_argument("--duration", type=float, default=40.0,
                    help="seconds of load at most per run (overload runs: exactly)")
    ap.add_argument("--aborted", type=int, default=0,
                    help="this many uploads that send headers (Content-Length 100000) and "
                         "1000 bytes, then close; then one valid request timed (and as many "
                         "bare connect-close first, to compare)")
    ap.add_argument("--big", type=int, default=0,
                    help="this many requests of --big-boxes boxes; the predictor replicas' "
                         "RSS before, after and 5 s idle")
    ap.add_argument("--big-boxes", type=int, default=10000)
    ap.add_argument("--json", help="write the figures to this file")
    a = ap.parse_args()

    model = onnx.load(a.model)
    feeds = [generate_inputs(model, r=a.boxes, seed=i) for i in range(N_FEEDS)]
    runner = Runner(a.model, intra_op_threads=a.threads)
    expected = [runner.run(f) for f in feeds]
    bodies = [json.dumps({k: v.tolist() for k, v in f.items()}).encode() for f in feeds]
    t = time.perf_counter()
    for i in range(a.requests):
        runner.run(feeds[i % N_FEEDS])
    in_process = a.requests / (time.perf_counter() - t)
    bad = {k: v.copy() for k, v in feeds[0].items()}
    next(v for k, v in bad.items() if v.ndim == 2)[0, 1] = np.nan  # a NaN box
    bad_body = json.dumps({k: v.tolist() for k, v in bad.items()}).encode()
    bad_message = HttpPredictor(a.model).respond(bad_body)[1]

    port = _free_port()
    fig: dict = {
        "model": os.path.relpath(a.model, ROOT), "boxes": a.boxes, "replicas": a.replicas,
        "cpus": a.cpus, "cores": os.cpu_count(), "threads_per_replica": a.threads,
        "form": "ingress=False" if a.single else "ingress + predictors",
        "max_ongoing_requests": a.max_ongoing, "max_queued_requests": a.max_queued,
        "request_bytes": len(bodies[0]), "in_process_runs_per_s": round(in_process, 1)}
    ok = True
    scale.start_local(num_cpus=a.cpus, log_to_driver=False)
    from ray import serve

    try:
        serve.start(http_options=scale.http_options(port=port,
                                                    request_timeout_s=a.request_timeout))
        app = scale.application(
            a.model, replicas=a.replicas, cpus_per_replica=min(1.0, a.cpus / a.replicas),
            intra_op_threads=a.threads, max_ongoing_requests=a.max_ongoing,
            max_queued_requests=a.max_queued, health_check_period_s=a.health_period,
            health_check_timeout_s=a.health_timeout, ingress=not a.single,
            ingress_replicas=a.ingress_replicas)
        serve.run(app, name="roi", route_prefix="/roi")
        url = f"http://127.0.0.1:{port}/roi"
        once = scale.Client(url, attempts=1, timeout_s=a.timeout)

        def one(client: scale.Client, i: int) -> tuple[float, float, scale.Reply, bool]:
            """(start, seconds, reply, equal to the one-process run) of request i."""
            t0 = time.monotonic()
            r = client.post(bodies[i % N_FEEDS])
            return (t0, time.monotonic() - t0, r,
                    r.status == 200 and _equal(r.text, expected[i % N_FEEDS]))

        with ThreadPoolExecutor(a.concurrency) as pool:
            list(pool.map(lambda i: one(once, i), range(2 * a.concurrency)))  # warm-up

        if a.aborted:
            ok &= aborted(a, fig, port, once, bodies, expected)
        if a.big:
            ok &= big(a, fig, once, model, runner)
        if not a.fault and not a.clients and not a.aborted and not a.big:
            ok &= plain(a, fig, once, one, bad_body, bad_message, bodies, expected)
        if a.fault:
            ok &= fault(a, fig, url, one)
        for n in a.clients:
            ok &= overload(a, fig, n, one, url)
    finally:
        serve.shutdown()
        import ray

        ray.shutdown()
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(fig, indent=1) + "\n")
    return 0 if ok else 1


def _bounded_map(a, workers: int, fn, n: int) -> list:
    """fn(i) for i < n on ``workers`` threads; none started after --duration seconds."""
    stop = time.monotonic() + a.duration
    with ThreadPoolExecutor(workers) as pool:
        return [r for r in pool.map(lambda i: fn(i) if time.monotonic() < stop else None,
                                    range(n)) if r is not None]


def _ms(results, status: int | None = 200) -> list[float]:
    return [dt * 1e3 for _, dt, r, _ in results if status is None or r.status == status]


def plain(a, fig, once, one, bad_body, bad_message, bodies, expected) -> bool:
    """The plain run: each request sent once."""
    t = time.monotonic()
    results = _bounded_map(a, a.concurrency, lambda i: one(once, i), a.requests)
    wall = time.monotonic() - t
    done = len(results)
    errors = sum(r.status != 200 for _, _, r, _ in results)
    equal = sum(e for *_, e in results)
    lat = _ms(results)
    r = once.post(bad_body)
    bad_ok = r.status == 400 and r.text == bad_message
    r = once.post(bodies[1])
    after_ok = r.status == 200 and _equal(r.text, expected[1])
    fig.update({"requests": done, "concurrency": a.concurrency,
                "throughput_rps": round(done / wall, 1), "p50_ms": _pct(lat, 0.5),
                "p99_ms": _pct(lat, 0.99), "errors": errors, "outputs_equal": equal == done,
                "bad_request_400_with_message": bad_ok, "served_after_bad_request": after_ok})
    print(f"{done} requests, {a.concurrency} concurrent, {a.replicas} replicas "
          f"({a.cpus} CPUs, {os.cpu_count()} cores, {fig['form']}), {fig['model']} with "
          f"{a.boxes} boxes ({fig['request_bytes'] // 1024} KiB a request)")
    print(f"throughput {fig['throughput_rps']} req/s, p50 {fig['p50_ms']} ms, "
          f"p99 {fig['p99_ms']} ms, errors {errors}, outputs equal to one process: "
          f"{equal}/{done}")
    print(f"bad request: 400 with the RoiOpError message: {bad_ok}; served after it: "
          f"{after_ok}")
    print(f"(the model alone in this process, one thread, no HTTP: "
          f"{fig['in_process_runs_per_s']} runs/s)")
    return errors == 0 and equal == done and bad_ok and after_ok


def _timed_valid(once, bodies, expected) -> tuple[float, bool]:
    t = time.monotonic()
    r = once.post(bodies[2])
    return time.monotonic() - t, r.status == 200 and _equal(r.text, expected[2])


def aborted(a, fig, port, once, bodies, expected) -> bool:
    """--aborted N: N bare connect-close, a valid request timed; N aborted uploads (headers
    saying 100000 bytes, 1000 sent, closed), a valid request timed."""
    base, base_ok = _timed_valid(once, bodies, expected)
    out = {"n": a.aborted, "valid_idle_s": round(base, 3)}
    for kind in ("connect_close", "aborted_upload"):
        t = time.monotonic()
        for _ in range(a.aborted):
            s = socket.create_connection(("127.0.0.1", port), timeout=10)
            if kind == "aborted_upload":
                s.sendall(b"POST /roi HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
                          b"application/json\r\nContent-Length: 100000\r\n\r\n" +
                          b" " * 1000)
            s.close()
        sent = time.monotonic() - t
        waits = []
        for _ in range(20):  # the stall may come once the proxy has taken them all in
            dt, good = _timed_valid(once, bodies, expected)
            waits.append(dt)
            base_ok &= good
        out[kind] = {"send_s": round(sent, 2), "valid_after_s": round(waits[0], 2),
                     "valid_slowest_of_20_s": round(max(waits), 2),
                     "twenty_valid_s": round(sum(waits), 2), "valid_exact": base_ok}
        time.sleep(2.0)  # let the service settle before the next kind
    fig["aborted"] = out
    for kind in ("connect_close", "aborted_upload"):
        k = out[kind]
        print(f"--aborted {a.aborted}: {kind.replace('_', ' ')} x {a.aborted} (sent in "
              f"{k['send_s']} s), then 20 valid requests one after another: the first "
              f"{k['valid_after_s']} s, the slowest {k['valid_slowest_of_20_s']} s, all 20 "
              f"{k['twenty_valid_s']} s (one alone, idle: {out['valid_idle_s']} s)")
    print(f"answers exact: {base_ok}")
    return base_ok


def _rss_mb(pids: list[int]) -> list[float]:
    out = []
    for pid in pids:
        try:
            for line in open(f"/proc/{pid}/status"):
                if line.startswith("VmRSS:"):
                    out.append(round(int(line.split()[1]) / 1024, 1))
        except OSError:
            out.append(-1.0)
    return out


def big(a, fig, once, model, runner) -> bool:
    """--big N: N requests of --big-boxes boxes, one at a time; the predictors' RSS."""
    feed = generate_inputs(model, r=a.big_boxes, seed=99)
    want = runner.run(feed)
    body = json.dumps({k: v.tolist() for k, v in feed.items()}).encode()
    pids = predictor_pids()
    before = _rss_mb(pids)
    good = 0
    for _ in range(a.big):
        r = once.post(body)
        good += r.status == 200 and _equal(r.text, want)
    after = _rss_mb(pids)
    time.sleep(5.0)
    idle = _rss_mb(pids)
    fig["big"] = {"requests": a.big, "boxes": a.big_boxes, "body_bytes": len(body),
                  "rss_before_mb": before, "rss_after_mb": after, "rss_idle_mb": idle,
                  "exact": good}
    print(f"--big {a.big}: {a.big_boxes} boxes ({len(body) // 1024} KiB a request), {good} "
          f"exact; predictor RSS MB before {before}, after {after}, 5 s idle {idle}")
    return good == a.big


def fault(a, fig, url, one) -> bool:
    """The fault run: the documented client's load, one replica killed or stopped."""
    client = scale.Client(url, timeout_s=a.timeout, deadline_s=a.request_timeout * 2)
    sig = signal.SIGSTOP if a.fault == "stop" else signal.SIGKILL
    deployment = "HttpIngress" if a.fault == "kill-ingress" else "HttpPredictor"
    pids = predictor_pids(deployment=deployment)
    victim, hit, recovered = pids[0], {}, {}

    def injector() -> None:
        time.sleep(a.fault_at)
        hit["t"] = time.monotonic()
        os.kill(victim, sig)
        recovered["s"] = wait_recovered(
            a.ingress_replicas if deployment == "HttpIngress" else a.replicas, victim,
            hit["t"], a.duration + 60, deployment)

    th = threading.Thread(target=injector, daemon=True)
    t = time.monotonic()
    th.start()
    results = _bounded_map(a, a.concurrency, lambda i: one(client, i), a.requests)
    wall = time.monotonic() - t
    th.join(a.duration + 90)
    if sig == signal.SIGSTOP:
        try:  # Serve kills it when it replaces it; never leave one stopped
            os.kill(victim, signal.SIGCONT)
        except ProcessLookupError:
            pass
    done = len(results)
    lost = sum(not e for *_, e in results)
    retried = sum(r.attempts > 1 for _, _, r, _ in results)
    seen = {}
    for _, _, r, _ in results:
        for h in r.history:
            seen[str(h)] = seen.get(str(h), 0) + 1
    t_fault, rec = hit.get("t"), recovered.get("s")
    end = t_fault + rec if (t_fault and rec) else float("inf")
    during = [dt * 1e3 for t0, dt, r, _ in results if t_fault and t_fault <= t0 + dt
              and t0 <= end]
    fig[f"fault_{a.fault}"] = f = {
        "requests": done, "concurrency": a.concurrency, "lost": lost,
        "retried_by_client": retried, "failed_tries_seen": seen,
        "recovered_s": round(rec, 1) if rec is not None else None,
        "during_recovery": len(during), "p50_during_ms": _pct(during, 0.5),
        "p99_during_ms": _pct(during, 0.99), "max_during_ms": _pct(during, 1.0),
        "p99_all_ms": _pct(_ms(results, None), 0.99),
        "throughput_rps": round(done / wall, 1)}
    print(f"--fault {a.fault}: SIGKILL" if sig == signal.SIGKILL else "--fault stop: SIGSTOP",
          f"one of the {deployment} replicas {a.fault_at} s into {done} requests "
          f"({a.concurrency} concurrent, scale.Client: bounded retries)")
    print(f"requests lost: {lost}; retried by the client: {retried} (failed tries: {seen}); "
          f"recovered ({a.replicas} replicas running, the faulted one gone) in "
          f"{f['recovered_s']} s; {len(during)} requests meanwhile: p50 {f['p50_during_ms']} "
          f"ms, p99 {f['p99_during_ms']} ms, slowest {f['max_during_ms']} ms (all requests: p99 "
          f"{f['p99_all_ms']} ms)")
    return lost == 0 and rec is not None


def overload(a, fig, n: int, one, url) -> bool:
    """n clients back to back for --duration s, each request sent once; a 503 makes its
    client wait the Retry-After."""
    once = scale.Client(url, attempts=1, timeout_s=a.timeout)
    stop = time.monotonic() + a.duration
    results: list = []
    lock = threading.Lock()

    def client(k: int) -> None:
        i = k
        while time.monotonic() < stop:
            res = one(once, i)
            with lock:
                results.append(res)
            if res[2].status == 503:
                time.sleep(1.0)
            i += n

    t = time.monotonic()
    threads = [threading.Thread(target=client, args=(k,), daemon=True) for k in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(a.duration + a.timeout + 10)
    wall = time.monotonic() - t
    by = {}
    for _, _, r, _ in results:
        by[r.status] = by.get(r.status, 0) + 1
    wrong = sum(r.status == 200 and not e for _, _, r, e in results)
    ok200 = _ms(results)
    fig[f"overload_{n}"] = f = {
        "clients": n, "seconds": round(wall, 1), "answers": by,
        "ok_per_s": round(by.get(200, 0) / wall, 1), "p50_ok_ms": _pct(ok200, 0.5),
        "p99_ok_ms": _pct(ok200, 0.99), "p99_503_ms": _pct(_ms(results, 503), 0.99),
        "max_ms": round(max(_ms(results, None), default=0), 1), "wrong_outputs": wrong}
    print(f"--clients {n}: {wall:.0f} s, answers {by}, {f['ok_per_s']} ok/s; 200s: p50 "
          f"{f['p50_ok_ms']} ms, p99 {f['p99_ok_ms']} ms; 503s: p99 {f['p99_503_ms']} ms; "
          f"slowest {f['max_ms']} ms; wrong outputs {wrong}")
    return wrong == 0 and set(by) <= {200, 503}


if __name__ == "__main__":
    sys.exit(main())
