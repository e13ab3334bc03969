#!/usr/bin/env python3
"""Load test of an ort_roi model served by Ray Serve (ort_roi.scale.HttpPredictor) on localhost.

    python -m tools.ray_load [--requests 300 --concurrency 8 --replicas 2 --cpus 2]

Starts a local Ray cluster of --cpus CPUs, deploys the model with --replicas replicas on
127.0.0.1, sends --requests JSON requests (a dozen different images of --boxes boxes each),
--concurrency at a time after a warm-up, and reports the throughput, p50 / p99 latency, the
errors and whether every answer equals the model run in this process (bit for bit). Then one
bad request (a NaN box) must get a 400 with the RoiOpError message, and a good one after it a
200. Shuts the cluster down and exits: 0 when all of it held, 1 otherwise. Needs
``pip install 'ort-roi[ray]'``.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import pathlib
import socket
import statistics
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import onnx

from ort_roi.graph.inputs import generate_inputs
from ort_roi.scale import HttpPredictor, Runner

ROOT = pathlib.Path(__file__).resolve().parents[1]
N_FEEDS = 12


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Client:
    """One keep-alive connection per thread to the local Serve proxy."""

    def __init__(self, port: int, timeout: float):
        self.port, self.timeout, self.local = port, timeout, threading.local()

    def post(self, body: bytes) -> tuple[int, bytes, float]:
        """(status, body, seconds) of one POST to /roi."""
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = self.local.conn = http.client.HTTPConnection("127.0.0.1", self.port,
                                                                timeout=self.timeout)
        t = time.perf_counter()
        try:
            conn.request("POST", "/roi", body, {"Content-Type": "application/json"})
            r = conn.getresponse()
            data = r.read()
        except (OSError, http.client.HTTPException):
            self.local.conn = None
            conn.close()
            raise
        return r.status, data, time.perf_counter() - t


def _equal(answer: bytes, expected: dict[str, np.ndarray]) -> bool:
    got = json.loads(answer)
    return set(got) == set(expected) and all(
        np.array_equal(np.array(got[k], expected[k].dtype), v) for k, v in expected.items())


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
    ap.add_argument("--json", help="write the figures to this file")
    a = ap.parse_args()

    import ray
    from ray import serve

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
    bad_message = HttpPredictor(a.model).respond(
        json.dumps({k: v.tolist() for k, v in bad.items()}).encode())[1]

    port = _free_port()
    ray.init(num_cpus=a.cpus, include_dashboard=False, log_to_driver=False)
    try:
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        app = serve.deployment(HttpPredictor, num_replicas=a.replicas, ray_actor_options={
            "num_cpus": min(1.0, a.cpus / a.replicas)}).bind(a.model, a.threads)
        serve.run(app, name="roi", route_prefix="/roi")
        client = Client(port, a.timeout)

        def one(i: int) -> tuple[int, bool, float]:
            try:
                status, data, dt = client.post(bodies[i % N_FEEDS])
            except (OSError, http.client.HTTPException):
                return 0, False, float("nan")
            return status, status == 200 and _equal(data, expected[i % N_FEEDS]), dt

        with ThreadPoolExecutor(a.concurrency) as pool:
            list(pool.map(one, range(2 * a.concurrency)))  # warm-up, not counted
            t = time.perf_counter()
            results = list(pool.map(one, range(a.requests)))
            wall = time.perf_counter() - t

        status, data, _ = client.post(json.dumps({k: v.tolist() for k, v in bad.items()})
                                      .encode())
        bad_ok = status == 400 and data.decode() == bad_message
        status, data, _ = client.post(bodies[1])
        after_ok = status == 200 and _equal(data, expected[1])
    finally:
        serve.shutdown()
        ray.shutdown()

    lat = sorted(dt * 1e3 for s, _, dt in results if s == 200)
    errors = sum(s != 200 for s, _, _ in results)
    equal = sum(ok for _, ok, _ in results)
    fig = {
        "model": os.path.relpath(a.model, ROOT), "boxes": a.boxes, "requests": a.requests,
        "concurrency": a.concurrency, "replicas": a.replicas, "cpus": a.cpus,
        "cores": os.cpu_count(), "threads_per_replica": a.threads,
        "request_bytes": len(bodies[0]),
        "throughput_rps": round(a.requests / wall, 1),
        "p50_ms": round(statistics.median(lat), 1) if lat else None,
        "p99_ms": round(lat[min(len(lat) - 1, int(0.99 * len(lat)))], 1) if lat else None,
        "errors": errors, "outputs_equal": equal == a.requests,
        "bad_request_400_with_message": bad_ok, "served_after_bad_request": after_ok,
        "in_process_runs_per_s": round(in_process, 1),
    }
    print(f"{a.requests} requests, {a.concurrency} concurrent, {a.replicas} replicas "
          f"({a.cpus} CPUs, {os.cpu_count()} cores), {fig['model']} with {a.boxes} boxes "
          f"({fig['request_bytes'] // 1024} KiB a request)")
    print(f"throughput {fig['throughput_rps']} req/s, p50 {fig['p50_ms']} ms, "
          f"p99 {fig['p99_ms']} ms, errors {errors}, outputs equal to one process: "
          f"{equal}/{a.requests}")
    print(f"bad request: 400 with the RoiOpError message: {bad_ok}; served after it: "
          f"{after_ok}")
    print(f"(the model alone in this process, one thread, no HTTP: {fig['in_process_runs_per_s']}"
          f" runs/s)")
    if a.json:
        pathlib.Path(a.json).write_text(json.dumps(fig, indent=1) + "\n")
    return 0 if errors == 0 and equal == a.requests and bad_ok and after_ok else 1


if __name__ == "__main__":
    sys.exit(main())
