"""The collectives of one Transformer layer, timed once for the per-layer projection and
the whole-step model alike (method.md §3; Korthikanti et al., arXiv 2205.05198).

- **TP**: each layer all-reduces its activations twice in the forward pass and its errors
  twice in the backward pass, each of p*SL*B*H bytes among the TP ranks; full
  recomputation repeats the forward's two. Sequence parallelism replaces each all-reduce
  by a reduce-scatter and an all-gather of the same message.
- **DP**: a layer's weight gradients, p * 12 H^2 / TP bytes, among the DP replicas (an
  all-reduce for plain DP; ZeRO and FSDP use reduce-scatter and all-gather).

Times come from ``collectives.tier_time`` on the tier the group spans, a group that spans
nodes with as many of its ranks on each node as Megatron-LM's numbering (TP fastest, then
DP) puts there, each on its own NIC. Vectorised; seconds and bytes.
"""

from __future__ import annotations

import numpy as np

from tasks.model.kernels import layer
from tasks.model.collectives.dp_protocol import dp_ranks_per_node
from tasks.model.collectives.nccl import group_figures, tier_time, tier_time_given
from tasks.model.terms.specs import HardwareProfile

__all__ = ["TP_COLLECTIVES_PER_LAYER", "RECOMPUTED_TP_COLLECTIVES", "tp_collectives_per_layer", "tp_collective_time",
           "tp_layer_time", "dp_gradient_time", "tp_ranks_per_node"]

#: TP collectives of one layer per micro-batch: two in the forward pass (after the attention
#: output projection and after FC2), two of errors in the backward pass (method.md §3).
TP_COLLECTIVES_PER_LAYER = layer.tp_allreduces_per_layer
#: What full recomputation adds: the forward's two again.
RECOMPUTED_TP_COLLECTIVES = 2


def tp_collectives_per_layer(recomputed_share=0.0):
    """TP collectives of one layer per micro-batch, the one count every consumer reads:
    ``TP_COLLECTIVES_PER_LAYER``, plus ``RECOMPUTED_TP_COLLECTIVES`` for the share of layers
    full recomputation repeats (1 under full recomputation of every layer, 0 without)."""
    return TP_COLLECTIVES_PER_LAYER + RECOMPUTED_TP_COLLECTIVES * np.asarray(recomputed_share, dtype=np.float64)


def tp_ranks_per_node(tp, devices_per_node: int) -> np.ndarray:
    """Ranks of one TP group on one node, TP numbered fastest: a node's devices, or the whole
    group where it fits in one. A group wider than a node runs NCCL's rings through that many
    NICs of each node (``collectives.nccl``, "Across nodes")."""
    return np.minimum(np.asarray(tp, dtype=np.float64), float(devices_per_node))


def tp_collective_time(h, sl, b, tp, p, crosses_nodes, hw: HardwareProfile, *, sequence_parallel=False,
                       gather_p=None):
    """One TP all-reduce of a layer's activations (p*SL*B*H bytes) among ``tp`` ranks, or,
    with sequence parallelism, a reduce-scatter and an all-gather of the same bytes (the
    all-gather at ``gather_p`` bytes an element where given: an fp8 gather); a group that
    ``crosses_nodes`` has ``tp_ranks_per_node`` ranks on each."""
    message = layer.tp_allreduce_bytes(h, sl, b, p)
    gathered = message if gather_p is None else layer.tp_allreduce_bytes(h, sl, b, gather_p)
    local = tp_ranks_per_node(tp, hw.devices_per_node)
    allreduce = tier_time("all_reduce", tp, message, crosses_nodes, hw, local_ranks=local)
    if not np.any(sequence_parallel):
        return allreduce
    figures = group_figures("all_gather", tp, crosses_nodes, hw, local_ranks=local)   # the reduce-scatter's too
    split = (tier_time_given("reduce_scatter", tp, message, crosses_nodes, hw, figures, local_ranks=local)
             + tier_time_given("all_gather", tp, gathered, crosses_nodes, hw, figures, local_ranks=local))
    return np.where(sequence_parallel, split, allreduce)


def tp_layer_time(h, sl, b, tp, p, crosses_nodes, hw: HardwareProfile, *, sequence_parallel=False,
                  recompute_full=False):
    """Every TP collective of one layer and micro-batch: 4 (6 under full recomputation)."""
    count = tp_collectives_per_layer(np.where(recompute_full, 1.0, 0.0))
    return count * tp_collective_time(h, sl, b, tp, p, crosses_nodes, hw, sequence_parallel=sequence_parallel)


def dp_gradient_time(op: str, h, tp, dp, p, crosses_nodes, hw: HardwareProfile):
    """``op`` on one layer's weight gradients (p * 12 H^2 / TP bytes) among ``dp`` replicas,
    ``dp_protocol.dp_ranks_per_node`` of them on each node a group that ``crosses_nodes``
    spans."""
    return tier_time(op, dp, layer.dp_gradient_bytes(h, tp, p), crosses_nodes, hw,
                     local_ranks=dp_ranks_per_node(tp, dp, hw.devices_per_node))
