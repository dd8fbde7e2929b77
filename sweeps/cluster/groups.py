"""Collective points measured among Ray actors joined by torch.distributed.

Each rank is a ``tasks.measure.collectives.CollectiveMember`` (a plain class) run as a Ray
actor in a placement group: PACK keeps the group inside one node, STRICT_SPREAD puts every
rank on a different node.
"""

from __future__ import annotations

import contextlib
from typing import Any

import pyarrow as pa
import ray
from ray.exceptions import GetTimeoutError, RayError
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tasks.device import is_cuda
from tasks.measure.collectives import CollectiveMember
from tasks.outcomes import STATUS_INFEASIBLE, status_rows

__all__ = ["run_collective_group"]


def run_collective_group(points: pa.Table, *, world: int, placement: str, backend: str, device: str,
                         context: Any, schema: pa.Schema, form_timeout_s: float = 60.0) -> pa.Table:
    """Measure collective ``points`` among ``world`` Ray actors joined by torch.distributed.

    ``placement`` "pack" keeps the group inside one node where it can (intra-node links);
    "spread" puts every rank on a different node (inter-node links). A group that cannot
    form (too few nodes or devices, or a failed rendezvous) yields rows with status
    "infeasible" and the reason, not an exception.
    """
    bundle = {"CPU": 1, "GPU": 1} if is_cuda(device) else {"CPU": 1}
    group = placement_group([bundle] * world, strategy="PACK" if placement == "pack" else "STRICT_SPREAD")
    try:
        ray.get(group.ready(), timeout=form_timeout_s)
    except GetTimeoutError:
        remove_placement_group(group)
        return status_rows(points, schema, STATUS_INFEASIBLE,
                           f"a group of {world} x {bundle} placed '{placement}' cannot form on this cluster")
    member = ray.remote(CollectiveMember)
    actors = [member.options(num_cpus=1, num_gpus=bundle.get("GPU", 0), scheduling_strategy=
                             PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=i)).remote(
                                 i, world, backend, "cuda" if is_cuda(device) else device)
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
        return status_rows(points, schema, STATUS_INFEASIBLE, f"collective group failed: {reason}")
    finally:
        for actor in actors:
            with contextlib.suppress(Exception):
                ray.get(actor.leave.remote(), timeout=10)
            ray.kill(actor)
        remove_placement_group(group)
