"""A local Ray cluster whose every server listens on 127.0.0.1 only."""

from __future__ import annotations

import os
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
