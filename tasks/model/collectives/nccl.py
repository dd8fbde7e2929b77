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

**At scale** (NVIDIA/nccl src/graph/tuning.cc at 5067397c, ``ncclTopoTuneModel``): NCCL
gives a ring a base latency per call plus a latency per step, with its own per-step figures
on NVLink (ring LL 0.6, LL128 1.9, Simple 3.4 us; an intra-node step of a ring that crosses
nodes at least the network post overhead, 1 us, 3 us under Simple). A profile's α is fitted
on 8-GPU ladders, where it carries the call's fixed cost too, so charging it once per rank
makes a ring of thousands of ranks pay that cost thousands of times. ``ring_latency``
charges the fitted α for the steps of a ``FIT_RANKS`` group and NCCL's per-step cost for the
rest (the network α for steps that cross nodes, as before). Beyond that group NCCL may run
an all-reduce across nodes as a tree: 2 x log2(nodes) network tree steps (5.0 / 8.5 / 14 us
against the ring's 2.7 LL, scaled to the profile's network α) after the node's own ring, at
0.92 of the bus bandwidth (LL 1/3.8 of it, LL128 120/128) and an algorithm bandwidth of half
of it, times tuning.cc's correction for mid-sized messages (``TREE_CORRECTION``);
``tier_time`` takes the faster, as NCCL's tuner does. Groups up to ``FIT_RANKS`` ranks keep
the fitted ring alone.

**One rank per node** (tuning.cc at 5067397c): a ring with one rank on each node pays, for
each network step, the network tree's latency of its protocol (LL 5.0, LL128 8.5, Simple 14
us against the ring's 2.7 / 4.0 / 14: "With ppn=1 latencies are fully exposed, use the Tree
network latency"), scaled to the profile's network α. There NCCL may also run an all-gather
or a reduce-scatter as PAT (``ncclPatEnable``: one GPU per node, Simple protocol only): a
base latency of 8 us, log2(nodes) x the network tree's Simple latency / 3.5, and 2.8 us per
rank ("still a linear part"), moving the message at 0.75 of the bus bandwidth with no
(n-1)/n saving (its bus bandwidth is not turned into an algorithm bandwidth); ``tier_time``
takes it where it is faster, as the tuner does, and ``lowest_latency`` counts it.

**All-to-all** (expert parallelism) exchanges with each of the n-1 peers (n-1 steps,
factor (n-1)/n); across nodes each rank sends (n-L)/n of its message through its own
NIC, so its busbw there is min(scale-up busbw, NIC busbw x (n-1)/(n-L)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from tasks.model.terms.specs import HardwareProfile, LinkTier
from tasks.model.collectives.groups import per_group

__all__ = ["COLLECTIVE_OPS", "MODELLED_OPS", "ALGORITHMS", "Protocol", "PROTOCOLS", "NVLS_MIN_RANKS", "bus_factor",
           "ring_steps", "collective_time", "tier_figures", "nvls_busbw", "spanning_figures", "ring_latency",
           "tier_time", "predicted_busbw", "RING_STEP_US_NVLINK", "TREE_STEP_US_NVLINK", "TREE_STEP_US_NET",
           "RING_STEP_US_NET_LL", "NET_OVERHEAD_US", "FIT_RANKS", "TREE_BANDWIDTH_SHARE", "TREE_CORRECTION",
           "PAT_OPS", "PAT_BASE_US", "PAT_RANK_US", "PAT_LOG_DIVISOR", "PAT_BANDWIDTH_SHARE", "one_per_node",
           "lowest_latency", "group_figures", "figures_op", "tier_time_given"]

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
    return _fastest_protocol(op, n, message_bytes, busbw_Bps, [steps_alpha * p.latency_scale for p in protocols],
                             protocols)


def _fastest_protocol(op: str, n, message_bytes, busbw_Bps, latencies, protocols: Tuple[Protocol, ...] = PROTOCOLS):
    """The fastest of ``protocols`` in s, each its latency (``latencies``, one per protocol, in
    s) plus the bus bytes at its share of ``busbw_Bps``."""
    wire = bus_factor(op, n) * np.asarray(message_bytes, dtype=np.float64) / busbw_Bps
    best = None
    for latency, p in zip(latencies, protocols, strict=True):
        t = latency + wire / p.bandwidth_share
        best = t if best is None else np.minimum(best, t)
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


#: NCCL's per-step latencies in us, per protocol (LL, LL128, Simple), of a ring and a tree step
#: on NVLink and of a tree step on the network; the network ring LL step they are scaled
#: against; the network post overhead that bounds an intra-node step of a multi-node ring
#: (x3 under Simple). NVIDIA/nccl src/graph/tuning.cc at 5067397c (hwLatencies, getNetOverhead).
RING_STEP_US_NVLINK = (0.6, 1.9, 3.4)
TREE_STEP_US_NVLINK = (0.6, 1.25, 4.0)
TREE_STEP_US_NET = (5.0, 8.5, 14.0)
RING_STEP_US_NET_LL = 2.7
NET_OVERHEAD_US = 1.0
#: The tree's bus bandwidth share per protocol (tuning.cc: busBw x .92; LL x 1/3.8, LL128
#: x 120/128 across nodes), and its bandwidth correction by message size, index
#: log2(bytes / 64) below 23 (tuning.cc ``treeCorrectionFactor``, at 5067397c).
TREE_BANDWIDTH_SHARE = (0.92 / 3.8, 0.92 * 120.0 / 128.0, 0.92)
TREE_CORRECTION = (
    (1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0),
    (1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0),
    (.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9),
)


#: PAT (tuning.cc at 5067397c, module docstring "One rank per node"): the ops it serves, its
#: base latency and per-rank linear part in us, the divisor of its log2(nodes) network
#: latency, and its share of the bus bandwidth.
PAT_OPS: Tuple[str, ...] = ("all_gather", "reduce_scatter")
PAT_BASE_US = 8.0
PAT_RANK_US = 2.8
PAT_LOG_DIVISOR = 3.5
PAT_BANDWIDTH_SHARE = 0.75


#: The group a profile's α was fitted on: every ladder of conf/data/collective_ladders.csv with
#: small messages is one 8-GPU node. Up to it a ring pays steps x α as fitted; beyond it the
#: at-scale structure applies.
FIT_RANKS = 8


def ring_latency(op: str, n, crosses_nodes, hw: HardwareProfile, *, local_ranks=1) -> np.ndarray:
    """Per-protocol latency in s of a ring ``op`` among ``n`` ranks, shape (len(PROTOCOLS),
    ...) (module docstring, "At scale"): steps x α x the protocol's scale (``spanning_figures``'
    α) up to the steps of a ``FIT_RANKS`` group, as fitted; each step beyond pays NCCL's own
    per-step latency where it stays in a node (an NVLink step, at least the network post
    overhead when the ring crosses nodes) and the profile's network α where it crosses."""
    alpha = spanning_figures(op, n, crosses_nodes, hw, local_ranks=local_ranks)[0]
    return _ring_latency(op, n, crosses_nodes, local_ranks, alpha, hw)


def _ring_latency(op: str, n, crosses_nodes, local_ranks, alpha, hw: HardwareProfile) -> np.ndarray:
    """``ring_latency`` given the group's ``spanning_figures`` α (worked out once by the caller)."""
    n = np.asarray(n, dtype=np.float64)
    crosses = np.asarray(crosses_nodes, dtype=bool)
    local = np.minimum(np.maximum(np.asarray(local_ranks, dtype=np.float64), 1.0), n)
    a_out = hw.inter_node.latency_us * 1e-6
    steps = ring_steps(op, n)
    fitted = np.minimum(steps, ring_steps(op, float(FIT_RANKS)))
    out_share = np.where(crosses, ring_steps(op, n / local), 0.0) / np.maximum(steps, 1.0)
    alone = one_per_node(crosses, local)
    out = []
    for p, nvlink_us, tree_us in zip(PROTOCOLS, RING_STEP_US_NVLINK, TREE_STEP_US_NET):
        overhead = NET_OVERHEAD_US * (3.0 if p.name == "Simple" else 1.0)
        intra_step = np.where(crosses, max(nvlink_us, overhead), nvlink_us) * 1e-6
        scale = np.where(alone, tree_us / RING_STEP_US_NET_LL, p.latency_scale)
        beyond = out_share * a_out * scale + (1.0 - out_share) * intra_step
        out.append(fitted * alpha * scale + (steps - fitted) * beyond)
    return np.stack(np.broadcast_arrays(*out))


def one_per_node(crosses_nodes, local_ranks) -> np.ndarray:
    """Whether a group spans nodes with one of its ranks on each (module docstring, "One rank
    per node")."""
    return np.asarray(crosses_nodes, dtype=bool) & (np.asarray(local_ranks, dtype=np.float64) <= 1.0)


def _pat_latency(op: str, n, crosses_nodes, hw: HardwareProfile, local_ranks) -> np.ndarray:
    """PAT's latency in s (module docstring, "One rank per node"); NaN where NCCL would not
    run it (another op, a group within a node or with several ranks on a node)."""
    n = np.asarray(n, dtype=np.float64)
    network = hw.inter_node.latency_us * TREE_STEP_US_NET[-1] / RING_STEP_US_NET_LL
    latency = (PAT_BASE_US + np.log2(np.maximum(n, 1.0)) * network / PAT_LOG_DIVISOR + n * PAT_RANK_US) * 1e-6
    usable = one_per_node(crosses_nodes, local_ranks) & (n > 1) & (op in PAT_OPS)
    return np.where(usable, latency, np.nan)


def lowest_latency(op: str, n, crosses_nodes, hw: HardwareProfile, *, local_ranks=1) -> np.ndarray:
    """The least latency in s of ``op`` among ``n`` ranks that NCCL's algorithms and protocols
    offer, moving no bytes: the ring's under its lowest-latency protocol, the tree's for an
    all-reduce across nodes beyond ``FIT_RANKS``, PAT's at one rank per node. Ring-only before
    cost model step-21. Worked out once per distinct group (``groups.per_group``)."""
    return _group_figures(op, n, crosses_nodes, hw, local_ranks, floor_only=True)[0]


def _least_latency(op: str, n, crosses_nodes, hw: HardwareProfile, local_ranks, ring_alpha, pat_alpha) -> np.ndarray:
    """``lowest_latency`` given the group's ring latencies per protocol and PAT's (``_group_figures``)."""
    best = np.fmin(ring_alpha.min(axis=0), pat_alpha)
    if op == "all_reduce":
        best = np.fmin(best, _tree_time(n, 0.0, crosses_nodes, hw, local_ranks, 1.0))
    return best


def _tree_time(n, message_bytes, crosses_nodes, hw: HardwareProfile, local_ranks, busbw) -> np.ndarray:
    """A tree all-reduce across nodes in s (module docstring, "At scale"), for groups beyond
    ``FIT_RANKS``; NaN elsewhere. Inside each node its ranks pay the fitted ring's latency of
    their node's group; across nodes 2 x log2(nodes) network tree steps."""
    n = np.asarray(n, dtype=np.float64)
    local = np.minimum(np.maximum(np.asarray(local_ranks, dtype=np.float64), 1.0), n)
    nodes = np.maximum(n / local, 1.0)
    message = np.asarray(message_bytes, dtype=np.float64)
    size_index = np.floor(np.log2(np.maximum(message / 64.0, 1.0))).astype(np.int64)
    in_table = size_index < len(TREE_CORRECTION[0])
    a_in, a_out = hw.intra_node.latency_us * 1e-6, hw.inter_node.latency_us * 1e-6
    best = None
    for i, p in enumerate(PROTOCOLS):
        inside = ring_steps("all_reduce", local) * a_in * p.latency_scale
        latency = inside + 2.0 * np.log2(nodes) * a_out * TREE_STEP_US_NET[i] / RING_STEP_US_NET_LL
        correction = np.where(in_table, np.asarray(TREE_CORRECTION[i])[np.minimum(size_index, 22)], 1.0)
        t = latency + 2.0 * message / (busbw * TREE_BANDWIDTH_SHARE[i] * correction)
        best = t if best is None else np.minimum(best, t)
    usable = np.asarray(crosses_nodes, dtype=bool) & (nodes > 1) & (n > FIT_RANKS)
    return np.where(usable, best, np.nan)


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
    one rank per node). ``algorithm`` None takes the fastest of the ring and what else NCCL
    may run (as its tuner picks): for an all-reduce the tree across nodes and, inside a node
    where the hardware has it, the in-switch reduction; for an all-gather or a
    reduce-scatter at one rank per node, PAT. "ring" or "nvls" forces one (NaN where "nvls"
    is not available). The figures that depend on the group alone are worked out once per
    distinct group (``groups.per_group``)."""
    _check_algorithm(algorithm)
    return _tier_time(op, n, message_bytes, crosses_nodes, hw, local_ranks, algorithm,
                      _group_figures(op, n, crosses_nodes, hw, local_ranks))


def group_figures(op: str, n, crosses_nodes, hw: HardwareProfile, *, local_ranks=1) -> tuple:
    """(α, ring bus bandwidth, the ring's per-protocol latencies, PAT's latency, ``lowest_latency``)
    of ``op``'s groups, once per distinct group, for ``tier_time_given`` (``figures_op``'s)."""
    return _group_figures(figures_op(op), n, crosses_nodes, hw, local_ranks, floor=True)


def figures_op(op: str) -> str:
    """The op whose ``group_figures`` ``op`` shares: a reduce-scatter an all-gather's (same steps, PAT, no tree)."""
    return "all_gather" if op == "reduce_scatter" else op


def tier_time_given(op: str, n, message_bytes, crosses_nodes, hw: HardwareProfile, figures: tuple, *,
                    local_ranks=1) -> np.ndarray:
    """``tier_time`` of ``op`` (the fastest algorithm) given its groups' ``group_figures``."""
    return _tier_time(op, n, message_bytes, crosses_nodes, hw, local_ranks, None, figures[:4])


def _tier_time(op: str, n, message_bytes, crosses_nodes, hw: HardwareProfile, local_ranks, algorithm, figures):
    """``tier_time`` given the group's figures (``_group_figures``' first four)."""
    _alpha, busbw, ring_alpha, pat_alpha = figures
    ring = _fastest_protocol(op, n, message_bytes, busbw, ring_alpha)
    if op == "all_reduce" and algorithm is None and np.any(np.asarray(crosses_nodes) & (np.asarray(n) > FIT_RANKS)):
        ring = np.fmin(ring, _tree_time(n, message_bytes, crosses_nodes, hw, local_ranks, busbw))
    if op in PAT_OPS and algorithm is None and np.any(one_per_node(crosses_nodes, local_ranks)):
        pat = pat_alpha + np.asarray(message_bytes, dtype=np.float64) / (PAT_BANDWIDTH_SHARE * busbw)
        ring = np.fmin(ring, pat)
    if algorithm == "ring" or (algorithm is None and (op != "all_reduce" or hw.intra_node.nvls_efficiency <= 0)):
        return ring
    switch = _nvls_time(n, message_bytes, crosses_nodes, hw) if op == "all_reduce" else np.full_like(ring, np.nan)
    if algorithm == "nvls":
        return np.broadcast_to(switch, np.broadcast(switch, ring).shape).copy()
    return np.fmin(ring, switch)


def _group_figures(op: str, n, crosses_nodes, hw: HardwareProfile, local_ranks, floor=False, floor_only=False):
    """(α, ring bus bandwidth, the ring's per-protocol latencies, PAT's latency) of each group
    (``spanning_figures``, ``ring_latency``, ``_pat_latency``), and with ``floor`` its
    ``lowest_latency`` last (it alone with ``floor_only``), worked out per distinct group."""
    def figures(n_, crosses, local):
        alpha, busbw = spanning_figures(op, n_, crosses, hw, local_ranks=local)
        ring, pat = _ring_latency(op, n_, crosses, local, alpha, hw), _pat_latency(op, n_, crosses, hw, local)
        least = (_least_latency(op, n_, crosses, hw, local, ring, pat),) if floor or floor_only else ()
        return least if floor_only else (alpha, busbw, ring, pat, *least)
    return per_group(figures, n, crosses_nodes, local_ranks)


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
