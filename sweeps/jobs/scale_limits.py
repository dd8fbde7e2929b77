"""``commscale limits`` as a job: one point per (scenario, training FLOP of the grid), each the
family member at that compute and its best run within the duration, found on a worker
(``tasks.model.limits.rows.limit_rows``).

It runs through ``sweeps.run.run_job`` like any sweep: manifest, resume, Ray tasks, one
``limits`` row per point in the lake.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, Optional

import pandas as pd
import pyarrow as pa

from sweeps.config.scale_limits import LimitsSetup, flop_grid
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Resources, Workload, fingerprint_of, key_of
from sweeps.lake.kinds import LIMITS
from tasks.model.limits.curve import curve_thresholds, floor_days
from tasks.model.limits.rows import LIMITS_POINT_FIELDS, LIMITS_SCHEMA, LIMITS_SCHEMA_VERSION, LimitsContext, limit_rows
from tasks.model.projection.grid import COST_MODEL_VERSION
from tasks.model.step.plan import STEP_MODEL_VERSION
from tasks.model.terms.specs import fingerprint

__all__ = ["limits_key", "limits_job", "limits_summary"]


def limits_key(preset: str, config_fingerprint: str, hardware_fingerprint: str, scenario: str, flop: float) -> str:
    """The lake key of one point (kind ``limits``): the preset, the fingerprint of everything
    its rows depend on, the hardware's, the scenario and the target FLOP."""
    return key_of([LIMITS, preset, config_fingerprint, hardware_fingerprint, scenario, repr(flop)])


def limits_job(setup: LimitsSetup) -> SweepJob:
    """The points of ``setup``'s preset: its scenarios x its FLOP grid on its hardware (the
    spec, the stack's fingerprint and the cost model's version are part of every key: another
    assumption makes other rows)."""
    spec, hw = setup.spec, setup.hardware
    assumptions = {name: value for name, value in dataclasses.asdict(spec).items() if name != "description"}
    config = {"limits": assumptions, "stack": fingerprint(setup.stack),
              "cost_model": f"{COST_MODEL_VERSION}+{STEP_MODEL_VERSION}"}
    fp = fingerprint_of(config)
    rows = [{"key": limits_key(spec.name, fp, fingerprint(hw), scenario, flop), "scenario": scenario,
             "flop_target": flop, "hardware": hw.name}
            for scenario in spec.scenarios for flop in flop_grid(spec)]
    points = pa.Table.from_pylist(rows, schema=LIMITS_POINT_FIELDS)
    workload = Workload(kind=LIMITS, body=limit_rows, context=LimitsContext(setup.scenarios), schema=LIMITS_SCHEMA,
                        schema_version=LIMITS_SCHEMA_VERSION, resources=Resources(), point_timeout_s=600.0)
    return SweepJob(name=spec.name, hardware=hw.name, points=points, workload=workload, config=config,
                    sweep_fingerprint=fp, hardware_fingerprint=fingerprint(hw))


def _number(value: Any) -> Optional[float]:
    """A finite float, or None (JSON's null) for a missing or infinite figure."""
    return float(value) if value is not None and not pd.isna(value) and math.isfinite(float(value)) else None


def limits_summary(rows: pd.DataFrame, setup: LimitsSetup) -> Dict[str, Any]:
    """What ``commscale limits`` reports of its rows: for each scenario, in the preset's order,
    its description and what-ifs, the utilisation of its smallest run (``plateau``), the FLOP
    where utilisation stays under ``utilization_drop`` x plateau (``utilization_drop_flop``), the
    FLOP beyond which no layout finishes within the duration (``latency_wall_flop``), the FLOP
    beyond which the latency floor alone of each point's fastest run outlasts it
    (``latency_floor_wall_flop``; null where the grid does not reach one) and its points
    (``tasks.model.limits.curve.thresholds``), each with its run's days and the days its
    latency floor alone would take (``latency_floor_days``)."""
    spec = setup.spec
    out: Dict[str, Any] = {"preset": setup.preset, "hardware": setup.hardware.name, "stack": spec.stack,
                           "duration_days": spec.duration_days, "utilization_drop": spec.utilization_drop,
                           "overrides": list(setup.overrides), "scenarios": {}}
    for name, what in spec.scenarios.items():
        curve = rows[rows["scenario"] == name].sort_values("flop")
        turn = curve_thresholds(curve, spec.utilization_drop)
        points = [{"flop": _number(r["flop"]), "params": _number(r["params"]), "devices": int(r["devices"]),
                   "utilization": _number(r["utilization"]), "run_days": _number(r["run_days"]),
                   "latency_floor_days": floor_days(_number(r["latency_s"]), r["steps"]), "status": r["status"]}
                  for _, r in curve.iterrows()]
        out["scenarios"][name] = {"description": what.description, "latency_factor": what.latency_factor,
                                  "batch_scale": what.batch_scale, "plateau_utilization": turn.plateau,
                                  "utilization_drop_flop": turn.drop_flop, "latency_wall_flop": turn.wall_flop,
                                  "latency_floor_wall_flop": turn.floor_wall_flop,
                                  "points": points}
    return out

