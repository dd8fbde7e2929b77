"""Spec calibration: per-operator times from a hardware profile (roofline, α-β).

Every function is vectorised over NumPy arrays. Times are in seconds.
"""

from __future__ import annotations

import numpy as np

from tasks.specs import HardwareProfile, LinkTier

__all__ = ["gemm_time", "memory_bound_time", "ring_allreduce_time", "link_tier_time"]


def gemm_time(flops, bytes_moved, hw: HardwareProfile):
    """Roofline time of one GEMM kernel with a size-dependent efficiency and a floor.

    t = max(launch floor, flops / (peak * eff(flops)), bytes / (HBM bandwidth * mem_eff)),
    eff(F) = eff_max * F / (F + F_half). Since F / eff(F) = (F + F_half) / eff_max, the
    compute term is (F + F_half) / (peak * eff_max): small GEMMs pay a fixed overhead.
    """
    peak = hw.peak_tflops * 1e12
    f_half = hw.gemm_half_efficiency_gflop * 1e9
    compute = (flops + f_half) / (peak * hw.gemm_efficiency_max)
    memory = bytes_moved / (hw.hbm_tbps * 1e12 * hw.memory_efficiency)
    return np.maximum(hw.kernel_launch_us * 1e-6, np.maximum(compute, memory))


def memory_bound_time(bytes_moved, hw: HardwareProfile):
    """Time of one element-wise kernel: bytes over achieved HBM bandwidth, floored."""
    memory = bytes_moved / (hw.hbm_tbps * 1e12 * hw.memory_efficiency)
    return np.maximum(hw.kernel_launch_us * 1e-6, memory)


def ring_allreduce_time(n, message_bytes, latency_s, bus_bandwidth_Bps):
    """α-β time of a ring all-reduce of ``message_bytes`` among ``n`` devices.

    A ring runs 2(n-1) steps (reduce-scatter then all-gather), each paying the latency α
    and moving message/n bytes: t = 2(n-1) α + 2(n-1)/n * bytes / bw. With bw the bus
    bandwidth, the second term is nccl-tests' busbw definition inverted. n = 1 costs 0.
    """
    n = np.asarray(n, dtype=np.float64)
    steps = 2.0 * (n - 1.0)
    return steps * latency_s + (steps / n) * message_bytes / bus_bandwidth_Bps


def link_tier_time(n, message_bytes, tier: LinkTier):
    """Ring all-reduce time on one link tier of a hardware profile."""
    return ring_allreduce_time(
        n, message_bytes, tier.latency_us * 1e-6, tier.bandwidth_GBps * 1e9 * tier.efficiency
    )
