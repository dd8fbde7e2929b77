"""The sweeps of ``commscale run`` and ``probe``, end to end: plan the job, run it, read its rows back.

- ``project``: a projection sweep (the cost model, spec or measured calibration);
- ``run_probe``: ``commscale probe``'s synthetic sweep, leaving no marker behind;
- ``measure_roi``: a ``mode: roi`` sweep (measure the region of interest, fit the
  collectives, set the measured overlap beside the spec model's).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

import pandas as pd

from sweeps.calibrate import load_calibration
from sweeps.config import RunConfig
from sweeps.jobs.job import SweepJob
from sweeps.jobs.probe import remove_markers
from sweeps.jobs.projection import Highlight, projection_job
from sweeps.jobs.roi import measured_overlap, record_fits, roi_configs, roi_job
from sweeps.lake import Lake
from sweeps.lake.kinds import ROI
from sweeps.lake.views import read_rows
from sweeps.run import RunReport, run_job
from tasks.fit.alpha_beta import AlphaBetaFit, collective_fits
from tasks.model.projection.grid import Calibration

__all__ = ["ProjectionSweep", "RoiSweep", "project", "run_probe", "measure_roi"]


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
