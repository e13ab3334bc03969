"""A local Ray cluster whose every server listens on 127.0.0.1 only, Serve replicas whose
gRPC server listens on their node's address only, and a proxy that closes connections that
send no request (``worker_setup``)."""

from __future__ import annotations

import os
import sys
from typing import Any


#: the environment variable ``worker_setup`` reads: seconds a connection to Serve's
#: proxy may take to send a request's headers (0: no limit)
HEADER_TIMEOUT_ENV = "ORT_ROI_HEADER_TIMEOUT_S"


def start_local(num_cpus: int = 2, header_timeout_s: float = 10.0, **kwargs: Any) -> Any:
    """Start a Ray cluster on this machine whose every server listens on 127.0.0.1 only
    (Ray otherwise binds the machine's address and all interfaces), its workers set up by
    ``worker_setup``.

    Sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's local-only mode: node address
    127.0.0.1, inherited by the cluster's processes), ``ORT_ROI_HEADER_TIMEOUT_S`` and
    ``PYTHONPATH`` (led by the folder this ``ort_roi`` was imported from) before Ray starts
    them, then ``ray.init(_node_ip_address="127.0.0.1", include_dashboard=False,
    runtime_env={"worker_process_setup_hook": "ort_roi.scale.worker_setup"}, ...)``.

    Args:
        num_cpus: the cluster's CPUs.
        header_timeout_s: seconds a connection to Serve's proxy may take to send a
            request's headers, from when it opens or from its previous answer; then it is
            closed (0: no limit).
        **kwargs: more ``ray.init`` arguments (``log_to_driver=False``, ...; a
            ``runtime_env`` of one's own keeps its own setup hook, if it has one).

    Returns:
        What ``ray.init`` returns.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    os.environ[HEADER_TIMEOUT_ENV] = str(header_timeout_s)
    # the workers run the setup hook before Ray puts the driver's path on theirs: they find
    # this ort_roi (not another one installed) through PYTHONPATH
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *filter(None, paths)])
    import ray
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # read when the node's address is resolved
    kwargs.setdefault("include_dashboard", False)
    env = dict(kwargs.pop("runtime_env", None) or {})
    env.setdefault("worker_process_setup_hook", "ort_roi.scale.worker_setup")
    return ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", runtime_env=env,
                    **kwargs)


def worker_setup() -> None:
    """Ray's ``worker_process_setup_hook`` for a cluster serving ort_roi (what
    ``start_local`` sets; on a cluster of one's own,
    ``ray.init(runtime_env={"worker_process_setup_hook": "ort_roi.scale.worker_setup"})``):
    in each worker process, the HTTP server that Serve's proxy runs (uvicorn) closes a
    connection that has not sent a whole request's headers within
    ``$ORT_ROI_HEADER_TIMEOUT_S`` seconds (default 10) of opening or of its previous
    answer. Serve 2.60 gives uvicorn only a keep-alive timeout, which starts after an
    answer: a connection that sends nothing, or stops inside its headers, stayed open
    without end. A request whose headers have come is bounded by Serve's
    ``request_timeout_s`` and the body's ``read_timeout_s`` instead.
    """
    timeout = float(os.environ.get(HEADER_TIMEOUT_ENV, "10") or 0)
    if timeout <= 0:
        return
    try:
        from uvicorn.protocols.http import h11_impl, httptools_impl
    except ImportError:  # no Serve here
        return
    for cls in (h11_impl.H11Protocol, getattr(httptools_impl, "HttpToolsProtocol", None)):
        if cls is not None and not getattr(cls, "ort_roi_header_timeout", None):
            _guard(cls, timeout)


def _guard(cls: type, timeout: float) -> None:
    """Close a connection of uvicorn's protocol ``cls`` that has no request under way
    (none yet, or its last one answered) ``timeout`` seconds after it opened or after its
    last answer."""
    made, lost, done = cls.connection_made, cls.connection_lost, cls.on_response_complete

    def expire(self: Any) -> None:
        cycle = getattr(self, "cycle", None)
        if (cycle is None or cycle.response_complete) and not self.transport.is_closing():
            self.transport.close()

    def arm(self: Any) -> None:
        timer = getattr(self, "_ort_roi_timer", None)
        if timer is not None:
            timer.cancel()
        self._ort_roi_timer = self.loop.call_later(timeout, expire, self)

    def connection_made(self: Any, transport: Any) -> None:
        made(self, transport)
        arm(self)

    def on_response_complete(self: Any) -> None:
        done(self)
        if not self.transport.is_closing():
            arm(self)

    def connection_lost(self: Any, exc: Any) -> None:
        timer = getattr(self, "_ort_roi_timer", None)
        if timer is not None:
            timer.cancel()
        lost(self, exc)

    cls.connection_made, cls.connection_lost = connection_made, connection_lost
    cls.on_response_complete = on_response_complete
    cls.ort_roi_header_timeout = timeout


def replica_grpc_on_node_address() -> bool:
    """In a Ray Serve replica's process, make the replica's inter-deployment gRPC server
    listen on the node's address (127.0.0.1 on a ``start_local`` cluster) instead of on
    every interface.

    Ray 2.60 starts that server on ``"[::]:0"``, written into
    ``ray/serve/_private/replica.py`` with no setting or environment variable to change it,
    once the deployment's constructor has returned. Called from the constructor (as
    [`HttpPredictor`][ort_roi.scale.HttpPredictor] and [`HttpIngress`][ort_roi.scale.HttpIngress]
    do), this wraps the helper Ray binds it with, in this process, so that ``[::]`` becomes the
    node's address: the one Ray gives Serve's router for the replica, so a handle that uses gRPC
    still reaches it. Elsewhere (no Serve replica here, or done already) it does nothing.

    Returns:
        True when the replica's server will listen on the node's address.
    """
    replica = sys.modules.get("ray.serve._private.replica")
    context = sys.modules.get("ray.serve.context")
    bind = getattr(replica, "add_port_to_grpc_server", None)
    if bind is None or context is None or context._get_internal_replica_context() is None:
        return False  # not in a replica (Ray sets its context before the constructor runs)
    if getattr(bind, "ort_roi_host", None):
        return True
    import ray

    host = ray.util.get_node_ip_address()
    host = f"[{host}]" if ":" in host else host

    def add_port(server: Any, address: str) -> int:
        if address.startswith("[::]:"):
            address = host + address[4:]
        return bind(server, address)

    add_port.ort_roi_host = host  # type: ignore[attr-defined]
    replica.add_port_to_grpc_server = add_port
    return True
