"""Context parallelism's exchange of keys and values for one attention layer and one
micro-batch: what it sends among the CP ranks, what of it hides behind attention, and its
latency. Vectorised over NumPy arrays; seconds and bytes.

Context parallelism (Megatron-Core with Transformer Engine's attention, the only one that runs
it: megatron/core/transformer/dot_product_attention.py at d98e8a64dd asserts "Context
parallelism is only supported by TEDotProductAttention!") splits each sequence into 2 x CP
chunks and gives rank r chunks r and 2CP-1-r, so that under the causal mask every rank does
the same attention work (Megatron-LM's ``get_batch_on_this_cp_rank``). Each rank runs the
layer's GEMMs and element-wise kernels on its SL/CP tokens and attends its queries to the keys
of the whole sequence: CP attention steps, each as much work as one causal attention over SL/CP
tokens (``kernels.layer_cost.layer_cost``'s ``cp``). How the keys and values travel is the
layout's ``cp_comm`` (``terms.layout.CP_COMMS``; Transformer Engine's
``attention/dot_product_attention/context_parallel.py`` at d0067d0da):

- **p2p** (``AttnFuncWithCPAndKVP2P``): a ring. The forward pass sends its K/V chunk to the
  next rank CP-1 times, each send behind one attention step. The backward pass sends the K/V
  chunk on at its first step, K/V and the accumulated dK/dV at each of the CP-2 steps between,
  and dK/dV alone at its last: 2(CP-1) chunks over CP sends, each behind that step's attention
  gradient. A step waits for what its send takes beyond its attention step.
- **all_gather** (``AttnFuncWithCPAndKVAllGather``): K and V are all-gathered over the CP group
  before the layer's attention and dK, dV reduce-scattered after it, with nothing beside them
  to hide behind: all of it is waited for.
- **a2a** (``AttnFuncWithCPAndQKVOA2A``, DeepSpeed Ulysses): Q, K and V go through an
  all-to-all each before attention (``flash_attn_a2a_communicate``: sequence gathered, heads
  scattered) and the output through one after; the backward sends dO before and dQ, dK, dV
  after. Attention waits for its inputs and the next GEMM for its output: all of it is
  waited for, four all-to-alls a pass, each moving (CP-1)/CP of its tensor.

A ring hop crosses nodes where the CP group does (ranks numbered TP fastest, then CP:
Megatron-Core's order tp-cp-ep-dp-pp), and runs at that tier's point-to-point figures as the
pipeline's sends do. Recomputation that repeats the attention's forward repeats its exchange.
"""

from __future__ import annotations

from typing import Dict

import numpy as np

from tasks.model.collectives.dp_protocol import dp_ranks_per_node
from tasks.model.collectives.nccl import lowest_latency, tier_figures, tier_time
from tasks.model.terms.layout import CP_COMMS
from tasks.model.terms.specs import HardwareProfile

__all__ = ["kv_chunk_bytes", "cp_layer_exchange"]

_ALL_GATHER, _A2A = CP_COMMS.index("all_gather"), CP_COMMS.index("a2a")


def kv_chunk_bytes(tokens, kv_heads: float, head_dim: float, tp, p: float = 2.0):
    """Bytes of one device's keys and values: ``tokens`` (its micro-batch's share of the
    sequences), K and V of the kv heads on its TP rank, ``p`` bytes each (Transformer Engine's CP
    attention exchanges them at the run's 16 bits)."""
    return 2.0 * np.asarray(tokens, dtype=np.float64) * kv_heads * head_dim / np.asarray(tp, dtype=np.float64) * p


def cp_layer_exchange(cp, cp_comm, chunk_bytes, crosses, step_fwd, step_bwd, repeats, hw: HardwareProfile,
                      *, tp, q_bytes=0.0) -> Dict[str, np.ndarray]:
    """One layer's exchange for one micro-batch, 0 where ``cp`` is 1: ``forward_total`` and
    ``forward_exposed`` (the first forward pass's), ``total`` and ``exposed`` (with ``repeats``
    more forward exchanges under recomputation, and the backward's), ``latency`` (their α steps
    alone). ``cp_comm``: codes of ``CP_COMMS``; ``chunk_bytes``: ``kv_chunk_bytes``; ``crosses``:
    whether the CP group spans nodes; ``step_fwd``/``step_bwd``: one attention step's time,
    forward and backward (a layer's attention over CP); ``tp``: the TP degree (ranks of a CP
    group on one node: a node's devices over TP); ``q_bytes``: one device's queries (and
    attention output), which the a2a exchange moves too."""
    cp = np.asarray(cp, dtype=np.float64)
    (a_in, bw_in), (a_out, bw_out) = tier_figures(hw.intra_node), tier_figures(hw.inter_node)
    alpha, bandwidth = np.where(crosses, a_out, a_in), np.where(crosses, bw_out, bw_in)
    one, two = alpha + chunk_bytes / bandwidth, alpha + 2.0 * chunk_bytes / bandwidth
    inner = np.maximum(cp - 2.0, 0.0)
    ring_fwd, ring_bwd = (cp - 1.0) * one, 2.0 * one + inner * two
    ring_fwd_exposed = (cp - 1.0) * np.maximum(0.0, one - step_fwd)
    ring_bwd_exposed = 2.0 * np.maximum(0.0, one - step_bwd) + inner * np.maximum(0.0, two - step_bwd)
    local = dp_ranks_per_node(tp, cp, hw.devices_per_node)   # numbered right after TP, as a DP group is
    gather = tier_time("all_gather", cp, cp * chunk_bytes, crosses, hw, local_ranks=local)
    scatter = tier_time("reduce_scatter", cp, cp * chunk_bytes, crosses, hw, local_ranks=local)
    # a2a: Q, K, V (half the chunk each of K and V) and the output; the backward the same bytes
    swaps = 2.0 * tier_time("all_to_all", cp, q_bytes, crosses, hw, local_ranks=local) \
        + 2.0 * tier_time("all_to_all", cp, chunk_bytes / 2.0, crosses, hw, local_ranks=local)
    comm = np.asarray(cp_comm)
    ring, a2a = (comm != _ALL_GATHER) & (comm != _A2A), comm == _A2A
    fwd = np.where(ring, ring_fwd, np.where(a2a, swaps, gather))
    bwd = np.where(ring, ring_bwd, np.where(a2a, swaps, scatter))
    fwd_exposed = np.where(ring, ring_fwd_exposed, fwd)
    bwd_exposed = np.where(ring, ring_bwd_exposed, bwd)
    swap_alpha = 4.0 * lowest_latency("all_to_all", cp, crosses, hw, local_ranks=local)
    alphas = np.where(ring, (cp - 1.0) * alpha * (1.0 + repeats) + cp * alpha,
                      np.where(a2a, swap_alpha * (2.0 + repeats),
                               lowest_latency("all_gather", cp, crosses, hw, local_ranks=local) * (1.0 + repeats)
                               + lowest_latency("reduce_scatter", cp, crosses, hw, local_ranks=local)))
    out = {"forward_total": fwd, "forward_exposed": fwd_exposed, "total": fwd * (1.0 + repeats) + bwd,
           "exposed": fwd_exposed * (1.0 + repeats) + bwd_exposed, "latency": alphas}
    return {name: np.where(cp > 1, value, 0.0) for name, value in out.items()}
