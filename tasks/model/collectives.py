"""Collective time from the α-β ring model, defined once for every op and link tier.

A ring collective among ``n`` devices runs in steps; each step pays the latency α and
moves a share of the message. With the bus bandwidth of nccl-tests (PERFORMANCE.md:
busbw = algbw x factor, factor 2(n-1)/n for all-reduce and (n-1)/n for all-gather and
reduce-scatter), the time of a message of ``bytes`` is

    t = steps(op, n) * α + factor(op, n) * bytes / busbw,

steps 2(n-1) for all-reduce (reduce-scatter then all-gather) and n-1 otherwise. n = 1
costs nothing. Every projection, the whole-step model and every α-β fit of measured
collectives use these functions. Vectorised over NumPy arrays; seconds, bytes, B/s.
"""

from __future__ import annotations

from typing import Tuple

import numpy as np

from tasks.model.specs import HardwareProfile, LinkTier

__all__ = ["COLLECTIVE_OPS", "bus_factor", "ring_steps", "collective_time", "tier_figures", "tier_time"]

#: The collectives commscale models and measures.
COLLECTIVE_OPS: Tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter")


def _check(op: str) -> None:
    if op not in COLLECTIVE_OPS:
        raise ValueError(f"unknown collective {op!r}: choose one of {', '.join(COLLECTIVE_OPS)}")


def bus_factor(op: str, n):
    """nccl-tests' busbw / algbw factor of ``op`` among ``n`` ranks."""
    _check(op)
    n = np.asarray(n, dtype=np.float64)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1.0) / n


def ring_steps(op: str, n):
    """Latency-paying steps of a ring: 2(n-1) for all-reduce, n-1 otherwise."""
    _check(op)
    n = np.asarray(n, dtype=np.float64)
    return (2.0 if op == "all_reduce" else 1.0) * (n - 1.0)


def collective_time(op: str, n, message_bytes, latency_s, busbw_Bps):
    """α-β time of ``op`` on a ``message_bytes`` message among ``n`` ranks, in seconds."""
    return ring_steps(op, n) * latency_s + bus_factor(op, n) * np.asarray(message_bytes, dtype=np.float64) / busbw_Bps


def tier_figures(tier: LinkTier) -> Tuple[float, float]:
    """(α in s, bus bandwidth in B/s) of a link tier: its bandwidth times its efficiency."""
    return tier.latency_us * 1e-6, tier.bandwidth_GBps * 1e9 * tier.efficiency


def tier_time(op: str, n, message_bytes, crosses_nodes, hw: HardwareProfile):
    """``collective_time`` on the tier each group spans: the scale-out tier where
    ``crosses_nodes`` (a bool or bool array), the scale-up tier elsewhere."""
    (a_in, bw_in), (a_out, bw_out) = tier_figures(hw.intra_node), tier_figures(hw.inter_node)
    crosses = np.asarray(crosses_nodes, dtype=bool)
    return collective_time(op, n, message_bytes, np.where(crosses, a_out, a_in), np.where(crosses, bw_out, bw_in))
