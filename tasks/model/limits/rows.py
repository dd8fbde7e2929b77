"""The ``limits`` rows of the lake: one per (scenario, target training FLOP), the family member
at that compute and the best run of it within the duration (``frontier.best_run``). The body
``limit_rows`` is a plain function of its points and context, as every task body is."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Dict

import pyarrow as pa

from tasks.model.limits.family import Family, family_point
from tasks.model.limits.frontier import best_run
from tasks.model.search.space import LayoutSpace
from tasks.model.terms.specs import HardwareProfile
from tasks.model.terms.stack import Stack

__all__ = ["LIMITS_SCHEMA", "LIMITS_SCHEMA_VERSION", "LIMITS_POINT_FIELDS", "Scenario", "LimitsContext",
           "limit_rows"]

LIMITS_SCHEMA_VERSION = 1

#: A point's fields: its lake key, scenario, target FLOP and hardware (the job's partition).
LIMITS_POINT_FIELDS = pa.schema([("key", pa.string()), ("scenario", pa.string()), ("flop_target", pa.float64()),
                                 ("hardware", pa.string())])

LIMITS_SCHEMA = pa.schema(list(LIMITS_POINT_FIELDS) + [
    ("flop", pa.float64()),             # the family member's own 6 N D
    ("params", pa.float64()),           # the parameters a token uses (all of a dense member's)
    ("total_params", pa.float64()),
    ("tokens", pa.float64()),
    ("layers", pa.int64()),
    ("hidden", pa.int64()),
    ("heads", pa.int64()),
    ("batch_sequences", pa.int64()),
    ("seq_len", pa.int64()),
    ("steps", pa.float64()),
    ("duration_days", pa.float64()),
    ("utilization_drop", pa.float64()),  # the share of the smallest run's utilisation under which it has fallen
    ("devices", pa.int64()),
    ("tp", pa.int64()),
    ("pp", pa.int64()),
    ("dp", pa.int64()),
    ("cp", pa.int64()),
    ("ep", pa.int64()),
    ("micro_batch", pa.int64()),
    ("schedule", pa.string()),
    ("virtual_stages", pa.int64()),
    ("zero", pa.string()),
    ("recompute", pa.string()),
    ("step_time_s", pa.float64()),
    ("run_days", pa.float64()),
    ("utilization", pa.float64()),
    ("latency_s", pa.float64()),
    ("exposed_comm_share", pa.float64()),
    ("status", pa.string()),            # frontier.RUN_STATUSES
])


@dataclass(frozen=True)
class Scenario:
    """One curve's assumptions: how the family scales, the cluster (hardware and stack, what-ifs
    applied), the layout space searched at each device count, the duration (s), the most
    devices tried, and the share of the smallest run's utilisation under which it counts as
    fallen (``curve.thresholds``)."""

    family: Family
    hardware: HardwareProfile
    stack: Stack
    space: LayoutSpace
    duration_s: float
    max_devices: float
    utilization_drop: float = 0.5


@dataclass(frozen=True)
class LimitsContext:
    """What the points share: each scenario by name."""

    scenarios: Dict[str, Scenario] = field(default_factory=dict)


def limit_rows(points: pa.Table, context: LimitsContext) -> pa.Table:
    """``limits`` rows for ``points`` (``LIMITS_POINT_FIELDS``); a pure function."""
    rows = []
    for point in points.select(LIMITS_POINT_FIELDS.names).to_pylist():
        scenario = context.scenarios[point["scenario"]]
        member = family_point(point["flop_target"], scenario.family)
        run = best_run(member, scenario.hardware, scenario.stack, scenario.space, duration_s=scenario.duration_s,
                       max_devices=scenario.max_devices)
        layout = run.layout
        rows.append({**point, "flop": member.flop, "params": member.params, "total_params": member.total_params,
                     "tokens": member.tokens,
                     "layers": member.model.layers, "hidden": member.model.hidden, "heads": member.model.heads,
                     "batch_sequences": member.batch_sequences, "seq_len": member.model.seq_len,
                     "steps": member.steps, "duration_days": scenario.duration_s / 86400.0,
                     "utilization_drop": scenario.utilization_drop,
                     "devices": run.devices, **{name: layout.get(name) for name in (
                         "tp", "pp", "dp", "cp", "ep", "micro_batch", "schedule", "virtual_stages", "zero",
                         "recompute")},
                     "step_time_s": _finite(run.step_time_s), "run_days": _finite(run.run_s / 86400.0),
                     "utilization": run.utilization, "latency_s": _finite(run.latency_s),
                     "exposed_comm_share": _finite(run.exposed_comm_share), "status": run.status})
    return pa.Table.from_pylist(rows, schema=LIMITS_SCHEMA)


def _finite(value: float):
    """``value``, or None where it is not finite (a run with no layout)."""
    return value if math.isfinite(value) else None
