"""The best run of one family member within a duration: the fewest devices (a power of two)
whose best layout, found exhaustively by the step model, finishes the member's training
within ``duration_s``, and the hardware utilisation it then reaches (training FLOP over
devices x the 16-bit dense peak x the run's time). Erdil and Schneider-Joseph (arXiv
2411.01137) ask the same of their own model of a step: here every latency, bandwidth,
bubble and memory term is the step model's (``tasks.model.step``).

A scenario that changes the cluster's latencies (their "10x lower latency") is
``lower_latency``: every kernel's launch floor and host path and every link tier's per-step
latency divided by the factor.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Dict, Optional

import numpy as np

from tasks.model.kernels.roofline import peak_flops
from tasks.model.limits.family import FamilyPoint
from tasks.model.search.space import LayoutSpace, exhaustive
from tasks.model.step.plan import StepContext
from tasks.model.terms.layout import CODED_FIELDS, decode
from tasks.model.terms.specs import HardwareProfile
from tasks.model.terms.stack import Stack

__all__ = ["RunChoice", "best_run", "lower_latency", "RUN_STATUSES"]

#: A run's status: "ok" (finishes within the duration), "too_slow" (no device count up to the
#: bound does; the fastest is reported) or "no_layout" (no layout of the space is feasible at
#: any count tried: memory, divisibility).
RUN_STATUSES = ("ok", "too_slow", "no_layout")

#: Doublings of the device count without a faster step after which a search stops.
PATIENCE = 3


@dataclass(frozen=True)
class RunChoice:
    """The run ``best_run`` chose: device count, layout (field names as ``Layout`` spells
    them), step time (s), the run's time (s), utilisation, its latency floor per step (s), the
    share of the step spent in exposed communication, and its status (``RUN_STATUSES``)."""

    devices: int
    layout: Dict[str, object]
    step_time_s: float
    run_s: float
    utilization: float
    latency_s: float
    exposed_comm_share: float
    status: str


def lower_latency(hw: HardwareProfile, stack: Stack, factor: float) -> tuple:
    """(``hw``, ``stack``) with every latency divided by ``factor`` (> 0): the kernel launch
    floor, both link tiers' per-step and in-switch latencies, and the host's launch path."""
    if not factor > 0:
        raise ValueError(f"latency factor={factor!r}: must be positive")
    tiers = {name: replace(getattr(hw, name), latency_us=getattr(hw, name).latency_us / factor,
                           nvls_latency_us=getattr(hw, name).nvls_latency_us / factor)
             for name in ("intra_node", "inter_node")}
    return (replace(hw, kernel_launch_us=hw.kernel_launch_us / factor, **tiers),
            replace(stack, host_launch_us=stack.host_launch_us / factor))


def _best_at(point: FamilyPoint, hw: HardwareProfile, stack: Stack, space: LayoutSpace,
             devices: int) -> Optional[tuple]:
    """(layout fields, step columns of it) of the fastest feasible layout on ``devices``, or None."""
    ctx = StepContext(point.model, hw, devices=devices, global_batch=point.batch_sequences, stack=stack)
    layouts, result = exhaustive(space, ctx)
    ok = result["status_code"] == 0
    if not ok.any():
        return None
    i = int(np.argmin(np.where(ok, result["step_time_s"], np.inf)))
    fields = {name: (decode(name, [values[i]])[0] if name in CODED_FIELDS else values[i].item())
              for name, values in layouts.items()}
    fields["dp"] = int(result["dp"][i])
    return fields, {name: float(values[i]) for name, values in result.items() if np.ndim(values)}


def best_run(point: FamilyPoint, hw: HardwareProfile, stack: Stack, space: LayoutSpace, *,
             duration_s: float, max_devices: float) -> RunChoice:
    """The fewest devices, a power of two from the count that would need full utilisation,
    whose best layout trains ``point`` within ``duration_s`` (module docstring). Doubles the
    count until one does, until ``max_devices``, or until ``PATIENCE`` doublings bring no
    faster step; then reports the fastest run found ("too_slow"). Where no count from there up
    holds a layout (the batch has fewer sequences than the count's replicas would need), the
    largest count below that does is the fastest run, and too slow: below the starting count
    no run can finish in time. "no_layout" where no count holds one."""
    peak = peak_flops(hw, "bf16")
    start = 2 ** max(0, math.floor(math.log2(max(point.flop / (duration_s * peak), 1.0))))
    fastest: Optional[RunChoice] = None
    devices, stale = start, 0
    while devices <= max_devices and stale < PATIENCE:
        choice = _choice(point, hw, stack, space, devices, duration_s, peak)
        if choice is not None and choice.status == "ok":
            return choice
        if choice is not None:
            stale = 0 if fastest is None or choice.run_s < fastest.run_s else stale + 1
            fastest = choice if fastest is None or choice.run_s < fastest.run_s else fastest
        elif fastest is not None:       # past the batch's reach: more devices than its sequences can spread over
            stale += 1
        devices *= 2
    devices = start // 2
    while fastest is None and devices >= 1:
        fastest = _choice(point, hw, stack, space, devices, duration_s, peak)
        devices //= 2
    if fastest is None:
        return RunChoice(devices=0, layout={}, step_time_s=math.inf, run_s=math.inf, utilization=0.0,
                         latency_s=math.inf, exposed_comm_share=math.nan, status="no_layout")
    return replace(fastest, utilization=0.0)


def _choice(point: FamilyPoint, hw: HardwareProfile, stack: Stack, space: LayoutSpace, devices: int,
            duration_s: float, peak: float) -> Optional[RunChoice]:
    """The run of the fastest layout on ``devices`` (``_best_at``), or None where none is feasible."""
    found = _best_at(point, hw, stack, space, devices)
    if found is None:
        return None
    fields, figures = found
    run_s = figures["step_time_s"] * point.steps
    return RunChoice(devices=devices, layout=fields, step_time_s=figures["step_time_s"], run_s=run_s,
                     utilization=point.flop / (devices * peak * run_s), latency_s=figures["latency_s"],
                     exposed_comm_share=figures["exposed_comm_share"],
                     status="ok" if run_s <= duration_s else "too_slow")
