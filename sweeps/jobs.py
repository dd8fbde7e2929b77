"""Turn a config into a ``SweepJob``: the projection of a grid, or a probe of a cluster."""

from __future__ import annotations

import dataclasses
import tempfile
from typing import Dict, Mapping, Optional, Tuple

import pyarrow as pa

from sweeps.config import RoiSpec, RunConfig
from sweeps.dispatch import Workload
from sweeps.errors import ConfigError
from sweeps.lake.kinds import COLLECTIVE_FIT, PROBE, PROJECTION, ROI
from sweeps.plan import Plan, plan_points
from sweeps.run import SweepJob
from tasks.identity import content_hash
from tasks.measure import probe
from tasks.model import projection
from tasks.model.specs import HardwareProfile, fingerprint

__all__ = ["projection_job", "probe_job", "roi_job", "roi_workload", "roi_configs", "record_fits"]


def projection_job(config: RunConfig, *, point_timeout_s: float = 300.0,
                   calibration: Optional[projection.Calibration] = None) -> Tuple[SweepJob, Plan]:
    """The job of ``commscale run``: the sweep's points projected on its hardware, with
    the spec roofline or a measured ``calibration`` (its own partition of the lake)."""
    plan = plan_points(config, calibration.name if calibration else None)
    sweep = {f"sweep.{k}": v for k, v in dataclasses.asdict(config.sweep).items()
             if k not in ("description", "mode", "roi")}
    sweep["sweep.links"] = config.sweep.links.value
    # Only a sweep that lists scenarios names them, so older sweeps keep their fingerprint.
    scenarios = sweep.pop("sweep.scenarios", [])
    if scenarios:
        sweep["sweep.scenarios"] = [{"links": s["links"].value, "dp_slowdown": s["dp_slowdown"]} for s in scenarios]
    sweep["model"] = dataclasses.asdict(config.model) if config.model else None
    sweep["cost_model"] = projection.COST_MODEL_VERSION
    sweep["calibration"] = calibration.name if calibration else None
    workload = Workload(kind=PROJECTION, body=projection.project_with,
                        context=projection.ProjectionContext(config.hardware, calibration),
                        schema=projection.PROJECTION_SCHEMA, schema_version=projection.SCHEMA_VERSION,
                        resources={"num_cpus": 1}, point_timeout_s=point_timeout_s)
    hardware = config.hardware.name + (f".{config.calibration.name}" if calibration and config.calibration else "")
    job = SweepJob(name=config.sweep.name, hardware=hardware, points=plan.points, workload=workload,
                   config=sweep, sweep_fingerprint=content_hash(sweep),
                   hardware_fingerprint=fingerprint(config.hardware))
    return job, plan


def probe_job(*, name: str, points: int, sleep_s: float, fail: Mapping[str, int], resources: Dict[str, float],
              cpus_per_point: float = 1.0, point_timeout_s: float = 60.0, marker_dir: Optional[str] = None) -> SweepJob:
    """Synthetic points (``tasks.measure.probe``): ``points`` of them sleep ``sleep_s``; the first
    ones fail on purpose, ``fail[mode]`` points per mode. Each task asks for
    ``cpus_per_point`` CPUs and ``resources`` (custom Ray resources standing in for GPUs)."""
    if points <= 0:
        raise ConfigError("points", points, "must be positive")
    if sleep_s < 0:
        raise ConfigError("sleep_ms", sleep_s * 1000, "must not be negative")
    for mode, count in fail.items():
        if mode not in probe.FAIL_MODES or not mode:
            raise ConfigError("fail", mode, f"unknown mode; choose from {', '.join(m for m in probe.FAIL_MODES if m)}")
        if count < 0:
            raise ConfigError("fail", f"{mode}:{count}", "count must not be negative")
    if sum(fail.values()) > points:
        raise ConfigError("fail", dict(fail), f"asks for more failing points than the {points} points")
    modes = [mode for mode, count in sorted(fail.items()) for _ in range(count)]
    modes += [""] * (points - len(modes))
    config = {"points": points, "sleep_s": sleep_s, "fail": dict(sorted(fail.items()))}
    fp = content_hash(config)
    rows = [{"key": content_hash(["probe", name, fp, i], length=32), "index": i, "sleep_s": sleep_s,
             "fail": mode} for i, mode in enumerate(modes)]
    options: Dict[str, object] = {"num_cpus": cpus_per_point}
    if resources:
        options["resources"] = dict(resources)
    context = probe.ProbeContext(marker_dir or tempfile.mkdtemp(prefix="commscale-probe-"))
    workload = Workload(kind=PROBE, body=probe.probe_table, context=context, schema=probe.PROBE_SCHEMA,
                        schema_version=probe.SCHEMA_VERSION, resources=options, point_timeout_s=point_timeout_s)
    label = "+".join(sorted(resources)) or "cpu"
    return SweepJob(name=name, hardware=label, points=pa.Table.from_pylist(rows, schema=probe.PROBE_POINT_SCHEMA),
                    workload=workload, config=config, sweep_fingerprint=fp, hardware_fingerprint=content_hash(resources))


def roi_configs(config: RunConfig):
    """The overlapped grid: every (h, sl, b) of the sweep at TP = ``overlap_tp``."""
    sweep = config.sweep
    if config.model is not None:
        layers = [(config.model.hidden, config.model.heads)]
    else:
        layers = [(h, h // sweep.head_dim) for h in sweep.h]
    return [dict(h=h, heads=heads, sl=sl, b=b, tp=sweep.overlap_tp)
            for (h, heads) in layers for sl in sweep.sl for b in sweep.b]


def roi_job(config: RunConfig) -> SweepJob:
    """The job of ``commscale run`` for a ``mode: roi`` sweep: measure the backward GEMMs
    and the weight-gradient collectives of the overlapped grid on the cluster's devices.
    Measurements are keyed by what they measure, so they are shared between sweeps."""
    import torch

    from sweeps.dispatch import execute_roi
    from tasks.measure.roi import roi_points

    roi = config.sweep.roi
    points = roi_points(roi_configs(config), passes=roi.passes, elementwise=roi.elementwise, dtype=roi.dtype,
                        device=roi.device, device_model_spec=roi.device_model, collective_ops=roi.collective_ops,
                        world=roi.world, placement=roi.placement, ladder_bytes=roi.ladder_bytes,
                        torch_version=torch.__version__)
    workload = roi_workload(roi, config.hardware)
    spec = {f"sweep.{k}": v for k, v in dataclasses.asdict(config.sweep).items()
            if k not in ("description", "scenarios")}  # scenarios do not change what is measured
    spec["sweep.links"], spec["sweep.mode"] = config.sweep.links.value, config.sweep.mode.value
    spec["model"] = config.model.name if config.model else None
    label = roi.device_model if roi.device_model != "auto" else roi.device
    return SweepJob(name=config.sweep.name, hardware=label.replace(" ", "_").replace("/", "_"), points=points,
                    workload=workload, config=spec, sweep_fingerprint=content_hash(spec),
                    hardware_fingerprint=content_hash([roi.device, roi.device_model, torch.__version__]),
                    share_results=True, executor=execute_roi)


def roi_workload(roi: RoiSpec, hardware: HardwareProfile) -> Workload:
    """What measures ROI points (kind ``roi``): kernels as tasks, collectives as groups, on
    ``roi.device`` with the timing settings of ``roi``."""
    from tasks.measure.collectives import CollectiveContext
    from tasks.measure.kernels import ROI_SCHEMA, SCHEMA_VERSION, KernelContext
    from tasks.measure.roi import RoiContext, measure_roi_kernels

    context = RoiContext(
        kernels=KernelContext(warmup=roi.warmup, min_repeats=roi.min_repeats, max_repeats=roi.max_repeats,
                              rel_spread=roi.rel_spread, time_cap_s=roi.time_cap_s, hardware=hardware),
        collectives=CollectiveContext(warmup=roi.warmup, repeats=roi.collective_repeats),
        backend="nccl" if roi.device.startswith("cuda") else "gloo", device=roi.device)
    resources = {"num_cpus": 1, "num_gpus": 1} if roi.device.startswith("cuda") else {"num_cpus": 1}
    return Workload(kind=ROI, body=measure_roi_kernels, context=context, schema=ROI_SCHEMA,
                    schema_version=SCHEMA_VERSION, resources=resources, point_timeout_s=roi.point_timeout_s)


def record_fits(lake, job: SweepJob, rows, fits, placement: str) -> None:
    """Commit the α-β fits of a ROI sweep (kind ``collective_fit``). A fit's key is its
    sweep, the fitting method and the measurements it was fitted to, so an unchanged
    ladder adds nothing."""
    from tasks.fit.alpha_beta import FIT_METHOD, FIT_SCHEMA, FIT_SCHEMA_VERSION

    if not fits:
        return
    devices = ", ".join(sorted(set(rows["device_model"].dropna())))
    fit_rows = []
    for f in fits:
        used = rows[(rows["op"] == f.op) & (rows["world"] == f.world) & (rows["status"] == "ok")]
        fit_rows.append(dict(
            key=content_hash([job.name, FIT_METHOD, f.op, f.world, placement, sorted(used["key"])], length=32), op=f.op,
            world=f.world, placement=placement, device_model=devices, alpha_us=f.alpha_s * 1e6,
            busbw_GBps=f.busbw_Bps / 1e9, max_rel_error=f.max_rel_error, judged_from_bytes=f.judged_from_bytes,
            points=len(used), status="ok"))
    lake.commit(COLLECTIVE_FIT, job.partition, pa.Table.from_pylist(fit_rows, schema=FIT_SCHEMA),
                schema_version=FIT_SCHEMA_VERSION)
