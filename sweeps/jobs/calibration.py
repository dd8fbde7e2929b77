"""The measurements of a calibration (``commscale calibrate``): the baseline layer, its
one-at-a-time variations and the held-out configurations, each profiled on a whole device
(kind ``baseline``)."""

from __future__ import annotations

import dataclasses
import os

import pyarrow as pa

from sweeps.config.calibration import CalibrationSpec, fit_configs
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Resources, Workload, fingerprint_of, key_of
from sweeps.lake.kinds import BASELINE
from tasks.device import is_cuda
from tasks.measure.baseline import (BASELINE_POINT_SCHEMA, BASELINE_SCHEMA, MEASUREMENT_VERSION, SCHEMA_VERSION,
                                    ProfileContext, measure_points)

__all__ = ["calibration_job"]


def calibration_job(spec: CalibrationSpec) -> SweepJob:
    """The measurements of ``spec`` as a sweep of kind ``baseline``: one GPU per
    configuration, or a whole CPU node one at a time (measurements must not share a device)."""
    import torch

    settings = dict(dtype=spec.dtype, device=spec.device, causal=spec.causal, threads=spec.threads,
                    warmup=spec.warmup, steps=spec.steps, plain_repeats=spec.plain_repeats, dropout=spec.dropout,
                    measurement=MEASUREMENT_VERSION, torch=torch.__version__)
    configs = fit_configs(spec) + [dict(dataclasses.asdict(p), role="held_out", varied="none") for p in spec.held_out]
    rows = []
    for config in configs:
        shape = {k: config[k] for k in ("h", "heads", "sl", "b", "tp")}
        rows.append(dict(shape, key=key_of([spec.name, config["role"], shape, settings]),
                         calibration=spec.name, role=config["role"], varied=config["varied"], dtype=spec.dtype,
                         device=spec.device, causal=spec.causal))
    context = ProfileContext(warmup=spec.warmup, steps=spec.steps, plain_repeats=spec.plain_repeats,
                             time_cap_s=spec.time_cap_s, dropout=spec.dropout, threads=spec.threads)
    whole_cpu = float(spec.threads or os.cpu_count() or 1)
    resources = Resources.for_device(spec.device) if is_cuda(spec.device) else Resources(cpus=whole_cpu)
    workload = Workload(kind=BASELINE, body=measure_points, context=context, schema=BASELINE_SCHEMA,
                        schema_version=SCHEMA_VERSION, resources=resources, point_timeout_s=spec.point_timeout_s)
    config = {**dataclasses.asdict(spec), **settings}
    config.pop("description", None)
    return SweepJob(name=f"calibration-{spec.name}", hardware=spec.device.replace(":", "-"),
                    points=pa.Table.from_pylist(rows, schema=BASELINE_POINT_SCHEMA), workload=workload, config=config,
                    sweep_fingerprint=fingerprint_of(config), hardware_fingerprint=fingerprint_of(settings))
