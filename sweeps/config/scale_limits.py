"""The config of ``commscale limits`` (``conf/limits/*.yaml``): how a dense family scales with
its compute, the cluster and stack it runs on, the duration, the grid of training FLOP, the
layout space searched at each point and the scenarios (the baseline and its what-ifs), with
its checks before any work.

Overrides are ``FIELD=VALUE`` in OmegaConf dotlist syntax (``duration_days=180``,
``family.batch_exponent=0.4``, ``scenarios.batch_10x.batch_scale=4``); ``hardware.FIELD=VALUE``
and ``stack.FIELD=VALUE`` change one field of the named hardware or stack preset. Every bad
input raises ``ConfigError`` (exit status 2) before any work starts and before the lake is
touched.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

from sweeps.config.checks import check_name
from sweeps.config.compose import compose, load_preset, preset_node, preset_path
from sweeps.config.limits import FRACTION, Range, check_fields
from sweeps.config.search import check_layout_space, load_stack, split_overrides
from sweeps.config.specs import validate_hardware
from sweeps.errors import ConfigError
from tasks.model.limits.family import Family
from tasks.model.limits.frontier import lower_latency
from tasks.model.limits.rows import Scenario
from tasks.model.search.space import LayoutSpace
from tasks.model.terms.specs import HardwareProfile
from tasks.model.terms.stack import Stack

__all__ = ["WhatIf", "LimitsSpec", "LimitsSetup", "load_limits", "flop_grid", "BASELINE",
           "MAX_POINTS"]

#: The scenario every preset holds: its assumptions as stated; the others are what-ifs.
BASELINE = "baseline"
#: The most (scenario, FLOP) points one run may cost.
MAX_POINTS = 400


@dataclass
class WhatIf:
    """A scenario: every latency of the cluster divided by ``latency_factor``, the batch at
    every compute times ``batch_scale``; with ``experts`` > 0 a sparse family (``topk`` of
    ``experts`` routed experts, ``tasks.model.limits.family``) searched over the expert-parallel
    degrees ``ep``."""

    description: str = ""
    latency_factor: float = 1.0
    batch_scale: float = 1.0
    experts: int = 0
    topk: int = 0
    ep: List[int] = field(default_factory=lambda: [1])


@dataclass
class LimitsSpec:
    """One ``commscale limits`` preset (``conf/limits``; module docstring). ``kernel_launch_us``
    and ``host_launch_us`` (None: the hardware's and the stack's own) set the latency floors
    the question is asked at; ``max_devices`` bounds the device counts tried; ``utilization_drop``
    is the share of the smallest run's utilisation under which utilisation counts as fallen."""

    name: str = "default"
    description: str = ""
    hardware: str = "h100"
    stack: str = "megatron-core-2024"
    kernel_launch_us: Optional[float] = None
    host_launch_us: Optional[float] = None
    duration_days: float = 90.0
    flop_start: float = 1e24
    flop_stop: float = 1e33
    points_per_decade: int = 2
    max_devices: float = 2.0 ** 36
    utilization_drop: float = 0.5
    family: Family = field(default_factory=Family)
    space: LayoutSpace = field(default_factory=LayoutSpace)
    scenarios: Dict[str, WhatIf] = field(default_factory=lambda: {BASELINE: WhatIf()})


#: Sane ranges of the numeric fields (``sweeps.config.limits``).
_LIMITS = {"kernel_launch_us": Range(0, 1e6), "host_launch_us": Range(0, 1e6), "duration_days": Range(0, 1e5, True),
           "flop_start": Range(1e10, 1e45), "flop_stop": Range(1e10, 1e45), "points_per_decade": Range(1, 20),
           "max_devices": Range(8, 1e15), "utilization_drop": FRACTION}
_FAMILY = {"tokens_per_param": Range(0, 1e6, True), "aspect_ratio": Range(0, 1e6, True), "head_dim": Range(1, 1e5),
           "seq_len": Range(1, 1e8), "batch_coefficient": Range(0, 1e12, True), "batch_exponent": Range(0, 2),
           "batch_scale": Range(0, 1e6, True)}
_WHAT_IF = {"latency_factor": Range(0, 1e6, True), "batch_scale": Range(0, 1e6, True), "experts": Range(0, 1e6),
            "topk": Range(0, 1e6), "ep": Range(1, 1e8)}


@dataclass
class LimitsSetup:
    """A loaded, checked ``limits`` preset: its spec, the hardware and stack as named (with the
    preset's latency floors), each scenario ready to cost, the preset's name and overrides."""

    spec: LimitsSpec
    hardware: HardwareProfile
    stack: Stack
    scenarios: Dict[str, Scenario]
    preset: str = "default"
    overrides: Tuple[str, ...] = ()


def flop_grid(spec: LimitsSpec) -> List[float]:
    """The training FLOP of the curve's points: ``points_per_decade`` per decade, log-spaced,
    from ``flop_start`` to ``flop_stop`` inclusive."""
    start, stop = math.log10(spec.flop_start), math.log10(spec.flop_stop)
    count = int(math.floor((stop - start) * spec.points_per_decade + 1e-9)) + 1
    return [10 ** (start + i / spec.points_per_decade) for i in range(count)]


def load_limits(overrides: Sequence[str] = (), *, allow_large: bool = False) -> LimitsSetup:
    """``[PRESET] [FIELD=VALUE ...]``: the preset of ``conf/limits`` (or a YAML path), then the
    overrides; checked (``validate_limits``) with its hardware and stack, every scenario built."""
    preset, own, fields = split_overrides(overrides, group="limits", default="default")
    if fields["model"]:
        key, _, value = fields["model"][0].partition("=")
        raise ConfigError(f"model.{key}", value, "limits scales its own model family; set family.FIELD instead")
    path = preset_path("limits", preset)
    spec: LimitsSpec = compose(preset_node(LimitsSpec, path, prefix="limits", allow_large=allow_large), own,
                               prefix="limits.")
    validate_limits(spec)
    hardware = load_preset("hardware", spec.hardware, fields["hardware"], allow_large=allow_large)
    if spec.kernel_launch_us is not None:
        hardware = dataclasses.replace(hardware, kernel_launch_us=spec.kernel_launch_us)
    validate_hardware(hardware)
    stack = load_stack(spec.stack, hardware, fields["stack"], allow_large=allow_large)
    if spec.host_launch_us is not None:
        stack = dataclasses.replace(stack, host_launch_us=spec.host_launch_us)
    scenarios = {name: _scenario(spec, what, hardware, stack) for name, what in spec.scenarios.items()}
    return LimitsSetup(spec, hardware, stack, scenarios, preset=preset,
                       overrides=tuple(item for item in overrides if "=" in item))


def _scenario(spec: LimitsSpec, what: WhatIf, hardware: HardwareProfile, stack: Stack) -> Scenario:
    """One scenario's assumptions, its what-ifs applied."""
    hw, st = lower_latency(hardware, stack, what.latency_factor) if what.latency_factor != 1.0 else (hardware, stack)
    family = dataclasses.replace(spec.family, batch_scale=spec.family.batch_scale * what.batch_scale,
                                 **({"experts": what.experts, "topk": what.topk} if what.experts else {}))
    space = dataclasses.replace(spec.space, ep=list(what.ep)) if what.experts else spec.space
    return Scenario(family=family, hardware=hw, stack=st, space=space, duration_s=spec.duration_days * 86400.0,
                    max_devices=spec.max_devices, utilization_drop=spec.utilization_drop)


def validate_limits(spec: LimitsSpec) -> None:
    """Field checks OmegaConf's types cannot express; raises ``ConfigError`` naming the field."""
    check_name("limits.name", spec.name)
    check_fields("limits", spec, _LIMITS)
    check_fields("limits.family", spec.family, _FAMILY)
    if spec.flop_stop < spec.flop_start:
        raise ConfigError("limits.flop_stop", spec.flop_stop, f"is below flop_start={spec.flop_start:g}")
    if BASELINE not in spec.scenarios:
        raise ConfigError("limits.scenarios", sorted(spec.scenarios), f"must hold a {BASELINE!r} scenario")
    for name, what in spec.scenarios.items():
        check_name(f"limits.scenarios.{name}", name)
        check_fields(f"limits.scenarios.{name}", what, _WHAT_IF)
        if what.experts and not 0 < what.topk <= what.experts:
            raise ConfigError(f"limits.scenarios.{name}.topk", what.topk,
                              f"must be between 1 and experts={what.experts}")
    points = len(flop_grid(spec)) * len(spec.scenarios)
    if points > MAX_POINTS:
        raise ConfigError("limits.points_per_decade", spec.points_per_decade,
                          f"makes {points} points with {len(spec.scenarios)} scenarios; at most {MAX_POINTS}")
    check_layout_space("limits.space", spec.space)
