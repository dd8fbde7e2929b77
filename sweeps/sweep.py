"""The workflows of the commands, end to end: plan the job, run it, read its rows back (the
command line only parses and renders).

- ``project``: a projection sweep (the cost model, spec or measured calibration);
- ``run_probe``: ``commscale probe``'s synthetic sweep, leaving no marker behind;
- ``measure_roi``: a ``mode: roi`` sweep (measure the region of interest, fit the
  collectives, set the measured overlap beside the spec model's);
- ``run_scaling``: ``commscale search --scaling``, the best layout per model and device count;
- ``run_limits``: ``commscale limits``, utilisation against training compute per scenario;
- ``measure_winners``: ``commscale search --measure``, the top layouts' kernels and
  collectives measured beside their projection;
- ``validate``: ``commscale validate``, every published measurement predicted and its records
  committed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

import pandas as pd

from sweeps.calibrate import load_calibration
from sweeps.config import RunConfig
from sweeps.jobs.job import SweepJob
from sweeps.jobs.probe import remove_markers
from sweeps.jobs.projection import Highlight, projection_job
from sweeps.jobs.roi import measured_overlap, record_fits, roi_configs, roi_job
from sweeps.lake import Lake
from sweeps.lake.kinds import LIMITS, ROI, SCALING
from sweeps.lake.views import read_rows
from sweeps.run import RunReport, run_job
from tasks.fit.alpha_beta import AlphaBetaFit, collective_fits
from tasks.model.projection.grid import Calibration

if TYPE_CHECKING:
    from sweeps.config import SearchSetup
    from sweeps.config.scale_limits import LimitsSetup
    from sweeps.jobs.validation import ValidationResult
    from tasks.model.terms.layout import Layout

__all__ = ["ProjectionSweep", "RoiSweep", "PointsRun", "WinnersRun", "ValidationRun", "project", "run_probe",
           "measure_roi", "run_scaling", "run_limits", "measure_winners", "validate"]


@dataclass(frozen=True)
class ProjectionSweep:
    """A projection sweep run: its partition of the lake, the highlighted models, what the
    run did, and the calibration it projected with (None: the spec roofline). Its points
    and rows are not kept: summaries read the rows in the lake (``analysis.summary``), so
    a run holds no grid in memory once it is done."""

    partition: Dict[str, str]
    highlights: Tuple[Highlight, ...]
    report: RunReport
    calibration: Optional[Calibration]
    version: str  # the sweep version its config is (``sweeps.lake.versions``)


@dataclass(frozen=True)
class RoiSweep:
    """A ROI sweep run: its job, what the run did, its rows (any status), the α-β fits of
    its collectives and the measured overlap per configuration."""

    job: SweepJob
    report: RunReport
    rows: pd.DataFrame
    fits: List[AlphaBetaFit]
    overlap: pd.DataFrame


def project(config: RunConfig, lake: Lake, **run_options: Any) -> ProjectionSweep:
    """Project ``config``'s sweep into ``lake`` (``run_options`` go to ``run_job``)."""
    calibration = load_calibration(lake, config.calibration.name) if config.calibration is not None else None
    job, plan = projection_job(config, calibration=calibration)
    report = run_job(job, lake, **run_options)
    report.job = None  # the points go; the report keeps its counts
    return ProjectionSweep(job.partition, plan.highlights, report, calibration, job.version)


def run_probe(job: SweepJob, lake: Lake, **run_options: Any) -> RunReport:
    """Run a probe ``job`` (``sweeps.jobs.probe``) into ``lake`` (``run_options`` go to
    ``run_job``); its folder of markers goes when the run ends, however it ends."""
    try:
        return run_job(job, lake, **run_options)
    finally:
        remove_markers(job)


def measure_roi(config: RunConfig, lake: Lake, **run_options: Any) -> RoiSweep:
    """Measure ``config``'s region of interest into ``lake``, commit the collective fits."""
    job = roi_job(config)
    report = run_job(job, lake, **run_options)
    roi = config.sweep.roi
    rows = read_rows(lake, ROI, job.points, status=None)
    fits = collective_fits(rows)
    record_fits(lake, job, rows, fits, roi.placement)
    overlap = measured_overlap(rows, roi_configs(config), passes=roi.passes, world=roi.world,
                               dtype_bytes=config.sweep.dtype_bytes, hardware=config.hardware)
    return RoiSweep(job, report, rows, fits, overlap)


@dataclass(frozen=True)
class PointsRun:
    """A sweep of analytic points run and read back (``run_scaling``, ``run_limits``): what the
    run did and its rows (every status), in the order the sweep reads them."""

    report: RunReport
    rows: pd.DataFrame


def _run_points(job: SweepJob, lake: Lake, kind: str, order: List[str], run_options: Dict[str, Any]) -> PointsRun:
    """Run ``job`` one point a task into ``lake`` and read its rows of ``kind`` back, sorted by ``order``."""
    report = run_job(job, lake, chunk_size=1, **run_options)
    return PointsRun(report, read_rows(lake, kind, job.points, status=None).sort_values(order))


def run_scaling(setup: "SearchSetup", lake: Lake, **run_options: Any) -> PointsRun:
    """The scaling sweep of ``setup``'s preset into ``lake`` (``sweeps.jobs.scaling``), by model
    and device count."""
    from sweeps.jobs.scaling import scaling_job

    return _run_points(scaling_job(setup), lake, SCALING, ["model", "devices"], run_options)


def run_limits(setup: "LimitsSetup", lake: Lake, **run_options: Any) -> PointsRun:
    """The ``limits`` points of ``setup``'s preset into ``lake`` (``sweeps.jobs.scale_limits``),
    by scenario and training FLOP."""
    from sweeps.jobs.scale_limits import limits_job

    return _run_points(limits_job(setup), lake, LIMITS, ["scenario", "flop_target"], run_options)


@dataclass(frozen=True)
class WinnersRun:
    """``measure_winners``' result: the layouts measured, what the run did, its ROI rows
    (every status) and each layout's measured pieces beside the projected ones."""

    layouts: List["Layout"]
    report: RunReport
    rows: pd.DataFrame
    comparison: pd.DataFrame


def measure_winners(setup: "SearchSetup", lake: Lake, top: pd.DataFrame, *, device: str, dtype: str, world: int,
                    **run_options: Any) -> Optional[WinnersRun]:
    """Measure the layer GEMMs and collectives of ``top``'s layouts (``sweeps.jobs.winners``)
    into ``lake``; None when ``top`` holds no layout."""
    import torch

    from sweeps.jobs.winners import compare, winner_job, winner_points
    from sweeps.search.results import layout_of

    layouts = [layout_of(row) for _, row in top.iterrows()]
    if not layouts:
        return None
    points = winner_points(setup, layouts, device=device, dtype=dtype, world=world, torch_version=torch.__version__)
    job = winner_job(setup, points, device=device, dtype=dtype, world=world)
    report = run_job(job, lake, **run_options)
    rows = read_rows(lake, ROI, points, status=None)
    return WinnersRun(layouts, report, rows, compare(setup, layouts, rows))


@dataclass(frozen=True)
class ValidationRun:
    """``validate``'s result: the records (``result``) and the commit (None: nothing committed,
    or ``commit`` was off)."""

    result: "ValidationResult"
    committed: Optional[Any]


def validate(lake: Lake, *, datasets: Tuple[str, ...], runs_file: Optional[Path], commit: bool) -> ValidationRun:
    """Predict every published measurement of ``datasets`` (``runs_file`` in place of the
    shipped runs) and, if ``commit``, commit the records to ``lake``; a lake that exists but
    cannot be read is refused before any work."""
    from sweeps.jobs.validation import commit_validation, load_profiles, run_validation

    if commit and lake.exists():
        lake.ensure_readable()
    result = run_validation(load_profiles(), datasets=datasets, runs_file=runs_file)
    return ValidationRun(result, commit_validation(lake, result) if commit else None)
