"""Start or join a Ray cluster for one run, on loopback and with token authentication.

The embedded cluster binds to 127.0.0.1, runs no dashboard (nor Ray's autoscaler, log
monitor or API server: ``lean_head``), and runs with Ray's token
authentication, which Ray 2.60 turns on for a new local cluster unless ``RAY_AUTH_MODE``
says otherwise (it generates ``~/.ray/auth_token`` if missing). When joining a cluster,
the ``tasks`` package travels with the job, so workers need only Ray and the scientific
stack.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
import threading
from dataclasses import dataclass
from typing import Iterator, Optional

import ray
from ray._private import ray_constants
from ray._raylet import AuthenticationMode, get_authentication_mode
from ray.exceptions import AuthenticationError

import tasks
from sweeps.cluster.lean_head import lean_head
from sweeps.cluster.reach import check_reachable
from sweeps.cluster.reaper import Reaper
from sweeps.errors import UserError
from sweeps.jobs.work import Resources

__all__ = ["RaySession", "ray_session", "wait_stopped", "slots", "ray_options"]


@dataclass(frozen=True)
class RaySession:
    """Where the work runs: a description for people, the cluster's CPU count, its
    authentication mode, and whether this driver started it (``embedded``: no node is
    ever added to it)."""

    where: str
    cpus: int
    auth: str
    embedded: bool = False


#: The environment variable of the niceness Ray's raylet starts its workers at.
WORKER_NICENESS = "RAY_worker_niceness"


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, num_cpus: Optional[int] = None) -> Iterator[RaySession]:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``), or start an embedded one;
    ``auth`` in the session says which authentication mode is in force. Shuts the
    embedded cluster down (or disconnects) on exit, in the background (``wait_stopped``)."""
    wait_stopped()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    _reread_auth()
    address = address or os.environ.get("RAY_ADDRESS") or None
    if not address:
        _keep_to_loopback()
    # Ray logs a warning that token authentication is on; the session reports it instead.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    quiet = dict(logging_level=logging.WARNING, log_to_driver=False, configure_logging=True)
    reaper: Optional[Reaper] = None  # joining a cluster: its processes are not this driver's
    if address:
        nodes = check_reachable(address) or []  # one line within seconds, rather than Ray's minutes
        # A driver beside a cluster on loopback must not advertise another interface; when
        # the cluster's nodes kept 127.0.0.1 (``local.LocalCluster``), neither may it.
        local = {"_node_ip_address": "127.0.0.1"} if _is_loopback(address) else {}
        if local and any(_is_loopback(f"{node['ip']}:0") for node in nodes):
            _keep_to_loopback()
        try:
            ray.init(address=address, runtime_env={"py_modules": [os.path.dirname(tasks.__file__)]}, **local, **quiet)
        except (ConnectionError, AuthenticationError, RuntimeError) as exc:
            raise UserError(
                f"cannot join the Ray cluster at {address!r}: {str(exc).splitlines()[0]} "
                "(check the address, and RAY_AUTH_TOKEN or ~/.ray/auth_token for its token)"
            ) from None
        where = f"Ray cluster at {address}"
    else:
        # Its session (sockets, logs) in a folder of its own, which goes with it: by Ray's
        # default it would stay in TMP/ray/session_* after every run.
        # Ray starts its workers at nice 15: on a shared machine any ordinary process then
        # takes their cores (a calibration's worker beside two busy processes got under 4 %
        # of a core). The embedded cluster's workers run at the driver's priority, unless
        # RAY_worker_niceness says otherwise.
        os.environ.setdefault(WORKER_NICENESS, str(os.nice(0)))
        temp_dir = tempfile.mkdtemp(prefix="csr-", dir=os.environ.get("RAY_TMPDIR") or tempfile.gettempdir())
        reaper = Reaper.start(temp_dir)  # the embedded cluster dies with this process, however it ends
        try:
            with lean_head():  # no autoscaler, log monitor or API server: no one else reaches it
                ray.init(address="local", _node_ip_address="127.0.0.1", include_dashboard=False,
                         num_cpus=num_cpus, _temp_dir=temp_dir, **quiet)
        except BaseException:
            _stop_in_background(reaper)
            raise
        where = "embedded Ray on 127.0.0.1"
    try:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        auth = "token" if get_authentication_mode() == AuthenticationMode.TOKEN else "none"
        yield RaySession(f"{where} ({cpus} CPUs, auth: {auth})", cpus, auth, embedded=reaper is not None)
    finally:
        _stop_in_background(reaper)


#: The thread stopping the last session's Ray, if it may still run.
_stopping: Optional[threading.Thread] = None


def _stop_in_background(reaper: Optional[Reaper]) -> None:
    """Stop Ray (the embedded cluster's processes, or the connection to a cluster) while the
    driver goes on to what needs no Ray (summaries, the report): it takes seconds of
    waiting on processes. The thread is not a daemon, so the interpreter waits for it
    before it exits; the next session waits for it before it starts. The ``reaper`` of an
    embedded cluster removes the cluster's temp folder and stands down once it has stopped."""
    global _stopping

    def stop() -> None:
        ray.shutdown()
        if reaper is not None:
            reaper.stand_down()

    _stopping = threading.Thread(target=stop, name="commscale-ray-shutdown")
    _stopping.start()


def wait_stopped() -> None:
    """Return once the last session's Ray has stopped."""
    if _stopping is not None:
        _stopping.join()


def ray_options(resources: Resources) -> dict:
    """Ray task options for ``resources``."""
    options: dict = {"num_cpus": resources.cpus}
    if resources.gpus:
        options["num_gpus"] = resources.gpus
    if resources.custom:
        options["resources"] = dict(resources.custom)
    return options


def slots(resources: Resources) -> int:
    """How many tasks needing ``resources`` the cluster can run at once (at least 1)."""
    total = ray.cluster_resources()
    needs = {"CPU": resources.cpus, "GPU": resources.gpus, **resources.custom}
    fits = [total.get(name, 0) / amount for name, amount in needs.items() if amount]
    return max(1, int(min(fits))) if fits else max(1, int(total.get("CPU", 1)))


def _reread_auth() -> None:
    """Make Ray read its authentication mode and token anew, from the environment and
    ``~/.ray/auth_token`` as they are now. Ray caches both per process at first use: a
    process that talked to one cluster (another token) and then started an embedded one
    sent the old token to the new GCS, which refused it ("Failed to start GCS")."""
    try:
        from ray._raylet import AuthenticationTokenLoader, Config
    except ImportError:  # a Ray without token authentication caches nothing of it
        return
    Config.initialize("")
    AuthenticationTokenLoader.instance().reset_cache()


def _keep_to_loopback() -> None:
    """Make the embedded cluster use 127.0.0.1 as its node IP, so it listens on loopback.

    Ray 2.60 replaces a node IP of 127.0.0.1 (``_node_ip_address``) by the host's
    outward address unless it treats the host as single-node, which
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`` selects; its servers then listen on loopback
    only. The variable reaches the processes Ray starts; the already imported constant
    covers this one. Not for joining a cluster: a driver must share the node IP its
    cluster's nodes advertise.
    """
    os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] = "0"
    ray_constants.ENABLE_RAY_CLUSTER = False


def _is_loopback(address: str) -> bool:
    host = address.split("://")[-1].rsplit(":", 1)[0].strip("[]")
    return host in ("localhost", "::1") or host.startswith("127.")
