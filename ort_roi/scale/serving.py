"""The Ray Serve application: [`HttpIngress`][ort_roi.scale.HttpIngress] (reads each request and
hands it to a predictor replica, retrying where the replica was lost),
[`http_options`][ort_roi.scale.http_options] (Serve's proxy, loopback, requests bounded in time) and
[`application`][ort_roi.scale.application] (the two deployments with production settings)."""

from __future__ import annotations

import asyncio
import math
import os
import random
from typing import Any, Mapping

from .bodies import read_body
from .cluster import check_listening, replica_grpc_on_node_address
from .limits import ERROR_HEADER, HttpError, Limits, as_limits, response
from .replica import HttpPredictor


class HttpIngress:
    """The HTTP ingress of [`application`][ort_roi.scale.application]: reads and checks each request
    (method, content type, body size and time) and hands the body to an
    [`HttpPredictor`][ort_roi.scale.HttpPredictor] replica, retrying on another replica when the one
    it went to was lost (killed, or replaced by its health check): inference is idempotent, so a
    lost replica costs no request. What cannot be answered now is 503 with ``Retry-After`` (the
    predictors' queue is full, or every attempt found a replica lost); slow clients hold an ingress
    slot, never a model's.

    Args:
        predictor: the [`HttpPredictor`][ort_roi.scale.HttpPredictor] deployment's handle (Serve
            passes it for the bound deployment).
        limits: the caps ([`Limits`][ort_roi.scale.Limits], or a dict of its fields); defaults if
            None.
        attempts: tries per request on a lost replica (the first included).
        backoff_s: the wait before the second try, doubled for each later one (jittered).
        retry_after_s: the ``Retry-After`` of a 503.
        shed_at: requests this replica may have waiting on the predictors (sent, not yet
            answered); a request that comes while that many wait is answered 503 before its
            body is read (its body would cost the proxy and this replica seconds under
            overload, only to be refused by the predictors' full queue). None: never.
    """

    def __init__(self, predictor: Any, limits: Limits | Mapping[str, Any] | None = None,
                 attempts: int = 4, backoff_s: float = 0.05, retry_after_s: float = 1.0,
                 shed_at: int | None = None):
        replica_grpc_on_node_address()  # Ray would listen on every interface
        self.predictor = predictor
        self.limits = as_limits(limits)
        self.attempts = attempts
        self.backoff_s = backoff_s
        self.retry_after_s = retry_after_s
        self.shed_at = shed_at
        #: requests sent to the predictors and not yet answered
        self.waiting = 0

    def check_health(self) -> None:
        """Ray Serve's health check: the process listens on its node's address and loopback
        only ([`check_listening`][ort_roi.scale.check_listening]); Serve runs it before the
        replica is given a request.

        Raises:
            RuntimeError: naming the address listened on beyond those.
        """
        check_listening()

    async def forward(self, body: bytes) -> tuple[int, str, dict]:
        """Have a predictor replica answer ``body``, retrying where the replica was lost.

        Args:
            body: the request's body.

        Returns:
            (status, text, headers): the predictor's answer, or 503 with ``Retry-After``.
        """
        from ray import exceptions as rex
        from ray.serve.exceptions import BackPressureError

        after = str(max(1, math.ceil(self.retry_after_s)))
        lost = (rex.RayActorError, rex.ActorUnavailableError)
        why = "?"
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff_s * 2 ** (attempt - 1) * random.uniform(.5, 1.5))
            try:
                status, text = await self.predictor.respond.remote(body)
                return status, text, {}
            except BackPressureError as e:
                return 503, f"ort_roi: overloaded: {e}; retry after {after} s", \
                    {"Retry-After": after, ERROR_HEADER: "overloaded"}
            except lost as e:  # the replica was lost with the request: try another
                why = type(e).__name__
            except rex.RayTaskError as e:
                if not isinstance(getattr(e, "cause", None), lost):
                    return 500, f"ort_roi: model error: {type(e).__name__}: {e}", {}
                why = type(e.cause).__name__
        return 503, (f"ort_roi: unavailable: {self.attempts} attempts each found the model's "
                     f"replica lost ({why}); retry after {after} s"), {"Retry-After": after}

    async def __call__(self, request: Any) -> Any:
        """Ray Serve's HTTP entry point.

        Args:
            request: the ``starlette.requests.Request`` Serve hands over.

        Returns:
            A ``starlette.responses.Response``.
        """
        if self.shed_at is not None and self.waiting >= self.shed_at:
            after = str(max(1, math.ceil(self.retry_after_s)))
            return response(503, f"ort_roi: overloaded: {self.waiting} requests wait on the "
                            f"model's replicas (shed_at={self.shed_at}); refused before its "
                            f"body was read; retry after {after} s",
                            {"Retry-After": after, ERROR_HEADER: "overloaded"})
        try:
            body = await read_body(request, self.limits)
        except HttpError as e:
            return response(e.status, e.message, e.headers)
        self.waiting += 1
        try:
            status, text, headers = await self.forward(body)
        finally:
            self.waiting -= 1
        return response(status, text, headers)


def http_options(port: int = 8000, request_timeout_s: float = 30.0,
                 host: str = "127.0.0.1", keep_alive_timeout_s: int = 5) -> dict:
    """``serve.start(http_options=...)`` for an ort_roi service: Serve's proxy on ``host``
    (loopback unless said), every request bounded in time (a slow client or a stuck request
    is answered 408 and the proxy goes on), an idle connection closed after its answer.

    A connection that sends no request at all, or stops inside its headers, is closed by
    ``worker_setup`` (``header_timeout_s`` of ``start_local``).

    Args:
        port: the proxy's port.
        request_timeout_s: the end-to-end limit of a request.
        host: the address to listen on.
        keep_alive_timeout_s: seconds a connection may stay idle after an answer (Serve's
            default: 90).

    Returns:
        The options, a dict.
    """
    return {"host": host, "port": port, "request_timeout_s": request_timeout_s,
            "keep_alive_timeout_s": keep_alive_timeout_s}


def application(model: str | os.PathLike | bytes, *, replicas: int = 2,
                ingress_replicas: int = 2, cpus_per_replica: float = 1.0,
                intra_op_threads: int = 1, check_finite: bool = True,
                limits: Limits | Mapping[str, Any] | None = None,
                max_ongoing_requests: int = 2, max_queued_requests: int = 16,
                health_check_period_s: float = 2.0, health_check_timeout_s: float = 2.0,
                attempts: int = 4, retry_after_s: float = 1.0, ingress: bool = True,
                check_resources: bool = True) -> Any:
    """The production form of the Serve recipe: an [`HttpIngress`][ort_roi.scale.HttpIngress] in
    front of ``replicas`` [`HttpPredictor`][ort_roi.scale.HttpPredictor] replicas;
    ``serve.run(application(...))``.

    ``ingress=False`` deploys the predictors alone, one Serve hop less (on a 2-core machine
    running everything, about 1.5 times the requests a second): then a request whose replica
    is lost gets no answer from Serve's proxy (a bare 500 from uvicorn; a 503 with ``Retry-After``
    where ``worker_setup`` runs; [`Client`][ort_roi.scale.Client] retries either)
    and a slow client holds one of a predictor's ``max_ongoing_requests`` until ``read_timeout_s``.

    Args:
        model: the ONNX model's path (or bytes), loaded by each replica.
        replicas: predictor replicas.
        ingress_replicas: ingress replicas (light: reading bodies and retrying; no CPU
            reserved). Two, so that a lost one is not every request's: Serve's proxy sends
            the next requests to the other while it is replaced (one alone: 7 of 200
            requests lost as Serve's 500 on its SIGKILL, back 14-19 s later).
        cpus_per_replica: Ray CPUs per predictor replica (with ``intra_op_threads``).
        intra_op_threads: onnxruntime's intra-op threads per predictor replica.
        check_finite: refuse NaN or Inf in inputs or outputs (400).
        limits: the caps ([`Limits`][ort_roi.scale.Limits], or a dict of its fields).
        max_ongoing_requests: requests a predictor replica holds at once: it runs one model
            at a time (a thread per request; 2 keeps the next one's JSON parsed meanwhile).
        max_queued_requests: requests the ingress queues for the predictors beyond those;
            more are answered 503 with ``Retry-After``, so a request's wait stays bounded.
        health_check_period_s: how often Serve runs each predictor's ``check_health``.
        health_check_timeout_s: how long a health check may take (3 missed in a row: the
            replica is replaced).
        attempts: the ingress's tries per request when a replica is lost.
        retry_after_s: the ``Retry-After`` of the 503s.
        ingress: put the [`HttpIngress`][ort_roi.scale.HttpIngress] in front (else the predictors
            take HTTP).
        check_resources: where Ray is running, refuse replicas its nodes cannot all hold:
            each replica's ``cpus_per_replica`` on one node, counted against each live
            node's CPUs (Serve would wait for them without a word: ``serve.run`` blocked
            for 17 minutes and more). CPUs that other work holds now are not counted
            (their replicas start when those are free); off for a cluster that adds nodes.

    Returns:
        A bound Serve application.

    Raises:
        ValueError: ``check_resources`` and the cluster's nodes cannot hold ``replicas``
            replicas of ``cpus_per_replica`` CPUs (naming both and what the nodes hold).
    """
    from ray import serve
    from ray.serve.config import BackpressureConfig

    if check_resources:
        _check_cpus(replicas, cpus_per_replica)
    limits = as_limits(limits)
    retry = BackpressureConfig(status_code=503, retry_after_s=retry_after_s)
    predictor = serve.deployment(
        HttpPredictor, name="HttpPredictor", num_replicas=replicas,
        ray_actor_options={"num_cpus": cpus_per_replica},
        max_ongoing_requests=max_ongoing_requests, max_queued_requests=max_queued_requests,
        backpressure_config=retry, health_check_period_s=health_check_period_s,
        health_check_timeout_s=health_check_timeout_s, graceful_shutdown_timeout_s=5,
    ).bind(model, intra_op_threads, check_finite, limits)
    if not ingress:
        return predictor
    front = serve.deployment(
        HttpIngress, name="HttpIngress", num_replicas=ingress_replicas,
        ray_actor_options={"num_cpus": 0}, max_ongoing_requests=256,
        max_queued_requests=512, backpressure_config=retry, graceful_shutdown_timeout_s=5,
    )
    # what the predictors take from one ingress replica: their slots (shared) and its queue
    shed_at = replicas * max_ongoing_requests + max(0, max_queued_requests)
    return front.bind(predictor, limits, attempts, 0.05, retry_after_s,
                      shed_at if max_queued_requests >= 0 else None)


def _check_cpus(replicas: int, cpus: float) -> None:
    """ValueError where Ray runs and its live nodes cannot each hold whole replicas of
    ``cpus`` CPUs, ``replicas`` of them in all."""
    import ray

    if not ray.is_initialized() or cpus <= 0:
        return
    nodes = [float(n.get("Resources", {}).get("CPU", 0)) for n in ray.nodes() if n.get("Alive")]
    room = sum(int(n / cpus + 1e-9) for n in nodes)
    if room < replicas:
        held = " + ".join(f"{n:g}" for n in nodes) or "0"
        raise ValueError(
            f"ort_roi: application: {replicas} predictor replicas of {cpus:g} CPU each "
            f"(cpus_per_replica) need {replicas * cpus:g} CPUs, each replica's on one node; "
            f"the cluster's nodes hold {held} CPUs: room for {room}. Lower replicas or "
            "cpus_per_replica, or start the cluster with more (start_local(num_cpus=...)); "
            "check_resources=False for a cluster that adds nodes")
