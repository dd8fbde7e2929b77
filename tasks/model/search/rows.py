"""Rows of a layout search, as the lake stores them, and the task bodies that make them.

- ``evaluate_trials``: one ``search`` row per trial (a layout proposed by the sampler).
- ``best_layout_rows``: one ``scaling`` row per (model, device count): the best layout of
  the whole space, found exhaustively.

Both are plain functions of an Arrow table and a context (``tasks.outcomes`` runs them on
a worker); infeasible layouts are rows with ``status`` "infeasible" and the reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, Mapping, Tuple

import numpy as np
import pyarrow as pa

from tasks.model.terms.layout import CODED_FIELDS, STRUCTURAL_CONSTRAINTS, decode, encode, families
from tasks.model.step.memory import USABLE_HBM_FRACTION
from tasks.model.search.penalty import sampler_values
from tasks.model.search.space import LayoutSpace, constraint_counts, exhaustive
from tasks.model.terms.specs import HardwareProfile, TransformerModel
from tasks.model.terms.stack import Stack
from tasks.model.step.plan import StepContext, reasons, step_columns
from tasks.outcomes import STATUS_INFEASIBLE, STATUS_OK

__all__ = [
    "SEARCH_SCHEMA_VERSION",
    "SCALING_SCHEMA_VERSION",
    "SEARCH_SCHEMA",
    "SCALING_SCHEMA",
    "TRIAL_FIELDS",
    "RECORD_FIELDS",
    "OBJECTIVES",
    "TIE_BREAKERS",
    "ranking",
    "best_row",
    "SearchContext",
    "ScalingContext",
    "coded",
    "evaluate_trials",
    "best_layout_rows",
    "no_fit_reason",
]

#: 2: the study's record (``RECORD_FIELDS``) joined every row. 3 (and scaling's 2): context
#: parallelism, ``cp`` and ``cp_comm``, in the layout. 4 (and scaling's 3): expert parallelism,
#: ``ep``, ``etp`` and ``dispatcher``, in the layout, and a search row's ``ep_comm_s`` and
#: ``ep_exposed_s``. 5: ``step_time_if_fit_s`` (a layout over memory's step time had it fit)
#: and ``sampler_value`` (what the sampler was told: ``penalty.sampler_values``).
SEARCH_SCHEMA_VERSION = 5
SCALING_SCHEMA_VERSION = 3

#: Objectives: name -> ((result column, direction), ...). "pareto" is the multi-objective
#: case: exposed-communication share against tokens per second per device.
OBJECTIVES: Dict[str, Tuple[Tuple[str, str], ...]] = {
    "step_time": (("step_time_s", "minimize"),),
    "tokens_per_s_per_device": (("tokens_per_s_per_device", "maximize"),),
    "exposed_comm_share": (("exposed_comm_share", "minimize"),),
    "exposed_comm": (("exposed_comm_s", "minimize"),),
    "pareto": (("exposed_comm_share", "minimize"), ("tokens_per_s_per_device", "maximize")),
}

#: What decides between layouts tied on an objective, in order, each the smaller the better:
#: the shorter step, then the smaller memory per device. Exposed communication is often
#: nothing for many layouts at once; the order the sampler tried them decides nothing.
TIE_BREAKERS: Tuple[str, ...] = ("step_time_s", "memory_per_device_bytes")


def ranking(columns: Mapping[str, np.ndarray], objective: str) -> np.ndarray:
    """The positions of ``columns``' rows (a mapping or frame of equal-length columns: the
    objective's first column and ``TIE_BREAKERS``), best first by ``objective``'s first
    column, ties broken by ``TIE_BREAKERS``; a stable order, so rows tied on all three keep
    theirs. NaN sorts last."""
    column, direction = OBJECTIVES[objective][0]
    value = np.asarray(columns[column], dtype=float)
    keys = [np.asarray(columns[name], dtype=float) for name in reversed(TIE_BREAKERS)]
    return np.lexsort([*keys, -value if direction == "maximize" else value])


def best_row(costs: Mapping[str, np.ndarray], objective: str) -> int:
    """The row of the best feasible layout of ``costs`` (``step.step_columns``' output) by
    ``ranking``; -1 when none is feasible."""
    feasible = np.flatnonzero(np.asarray(costs["status_code"]) == 0)
    if not len(feasible):
        return -1
    return int(feasible[ranking({name: np.asarray(costs[name])[feasible] for name in (OBJECTIVES[objective][0][0],
                                                                                        *TIE_BREAKERS)},
                                objective)[0]])


_LAYOUT = [("tp", pa.int64()), ("pp", pa.int64()), ("dp", pa.int64()), ("micro_batch", pa.int64()),
           ("schedule", pa.string()), ("virtual_stages", pa.int64()), ("zero", pa.string()),
           ("sequence_parallel", pa.bool_()), ("recompute", pa.string()), ("cp", pa.int64()), ("cp_comm", pa.string()),
           ("ep", pa.int64()), ("etp", pa.int64()), ("dispatcher", pa.string())]
_METRICS = [("step_time_s", pa.float64()), ("exposed_comm_s", pa.float64()), ("exposed_comm_share", pa.float64()),
            ("tokens_per_s_per_device", pa.float64()), ("memory_per_device_bytes", pa.float64()),
            ("latency_s", pa.float64())]
_DETAIL = [("microbatches", pa.int64()), ("bubble_fraction", pa.float64()), ("compute_s", pa.float64()),
           ("tp_comm_s", pa.float64()), ("pp_comm_s", pa.float64()), ("dp_comm_s", pa.float64()),
           ("dp_traffic_bytes", pa.float64()), ("tp_exposed_s", pa.float64()), ("pp_exposed_s", pa.float64()),
           ("optimizer_s", pa.float64()), ("ep_comm_s", pa.float64()), ("ep_exposed_s", pa.float64()),
           ("step_time_if_fit_s", pa.float64()), ("family", pa.string())]
_CASE = [("key", pa.string()), ("model", pa.string()), ("hardware", pa.string()), ("devices", pa.int64()),
         ("global_batch", pa.int64())]

#: What decided a study, the same in each of its rows (``sweeps.config.SearchSetup.record``):
#: the stack as named (a preset of ``conf/stack`` or a file) and the ``specs.fingerprint``
#: of the stack, model and hardware as costed (each field override included), the search
#: preset, the command line's overrides that decide the study (``model.layers=40``,
#: ``hardware.devices_per_node=4``, ``model=./mine.yaml``; shell words, space-separated) and
#: the objective's name (a key of ``OBJECTIVES``).
RECORD_FIELDS = ("stack", "stack_fp", "model_fp", "hardware_fp", "preset", "overrides", "objective_name")
_RECORD = [(name, pa.string()) for name in RECORD_FIELDS]

#: What the driver sends per trial: the case, the trial number and its layout.
TRIAL_FIELDS = pa.schema(_CASE[:1] + [("study", pa.string())] + _CASE[1:] + [("trial", pa.int64())] + _LAYOUT)

#: kind ``search``: one trial of a layout search. ``objective`` is the value of the
#: study's (first) objective; NaN where the layout is infeasible. ``sampler_value`` is what
#: the sampler was told for it (``penalty.sampler_values``: the objective, or a layout over
#: memory's penalised step time; NaN where it was told the worst value).
SEARCH_SCHEMA = pa.schema(list(TRIAL_FIELDS) + [("status", pa.string()), ("reason", pa.string())] + _METRICS
                          + [("objective", pa.float64()), ("sampler_value", pa.float64())] + _DETAIL + _RECORD)

#: kind ``scaling``: the best layout of the whole space for one model and device count.
#: ``latency_s``: the step's latency terms alone (collective α steps and kernel launch
#: floors), seconds. ``winner_family``: ``tasks.model.terms.layout.family`` of the best layout.
#: ``feasible_layouts`` of ``space_layouts`` fit; with none, the row is "infeasible".
SCALING_SCHEMA = pa.schema(_CASE + _LAYOUT + [m for m in _METRICS if m[0] != "exposed_comm_s"]
                           + [("exposed_comm_s", pa.float64()), ("winner_family", pa.string()),
                              ("objective", pa.string()), ("status", pa.string()), ("reason", pa.string()),
                              ("space_layouts", pa.int64()), ("feasible_layouts", pa.int64()),
                              ("bubble_fraction", pa.float64()), ("microbatches", pa.int64())])


@dataclass(frozen=True)
class SearchContext:
    """What the trials of one study share: the step model's context, the objective and the
    study's record (``RECORD_FIELDS`` by name; a field left out is null in the rows)."""

    step: StepContext
    objective: str = "step_time"
    record: Tuple[Tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ScalingContext:
    """What the scaling points share: models by name, the cluster, the space, settings and
    the software stack the search names (``tasks.model.terms.stack``)."""

    models: Dict[str, TransformerModel]
    hardware: HardwareProfile
    space: LayoutSpace
    objective: str = "step_time"
    memory_fraction: float = USABLE_HBM_FRACTION
    dtype_bytes: int = 2
    stack: Stack = field(default_factory=Stack)


def coded(table: pa.Table) -> Dict[str, np.ndarray]:
    """A table's layout columns as ``step.step_columns`` reads them (names to codes)."""
    columns = {name: table.column(name).to_numpy(zero_copy_only=False) for name, _ in _LAYOUT}
    for name in CODED_FIELDS:
        columns[name] = encode(name, columns[name])
    return columns


def evaluate_trials(points: pa.Table, context: SearchContext) -> pa.Table:
    """``search`` rows for trial points (``TRIAL_FIELDS``); a pure function."""
    points = points.select(TRIAL_FIELDS.names).cast(TRIAL_FIELDS)
    layouts = coded(points)
    result = step_columns(layouts, context.step)
    ok = result["status_code"] == 0
    column, _ = OBJECTIVES[context.objective][0]
    out = {name: points.column(name) for name in TRIAL_FIELDS.names if name != "dp"}
    out["dp"] = pa.array(result["dp"], pa.int64())
    out["status"] = pa.array(np.where(ok, STATUS_OK, STATUS_INFEASIBLE).tolist(), pa.string())
    out["reason"] = pa.array(reasons(result, context.step), pa.string())
    for name, _ in _METRICS + _DETAIL[:-1]:
        out[name] = pa.array(result[name])
    out["objective"] = pa.array(result[column])
    out["sampler_value"] = pa.array(sampler_values(context.objective, result[column], ok, result["step_time_if_fit_s"],
                                                   result["memory_per_device_bytes"], context.step.memory_limit_bytes))
    out["family"] = pa.array(families(layouts["tp"], layouts["pp"], result["dp"], layouts["zero"],
                                      layouts["cp"]).tolist(), pa.string())
    record = dict(context.record)
    for name in RECORD_FIELDS:
        out[name] = pa.nulls(points.num_rows, pa.string()) if name not in record else \
            pa.array([record[name]] * points.num_rows, pa.string())
    return pa.table(out).select(SEARCH_SCHEMA.names).cast(SEARCH_SCHEMA)


def no_fit_reason(layouts: Dict[str, np.ndarray], result: Dict[str, np.ndarray], model: TransformerModel,
                   ctx: StepContext) -> str:
    """Why no layout of a space is feasible, counting layouts per failed constraint."""
    counts, structural_ok = constraint_counts(layouts, heads=model.heads, layers=model.layers, devices=ctx.devices,
                                              global_batch=ctx.global_batch, kv_heads=model.kv_heads or 0,
                                              experts=model.experts)
    total = len(layouts["tp"])
    failed = [f"{name} fails for {n} of {total}" for name, n in counts.items() if n]
    if structural_ok:
        smallest = np.nanmin(np.where(result["status_code"] == len(STRUCTURAL_CONSTRAINTS) + 1,
                                      result["memory_per_device_bytes"], np.nan))
        failed.append(f"memory: all {structural_ok} remaining layouts exceed {ctx.memory_limit_bytes / 1e9:.1f} GB "
                      f"usable (the smallest needs {smallest / 1e9:.1f} GB)")
    return "no feasible layout: " + "; ".join(failed)


def best_layout_rows(points: pa.Table, context: ScalingContext) -> pa.Table:
    """``scaling`` rows: for each point (model, devices, global batch), the best layout of
    ``context.space`` by ``context.objective`` (a single objective; ties broken as
    ``ranking`` breaks them), found exhaustively."""
    rows = []
    for point in points.to_pylist():
        model = context.models[point["model"]]
        ctx = StepContext(model, context.hardware, devices=point["devices"], global_batch=point["global_batch"],
                          dtype_bytes=context.dtype_bytes, memory_fraction=context.memory_fraction,
                          stack=context.stack)
        layouts, result = exhaustive(context.space, ctx)
        best = best_row(result, context.objective)
        row = {name: point[name] for name, _ in _CASE}
        row.update(objective=context.objective, space_layouts=len(layouts["tp"]),
                   feasible_layouts=int((result["status_code"] == 0).sum()))
        if best < 0:
            row.update(status=STATUS_INFEASIBLE, reason=no_fit_reason(layouts, result, model, ctx))
        else:
            pick = {name: values[best] for name, values in layouts.items()}
            row.update({name: pick[name].item() for name in ("tp", "pp", "micro_batch", "virtual_stages", "cp", "ep",
                                                             "etp")})
            row.update({name: decode(name, [pick[name]])[0] for name in CODED_FIELDS})
            row.update(dp=int(result["dp"][best]), sequence_parallel=bool(pick["sequence_parallel"]),
                       status=STATUS_OK, reason=None, microbatches=int(result["microbatches"][best]),
                       winner_family=families(*(np.asarray([v]) for v in (pick["tp"], pick["pp"], result["dp"][best],
                                                                         pick["zero"], pick["cp"])))[0])
            row.update({name: float(result[name][best]) for name, _ in _METRICS + [("bubble_fraction", None)]})
        rows.append(row)
    return pa.Table.from_pylist(rows, schema=SCALING_SCHEMA)
