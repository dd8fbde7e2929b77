"""Fan chunks of points out as Ray tasks and hand each finished chunk back to the driver as
it completes; collective points run among groups of ranks (``groups``).

Fault handling: a task whose worker or node dies, or that raises ``TransientError``, is
retried by Ray (``MAX_RETRIES``); infeasible and out-of-memory points come back as result
rows (``tasks.outcomes``); a chunk that outlives its time cap (``point_timeout_s`` per
point) is cancelled and its points are reported as failures, so a sweep never hangs on a
dead or stuck worker.
"""

from __future__ import annotations

import time
from typing import Callable, Dict, List

import pyarrow as pa
import pyarrow.compute as pc
import ray
from ray.exceptions import GetTimeoutError, RayError, RayTaskError, TaskCancelledError

from sweeps.cluster.groups import run_collective_group
from sweeps.cluster.session import ray_options
from sweeps.jobs.work import Workload
from tasks.model.collectives.nccl import COLLECTIVE_OPS
from tasks.outcomes import ChunkOutcome, TransientError, run_chunk

__all__ = ["execute", "chunk", "MAX_RETRIES"]

#: Ray retries a task whose worker died, or that raised TransientError, this many times.
MAX_RETRIES = 3

OnOutcome = Callable[[pa.Table, ChunkOutcome], None]


def chunk(points: pa.Table, chunk_size: int) -> List[pa.Table]:
    """Split a table into consecutive slices of at most ``chunk_size`` rows."""
    return [points.slice(start, chunk_size) for start in range(0, points.num_rows, chunk_size)]


def _lost(points: pa.Table, status: str, exc: BaseException) -> ChunkOutcome:
    message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return ChunkOutcome(None, [dict(point_key=k, status=status, error_type=type(exc).__name__, message=message,
                                    traceback=str(exc)) for k in points.column("key").to_pylist()])


def execute(points: pa.Table, workload: Workload, *, chunk_size: int, max_in_flight: int,
            on_outcome: OnOutcome) -> None:
    """Run ``workload`` over ``points``: kernel-like points as Ray tasks of ``chunk_size``
    rows; with ``workload.collectives``, collective points among actor groups, one group
    per (world, placement), one after the other so their timings do not overlap.

    ``on_outcome(points, outcome)`` runs in the driver for every chunk, in completion
    order, including chunks that timed out or were lost.
    """
    if workload.collectives is None:
        _execute_tasks(points, workload, chunk_size=chunk_size, max_in_flight=max_in_flight, on_outcome=on_outcome)
        return
    collective = pc.is_in(points.column("op"), pa.array(list(COLLECTIVE_OPS)))
    kernels = points.filter(pc.invert(collective))
    if kernels.num_rows:
        _execute_tasks(kernels, workload, chunk_size=chunk_size, max_in_flight=max_in_flight, on_outcome=on_outcome)
    groups = points.filter(collective)
    settings = workload.collectives
    pairs = sorted({(r["world"], r["placement"]) for r in groups.select(["world", "placement"]).to_pylist()})
    for world, placement in pairs:
        mask = pc.and_(pc.equal(groups.column("world"), world), pc.equal(groups.column("placement"), placement))
        piece = groups.filter(mask)
        rows = run_collective_group(piece, world=world, placement=placement, backend=settings.backend,
                                    device=settings.device, context=settings.context, schema=workload.schema)
        on_outcome(piece, ChunkOutcome(rows))


def _execute_tasks(points: pa.Table, workload: Workload, *, chunk_size: int, max_in_flight: int,
                   on_outcome: OnOutcome) -> None:
    """Chunks as Ray tasks; at most ``max_in_flight`` submitted at once, so a task's time
    cap counts from about when it starts."""
    remote = ray.remote(run_chunk).options(max_retries=MAX_RETRIES, retry_exceptions=[TransientError],
                                           **ray_options(workload.resources))
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
            on_outcome(piece, _result(ref, piece))
        now = time.monotonic()
        for ref, (piece, deadline) in list(in_flight.items()):
            if deadline <= now:
                ray.cancel(ref, force=True)
                in_flight.pop(ref)
                on_outcome(piece, _lost(piece, "timeout", TimeoutError(
                    f"no result within {workload.point_timeout_s:g} s per point ({piece.num_rows} points)")))


def _result(ref: "ray.ObjectRef", piece: pa.Table) -> ChunkOutcome:
    try:
        return ray.get(ref)
    except (TaskCancelledError, GetTimeoutError) as exc:
        return _lost(piece, "timeout", exc)
    except RayTaskError as exc:  # the chunk itself raised, retries spent (transient to the end)
        return _lost(piece, "error", exc)
    except RayError as exc:  # retries spent on a dead worker or node
        return _lost(piece, "lost", exc)
