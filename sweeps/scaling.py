"""The scaling view as a sweep: one point per (model, device count), each the best layout
of the search's space found exhaustively on a worker (``tasks.model.search_rows.best_layout_rows``).

It runs through ``sweeps.run.run_job`` like any sweep: manifest, resume, Ray tasks, one
``scaling`` row per point in the lake.
"""

from __future__ import annotations

import dataclasses

import pyarrow as pa

from sweeps.config import load_preset
from sweeps.dispatch import Workload
from sweeps.lake.kinds import SCALING
from sweeps.run import SweepJob
from sweeps.config import SearchSetup
from tasks.identity import content_hash
from tasks.model.projection import COST_MODEL_VERSION
from tasks.model.search_rows import SCALING_SCHEMA, SCALING_SCHEMA_VERSION, ScalingContext, best_layout_rows
from tasks.model.specs import fingerprint
from tasks.model.step import STEP_MODEL_VERSION

__all__ = ["KIND", "scaling_job"]

KIND = SCALING


def scaling_job(setup: SearchSetup) -> SweepJob:
    """The scaling sweep of a search preset: ``scaling.models`` x ``scaling.devices`` at
    ``scaling.global_batch`` on the preset's hardware and space."""
    spec, hw = setup.spec, setup.hardware
    models = {name: load_preset("model", name) for name in spec.scaling.models}
    config = {"space": dataclasses.asdict(spec.space), "objective": spec.objective,
              "memory_fraction": spec.memory_fraction, "dtype_bytes": spec.dtype_bytes,
              "scaling": dataclasses.asdict(spec.scaling), "models": {n: fingerprint(m) for n, m in models.items()},
              "cost_model": f"{COST_MODEL_VERSION}+{STEP_MODEL_VERSION}"}
    fp = content_hash(config)
    rows = [{"key": content_hash(["scaling", spec.name, fp, fingerprint(hw), name, devices], length=32),
             "model": name, "hardware": hw.name, "devices": devices, "global_batch": spec.scaling.global_batch}
            for name in spec.scaling.models for devices in spec.scaling.devices]
    points = pa.Table.from_pylist(rows, schema=pa.schema(list(SCALING_SCHEMA)[:5]))
    context = ScalingContext(models, hw, spec.space, spec.objective, spec.memory_fraction, spec.dtype_bytes)
    workload = Workload(kind=KIND, body=best_layout_rows, context=context, schema=SCALING_SCHEMA,
                        schema_version=SCALING_SCHEMA_VERSION, resources={"num_cpus": 1}, point_timeout_s=120.0)
    return SweepJob(name=spec.name, hardware=hw.name, points=points, workload=workload, config=config,
                    sweep_fingerprint=fp, hardware_fingerprint=fingerprint(hw))
