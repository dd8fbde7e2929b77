"""The only module that knows Ray: start or join a cluster, fan chunks of points out
as tasks, hand each finished chunk back to the driver as it completes."""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Callable, Iterator, List, Optional

from dataclasses import dataclass

import pyarrow as pa
import ray
from ray._raylet import AuthenticationMode, get_authentication_mode
from ray.exceptions import AuthenticationError

import tasks
from sweeps.errors import UserError
from tasks.projection import project_table
from tasks.specs import HardwareProfile

__all__ = ["RaySession", "ray_session", "project_on_ray", "chunk"]

#: Ray retries a task whose worker died this many times (transient faults).
MAX_RETRIES = 3


@dataclass(frozen=True)
class RaySession:
    """Where the work runs: a description for people, and the cluster's CPU count."""

    where: str
    cpus: int
    auth: str


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, num_cpus: Optional[int] = None) -> Iterator[RaySession]:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``), or start an embedded one.

    The embedded cluster binds to 127.0.0.1, runs no dashboard, and runs with Ray's
    token authentication, which Ray 2.60 turns on for a new local cluster unless
    ``RAY_AUTH_MODE`` says otherwise (it generates ``~/.ray/auth_token`` if missing);
    ``auth`` in the session says which mode is in force. When joining a
    cluster, the ``tasks`` package travels with the job, so workers need only Ray and
    the scientific stack. Shuts the embedded cluster down (or disconnects) on exit.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    # Ray logs a warning that token authentication is on; the session reports it instead.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    quiet = dict(logging_level=logging.WARNING, log_to_driver=False, configure_logging=True)
    if address:
        # A driver beside a cluster on loopback must not advertise another interface.
        local = {"_node_ip_address": "127.0.0.1"} if _is_loopback(address) else {}
        try:
            ray.init(address=address, runtime_env={"py_modules": [tasks]}, **local, **quiet)
        except (ConnectionError, AuthenticationError, RuntimeError) as exc:
            raise UserError(
                f"cannot join the Ray cluster at {address!r}: {str(exc).splitlines()[0]} "
                "(check the address, and RAY_AUTH_TOKEN or ~/.ray/auth_token for its token)"
            ) from None
        where = f"Ray cluster at {address}"
    else:
        ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                 num_cpus=num_cpus, **quiet)
        where = "embedded Ray on 127.0.0.1"
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        auth = "token" if get_authentication_mode() == AuthenticationMode.TOKEN else "none"
        yield RaySession(f"{where} ({cpus} CPUs, auth: {auth})", cpus, auth)
    finally:
        ray.shutdown()


def _is_loopback(address: str) -> bool:
    host = address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")


def chunk(points: pa.Table, chunk_size: int) -> List[pa.Table]:
    """Split a table into consecutive slices of at most ``chunk_size`` rows."""
    return [points.slice(start, chunk_size) for start in range(0, points.num_rows, chunk_size)]


def project_on_ray(points: pa.Table, hw: HardwareProfile, chunk_size: int,
                   on_result: Callable[[pa.Table], None]) -> None:
    """Project ``points`` as Ray tasks of ``chunk_size`` rows, one CPU each.

    ``on_result`` runs in the driver for every finished chunk, in completion order.
    A task whose worker dies is retried by Ray; an exception in the cost model (a bug)
    propagates and fails the run.
    """
    remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES)(project_table)
    hw_ref = ray.put(hw)
    pending = [remote.remote(piece, hw_ref) for piece in chunk(points, chunk_size)]
    while pending:
        done, pending = ray.wait(pending, num_returns=1)
        for ref in done:
            on_result(ray.get(ref))
