"""``commscale calibrate``: measure a layer on a device, fit operator models, judge them.

1. The baseline, its one-at-a-time variations and the held-out configurations of a
   calibration preset are measured as Ray tasks on a device worker (one GPU each, or a
   whole CPU node one at a time: measurements must not share a device), into kind
   ``baseline``. Measured keys are skipped on a re-run, as any sweep's.
2. The baseline and variations are fitted (``tasks.fit.accuracy.fit_calibration``) into
   kind ``opmodel``.
3. The held-out configurations are projected and compared (kind ``accuracy``).

``load_calibration`` reads the newest fit of a calibration back, with the link tiers of
measured α-β fits of the same device where the lake has them, for ``commscale run
calibration=NAME``.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

import pandas as pd

from sweeps.config import CalibrationSpec
from sweeps.errors import UserError
from sweeps.lake import Lake
from sweeps.lake.kinds import ACCURACY, BASELINE, COLLECTIVE_FIT, OPMODEL
from sweeps.lake.views import read_rows
from sweeps.jobs.calibration import calibration_job
from sweeps.run import RunReport, run_job
from tasks.fit.accuracy import (
    ACCURACY_SCHEMA_VERSION,
    OPMODEL_SCHEMA_VERSION,
    accuracy_rows,
    fit_calibration,
    models_from_rows,
    newest_fit,
)
from tasks.model.projection import Calibration
from tasks.model.specs import LinkTier

__all__ = ["CalibrationResult", "calibrate", "load_calibration", "measured_label", "link_tier"]


def measured_label(name: str, calibration_id: str) -> str:
    """The ``calibration`` column of a projection made with a measured calibration."""
    return f"measured:{name}@{calibration_id}"


@dataclass(frozen=True)
class CalibrationResult:
    """What a calibration run measured, fitted and judged."""

    report: RunReport
    calibration_id: Optional[str]
    measured: pd.DataFrame           # every baseline row of the run, any status
    accuracy: Optional[pd.DataFrame]
    fit_s: float                     # wall time of the fits
    measure_s: float                 # wall time of the measurements (Ray start included)


def calibrate(spec: CalibrationSpec, lake: Lake, **run_options) -> CalibrationResult:
    """Measure, fit and judge ``spec`` into ``lake``; ``run_options`` go to ``run_job``."""
    job = calibration_job(spec)
    started = time.perf_counter()
    report = run_job(job, lake, chunk_size=1, **run_options)
    measure_s = time.perf_counter() - started
    rows = read_rows(lake, BASELINE, job.points, status=None)
    ok = rows[rows["status"] == "ok"]
    fit_rows, held = ok[ok["role"] != "held_out"], ok[ok["role"] == "held_out"]
    if len(fit_rows) < 3:
        return CalibrationResult(report, None, rows, None, 0.0, measure_s)
    started = time.perf_counter()
    fitted_at = time.time()
    opmodels, calibration_id = fit_calibration(spec.name, fit_rows, fitted_at=fitted_at)
    models, box = models_from_rows(opmodels.to_pandas())
    accuracy = accuracy_rows(spec.name, calibration_id, models, box, fit_rows, held,
                             judged_from_s=spec.judged_from_ms / 1e3, fitted_at=fitted_at)
    fit_s = time.perf_counter() - started
    partition = job.partition
    if not lake.keys(OPMODEL, partition) >= set(opmodels.column("key").to_pylist()):
        lake.commit(OPMODEL, partition, opmodels, schema_version=OPMODEL_SCHEMA_VERSION)
    if accuracy.num_rows:
        lake.commit(ACCURACY, partition, accuracy, schema_version=ACCURACY_SCHEMA_VERSION)
    return CalibrationResult(report, calibration_id, rows, accuracy.to_pandas(), fit_s, measure_s)


def link_tier(fits: pd.DataFrame, placement: str) -> Optional[LinkTier]:
    """The link tier of ``placement`` from the lake's all-reduce α-β fits: the largest
    group's, and among its fits the one over the most sizes, then the tightest."""
    chosen = fits[(fits["placement"] == placement) & (fits["op"] == "all_reduce") & (fits["status"] == "ok")]
    if chosen.empty:
        return None
    best = chosen.sort_values(["world", "points", "max_rel_error"], ascending=[False, False, True], kind="stable").iloc[0]
    return LinkTier(bandwidth_GBps=float(best["busbw_GBps"]), latency_us=float(best["alpha_us"]), efficiency=1.0)


def load_calibration(lake: Lake, name: str) -> Calibration:
    """The newest fit of calibration ``name`` in ``lake``; ``UserError`` if there is none."""
    if OPMODEL not in lake.kinds():
        raise UserError(f"calibration={name}: the lake {lake} holds no operator models; "
                        f"run `commscale calibrate calibration={name}` first")
    table = lake.dataset(OPMODEL).to_table().to_pandas()
    mine = table[(table["calibration"] == name) & (table["status"] == "ok")]
    if mine.empty:
        raise UserError(f"calibration={name}: the lake {lake} holds no operator models of it; "
                        f"run `commscale calibrate calibration={name}` first")
    newest = newest_fit(mine).drop_duplicates("op_class")
    models, box = models_from_rows(newest)
    device_model = newest["device_model"].iloc[0]
    intra = inter = None
    if COLLECTIVE_FIT in lake.kinds():
        fits = lake.dataset(COLLECTIVE_FIT).to_table().to_pandas()
        fits = fits[fits["device_model"] == device_model]
        intra, inter = link_tier(fits, "pack"), link_tier(fits, "spread")
    return Calibration(measured_label(name, newest["calibration_id"].iloc[0]), models, box, intra, inter)
