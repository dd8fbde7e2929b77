"""The projection job of ``commscale run``: one point per configuration x hardware
scenario, each with a stable key, projected by the cost model on any worker.

A key hashes the point's content, its sweep, and everything that would change its result
(the hardware profile's figures, the cost model's version, the calibration), so a point
whose key is already in the lake never needs projecting again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import numpy as np
import pyarrow as pa

from sweeps.config import RunConfig, load_preset
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Resources, Workload, fingerprint_of
from sweeps.lake.kinds import PROJECTION
from tasks.model.projection import grid as projection
from tasks.model.terms.metrics import required_tp
from tasks.model.projection.grid import COST_MODEL_VERSION, HIGHLIGHT_PREFIX, POINT_SCHEMA
from tasks.model.terms.specs import TransformerModel, fingerprint

__all__ = ["Highlight", "Plan", "plan_points", "planned_count", "sample_config", "point_keys", "projection_job"]

_KEY_FIELDS = [f for f in POINT_SCHEMA.names if f != "key"]
#: Points per projection task: the cost model projects about 10^6 a second, so a task of
#: this many takes a few tens of ms, and a grid of 10^6 points lands in tens of files.
PROJECTION_CHUNK = 16384


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
    multipliers = [float(m) for m in sweep.flop_vs_bw]
    return Plan(_point_table(configs, multipliers, scenarios, sweep.dp, sweep.dtype_bytes,
                             dict(sweep=sweep.name, hardware=hw_print, calibration=calibration)), highlights)


def planned_count(config: RunConfig) -> int:
    """How many points ``plan_points(config)`` plans, from the lengths of the grid's lists
    alone: nothing is built, so a grid of 10^12 points is counted at once."""
    sweep = config.sweep
    layers = 1 if config.model is not None else len(sweep.h)
    configs = layers * len(sweep.sl) * len(sweep.b) * len(sweep.tp) + len(sweep.highlights)
    return configs * len(sweep.flop_vs_bw) * max(1, len(sweep.scenarios))


def sample_config(config: RunConfig, width: int = 2) -> RunConfig:
    """``config`` with each list of its grid cut to its first ``width`` values: a grid of
    the same kind of points, small enough to plan in milliseconds."""
    sweep = config.sweep
    cut = {name: getattr(sweep, name)[:width] for name in ("h", "sl", "b", "tp", "flop_vs_bw", "scenarios",
                                                           "highlights")}
    return dataclasses.replace(config, sweep=dataclasses.replace(sweep, **cut))


def _point_table(configs: List[tuple], multipliers: List[float], scenarios: List[Tuple[str, float]], dp: int,
                 dtype_bytes: int, provenance: Dict[str, str]) -> pa.Table:
    """The cross product configs x multipliers x scenarios as columns (no object per point),
    each point keyed by ``point_keys``."""
    n_m, n_s = len(multipliers), len(scenarios)
    n = len(configs) * n_m * n_s
    index = np.arange(n)
    pick = index // (n_m * n_s)
    columns = {name: np.asarray([c[i] for c in configs], dtype=np.int64)[pick]
               for i, name in enumerate(("h", "heads", "sl", "b", "tp"), start=1)}
    columns.update(dp=np.full(n, dp, dtype=np.int64), dtype_bytes=np.full(n, dtype_bytes, dtype=np.int64),
                   flop_vs_bw=np.asarray(multipliers, dtype=np.float64)[(index // n_s) % n_m],
                   dp_slowdown=np.asarray([s for _, s in scenarios], dtype=np.float64)[index % n_s])
    labels = pa.array([c[0] for c in configs], pa.string()).take(pa.array(pick))
    links = pa.array([link for link, _ in scenarios], pa.string()).take(pa.array(index % n_s))
    keys = pa.array(list(point_keys(configs, multipliers, scenarios, dp, dtype_bytes, provenance)), pa.string())
    table = {"key": keys, "label": labels, **{k: pa.array(v) for k, v in columns.items()}, "links": links}
    return pa.table({name: table[name] for name in POINT_SCHEMA.names}, schema=POINT_SCHEMA)


def point_keys(configs, multipliers, scenarios, dp: int, dtype_bytes: int, provenance: Dict[str, str]):
    """The lake key of every point of a projection sweep (kind ``projection``), in the point
    table's order: the content hash (``work.key_of``: sha256 of the canonical JSON, 32 hex
    digits) of the point's fields (``POINT_SCHEMA`` but its key), the sweep it belongs to,
    the fingerprint of its hardware, its calibration and the cost model's version. Keys are
    unique within a result kind, so each sweep owns whole rows (a point of two sweeps is one
    row in each). The JSON is assembled from its parts, without an object per point."""
    text = json.dumps
    fixed = (f'"calibration":{text(provenance["calibration"])},"cost_model":{text(COST_MODEL_VERSION)},'
             f'"dp":{dp},"dp_slowdown":')
    hardware, sweep = text(provenance["hardware"]), text(provenance["sweep"])
    multiplier_parts = [f',"dtype_bytes":{dtype_bytes},"flop_vs_bw":{m!r}' for m in multipliers]
    scenario_parts = [(f"{s!r}", text(link)) for link, s in scenarios]
    for label, h, heads, sl, b, tp in configs:
        head = f'{{"b":{b},' + fixed
        middle = f',"h":{h},"hardware":{hardware},"heads":{heads},"label":{text(label)},"links":'
        end = f',"sl":{sl},"sweep":{sweep},"tp":{tp}}}'
        for m_part in multiplier_parts:
            for slowdown, link in scenario_parts:
                canonical = head + slowdown + m_part + middle + link + end
                yield hashlib.sha256(canonical.encode()).hexdigest()[:32]


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
                        resources=Resources(), point_timeout_s=point_timeout_s, max_chunk=PROJECTION_CHUNK)
    hardware = config.hardware.name + (f".{config.calibration.name}" if calibration and config.calibration else "")
    job = SweepJob(name=config.sweep.name, hardware=hardware, points=plan.points, workload=workload,
                   config=identity, sweep_fingerprint=fingerprint_of(identity),
                   hardware_fingerprint=fingerprint(config.hardware))
    return job, plan
