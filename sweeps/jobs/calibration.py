"""The measurements of a calibration (``commscale calibrate``): the baseline layer, its
one-at-a-time variations and the held-out configurations, each profiled on a whole device
(kind ``baseline``), re-measured while unstable (``tasks.measure.stability``)."""

from __future__ import annotations

import dataclasses
import os
from typing import Dict

import pyarrow as pa

from sweeps.config.calibration import CalibrationSpec, fit_configs
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Resources, Workload, fingerprint_of, key_of
from sweeps.lake.kinds import BASELINE
from tasks.device import is_cuda
from tasks.measure.baseline import (BASELINE_POINT_SCHEMA, BASELINE_SCHEMA, MEASUREMENT_VERSION, SCHEMA_VERSION,
                                    ProfileContext, measure_points)
from tasks.measure.stability import StabilityRule

__all__ = ["baseline_key", "calibration_job", "cpus_per_measurement"]


def cpus_per_measurement(spec: CalibrationSpec) -> float:
    """CPUs a CPU calibration's measurement task asks for: ``spec.threads``, else every core
    of this machine, so that nothing else runs beside the layer it times."""
    return float(spec.threads or os.cpu_count() or 1)


def baseline_key(calibration: str, role: str, shape: Dict[str, int], settings: Dict[str, object]) -> str:
    """The lake key of one measured configuration (kind ``baseline``): the calibration, the
    configuration's role (fit or held out), its shape and every measurement setting."""
    return key_of([calibration, role, shape, settings])


def calibration_job(spec: CalibrationSpec) -> SweepJob:
    """The measurements of ``spec`` as a sweep of kind ``baseline``, run as one chunk
    (``measure_points`` interleaves its configurations) on one GPU or a whole CPU node
    (measurements must not share a device)."""
    import torch

    settings = dict(dtype=spec.dtype, device=spec.device, causal=spec.causal, threads=spec.threads,
                    warmup=spec.warmup, steps=spec.steps, plain_repeats=spec.plain_repeats, dropout=spec.dropout,
                    rounds=spec.rounds, max_drift=spec.max_drift,
                    max_excess=spec.max_excess, remeasure=spec.remeasure, measurement=MEASUREMENT_VERSION,
                    torch=torch.__version__)
    configs = fit_configs(spec) + [dict(dataclasses.asdict(p), role="held_out", varied="none") for p in spec.held_out]
    rows = []
    for config in configs:
        shape = {k: config[k] for k in ("h", "heads", "sl", "b", "tp")}
        rows.append(dict(shape, key=baseline_key(spec.name, config["role"], shape, settings),
                         calibration=spec.name, role=config["role"], varied=config["varied"], dtype=spec.dtype,
                         device=spec.device, causal=spec.causal))
    rule = StabilityRule(max_drift=spec.max_drift, max_excess=spec.max_excess,
                         remeasure=spec.remeasure)
    context = ProfileContext(warmup=spec.warmup, steps=spec.steps, plain_repeats=spec.plain_repeats,
                             time_cap_s=spec.time_cap_s, dropout=spec.dropout, threads=spec.threads, rounds=spec.rounds,
                             rule=rule)
    resources = (Resources.for_device(spec.device) if is_cuda(spec.device)
                 else Resources(cpus=cpus_per_measurement(spec)))
    workload = Workload(kind=BASELINE, body=measure_points, context=context, schema=BASELINE_SCHEMA,
                        schema_version=SCHEMA_VERSION, resources=resources, point_timeout_s=spec.point_timeout_s)
    config = {**dataclasses.asdict(spec), **settings}
    config.pop("description", None)
    return SweepJob(name=f"calibration-{spec.name}", hardware=spec.device.replace(":", "-"),
                    points=pa.Table.from_pylist(rows, schema=BASELINE_POINT_SCHEMA), workload=workload, config=config,
                    sweep_fingerprint=fingerprint_of(config), hardware_fingerprint=fingerprint_of(settings))
