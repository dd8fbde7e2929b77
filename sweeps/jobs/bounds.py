"""A job's size before it is planned: how many points it would plan and how much driver
memory they would take, checked against ``sweeps.config.bounds`` (``check_points``).

The count comes from the lengths of the grid's lists, without building the grid. The
memory per point is the Arrow table of a small grid of the same job, planned for real,
times the peak the planning reaches above its table (``PLAN_PEAK``): the keys are Python
strings before Arrow holds them, and a probe's or ROI sweep's points are Python dicts.
"""

from __future__ import annotations

from typing import Optional

from sweeps.config import RunConfig, SweepMode
from sweeps.config.bounds import check_points
from sweeps.jobs.projection import plan_points, planned_count, sample_config

__all__ = ["PLAN_PEAK", "projection_bytes_per_point", "check_sweep_size", "check_probe_size"]

#: Peak driver memory while a job plans and runs, over its point table's Arrow bytes.
#: Measured on 2 x 10^6 points: a projection's table holds 121 bytes a point and planning
#: peaks 299 bytes a point above the start; a probe's, 56 and 449.
PLAN_PEAK = {"projection": 3.0, "probe": 8.0, "roi": 8.0}
#: Points of the probe job planned to size one probe point.
_PROBE_SAMPLE = 1000


def projection_bytes_per_point(config: RunConfig) -> float:
    """Driver bytes per point of ``config``'s projection sweep (``PLAN_PEAK``)."""
    points = plan_points(sample_config(config)).points
    return PLAN_PEAK["projection"] * points.nbytes / points.num_rows


def _roi_size(config: RunConfig) -> tuple:
    """(about how many points, driver bytes per point) of a ``mode: roi`` sweep: its
    configurations (h x sl x b at ``overlap_tp``) times the points a small sample plans
    per configuration (its kernels and collectives, an upper bound as points repeat)."""
    from sweeps.jobs.roi import roi_configs, roi_job

    sweep = config.sweep
    configs = (1 if config.model is not None else len(sweep.h)) * len(sweep.sl) * len(sweep.b)
    sample = sample_config(config)
    points = roi_job(sample).points
    per_config = points.num_rows / len(roi_configs(sample))
    return int(configs * per_config), PLAN_PEAK["roi"] * points.nbytes / points.num_rows


def check_sweep_size(config: RunConfig, *, allow_large: bool, available: Optional[int] = None) -> None:
    """Refuse (``UserError``) a sweep beyond ``MAX_POINTS`` or the machine's memory
    (``available`` bytes, default what it has now) before anything is planned, unless
    ``allow_large``."""
    if allow_large:
        return
    if config.sweep.mode == SweepMode.roi:
        count, per_point = _roi_size(config)
    else:
        count, per_point = planned_count(config), projection_bytes_per_point(config)
    check_points(f"sweep {config.sweep.name}", count, per_point, allow_large=False, available=available)


def check_probe_size(points: int, *, allow_large: bool, available: Optional[int] = None) -> None:
    """Refuse (``UserError``) a probe of more ``points`` than the bounds allow, unless
    ``allow_large``."""
    if allow_large:
        return
    from sweeps.jobs.probe import probe_job

    sample = probe_job(name="probe", points=_PROBE_SAMPLE, sleep_s=0.0, fail={}, resources={},
                       marker_dir="unused").points
    check_points(f"probe of {points:,} points", points, PLAN_PEAK["probe"] * sample.nbytes / sample.num_rows,
                 allow_large=False, available=available)
