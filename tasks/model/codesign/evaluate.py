"""Co-design points costed by the step model: a point is a hardware choice (``knobs``) and a
layout; its objectives are the step time (s) and the cluster's cost ($), its training time
at the token budget the step time times the steps. Points are costed together per hardware
choice (one ``StepContext`` each, the layouts as columns), and a space of every knob choice
times every layout is costed exhaustively by ``exhaustive_points`` (the reduced spaces a
sampler's front is measured against)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Dict, List, Sequence

import numpy as np
import pyarrow as pa

from tasks.model.codesign.knobs import KNOB_NAMES, CostModel, Knobs, apply, cluster_cost
from tasks.model.search.space import LayoutSpace, exhaustive
from tasks.model.step.plan import StepContext, step_columns
from tasks.model.terms.layout import CODED_FIELDS, encode
from tasks.model.terms.specs import HardwareProfile, TransformerModel
from tasks.model.terms.stack import Stack

__all__ = ["CodesignProblem", "evaluate_points", "exhaustive_points", "knob_points", "CODESIGN_SCHEMA",
           "CODESIGN_SCHEMA_VERSION"]

CODESIGN_SCHEMA_VERSION = 1
#: A ``codesign`` row: one trial of a study, its knobs, its layout and its objectives.
CODESIGN_SCHEMA = pa.schema([
    ("key", pa.string()), ("study", pa.string()), ("trial", pa.int64()), ("model", pa.string()),
    ("hardware", pa.string()), ("devices", pa.int64()), ("domain", pa.int64()), ("scale_up", pa.float64()),
    ("scale_out", pa.float64()), ("hbm_gb", pa.int64()), ("flops", pa.float64()), ("tp", pa.int64()),
    ("pp", pa.int64()), ("dp", pa.int64()), ("micro_batch", pa.int64()), ("schedule", pa.string()),
    ("virtual_stages", pa.int64()), ("zero", pa.string()), ("sequence_parallel", pa.bool_()),
    ("recompute", pa.string()), ("cp", pa.int64()), ("cp_comm", pa.string()), ("step_time_s", pa.float64()),
    ("train_days", pa.float64()), ("cost_usd", pa.float64()), ("memory_gb", pa.float64()), ("feasible", pa.bool_()),
])


@dataclass(frozen=True)
class CodesignProblem:
    """What every point shares: the model, the base hardware the knobs change, the stack, the
    global batch (sequences), the token budget and the cost model."""

    model: TransformerModel
    base: HardwareProfile
    stack: Stack
    global_batch: int
    tokens: float
    cost: CostModel

    @property
    def steps(self) -> float:
        """Optimizer steps the token budget takes."""
        return self.tokens / (self.global_batch * self.model.seq_len)


def _context(problem: CodesignProblem, knob: Dict[str, float]) -> StepContext:
    return StepContext(problem.model, apply(problem.base, knob), devices=int(knob["devices"]),
                       global_batch=problem.global_batch, stack=problem.stack)


def evaluate_points(problem: CodesignProblem, points: Sequence[Dict[str, object]]) -> List[Dict[str, object]]:
    """Each point (``KNOB_NAMES`` values and layout fields by name, as ``Layout`` spells them)
    with ``step_time_s``, ``train_days``, ``cost_usd``, ``memory_gb`` and ``feasible`` added;
    infeasible points (a structural constraint or memory) have no step time."""
    out: List[Dict[str, object]] = [dict(p) for p in points]
    groups: Dict[tuple, List[int]] = {}
    for i, p in enumerate(points):
        groups.setdefault(tuple(p[name] for name in KNOB_NAMES), []).append(i)
    for knob_values, members in groups.items():
        knob = dict(zip(KNOB_NAMES, knob_values))
        ctx = _context(problem, knob)
        columns = {name: np.asarray([points[i][name] for i in members]) for name in _LAYOUT_FIELDS}
        for name in CODED_FIELDS:
            columns[name] = encode(name, columns[name])
        result = step_columns(columns, ctx)
        cost = cluster_cost(knob, problem.cost)
        ok = result["status_code"] == 0    # memory included: status "fits_memory"
        for j, i in enumerate(members):
            step = float(result["step_time_s"][j]) if ok[j] else None
            out[i].update(step_time_s=step, train_days=None if step is None else step * problem.steps / 86400.0,
                          cost_usd=cost, memory_gb=float(result["memory_per_device_bytes"][j]) / 1e9,
                          dp=int(result["dp"][j]), feasible=bool(ok[j]))
    return out


#: The layout fields a point carries (``Layout``'s but DP, which the device count sets).
_LAYOUT_FIELDS = ("tp", "pp", "micro_batch", "schedule", "virtual_stages", "zero", "sequence_parallel", "recompute",
                  "cp", "cp_comm", "ep", "etp", "dispatcher")


def knob_points(knobs: Knobs) -> List[Dict[str, float]]:
    """Every combination of the knobs' choices."""
    return [dict(zip(KNOB_NAMES, values)) for values in itertools.product(*(getattr(knobs, n) for n in KNOB_NAMES))]


def exhaustive_points(problem: CodesignProblem, knobs: Knobs, space: LayoutSpace) -> Dict[str, np.ndarray]:
    """Every (knob choice, layout of ``space``) point's ``step_time_s`` (NaN where infeasible)
    and ``cost_usd``, as arrays over the ``knobs.size`` x ``space.size`` points."""
    steps, costs = [], []
    for knob in knob_points(knobs):
        ctx = _context(problem, knob)
        _, result = exhaustive(space, ctx)
        ok = result["status_code"] == 0    # memory included: status "fits_memory"
        steps.append(np.where(ok, result["step_time_s"], np.nan))
        costs.append(np.full(len(ok), cluster_cost(knob, problem.cost)))
    return {"step_time_s": np.concatenate(steps), "cost_usd": np.concatenate(costs)}
