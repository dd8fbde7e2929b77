"""Collective time from NCCL's protocol model, defined once for every op, link tier and
algorithm. Vectorised over NumPy arrays; seconds, bytes, B/s.

**Bus bandwidth** (nccl-tests PERFORMANCE.md): busbw = algbw x factor, factor 2(n-1)/n for
all-reduce and (n-1)/n for all-gather, reduce-scatter and all-to-all; a collective of
``bytes`` takes factor x bytes / busbw at full speed. n = 1 costs nothing.

**Ring, three protocols.** A ring collective among n ranks runs in steps(op, n) steps
(2(n-1) for all-reduce, n-1 otherwise). NCCL runs it under one of three protocols and
picks the fastest for each size (NVIDIA/nccl src/graph/tuning.cc, ``ncclTopoTuneModel``):
protocol p pays ``latency_scale`` x α per step and moves bytes at ``bandwidth_share`` x
busbw, so

    t = min_p [ steps(op, n) * latency_scale_p * α + factor(op, n) * bytes / (bandwidth_share_p * busbw) ]

with α the tier's per-step latency of LL and busbw its saturated bus bandwidth
(``tier_figures``). Small messages ride LL (lowest latency, half the bandwidth: its 8-byte
lines carry 4 bytes of flags), middle ones LL128 (120 of every 128 bytes are data), large
ones Simple (full bandwidth, the highest latency); the busbw curve rises with size and
saturates. The bandwidth shares are tuning.cc's (``busBw * .5`` for LL, ``busBw * 0.92``
for LL128). The latency scales are the ratios of tuning.cc's ring hardware latencies,
NET row (LL 2.7, LL128 4.0, Simple 14.0 us); on every tier, because with them the 8xA100
ladder of conf/data/collective_ladders.csv is met within 4 % where the NVLink row's
ratios (0.6 : 1.9 : 3.4) miss it by 10 % (scripts/bench_collectives.py).

**In-switch reduction (NVLS).** An all-reduce among more than four ranks on a tier with
``nvls_efficiency`` > 0 may reduce in the NVSwitch: each rank sends its whole buffer to
the switch, which reduces it, and takes back its reduced shard, then sends that shard
once for the switch to multicast: bytes x (n+1)/n each way, so busbw = 2(n-1)/(n+1) x
bandwidth x ``nvls_efficiency`` (above the ring's wire speed), after a fixed
``nvls_latency_us`` (Simple protocol only, as in tuning.cc). NCCL picks it where it is
faster than the ring; the ladder's note on 4 of 8 H200 says it is used only with more
than four GPUs.

**Across nodes.** A group of n ranks with L ranks on each node (its own NIC each,
rail-optimised) runs NCCL's rings through L NICs at once; the ring's busbw is
min(scale-up busbw, L x NIC busbw), and of its steps 2(nodes-1) (all-reduce) or nodes-1
cross the network and pay the scale-out α (tuning.cc, ``nInterSteps``). L = 1 is one rank
per node: every step and every byte on the scale-out tier.

**All-to-all** (expert parallelism) exchanges with each of the n-1 peers (n-1 steps,
factor (n-1)/n); across nodes each rank sends (n-L)/n of its message through its own
NIC, so its busbw there is min(scale-up busbw, NIC busbw x (n-1)/(n-L)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from tasks.model.terms.specs import HardwareProfile, LinkTier

__all__ = ["COLLECTIVE_OPS", "MODELLED_OPS", "ALGORITHMS", "Protocol", "PROTOCOLS", "NVLS_MIN_RANKS", "bus_factor",
           "ring_steps", "collective_time", "tier_figures", "nvls_busbw", "spanning_figures", "tier_time",
           "predicted_busbw"]

#: The collectives commscale models and measures.
COLLECTIVE_OPS: Tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")
#: The collectives the model times (all-to-all is modelled, not measured).
MODELLED_OPS: Tuple[str, ...] = COLLECTIVE_OPS + ("all_to_all",)
#: ``algorithm`` choices: None picks the fastest available, as NCCL's tuner does.
ALGORITHMS: Tuple[str, ...] = ("ring", "nvls")
#: NVLS serves all-reduces among more than four ranks only (collective_ladders.csv, 4 of 8xH200).
NVLS_MIN_RANKS = 5


@dataclass(frozen=True)
class Protocol:
    """One NCCL protocol: per-step latency in units of the tier's α (LL's), and the share
    of the tier's saturated bus bandwidth it moves bytes at."""

    name: str
    latency_scale: float
    bandwidth_share: float


#: NCCL's protocols (NVIDIA/nccl src/graph/tuning.cc): latency scales from the ring's NET
#: hardware latencies (LL 2.7, LL128 4.0, Simple 14.0 us), bandwidth shares from its model
#: refinements (LL x 0.5, LL128 x 0.92).
PROTOCOLS: Tuple[Protocol, ...] = (Protocol("LL", 1.0, 0.5), Protocol("LL128", 4.0 / 2.7, 0.92),
                                   Protocol("Simple", 14.0 / 2.7, 1.0))


def _check(op: str) -> None:
    if op not in MODELLED_OPS:
        raise ValueError(f"unknown collective {op!r}: choose one of {', '.join(MODELLED_OPS)}")


def bus_factor(op: str, n):
    """nccl-tests' busbw / algbw factor of ``op`` among ``n`` ranks."""
    _check(op)
    n = np.asarray(n, dtype=np.float64)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1.0) / n


def ring_steps(op: str, n):
    """Latency-paying steps: 2(n-1) for all-reduce, n-1 otherwise (all-to-all: one per peer)."""
    _check(op)
    n = np.asarray(n, dtype=np.float64)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1.0)


def collective_time(op: str, n, message_bytes, latency_s, busbw_Bps, *,
                    protocols: Tuple[Protocol, ...] = PROTOCOLS):
    """Time of ``op`` on a ``message_bytes`` message among ``n`` ranks, in seconds: the
    fastest of ``protocols`` (module docstring), with ``latency_s`` the per-step α of a
    protocol of latency scale 1 and ``busbw_Bps`` the bus bandwidth of share 1.
    ``protocols=(Protocol("line", 1.0, 1.0),)`` gives the plain α-β line."""
    steps_alpha = ring_steps(op, n) * latency_s
    wire = bus_factor(op, n) * np.asarray(message_bytes, dtype=np.float64) / busbw_Bps
    best = steps_alpha * protocols[0].latency_scale + wire / protocols[0].bandwidth_share
    for p in protocols[1:]:
        best = np.minimum(best, steps_alpha * p.latency_scale + wire / p.bandwidth_share)
    return best


def tier_figures(tier: LinkTier) -> Tuple[float, float]:
    """(α in s, saturated bus bandwidth in B/s) of a link tier: its LL per-step latency, and
    its bandwidth times its efficiency."""
    return tier.latency_us * 1e-6, tier.bandwidth_GBps * 1e9 * tier.efficiency


def nvls_busbw(n, tier: LinkTier):
    """Bus bandwidth in B/s of an in-switch (NVLS) all-reduce among ``n`` ranks on ``tier``:
    2(n-1)/(n+1) x bandwidth x ``nvls_efficiency`` (module docstring); 0 where the tier
    has none or the group has fewer than ``NVLS_MIN_RANKS`` ranks."""
    n = np.asarray(n, dtype=np.float64)
    bound = 2.0 * (n - 1.0) / (n + 1.0) * tier.bandwidth_GBps * 1e9
    return np.where(n >= NVLS_MIN_RANKS, bound * tier.nvls_efficiency, 0.0)


def spanning_figures(op: str, n, crosses_nodes, hw: HardwareProfile, *, local_ranks=1):
    """(per-step α in s, ring bus bandwidth in B/s) of ``op`` among ``n`` ranks on the
    tiers the group spans: the scale-up tier's where it stays in a node; where it
    ``crosses_nodes`` with ``local_ranks`` ranks on each node, α averaged over its
    intra- and inter-node steps and the bus bandwidth through ``local_ranks`` NICs
    (module docstring). ``local_ranks=1`` puts every step and byte on the scale-out tier."""
    _check(op)
    (a_in, bw_in), (a_out, bw_out) = tier_figures(hw.intra_node), tier_figures(hw.inter_node)
    n = np.asarray(n, dtype=np.float64)
    local = np.minimum(np.maximum(np.asarray(local_ranks, dtype=np.float64), 1.0), n)
    if op == "all_to_all":
        inter_steps = n - local
        nic = bw_out * (n - 1.0) / np.maximum(n - local, 1.0)
    else:
        inter_steps = ring_steps(op, n / local)
        nic = bw_out * local
    out_share = inter_steps / np.maximum(ring_steps(op, n), 1.0)
    crosses = np.asarray(crosses_nodes, dtype=bool)
    return (np.where(crosses, a_in + out_share * (a_out - a_in), a_in),
            np.where(crosses, np.minimum(bw_in, nic), bw_in))


def _nvls_time(n, message_bytes, crosses_nodes, hw: HardwareProfile):
    """In-switch all-reduce time in s; NaN where NVLS is not available (across nodes, too
    few ranks, or no in-switch reduction on the scale-up tier)."""
    tier = hw.intra_node
    bandwidth = nvls_busbw(n, tier)
    usable = (bandwidth > 0) & ~np.asarray(crosses_nodes, dtype=bool)
    wire = bus_factor("all_reduce", n) * np.asarray(message_bytes, dtype=np.float64) / np.where(usable, bandwidth, 1.0)
    return np.where(usable, tier.nvls_latency_us * 1e-6 + wire, np.nan)


def _check_algorithm(algorithm: Optional[str]) -> None:
    if algorithm is not None and algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm {algorithm!r}: choose one of {', '.join(ALGORITHMS)} or None")


def tier_time(op: str, n, message_bytes, crosses_nodes, hw: HardwareProfile, *, local_ranks=1,
              algorithm: Optional[str] = None):
    """Time in s of ``op`` among ``n`` ranks on the tiers each group spans: the scale-up
    tier where it stays in a node, the scale-out tier where it ``crosses_nodes`` (a bool
    or bool array) with ``local_ranks`` ranks of the group on each node (1, the default:
    one rank per node). ``algorithm`` None takes the faster of the ring and, for an
    all-reduce inside a node where the hardware has it, the in-switch reduction (as NCCL
    picks); "ring" or "nvls" forces one (NaN where "nvls" is not available)."""
    _check_algorithm(algorithm)
    alpha, busbw = spanning_figures(op, n, crosses_nodes, hw, local_ranks=local_ranks)
    ring = collective_time(op, n, message_bytes, alpha, busbw)
    if algorithm == "ring" or (algorithm is None and (op != "all_reduce" or hw.intra_node.nvls_efficiency <= 0)):
        return ring
    switch = _nvls_time(n, message_bytes, crosses_nodes, hw) if op == "all_reduce" else np.full_like(ring, np.nan)
    if algorithm == "nvls":
        return np.broadcast_to(switch, np.broadcast(switch, ring).shape).copy()
    return np.fmin(ring, switch)


def predicted_busbw(op: str, n, message_bytes, hw: HardwareProfile, nodes=1, algorithm: Optional[str] = None):
    """nccl-tests' bus bandwidth in B/s (not GB/s) the model predicts for ``op`` on a
    ``message_bytes`` message among ``n`` ranks spread evenly over ``nodes`` nodes of
    ``hw`` (n / nodes ranks on each, one NIC each), as a published ladder row reports it:
    bus_factor x bytes / ``tier_time``. ``algorithm`` as in ``tier_time``; NaN for one
    rank or an algorithm that is not available."""
    n = np.asarray(n, dtype=np.float64)
    nodes = np.asarray(nodes, dtype=np.float64)
    t = tier_time(op, n, message_bytes, nodes > 1, hw, local_ranks=n / nodes, algorithm=algorithm)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(t > 0, bus_factor(op, n) * np.asarray(message_bytes, dtype=np.float64) / t, np.nan)
