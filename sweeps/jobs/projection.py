"""The projection job of ``commscale run``: one point per configuration x hardware
scenario, each with a stable key, projected by the cost model on any worker.

A key hashes the point's content, its sweep, and everything that would change its result
(the hardware profile's figures, the cost model's version, the calibration), so a point
whose key is already in the lake never needs projecting again.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import pyarrow as pa

from sweeps.config import RunConfig, load_preset
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Resources, Workload, fingerprint_of, key_of
from sweeps.lake.kinds import PROJECTION
from tasks.model import projection
from tasks.model.metrics import required_tp
from tasks.model.projection import COST_MODEL_VERSION, HIGHLIGHT_PREFIX, POINT_SCHEMA
from tasks.model.specs import TransformerModel, fingerprint

__all__ = ["Highlight", "Plan", "plan_points", "point_key", "projection_job"]

_KEY_FIELDS = [f for f in POINT_SCHEMA.names if f != "key"]


@dataclass(frozen=True)
class Highlight:
    """A model projected at the TP Eq. 10 requires of it on the sweep's hardware."""

    model: str
    h: int
    heads: int
    sl: int
    tp: int
    tp_eq10: float


@dataclass(frozen=True)
class Plan:
    """The points of a run (``POINT_SCHEMA``) and the highlighted models among them."""

    points: pa.Table
    highlights: Tuple[Highlight, ...]


def point_key(point: Dict[str, object], sweep: str, hardware_fingerprint: str, calibration: str) -> str:
    """Deterministic key of one point of a sweep: the hash of its canonical content, the
    sweep it belongs to, and its provenance. Keys are unique within a result kind, so
    each sweep owns whole rows (a point of two sweeps is one row in each)."""
    content = {f: point[f] for f in _KEY_FIELDS}
    content.update(sweep=sweep, hardware=hardware_fingerprint, calibration=calibration, cost_model=COST_MODEL_VERSION)
    return key_of(content)


def _next_power_of_two(x: float) -> int:
    return 1 if x <= 1 else 2 ** math.ceil(math.log2(x))


def _highlight(model: TransformerModel, reference: TransformerModel, config: RunConfig) -> Highlight:
    """Eq. 10: TP = base_TP * (params / reference params) / (HBM / reference HBM),
    rounded up to a power of two."""
    sweep, hw = config.sweep, config.hardware
    tp = float(required_tp(model.params_b / reference.params_b, hw.hbm_gb / sweep.reference_hbm_gb, sweep.reference_tp))
    return Highlight(model.name, model.hidden, model.heads, model.seq_len, _next_power_of_two(tp), tp)


def plan_points(config: RunConfig, calibration: Optional[str] = None) -> Plan:
    """Every point of the sweep: the grid (or the selected model's layer over the grid's
    SL, B, TP) plus each highlighted model at its Eq. 10 TP, times every flop-vs-bw m
    (and every network scenario, when the sweep lists them). ``calibration`` names the
    measured calibration the points are projected with (default: the spec roofline)."""
    sweep, hw = config.sweep, config.hardware
    if config.model is None:
        layers = [("", h, h // sweep.head_dim) for h in sweep.h]
    else:
        layers = [(config.model.name, config.model.hidden, config.model.heads)]
    configs = [
        (label, h, heads, sl, b, tp)
        for (label, h, heads), sl, b, tp in itertools.product(layers, sweep.sl, sweep.b, sweep.tp)
    ]
    reference = load_preset("model", sweep.reference_model)
    highlights = tuple(_highlight(load_preset("model", name), reference, config) for name in sweep.highlights)
    configs += [(f"{HIGHLIGHT_PREFIX}{x.model}", x.h, x.heads, x.sl, min(sweep.b), x.tp) for x in highlights]

    hw_print, calibration = fingerprint(hw), calibration or f"spec:{hw.name}"
    scenarios = [(s.links.value, float(s.dp_slowdown)) for s in sweep.scenarios] or [
        (sweep.links.value, float(sweep.dp_slowdown))]
    rows: List[Dict[str, object]] = []
    for (label, h, heads, sl, b, tp), multiplier, (links, slowdown) in itertools.product(configs, sweep.flop_vs_bw,
                                                                                      scenarios):
        row = dict(label=label, h=h, heads=heads, sl=sl, b=b, tp=tp, dp=sweep.dp,
                   dtype_bytes=sweep.dtype_bytes, flop_vs_bw=float(multiplier),
                   dp_slowdown=slowdown, links=links)
        row["key"] = point_key(row, sweep.name, hw_print, calibration)
        rows.append(row)
    return Plan(pa.Table.from_pylist(rows, schema=POINT_SCHEMA), highlights)


def _identity(config: RunConfig, calibration: Optional[projection.Calibration]) -> Dict[str, object]:
    """What a projection sweep's rows depend on, as its manifest keeps it."""
    sweep = {f"sweep.{k}": v for k, v in dataclasses.asdict(config.sweep).items()
             if k not in ("description", "mode", "roi")}
    sweep["sweep.links"] = config.sweep.links.value
    # Only a sweep that lists scenarios names them, so older sweeps keep their fingerprint.
    scenarios = sweep.pop("sweep.scenarios", [])
    if scenarios:
        sweep["sweep.scenarios"] = [{"links": s["links"].value, "dp_slowdown": s["dp_slowdown"]} for s in scenarios]
    sweep["model"] = dataclasses.asdict(config.model) if config.model else None
    sweep["cost_model"] = COST_MODEL_VERSION
    sweep["calibration"] = calibration.name if calibration else None
    return sweep


def projection_job(config: RunConfig, *, point_timeout_s: float = 300.0,
                   calibration: Optional[projection.Calibration] = None) -> Tuple[SweepJob, Plan]:
    """The job of ``commscale run``: the sweep's points projected on its hardware, with
    the spec roofline or a measured ``calibration`` (its own partition of the lake)."""
    plan = plan_points(config, calibration.name if calibration else None)
    identity = _identity(config, calibration)
    workload = Workload(kind=PROJECTION, body=projection.project_with,
                        context=projection.ProjectionContext(config.hardware, calibration),
                        schema=projection.PROJECTION_SCHEMA, schema_version=projection.SCHEMA_VERSION,
                        resources=Resources(), point_timeout_s=point_timeout_s)
    hardware = config.hardware.name + (f".{config.calibration.name}" if calibration and config.calibration else "")
    job = SweepJob(name=config.sweep.name, hardware=hardware, points=plan.points, workload=workload,
                   config=identity, sweep_fingerprint=fingerprint_of(identity),
                   hardware_fingerprint=fingerprint(config.hardware))
    return job, plan
