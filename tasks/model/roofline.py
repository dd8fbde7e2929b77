"""Spec costs of kernels from a hardware profile: a roofline with a launch floor.

Every function is vectorised over NumPy arrays. Times are in seconds. Collective costs
are in ``tasks.model.collectives``.
"""

from __future__ import annotations

import numpy as np

from tasks.model.specs import HardwareProfile

__all__ = ["gemm_time", "memory_bound_time"]


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
