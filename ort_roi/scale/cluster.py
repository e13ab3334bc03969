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

    Also, the proxy hands a request on (routes it to a replica) once its body has come,
    or 64 KiB of it, or that many seconds have passed: a client that leaves before (an
    upload aborted early) costs no replica anything. And where the proxy got no answer for
    a request (the replica holding it was lost), it answers 503 with ``Retry-After: 1``
    and ``X-Ort-Roi-Error: unavailable`` instead of uvicorn's bare 500.
    """
    try:
        from uvicorn.protocols.http import h11_impl, httptools_impl
    except ImportError:  # no Serve here
        return
    for module in (h11_impl, httptools_impl):
        cycle = getattr(module, "RequestResponseCycle", None)
        if cycle is not None and not getattr(cycle, "ort_roi_unavailable", False):
            _unavailable(cycle)
    timeout = float(os.environ.get(HEADER_TIMEOUT_ENV, "10") or 0)
    if timeout <= 0:
        return
    for cls in (h11_impl.H11Protocol, getattr(httptools_impl, "HttpToolsProtocol", None)):
        if cls is not None and not getattr(cls, "ort_roi_header_timeout", None):
            _guard(cls, timeout)
    for module in (h11_impl, httptools_impl):
        cycle = getattr(module, "RequestResponseCycle", None)
        if cycle is not None and not getattr(cycle, "ort_roi_body_wait", None):
            _defer(cycle, timeout)


#: the body of the 503 that replaces uvicorn's bare 500 (what ``worker_setup`` sets up)
UNAVAILABLE = (b"ort_roi: unavailable: Serve's proxy got no answer for this request (the "
               b"process holding it was lost); retry after 1 s")


def _unavailable(cycle: type) -> None:
    """Where the app gave no answer at all (Serve's proxy does so when the replica holding
    the request was lost: uvicorn then sent a bare ``500 Internal Server Error``), answer
    503 with ``Retry-After: 1`` and ``X-Ort-Roi-Error: unavailable``: inference is
    idempotent, and a plain client can tell it may send the request again."""
    from .limits import ERROR_HEADER

    async def send_500_response(self: Any) -> None:
        await self.send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"text/plain; charset=utf-8"),
            (b"content-length", str(len(UNAVAILABLE)).encode()),
            (b"retry-after", b"1"), (ERROR_HEADER.lower().encode(), b"unavailable"),
            (b"connection", b"close")]})
        await self.send({"type": "http.response.body", "body": UNAVAILABLE,
                         "more_body": False})

    cycle.send_500_response = send_500_response
    cycle.ort_roi_unavailable = True


def _defer(cycle: type, timeout: float) -> None:
    """Hand a request of uvicorn's ``cycle`` class to the app (Serve's proxy, which then
    routes it to a replica) once its body has come, or the first ``HIGH_WATER_LIMIT`` bytes
    of it (64 KiB: what uvicorn buffers before it stops reading), or ``timeout`` seconds
    have passed; a request whose client leaves before is never handed over. An upload
    aborted within its first 64 KiB cost Serve a routed and cancelled request: 1000 of them
    (1000 bytes each, then closed) kept the service busy for 5 s."""
    from uvicorn.protocols.http.flow_control import HIGH_WATER_LIMIT

    run = cycle.run_asgi

    async def run_asgi(self: Any, app: Any) -> None:
        import asyncio

        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        while (self.more_body and not self.disconnected and len(self.body) <= HIGH_WATER_LIMIT
               and not getattr(self, "waiting_for_100_continue", False)):
            left = until - loop.time()
            if left <= 0:
                break
            self.message_event.clear()
            try:
                await asyncio.wait_for(self.message_event.wait(), left)
            except asyncio.TimeoutError:
                break
        if self.disconnected:
            return  # the client left before its body came: nothing to answer
        self.message_event.set()  # the app's first receive() reads what has come
        await run(self, app)

    cycle.run_asgi = run_asgi
    cycle.ort_roi_body_wait = timeout


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
    add_port.ort_roi_bind = bind  # type: ignore[attr-defined]  # Ray's own
    replica.add_port_to_grpc_server = add_port
    return True


#: addresses a server of the cluster may listen on besides the node's own
_LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def listening_sockets() -> list[tuple[str, int]] | None:
    """The TCP sockets this process listens on, as (address, port), read from Linux's
    ``/proc`` (what ``ss -ltnp`` lists for it); None where there is no ``/proc``.

    Returns:
        The (address, port) pairs (``0.0.0.0`` and ``::``: every interface), or None.
    """
    import socket

    if not os.path.exists("/proc/self/net/tcp"):
        return None
    where: dict[str, tuple[str, int]] = {}
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open(f"/proc/self/net/{table}") as f:
                lines = list(f)[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            if len(cols) < 10 or cols[3] != "0A":  # LISTEN
                continue
            ip, port = cols[1].split(":")
            raw = bytes.fromhex(ip)
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            where[cols[9]] = (socket.inet_ntop(family, raw), int(port, 16))
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if link.startswith("socket:[") and link[8:-1] in where:
            found.append(where[link[8:-1]])
    return sorted(set(found))


def check_listening(node_address: str | None = None) -> None:
    """Refuse to serve from a process that listens beyond its node's address: check the
    guarantee that [`replica_grpc_on_node_address`][ort_roi.scale.replica_grpc_on_node_address]
    only arranges (Ray could rename the helper it wraps, stop calling it or bind another
    literal, and the replica's gRPC server would listen on every interface again).
    [`HttpPredictor`][ort_roi.scale.HttpPredictor] and [`HttpIngress`][ort_roi.scale.HttpIngress]
    call it from ``check_health``; Serve runs that once the replica's servers have started and
    before it is given a request, so a replica that fails it never serves (``serve.run``
    raises with this message once Serve gives up on the deployment).

    Args:
        node_address: the node's address (default: ``ray.util.get_node_ip_address()``).
            Loopback addresses are allowed too; a wildcard (``0.0.0.0``, ``::``) never.

    Raises:
        RuntimeError: naming each address and port listened on beyond those.
    """
    found = listening_sockets()
    if found is None:
        return  # no /proc: nothing to read (docs/scaling.md says where this holds)
    if node_address is None:
        import ray

        node_address = ray.util.get_node_ip_address()
    allowed = {*_LOOPBACK, node_address, f"::ffff:{node_address}"}
    exposed = [(ip, port) for ip, port in found if ip not in allowed]
    if exposed:
        where = ", ".join(f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
                          for ip, port in exposed)
        every = any(ip in ("0.0.0.0", "::") for ip, _ in exposed)
        raise RuntimeError(
            f"ort_roi: process {os.getpid()} listens on {where}"
            f"{' (every interface)' if every else ''}, beyond the node's address "
            f"{node_address}: refusing to serve. Ray's replica gRPC server was not rebound "
            "(replica_grpc_on_node_address: Ray renamed or stopped calling the helper it "
            "wraps, or binds another address; ort_roi is tested with Ray 2.60.0)")
