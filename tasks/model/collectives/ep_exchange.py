"""Expert parallelism's exchange of tokens in one mixture-of-experts layer, one micro-batch:
the dispatch of each TP rank's routed token copies to their experts' ranks and the combine
that brings the experts' outputs back, forward and backward, and expert tensor parallelism's
gather and scatter around the experts.

Megatron-Core's ``MoEAlltoAllTokenDispatcher`` (Megatron-LM
megatron/core/transformer/moe/token_dispatcher.py at d98e8a64dd) runs, per layer and pass: an
all-to-all over the EP group (``token_dispatch``), an all-gather over the ETP group
(``dispatch_postprocess``, ETP > 1 only), the experts, a reduce-scatter over ETP
(``combine_preprocess``) and an all-to-all back (``token_combine``); the backward runs the
same four in reverse. Each all-to-all moves every routed copy a TP rank holds, tokens/TP x
topk rows of H values at the activations' width (``layer.routed_tokens``' balance). The
"flex" dispatcher (``layout.MOE_DISPATCHERS``) sends a token once to each other node that holds
one of its experts and fans it out inside the node (DeepSeek-V3 report §3.2.2; DeepEP): at
the router's forced balance a token's ``topk`` experts fall on N(1 - (1 - 1/N)^topk) of an
EP group's N nodes, so it moves that share of the all-to-all's cross-node copies
(``flex_cross_node_share``) while NVLink still carries every copy. Full recomputation
repeats the forward's exchange. Seconds, arrays over layouts.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from tasks.model.collectives.nccl import lowest_latency, spanning_figures, tier_figures, tier_time
from tasks.model.terms.specs import HardwareProfile

__all__ = ["EXCHANGES_PER_PASS", "flex_cross_node_share", "dispatch_time", "ep_layer_exchange"]

#: All-to-alls per MoE layer and pass: the dispatch and the combine.
EXCHANGES_PER_PASS = 2


def flex_cross_node_share(nodes, topk):
    """The share of an all-to-all's cross-node copies a dispatcher that sends a token once per
    node moves, at uniform routing over ``nodes`` nodes: N(1 - (1 - 1/N)^topk) / topk (1 for
    one node or topk 1)."""
    nodes = np.maximum(np.asarray(nodes, dtype=np.float64), 1.0)
    return np.where(nodes > 1.0, nodes * (1.0 - (1.0 - 1.0 / nodes) ** topk) / topk, 1.0)


def dispatch_time(ep, message_bytes, crosses, local, hw: HardwareProfile, *, flex, topk: float):
    """Seconds of one dispatch (or combine) among ``ep`` ranks, each sending ``message_bytes``
    (all its routed copies; 1/EP stays on the rank), ``local`` of them on a node: NCCL's
    all-to-all (``nccl.tier_time``), or where ``flex`` (a bool or bool array) the same latency
    with the cross-node bytes cut to ``flex_cross_node_share`` and every copy on NVLink, the
    slower of the two paths setting the pace."""
    nccl = tier_time("all_to_all", ep, message_bytes, crosses, hw, local_ranks=local)
    if not np.any(flex):
        return nccl
    ep = np.asarray(ep, dtype=np.float64)
    local = np.minimum(np.maximum(np.asarray(local, dtype=np.float64), 1.0), ep)
    alpha = spanning_figures("all_to_all", ep, crosses, hw, local_ranks=local)[0]
    (_, bw_in), (_, bw_out) = tier_figures(hw.intra_node), tier_figures(hw.inter_node)
    share = flex_cross_node_share(ep / local, topk)
    wire = np.maximum((ep - 1.0) / ep * message_bytes / bw_in, share * (ep - local) / ep * message_bytes / bw_out)
    return np.where(np.asarray(flex, dtype=bool) & crosses, (ep - 1.0) * alpha + wire, nccl)


def ep_layer_exchange(ep, etp, routed_bytes, hw: HardwareProfile, *, crosses, local, flex, topk: float,
                      repeats, overlap, hide_fwd, hide_bwd) -> Dict[str, np.ndarray]:
    """One MoE layer's exchange for one micro-batch (module docstring): ``total``,
    ``exposed``, ``forward_total``, ``forward_exposed`` and ``latency`` (its α steps alone),
    in seconds; 0 where EP and ETP are 1. ``routed_bytes``: one TP rank's routed copies
    (tokens/TP x topk x H x bytes); ``repeats``: the share of the forward full recomputation
    repeats. ``crosses`` and ``local``: whether the EP group spans nodes, and its ranks on one
    (``step.context.StepLayouts.ep_crosses``, ``ep_local_ranks``); an ETP group is ETP
    consecutive ranks (Megatron-Core's expert grid, tp-ep-dp-pp, TP there being ETP). Where
    ``overlap`` (a bool or bool array: ``Stack.moe_a2a_overlap``), a pass's exchange runs
    behind the other pass's compute of another micro-batch, ``hide_bwd`` and ``hide_fwd``
    seconds of the layer (what it waits for is the excess); elsewhere all of it."""
    ep, etp = np.asarray(ep, dtype=np.float64), np.asarray(etp, dtype=np.float64)
    per_node = float(hw.devices_per_node)
    with np.errstate(divide="ignore", invalid="ignore"):   # a group of one rank moves nothing: masked below
        a2a = np.where(ep > 1, dispatch_time(ep, routed_bytes, crosses, local, hw, flex=flex, topk=topk), 0.0)
    etp_crosses, etp_local = etp > per_node, np.minimum(etp, per_node)
    gathered = etp * routed_bytes
    etp_pair = np.where(etp > 1, tier_time("all_gather", etp, gathered, etp_crosses, hw, local_ranks=etp_local)
                        + tier_time("reduce_scatter", etp, gathered, etp_crosses, hw, local_ranks=etp_local), 0.0)
    one_pass = EXCHANGES_PER_PASS * a2a + etp_pair
    forward = one_pass * (1.0 + repeats)
    overlap = np.asarray(overlap, dtype=bool)
    fwd_exposed = np.where(overlap, np.maximum(0.0, one_pass - hide_bwd) * (1.0 + repeats), forward)
    bwd_exposed = np.where(overlap, np.maximum(0.0, one_pass - hide_fwd), one_pass)
    alpha = np.where(ep > 1, lowest_latency("all_to_all", ep, crosses, hw, local_ranks=local), 0.0)
    return {"total": forward + one_pass, "exposed": fwd_exposed + bwd_exposed, "forward_total": one_pass,
            "forward_exposed": fwd_exposed / (1.0 + repeats),
            "latency": EXCHANGES_PER_PASS * alpha * (2.0 + repeats)}
