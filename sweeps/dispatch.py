"""The only module that knows Ray: start or join a cluster, fan chunks of points out
as tasks, hand each finished chunk back to the driver as it completes.

Fault handling: a task whose worker or node dies, or that raises ``TransientError``, is
retried by Ray (``MAX_RETRIES``); infeasible and out-of-memory points come back as result
rows (``tasks.outcomes``); a chunk that outlives its time cap (``point_timeout_s`` per
point) is cancelled and its points are reported as failures, so a sweep never hangs on a
dead or stuck worker.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, Iterator, List, Optional

import pyarrow as pa
import ray
from ray._private import ray_constants
from ray._raylet import AuthenticationMode, get_authentication_mode
from ray.exceptions import AuthenticationError, GetTimeoutError, RayError, RayTaskError, TaskCancelledError

import tasks
from sweeps.errors import UserError
from tasks.outcomes import ChunkOutcome, TransientError, run_chunk, status_rows

__all__ = ["RaySession", "Workload", "ray_session", "execute", "chunk", "MAX_RETRIES"]

#: Ray retries a task whose worker died, or that raised TransientError, this many times.
MAX_RETRIES = 3


@dataclass(frozen=True)
class RaySession:
    """Where the work runs: a description for people, and the cluster's CPU count."""

    where: str
    cpus: int
    auth: str


@dataclass
class Workload:
    """What to run on each chunk of points, and what a chunk needs from a worker.

    ``body(points, context)`` is a plain function of ``tasks`` returning rows of
    ``schema``; ``resources`` are Ray task options (``num_cpus``, ``num_gpus``,
    ``resources``); ``point_timeout_s`` caps the time of one point.
    """

    kind: str
    body: Callable[[pa.Table, Any], pa.Table]
    context: Any
    schema: pa.Schema
    schema_version: int
    resources: Dict[str, Any] = field(default_factory=lambda: {"num_cpus": 1})
    point_timeout_s: float = 300.0


@contextlib.contextmanager
def ray_session(address: Optional[str] = None, num_cpus: Optional[int] = None) -> Iterator[RaySession]:
    """Join the Ray cluster at ``address`` (or ``RAY_ADDRESS``), or start an embedded one.

    The embedded cluster binds to 127.0.0.1, runs no dashboard, and runs with Ray's
    token authentication, which Ray 2.60 turns on for a new local cluster unless
    ``RAY_AUTH_MODE`` says otherwise (it generates ``~/.ray/auth_token`` if missing);
    ``auth`` in the session says which mode is in force. When joining a cluster, the
    ``tasks`` package travels with the job, so workers need only Ray and the scientific
    stack. Shuts the embedded cluster down (or disconnects) on exit.
    """
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    address = address or os.environ.get("RAY_ADDRESS") or None
    if not address:
        _keep_to_loopback()
    # Ray logs a warning that token authentication is on; the session reports it instead.
    logging.getLogger("ray._private.authentication.authentication_token_setup").setLevel(logging.ERROR)
    quiet = dict(logging_level=logging.WARNING, log_to_driver=False, configure_logging=True)
    if address:
        # A driver beside a cluster on loopback must not advertise another interface.
        local = {"_node_ip_address": "127.0.0.1"} if _is_loopback(address) else {}
        try:
            ray.init(address=address, runtime_env={"py_modules": [os.path.dirname(tasks.__file__)]}, **local, **quiet)
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


def slots(workload: Workload) -> int:
    """How many tasks of ``workload`` the cluster can run at once (at least 1)."""
    total = ray.cluster_resources()
    needs = {"CPU": workload.resources.get("num_cpus", 1), "GPU": workload.resources.get("num_gpus", 0),
             **workload.resources.get("resources", {})}
    fits = [total.get(name, 0) / amount for name, amount in needs.items() if amount]
    return max(1, int(min(fits))) if fits else max(1, int(total.get("CPU", 1)))


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


def chunk(points: pa.Table, chunk_size: int) -> List[pa.Table]:
    """Split a table into consecutive slices of at most ``chunk_size`` rows."""
    return [points.slice(start, chunk_size) for start in range(0, points.num_rows, chunk_size)]


def _lost(points: pa.Table, status: str, exc: BaseException) -> ChunkOutcome:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ChunkOutcome(None, [dict(point_key=k, status=status, error_type=type(exc).__name__, message=message,
                                    traceback=str(exc)) for k in points.column("key").to_pylist()])


def execute(points: pa.Table, workload: Workload, *, chunk_size: int, max_in_flight: int,
            on_outcome: Callable[[pa.Table, ChunkOutcome], None]) -> None:
    """Run ``workload`` over ``points`` as Ray tasks of ``chunk_size`` rows.

    At most ``max_in_flight`` tasks are submitted at once, so a task's time cap counts
    from about when it starts. ``on_outcome(points, outcome)`` runs in the driver for
    every chunk, in completion order, including chunks that timed out or were lost.
    """
    remote = ray.remote(run_chunk).options(max_retries=MAX_RETRIES, retry_exceptions=[TransientError],
                                           **workload.resources)
    context_ref = ray.put(workload.context)
    queue = chunk(points, chunk_size)[::-1]
    in_flight: Dict[ray.ObjectRef, tuple] = {}
    while queue or in_flight:
        while queue and len(in_flight) < max_in_flight:
            piece = queue.pop()
            ref = remote.remote(workload.body, piece, context_ref, workload.schema)
            in_flight[ref] = (piece, time.monotonic() + workload.point_timeout_s * piece.num_rows)
        next_deadline = min(deadline for _, deadline in in_flight.values())
        done, _ = ray.wait(list(in_flight), num_returns=1, timeout=max(0.0, next_deadline - time.monotonic()))
        for ref in done:
            piece, _ = in_flight.pop(ref)
            try:
                outcome = ray.get(ref)
            except (TaskCancelledError, GetTimeoutError) as exc:
                outcome = _lost(piece, "timeout", exc)
            except RayTaskError as exc:  # the chunk itself raised, retries spent (transient to the end)
                outcome = _lost(piece, "error", exc)
            except RayError as exc:  # retries spent on a dead worker or node
                outcome = _lost(piece, "lost", exc)
            on_outcome(piece, outcome)
        now = time.monotonic()
        for ref, (piece, deadline) in list(in_flight.items()):
            if deadline <= now:
                ray.cancel(ref, force=True)
                in_flight.pop(ref)
                on_outcome(piece, _lost(piece, "timeout", TimeoutError(
                    f"no result within {workload.point_timeout_s:g} s per point ({piece.num_rows} points)")))


def run_collective_group(points: pa.Table, *, world: int, placement: str, backend: str, device: str,
                         context: Any, schema: pa.Schema, form_timeout_s: float = 60.0) -> pa.Table:
    """Measure collective ``points`` among ``world`` Ray actors joined by torch.distributed.

    ``placement`` "pack" keeps the group inside one node where it can (intra-node links);
    "spread" puts every rank on a different node (inter-node links). A group that cannot
    form (too few nodes or devices, or a failed rendezvous) yields rows with status
    "infeasible" and the reason, not an exception.
    """
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from tasks.measure.collectives import CollectiveMember

    bundle = {"CPU": 1, "GPU": 1} if device.startswith("cuda") else {"CPU": 1}
    group = placement_group([bundle] * world, strategy="PACK" if placement == "pack" else "STRICT_SPREAD")
    try:
        ray.get(group.ready(), timeout=form_timeout_s)
    except GetTimeoutError:
        remove_placement_group(group)
        return status_rows(points, schema, "infeasible",
                                f"a group of {world} x {bundle} placed '{placement}' cannot form on this cluster")
    member = ray.remote(CollectiveMember)
    actors = [member.options(num_cpus=1, num_gpus=bundle.get("GPU", 0), scheduling_strategy=
                             PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)).remote(
                                 i, world, backend, "cuda" if device.startswith("cuda") else device)
              for i in range(world)]
    try:
        master = ray.get(actors[0].__ray_call__.remote(lambda self: ray.util.get_node_ip_address()))
        port = ray.get(actors[0].free_port.remote())
        ray.get([a.join.remote(master, port, context.timeout_s) for a in actors], timeout=context.timeout_s)
        totals = ray.get([a.check.remote() for a in actors], timeout=context.timeout_s)  # every rank joins in
        if any(total != world for total in totals):
            raise RuntimeError(f"an all-reduce of ones gave {totals}, not {world} on every rank")
        rows = ray.get([a.measure.remote(points.to_pylist(), context) for a in actors])[0]
        return pa.Table.from_pylist(rows, schema=schema)
    except (RayError, RuntimeError) as exc:
        cause = getattr(exc, "cause", None) or exc
        reason = str(cause).strip().splitlines()[-1] if str(cause).strip() else type(cause).__name__
        return status_rows(points, schema, "infeasible", f"collective group failed: {reason}")
    finally:
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.get(actor.leave.remote(), timeout=10)
            ray.kill(actor)
        remove_placement_group(group)


def execute_roi(points: pa.Table, workload: Workload, *, chunk_size: int, max_in_flight: int,
                on_outcome: Callable[[pa.Table, ChunkOutcome], None]) -> None:
    """Kernel points as tasks (``execute``); collective points as actor groups, one group
    per (world, placement), run one after the other so their timings do not overlap."""
    import pyarrow.compute as pc

    collective = pc.is_in(points.column("op"), pa.array(["all_reduce", "all_gather", "reduce_scatter"]))
    kernels = points.filter(pc.invert(collective))
    if kernels.num_rows:
        execute(kernels, workload, chunk_size=chunk_size, max_in_flight=max_in_flight, on_outcome=on_outcome)
    groups = points.filter(collective)
    settings = workload.context
    for world, placement in sorted({(r["world"], r["placement"]) for r in groups.select(["world", "placement"]).to_pylist()}):
        mask = pc.and_(pc.equal(groups.column("world"), world), pc.equal(groups.column("placement"), placement))
        piece = groups.filter(mask)
        rows = run_collective_group(piece, world=world, placement=placement, backend=settings.backend,
                                    device=settings.device, context=settings.collectives, schema=workload.schema)
        on_outcome(piece, ChunkOutcome(rows))
