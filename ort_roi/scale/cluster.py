"""A local Ray cluster whose every server listens on 127.0.0.1 only, and Serve replicas
whose gRPC server listens on their node's address only."""

from __future__ import annotations

import os
import sys
from typing import Any


def start_local(num_cpus: int = 2, **kwargs: Any) -> Any:
    """Start a Ray cluster on this machine whose every server listens on 127.0.0.1 only
    (Ray otherwise binds the machine's address and all interfaces).

    Sets ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` (Ray's local-only mode: node address
    127.0.0.1, inherited by the cluster's processes) before Ray starts them, then
    ``ray.init(_node_ip_address="127.0.0.1", include_dashboard=False, ...)``.

    Args:
        num_cpus: the cluster's CPUs.
        **kwargs: more ``ray.init`` arguments (``log_to_driver=False``, ...).

    Returns:
        What ``ray.init`` returns.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    import ray
    from ray._private import ray_constants

    ray_constants.ENABLE_RAY_CLUSTER = False  # read when the node's address is resolved
    kwargs.setdefault("include_dashboard", False)
    return ray.init(num_cpus=num_cpus, _node_ip_address="127.0.0.1", **kwargs)


def replica_grpc_on_node_address() -> bool:
    """In a Ray Serve replica's process, make the replica's inter-deployment gRPC server
    listen on the node's address (127.0.0.1 on a :func:`start_local` cluster) instead of on
    every interface.

    Ray 2.60 starts that server on ``"[::]:0"``, written into
    ``ray/serve/_private/replica.py`` with no setting or environment variable to change it,
    once the deployment's constructor has returned. Called from the constructor (as
    :class:`HttpPredictor` and :class:`HttpIngress` do), this wraps the helper Ray binds it
    with, in this process, so that ``[::]`` becomes the node's address: the one Ray gives
    Serve's router for the replica, so a handle that uses gRPC still reaches it. Elsewhere
    (no Serve replica here, or done already) it does nothing.

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
