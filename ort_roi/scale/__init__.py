"""Scaling out: ort_roi models in Ray Data (batch inference) and Ray Serve (HTTP serving).

ort_roi's ops are Python ops registered per process, and sessions do not pickle: each worker
builds its own session from the model path when it starts (importing ort_roi registers the
ops there). This package does not import Ray until one of its Ray helpers is called; it gives
the callables that Ray runs, the applications that put them together with production
settings, and a client that retries what may be retried:

    import ray
    from ray import serve
    from ort_roi import scale

    scale.start_local(num_cpus=2)                    # a local cluster on 127.0.0.1 only
    out = scale.predict_batches(ray.data.from_items(rows), "head.onnx", actors=2)

    serve.start(http_options=scale.http_options(port=8000))
    serve.run(scale.application("head.onnx", replicas=2), route_prefix="/roi")
    reply = scale.Client("http://127.0.0.1:8000/roi").post(feed)   # retries 503 / 408

A bad row or request (wrong shape or dtype, NaN boxes, a count that does not add up, an image
or outputs holding NaN or Inf) is reported with the [`ort_roi.RoiOpError`][ort_roi.RoiOpError]
message: in the row's ``error`` column (its outputs empty) or as an HTTP 400 whose body is the
message. A request over one of the [`Limits`][ort_roi.scale.Limits] is a 400 naming the cap, before
the work it would cost. The worker goes on with the next one; no NaN output is passed on as a
result.

Its modules, one concern each: ``runner`` (a session and the checks of a run), ``data`` (Ray
Data), ``limits`` (the caps and the error answers), ``bodies`` (reading a hostile body),
``replica`` (the Serve predictor), ``serving`` (the ingress and the application),
``cluster`` (a loopback cluster, replicas' gRPC on the node's address and the check that it
holds, the proxy's setup), ``client`` (the retrying client). Everything public is here,
as ``ort_roi.scale.<name>``.
"""

from __future__ import annotations

# in the order a reader meets them (the API reference lists them so)
from .runner import Runner
from .data import BatchPredictor, predict_batches
from .limits import ERROR_HEADER, HttpError, Limits
from .bodies import read_body
from .replica import HttpPredictor
from .serving import HttpIngress, application, http_options
from .cluster import (check_listening, replica_grpc_on_node_address, start_local,
                      worker_setup)
from .client import Client, Reply

__all__ = ["Runner", "BatchPredictor", "predict_batches", "Limits", "HttpError",
           "ERROR_HEADER", "read_body", "HttpPredictor", "HttpIngress", "application",
           "http_options", "start_local", "worker_setup", "replica_grpc_on_node_address",
           "check_listening",
           "Client", "Reply"]
