"""``commscale calibrate``: measure a layer on a device, fit operator models, judge them.

1. The baseline, its one-at-a-time variations and the held-out configurations of a
   calibration preset are measured as one Ray task on a device worker (one GPU, or a whole
   CPU node: measurements must not share a device), in interleaved rounds, so that a slow
   spell of the machine shows as a drift instead of slowing one configuration unseen; into
   kind ``baseline``. Measured keys are skipped on a re-run, as any sweep's (an interrupted
   calibration measures again from the start). The unstable ones are re-measured
   (``tasks.measure.stability``); one still unstable is a row of status ``unstable`` with
   the reason.
2. The baseline and variations are fitted (``tasks.fit.accuracy.fit_calibration``) into
   kind ``opmodel``, unstable ones included (their class times are the fastest of all
   their profiled steps; leaving them out would narrow the measured range).
3. The held-out configurations are projected and compared (kind ``accuracy``); unstable
   ones are stored with their status and reason, and not judged.

``calibrate_measured`` does steps 2 and 3 from measurements made elsewhere: the
``baseline.parquet`` that ``scripts/device_check.py`` writes on a GPU machine without Ray.

``load_calibration`` reads the newest fit of a calibration back, with the link tiers of
measured α-β fits of the same device where the lake has them, for ``commscale run
calibration=NAME``.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass
from typing import Optional

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from sweeps.config import CalibrationSpec
from sweeps.errors import ConfigError, UserError
from sweeps.lake import Lake
from sweeps.lake.kinds import ACCURACY, BASELINE, COLLECTIVE_FIT, OPMODEL
from sweeps.lake.views import read_rows
from sweeps.jobs.calibration import calibration_job
from sweeps.run import RunReport, run_job
from tasks.fit.accuracy import ACCURACY_SCHEMA_VERSION, OPMODEL_SCHEMA_VERSION, Judged, fit_and_judge, \
    models_from_rows, newest_fit, timed_rows
from tasks.measure.baseline import BASELINE_SCHEMA
from tasks.measure.baseline import SCHEMA_VERSION as BASELINE_SCHEMA_VERSION
from tasks.identity import content_hash
from tasks.model.projection.grid import Calibration
from tasks.model.terms.specs import LinkTier

__all__ = ["CalibrationResult", "calibrate", "calibrate_measured", "read_measured", "timed_rows", "load_calibration",
           "measured_label", "link_tier"]


def measured_label(name: str, calibration_id: str, intra: Optional[LinkTier] = None,
                   inter: Optional[LinkTier] = None) -> str:
    """The ``calibration`` column of a projection made with a measured calibration:
    ``measured:NAME@ID``, and ``+links:HASH`` (8 hex digits of the tiers' figures) where
    measured link tiers price its collectives. The label is part of every row's key and of
    the sweep's version, so a new fit of the compute or of the links makes new rows."""
    label = f"measured:{name}@{calibration_id}"
    if intra is None and inter is None:
        return label
    tiers = [dataclasses.asdict(t) if t is not None else None for t in (intra, inter)]
    return f"{label}+links:{content_hash(tiers, length=8)}"


@dataclass(frozen=True)
class CalibrationResult:
    """What a calibration run measured, fitted and judged."""

    report: Optional[RunReport]      # None for measurements read from a file (``calibrate_measured``)
    calibration_id: Optional[str]
    measured: pd.DataFrame           # every baseline row of the run, any status
    accuracy: Optional[pd.DataFrame]
    fit_s: float                     # wall time of the fits
    measure_s: float                 # wall time of the measurements (Ray start included)
    not_fitted: Optional[str] = None  # why no fit was made (calibration_id None)


def calibrate(spec: CalibrationSpec, lake: Lake, **run_options) -> CalibrationResult:
    """Measure, fit and judge ``spec`` into ``lake``; ``run_options`` go to ``run_job``."""
    job = calibration_job(spec)
    started = time.perf_counter()
    # One chunk: its configurations are measured together, round after round.
    report = run_job(job, lake, chunk_size=max(1, job.points.num_rows), **run_options)
    measure_s = time.perf_counter() - started
    rows = read_rows(lake, BASELINE, job.points, status=None)
    planned = int((job.points.column("role").to_numpy(zero_copy_only=False) != "held_out").sum())
    judged = fit_and_judge(spec.name, rows, planned=planned, judged_from_s=spec.judged_from_ms / 1e3)
    if judged.not_fitted:
        return CalibrationResult(report, None, rows, None, 0.0, measure_s, judged.not_fitted)
    _commit_fit(lake, job.partition, judged)
    return CalibrationResult(report, judged.calibration_id, rows, judged.accuracy.to_pandas(), judged.fit_s,
                             measure_s)


def _commit_fit(lake: Lake, partition, judged: Judged) -> None:
    """The operator models (once per fit) and the accuracy rows of a calibration fitted and judged."""
    if not lake.keys(OPMODEL, partition) >= set(judged.opmodels.column("key").to_pylist()):
        lake.commit(OPMODEL, partition, judged.opmodels, schema_version=OPMODEL_SCHEMA_VERSION)
    if judged.accuracy.num_rows:
        lake.commit(ACCURACY, partition, judged.accuracy, schema_version=ACCURACY_SCHEMA_VERSION)


def _configurations(table: pa.Table) -> set:
    return set(zip(*(table.column(c).to_pylist() for c in ("role", "h", "heads", "sl", "b", "tp"))))


def read_measured(spec: CalibrationSpec, path: str) -> pa.Table:
    """The ``baseline`` rows of calibration ``spec`` measured elsewhere (``scripts/device_check.py``
    writes them as ``baseline.parquet`` on a GPU machine without Ray): a Parquet file with every
    column of ``BASELINE_SCHEMA``, holding this calibration's configurations and no other.
    ``ConfigError`` naming ``--measured`` otherwise, before anything is written."""
    try:
        table = pq.read_table(path)
    except (OSError, ValueError, pa.ArrowException) as exc:
        raise ConfigError("--measured", path, f"cannot be read as Parquet ({exc})") from None
    missing = [name for name in BASELINE_SCHEMA.names if name not in table.column_names]
    if missing:
        raise ConfigError("--measured", path, f"lacks the baseline column(s) {', '.join(missing[:5])}: write it "
                                              "with scripts/device_check.py")
    table = table.select(BASELINE_SCHEMA.names).cast(BASELINE_SCHEMA)
    names = sorted(set(table.column("calibration").to_pylist()))
    if names != [spec.name]:
        raise ConfigError("--measured", path, f"holds the measurements of calibration {', '.join(map(str, names))}, "
                                              f"not of calibration={spec.name}")
    wanted = _configurations(calibration_job(spec).points)
    if _configurations(table) != wanted:
        raise ConfigError("--measured", path, f"measures other configurations than calibration {spec.name}'s "
                                              f"{len(wanted)} (its preset changed since, or another file)")
    return table


def calibrate_measured(spec: CalibrationSpec, lake: Lake, table: pa.Table) -> CalibrationResult:
    """Fit and judge ``spec`` from its measurements made elsewhere (``read_measured``'s
    ``table``) into ``lake``: the ``baseline`` rows as they were measured (their keys name the
    machine's settings), then the fit and its judgement as ``calibrate`` commits them."""
    job = calibration_job(spec)
    lake.commit(BASELINE, job.partition, table, schema_version=BASELINE_SCHEMA_VERSION)
    rows = table.to_pandas()
    planned = int((rows["role"] != "held_out").sum())
    judged = fit_and_judge(spec.name, rows, planned=planned, judged_from_s=spec.judged_from_ms / 1e3)
    if judged.not_fitted:
        return CalibrationResult(None, None, rows, None, 0.0, 0.0, judged.not_fitted)
    _commit_fit(lake, job.partition, judged)
    return CalibrationResult(None, judged.calibration_id, rows, judged.accuracy.to_pandas(), judged.fit_s, 0.0)


def link_tier(fits: pd.DataFrame, placement: str) -> Optional[LinkTier]:
    """The link tier of ``placement`` from the lake's all-reduce α-β fits: the largest
    group's, and among its fits the one over the most sizes, then the tightest."""
    chosen = fits[(fits["placement"] == placement) & (fits["op"] == "all_reduce") & (fits["status"] == "ok")]
    if chosen.empty:
        return None
    best = chosen.sort_values(["world", "points", "max_rel_error"], ascending=[False, False, True],
                              kind="stable").iloc[0]
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
    return Calibration(measured_label(name, newest["calibration_id"].iloc[0], intra, inter), models, box, intra, inter)
