"""Whether a cluster could ever run a task: work it never could is refused at once.

Ray queues a task that asks for more than any node offers (a custom resource no node has,
a GPU on a CPU-only cluster, more CPUs than one node holds) as *infeasible* and waits for
a node that could run it. On a cluster with an autoscaler such a node may come; on a fixed
cluster none ever does, and a sweep would wait at 0 points for ever. What Ray 2.60 tells a
client about it, read from its code:

- every alive node's total resources (``ray.nodes()``; their sum is
  ``ray.cluster_resources()``);
- the node types an autoscaler may start, where one reports them to the GCS (autoscaler v2
  and KubeRay: ``ray._private.state.GlobalState.get_cluster_config``, a
  ``ClusterConfig`` of ``node_group_configs``, each with ``resources`` and ``max_count``,
  -1 meaning unbounded);
- the v1 autoscaler's status (internal KV ``__autoscaling_status``,
  ``autoscaler/_private/monitor.py``), whose ``node_type_mapping`` names each node's type.
  A cluster started by hand (``ray start``, the embedded Ray, ``harness.loopback.local``)
  runs v1 with its read-only provider, which names each node's type after the node
  itself (``format_readonly_node_type``) and never adds one; any other name means node
  types of a cluster config this client cannot read, so nothing is refused there.

A task runs on one node, so a need is met only by one node (or node type) that holds every
amount asked; the sum over nodes is shown, not compared.
"""

from __future__ import annotations

import json
from typing import Dict, List, Mapping, Optional, Sequence

import ray

from sweeps.errors import UserError
from sweeps.jobs.work import Resources

__all__ = ["needs_of", "unmet", "node_shapes", "check_runnable"]

#: Resources Ray counts in bytes; shown in GB.
_BYTES = ("memory", "object_store_memory")


def needs_of(resources: Resources) -> Dict[str, float]:
    """What one task asks of a node, by Ray's resource names (amounts above zero only)."""
    asked = {"CPU": resources.cpus, "GPU": resources.gpus, **resources.custom}
    return {name: float(amount) for name, amount in asked.items() if amount > 0}


def unmet(needs: Mapping[str, float], shapes: Sequence[Mapping[str, float]]) -> Optional[List[str]]:
    """None when one of ``shapes`` (a node's or node type's total resources) holds every
    amount of ``needs``; else the names of the needs that keep every shape from it: those
    no shape holds enough of, or, when each is held by some shape but none holds them all,
    every need."""
    if not needs:
        return None
    if any(all(shape.get(name, 0.0) >= amount for name, amount in needs.items()) for shape in shapes):
        return None
    short = [name for name, amount in needs.items() if max((s.get(name, 0.0) for s in shapes), default=0.0) < amount]
    return short or list(needs)


def _readonly_type(node_id: str) -> str:
    """The node type Ray's read-only provider gives a node of a cluster no autoscaler grows."""
    from ray.autoscaler._private.util import format_readonly_node_type

    return format_readonly_node_type(node_id)


def node_shapes(embedded: bool) -> Optional[List[Dict[str, float]]]:
    """The total resources of every alive node, and of every node type an autoscaler may
    add (``max_count`` not 0); None where the cluster's autoscaler has node types this
    client cannot read (nothing can be refused). ``embedded``: the driver started the
    cluster itself, so no node is ever added."""
    shapes = [dict(node["Resources"]) for node in ray.nodes() if node["Alive"]]
    if embedded:
        return shapes
    from ray._private.state import state
    from ray.experimental.internal_kv import _internal_kv_get

    config = state.get_cluster_config()
    if config is not None and config.node_group_configs:
        grown = [{k: float(v) for k, v in group.resources.items()} for group in config.node_group_configs
                 if group.max_count != 0]
        return shapes + grown
    status = _internal_kv_get("__autoscaling_status")
    mapping = (json.loads(status).get("autoscaler_report") or {}).get("node_type_mapping") if status else None
    if mapping and any(kind != _readonly_type(node_id) for node_id, kind in mapping.items()):
        return None
    return shapes


def _shown(resources: Mapping[str, float]) -> str:
    """Resources as ``NAME=AMOUNT`` (bytes in GB), without Ray's per-node labels."""
    items = []
    for name, amount in sorted(resources.items()):
        if name.startswith("node:"):
            continue
        items.append(f"{name}={amount / 1e9:.1f} GB" if name in _BYTES else f"{name}={amount:g}")
    return ", ".join(items) or "nothing"


def check_runnable(resources: Resources, where: str, *, embedded: bool) -> None:
    """``UserError`` when no node of the cluster (``where``, for the message), nor any
    node type its autoscaler may add, holds what one task asks for: naming the resource,
    the amount asked, and what the cluster has (``ray.cluster_resources()``)."""
    needs = needs_of(resources)
    shapes = node_shapes(embedded) if needs else None
    short = unmet(needs, shapes) if shapes is not None else None
    if not short:
        return
    total = ray.cluster_resources()
    most = {name: max(s.get(name, 0.0) for s in shapes) for name in short}
    per_node = [f"at most {name}={most[name]:g} on one node" for name in short if total.get(name, 0.0) >= needs[name]]
    asked = ", ".join(f"{name}={needs[name]:g}" for name in short)
    grows = "" if embedded else " nor any node type its autoscaler may add"
    raise UserError(f"each task asks for {asked}, which no node of the {where}{grows} holds, so it would wait for "
                    f"ever: the cluster has {_shown(total)}{' (' + '; '.join(per_node) + ')' if per_node else ''}; "
                    "ask for less, or join a cluster that has it (--address)")
