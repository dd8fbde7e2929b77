"""A space of parallel layouts: the candidate values of each field, enumerated vectorised.

The space is the cross product of the candidate lists, except that the virtual-stage
count applies to the interleaved schedule only (1F1B has one), and sequence parallelism
to TP > 1 only (at TP = 1 it is the same layout as without), the exchange of keys and
values (``cp_comm``) to CP > 1 only, and the dispatcher to EP > 1 only. DP is not a field
of the space: it is what the devices leave, ``devices / (TP * PP * CP)``. ``enumerate_layouts`` builds
the whole space as columns with NumPy index arithmetic (no Python loop per layout), so
the exhaustive reference (``exhaustive``) is one call of ``step.step_columns``.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Dict, List, Sequence, Tuple

import numpy as np

from tasks.model.terms.layout import (
    SEARCHED_RECOMPUTE_MODES,
    SCHEDULES,
    STRUCTURAL_CONSTRAINTS,
    ZERO_MODES,
    code,
    encode,
    structural_violations,
)
from tasks.model.search.heap import retain_freed_heap
from tasks.model.step.plan import StepContext, step_columns

__all__ = ["LayoutSpace", "enumerate_layouts", "cartesian_columns", "constraint_counts", "exhaustive", "best_index",
           "space_slices", "SliceOptimum", "slice_optimum"]


@dataclass
class LayoutSpace:
    """Candidate values per layout field (one list each; strings as in ``tasks.model.terms.layout``).

    ``virtual_stages`` are the interleaved schedule's choices (values above 1); ``cp`` the
    context-parallel degrees and ``cp_comm`` their exchanges (``layout.CP_COMMS``), which only CP
    above 1 has (1 and p2p by default: a space without context parallelism); ``ep`` the
    expert-parallel degrees, ``etp`` the expert-tensor-parallel ones and ``dispatcher`` how
    tokens travel (``layout.MOE_DISPATCHERS``), which only EP above 1 has (1, 1 and alltoall by
    default: a space without expert parallelism).
    """

    tp: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    pp: List[int] = field(default_factory=lambda: [1, 2, 4, 8])
    micro_batch: List[int] = field(default_factory=lambda: [1, 2, 4])
    schedule: List[str] = field(default_factory=lambda: list(SCHEDULES))
    virtual_stages: List[int] = field(default_factory=lambda: [2, 4])
    zero: List[str] = field(default_factory=lambda: list(ZERO_MODES))
    sequence_parallel: List[bool] = field(default_factory=lambda: [False, True])
    recompute: List[str] = field(default_factory=lambda: list(SEARCHED_RECOMPUTE_MODES))
    cp: List[int] = field(default_factory=lambda: [1])
    cp_comm: List[str] = field(default_factory=lambda: ["p2p"])
    ep: List[int] = field(default_factory=lambda: [1])
    etp: List[int] = field(default_factory=lambda: [1])
    dispatcher: List[str] = field(default_factory=lambda: ["alltoall"])

    def schedule_choices(self) -> List[Tuple[int, int]]:
        """(schedule code, virtual stages) pairs of the space."""
        pairs = []
        for name in self.schedule:
            stages = [1] if name == "1f1b" else [v for v in self.virtual_stages if v > 1]
            pairs += [(code("schedule", name), v) for v in stages]
        return pairs

    def sequence_parallel_choices(self, tp: int) -> List[bool]:
        """Sequence-parallel choices at a TP degree: at TP = 1 it splits nothing, so the one
        layout there is ``False`` (never enumerated or searched twice)."""
        return list(self.sequence_parallel) if tp > 1 else [False]

    def context_choices(self) -> List[Tuple[int, int]]:
        """(CP, exchange code) pairs of the space: CP 1 once (it exchanges nothing), each CP
        above 1 with each of ``cp_comm``."""
        return [(cp, code("cp_comm", name)) for cp in self.cp for name in (self.cp_comm if cp > 1 else ["p2p"])]

    def expert_choices(self) -> List[Tuple[int, int, int]]:
        """(EP, ETP, dispatcher code) triples of the space: EP 1 with alltoall only (it
        dispatches nothing), each EP above 1 with each of ``dispatcher``."""
        return [(ep, etp, code("dispatcher", name)) for ep in self.ep for etp in self.etp
                for name in (self.dispatcher if ep > 1 else ["alltoall"])]

    @property
    def experts_vary(self) -> bool:
        """Whether the space holds more than one (EP, ETP, dispatcher) choice (only then does a
        search ask for one)."""
        return len(self.expert_choices()) > 1

    @property
    def context_varies(self) -> bool:
        """Whether the space holds more than one (CP, exchange) choice: only then does a search
        ask for one (``sweeps.search.params``), and its trial parameters say so."""
        return len(self.context_choices()) > 1

    @property
    def size(self) -> int:
        """Layouts in the space (before any constraint)."""
        tp_sp = sum(len(self.sequence_parallel_choices(tp)) for tp in self.tp)
        return (tp_sp * len(self.pp) * len(self.micro_batch) * len(self.schedule_choices())
                * len(self.zero) * len(self.recompute) * len(self.context_choices())
                * len(self.expert_choices()))


def enumerate_layouts(space: LayoutSpace, devices: int) -> Dict[str, np.ndarray]:
    """Every layout of ``space`` as columns (coded fields; ``cp_comm`` and ``dispatcher`` as
    codes of ``layout.CP_COMMS`` and ``MOE_DISPATCHERS``), DP derived from ``devices`` (0 where
    TP x PP x CP does not divide them)."""
    sched = np.asarray(space.schedule_choices(), dtype=np.int64).reshape(-1, 2)
    context = np.asarray(space.context_choices(), dtype=np.int64).reshape(-1, 2)
    experts = np.asarray(space.expert_choices(), dtype=np.int64).reshape(-1, 3)
    axes = [np.asarray(space.tp, dtype=np.int64), np.asarray(space.pp, dtype=np.int64),
            np.asarray(space.micro_batch, dtype=np.int64), np.arange(len(sched)),
            encode("zero", space.zero), np.asarray(space.sequence_parallel, dtype=bool),
            encode("recompute", space.recompute), np.arange(len(context)), np.arange(len(experts))]
    tp, pp, b, choice, zero, sp, rc, ctx, ex = cartesian_columns(axes)
    # At TP = 1 sequence parallelism is no layout of its own: keep the first row as False.
    keep = np.flatnonzero((tp > 1) | (sp == np.asarray(space.sequence_parallel, dtype=bool)[0]))
    tp, pp, b, choice, zero, rc, ctx, ex = (column[keep] for column in (tp, pp, b, choice, zero, rc, ctx, ex))
    sp = sp[keep] & (tp > 1)
    cp = context[ctx, 0]
    model_parallel = tp * pp * cp
    dp = np.where(devices % model_parallel == 0, devices // model_parallel, 0)
    return {"tp": tp, "pp": pp, "dp": dp, "micro_batch": b, "schedule": sched[choice, 0],
            "virtual_stages": sched[choice, 1], "zero": zero, "sequence_parallel": sp, "recompute": rc,
            "cp": cp, "cp_comm": context[ctx, 1], "ep": experts[ex, 0], "etp": experts[ex, 1],
            "dispatcher": experts[ex, 2]}


def cartesian_columns(axes: Sequence[np.ndarray]) -> List[np.ndarray]:
    """Every combination of one value from each of ``axes``, as columns (the last axis varies
    fastest, as ``itertools.product``): each axis repeated as often as the axes after it hold
    combinations, and the whole tiled as often as those before it do."""
    sizes = [len(a) for a in axes]
    total = int(np.prod(sizes)) if sizes else 1
    columns, after = [], total
    for axis, size in zip(axes, sizes, strict=True):
        after //= max(size, 1)
        columns.append(np.tile(np.repeat(axis, after), total // max(size * after, 1)))
    return columns


def constraint_counts(layouts: Dict[str, np.ndarray], *, heads: int, layers: int, devices: int,
                      global_batch: int, kv_heads: int = 0, experts: int = 0) -> Tuple[Dict[str, int], int]:
    """How many layouts break each structural constraint, and how many break none."""
    violations = structural_violations(layouts, heads=heads, layers=layers, devices=devices,
                                       global_batch=global_batch, kv_heads=kv_heads, experts=experts)
    any_bad = np.zeros(len(layouts["tp"]), dtype=bool)
    for bad in violations.values():
        any_bad |= bad
    return {name: int(violations[name].sum()) for name in STRUCTURAL_CONSTRAINTS}, int((~any_bad).sum())


def exhaustive(space: LayoutSpace, ctx: StepContext) -> Tuple[Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """The whole space costed: (layout columns, ``step_columns`` output), row-aligned. The
    process keeps the heap a call frees for the next (``heap.retain_freed_heap``)."""
    retain_freed_heap()
    layouts = enumerate_layouts(space, ctx.devices)
    return layouts, step_columns(layouts, ctx)


def best_index(costs: Dict[str, np.ndarray], objective: str = "step_time_s", maximize: bool = False) -> int:
    """Row of the best feasible layout by ``objective``; -1 when none is feasible."""
    values = np.where(costs["status_code"] == 0, costs[objective], np.nan)
    if np.all(np.isnan(values)):
        return -1
    return int(np.nanargmax(values) if maximize else np.nanargmin(values))


def space_slices(space: LayoutSpace) -> List[LayoutSpace]:
    """``space`` cut into one sub-space per (TP, PP) pair: together they hold its layouts,
    each once, so a space too large to cost in one call is costed slice by slice (in
    parallel, as tasks)."""
    return [replace(space, tp=[tp], pp=[pp]) for tp in space.tp for pp in space.pp]


@dataclass(frozen=True)
class SliceOptimum:
    """One slice's exhaustive costing: its layouts, how many are feasible, and the best one's
    step time in seconds (inf where none is feasible) with its columns (coded fields); and how
    many the step model costed (those that break no structural constraint; the others are
    judged by the constraints alone)."""

    layouts: int
    feasible: int
    best_step_s: float
    best: Dict[str, int]
    costed: int = 0


def slice_optimum(space: LayoutSpace, ctx: StepContext) -> SliceOptimum:
    """The whole of ``space`` costed (``exhaustive``) and reduced to its optimum by step time:
    a plain task body, so a large space's slices (``space_slices``) run as tasks."""
    layouts, costs = exhaustive(space, ctx)
    best = best_index(costs)
    feasible = int((costs["status_code"] == 0).sum())
    costed = int((~np.isnan(costs["memory_per_device_bytes"])).sum())
    if best < 0:
        return SliceOptimum(len(layouts["tp"]), feasible, float("inf"), {}, costed)
    return SliceOptimum(len(layouts["tp"]), feasible, float(costs["step_time_s"][best]),
                        {name: int(column[best]) for name, column in layouts.items()}, costed)

