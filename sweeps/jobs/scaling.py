"""The scaling view as a job: one point per (model, device count), each the best layout of
the search's space found exhaustively on a worker (``tasks.model.search.rows.best_layout_rows``).

It runs through ``sweeps.run.run_job`` like any sweep: manifest, resume, Ray tasks, one
``scaling`` row per point in the lake.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from sweeps.config import SearchSetup, load_preset
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import Resources, Workload, fingerprint_of, key_of
from sweeps.lake.kinds import SCALING
from tasks.model.projection.grid import COST_MODEL_VERSION
from tasks.model.search.rows import SCALING_SCHEMA, SCALING_SCHEMA_VERSION, ScalingContext, best_layout_rows
from tasks.model.terms.specs import fingerprint
from tasks.model.step.plan import STEP_MODEL_VERSION

__all__ = ["scaling_key", "scaling_job"]


def scaling_key(search: str, config_fingerprint: str, hardware_fingerprint: str, model: str, devices: int) -> str:
    """The lake key of one scaling point (kind ``scaling``): the search preset, the fingerprint
    of everything its rows depend on, the hardware's, the model and the device count."""
    return key_of([SCALING, search, config_fingerprint, hardware_fingerprint, model, devices])


def scaling_job(setup: SearchSetup) -> SweepJob:
    """The scaling sweep of a search preset: ``scaling.models`` x ``scaling.devices`` at
    ``scaling.global_batch`` on the preset's hardware, stack and space (the stack's
    fingerprint is part of every key: another stack makes other rows)."""
    spec, hw = setup.spec, setup.hardware
    models = {name: load_preset("model", name) for name in spec.scaling.models}
    config = {"space": dataclasses.asdict(spec.space), "objective": spec.objective,
              "memory_fraction": spec.memory_fraction, "dtype_bytes": spec.dtype_bytes,
              "scaling": dataclasses.asdict(spec.scaling), "models": {n: fingerprint(m) for n, m in models.items()},
              "stack": fingerprint(setup.stack), "cost_model": f"{COST_MODEL_VERSION}+{STEP_MODEL_VERSION}"}
    fp = fingerprint_of(config)
    rows = [{"key": scaling_key(spec.name, fp, fingerprint(hw), name, devices),
             "model": name, "hardware": hw.name, "devices": devices, "global_batch": spec.scaling.global_batch}
            for name in spec.scaling.models for devices in spec.scaling.devices]
    points = pa.Table.from_pylist(rows, schema=pa.schema(list(SCALING_SCHEMA)[:5]))
    context = ScalingContext(models, hw, spec.space, spec.objective, spec.memory_fraction, spec.dtype_bytes,
                             setup.stack)
    workload = Workload(kind=SCALING, body=best_layout_rows, context=context, schema=SCALING_SCHEMA,
                        schema_version=SCALING_SCHEMA_VERSION, resources=Resources(), point_timeout_s=120.0)
    return SweepJob(name=spec.name, hardware=hw.name, points=points, workload=workload, config=config,
                    sweep_fingerprint=fp, hardware_fingerprint=fingerprint(hw))
