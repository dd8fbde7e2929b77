"""The hardware a co-design search may change, and what each choice costs.

A ``Knobs`` point changes a base profile (``apply``): the scale-up domain (GPUs that share the
NVLink-class tier, ``devices_per_node``), the scale-up and scale-out bandwidths (multiples of
the base tiers'), the HBM (a capacity with the bandwidth of the part that ships it,
``HBM_PARTS``), the FLOP rate (a multiple of every peak), and the device count. A
``CostModel`` prices a cluster of them, per device: a compute die whose price grows with its
FLOP rate, HBM by the gigabyte, the scale-up tier by its bandwidth and its domain (each
doubling of the domain a further switch stage), and the scale-out NICs by their bandwidth.

Every figure of the cost model is an assumption, stated in the preset that sets it
(``conf/codesign``): no vendor publishes these prices, so they rank designs by the shape of
their costs, not by dollars to be paid.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Dict, List

from tasks.model.terms.specs import HardwareProfile

__all__ = ["HBM_PARTS", "KNOB_NAMES", "Knobs", "CostModel", "apply", "device_cost", "cluster_cost"]

#: HBM capacity (GB) -> bandwidth (TB/s) of the part that ships it, from its datasheet: H100 SXM
#: 80 GB at 3.35; H100 NVL 94 GB at 3.9; H200 141 GB at 4.8; B200 192 GB at 8.0; B300 288 GB at 8.0.
HBM_PARTS: Dict[int, float] = {80: 3.35, 94: 3.9, 141: 4.8, 192: 8.0, 288: 8.0}

#: The knobs of a point, in the order a study names its parameters.
KNOB_NAMES = ("devices", "domain", "scale_up", "scale_out", "hbm_gb", "flops")


@dataclass
class Knobs:
    """The choices of each knob (module docstring): device counts, scale-up domain sizes,
    scale-up and scale-out bandwidth multiples, HBM capacities (``HBM_PARTS`` keys) and FLOP
    multiples."""

    devices: List[int] = field(default_factory=lambda: [1024, 2048, 4096])
    domain: List[int] = field(default_factory=lambda: [8, 72])
    scale_up: List[float] = field(default_factory=lambda: [1.0, 2.0])
    scale_out: List[float] = field(default_factory=lambda: [0.5, 1.0, 2.0])
    hbm_gb: List[int] = field(default_factory=lambda: [80, 192])
    flops: List[float] = field(default_factory=lambda: [1.0, 2.0])

    @property
    def size(self) -> int:
        return math.prod(len(getattr(self, name)) for name in KNOB_NAMES)


@dataclass
class CostModel:
    """Per-device prices in dollars (module docstring): ``die`` x flops ** ``die_exponent``,
    ``hbm_per_gb`` x HBM, ``scale_up`` x its multiple x (1 + log2(domain / 8) x
    ``switch_stage``), ``scale_out`` x its multiple."""

    die: float = 20000.0
    die_exponent: float = 0.7
    hbm_per_gb: float = 15.0
    scale_up: float = 3000.0
    switch_stage: float = 0.33
    scale_out: float = 2500.0


def apply(base: HardwareProfile, point: Dict[str, float]) -> HardwareProfile:
    """``base`` with ``point``'s knobs (``KNOB_NAMES`` but devices) applied: every dense peak
    times ``flops``, HBM of ``hbm_gb`` at its part's bandwidth, the scale-up domain and both
    tiers' bandwidths times their multiples."""
    hbm = int(point["hbm_gb"])
    if hbm not in HBM_PARTS:
        raise ValueError(f"hbm_gb={hbm}: choose one of {', '.join(map(str, HBM_PARTS))}")
    flops = float(point["flops"])
    return replace(base, devices_per_node=int(point["domain"]), hbm_gb=float(hbm), hbm_tbps=HBM_PARTS[hbm],
                   peak_tflops=base.peak_tflops * flops,
                   peak_fp8_tflops=None if base.peak_fp8_tflops is None else base.peak_fp8_tflops * flops,
                   intra_node=replace(base.intra_node, bandwidth_GBps=base.intra_node.bandwidth_GBps
                                      * float(point["scale_up"])),
                   inter_node=replace(base.inter_node, bandwidth_GBps=base.inter_node.bandwidth_GBps
                                      * float(point["scale_out"])))


def device_cost(point: Dict[str, float], cost: CostModel) -> float:
    """Dollars of one device of ``point`` under ``cost`` (class docstrings)."""
    stages = 1.0 + math.log2(max(float(point["domain"]), 8.0) / 8.0) * cost.switch_stage
    return (cost.die * float(point["flops"]) ** cost.die_exponent + cost.hbm_per_gb * float(point["hbm_gb"])
            + cost.scale_up * float(point["scale_up"]) * stages + cost.scale_out * float(point["scale_out"]))


def cluster_cost(point: Dict[str, float], cost: CostModel) -> float:
    """Dollars of ``point``'s whole cluster: its devices times ``device_cost``."""
    return float(point["devices"]) * device_cost(point, cost)
