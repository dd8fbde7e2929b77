"""The region-of-interest job (``sweep=roi``, method.md §5.2): the backward GEMMs and the
weight-gradient collectives of the overlapped grid, measured on the cluster's devices;
the α-β fits of what it measured; and the overlap percent those measurements give.

Measurements are keyed by what they measure (``tasks.measure.roi.measurement_key``), so a
kernel measured once for any sweep is not measured again.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from sweeps.config import RoiSpec, RunConfig
from sweeps.jobs.job import SweepJob
from sweeps.jobs.work import CollectiveGroups, Resources, Workload, fingerprint_of, key_of
from sweeps.lake.kinds import COLLECTIVE_FIT, ROI
from tasks.device import is_cuda
from tasks.fit.alpha_beta import FIT_METHOD, FIT_SCHEMA, FIT_SCHEMA_VERSION, AlphaBetaFit
from tasks.measure.collectives import CollectiveContext
from tasks.measure.kernels import ROI_SCHEMA, SCHEMA_VERSION, KernelContext
from tasks.measure.roi import RoiContext, config_gemms, measure_roi_kernels, roi_points
from tasks.model.kernels import layer
from tasks.model.terms import metrics
from tasks.model.projection.grid import project_columns
from tasks.model.terms.specs import HardwareProfile

__all__ = ["roi_configs", "roi_job", "roi_workload", "fit_key", "record_fits", "measured_overlap"]


def roi_configs(config: RunConfig) -> List[Dict[str, int]]:
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
    and the weight-gradient collectives of the overlapped grid on the cluster's devices."""
    import torch

    roi = config.sweep.roi
    points = roi_points(roi_configs(config), passes=roi.passes, elementwise=roi.elementwise, dtype=roi.dtype,
                        device=roi.device, device_model_spec=roi.device_model, collective_ops=roi.collective_ops,
                        world=roi.world, placement=roi.placement, ladder_bytes=roi.ladder_bytes,
                        torch_version=torch.__version__, peak_tflops=config.hardware.peak_tflops)
    spec = {f"sweep.{k}": v for k, v in dataclasses.asdict(config.sweep).items()
            if k not in ("description", "scenarios")}  # scenarios do not change what is measured
    spec["sweep.links"], spec["sweep.mode"] = config.sweep.links.value, config.sweep.mode.value
    spec["model"] = config.model.name if config.model else None
    label = roi.device_model if roi.device_model != "auto" else roi.device
    return SweepJob(name=config.sweep.name, hardware=label.replace(" ", "_").replace("/", "_"), points=points,
                    workload=roi_workload(roi, config.hardware), config=spec, sweep_fingerprint=fingerprint_of(spec),
                    hardware_fingerprint=fingerprint_of([roi.device, roi.device_model, torch.__version__]),
                    share_results=True)


def roi_workload(roi: RoiSpec, hardware: HardwareProfile) -> Workload:
    """What measures ROI points (kind ``roi``): kernels as tasks, collectives among groups
    of ranks, on ``roi.device`` with the timing settings of ``roi``."""
    kernels = KernelContext(warmup=roi.warmup, min_repeats=roi.min_repeats, max_repeats=roi.max_repeats,
                            rel_spread=roi.rel_spread, time_cap_s=roi.time_cap_s, hardware=hardware)
    collectives = CollectiveContext(warmup=roi.warmup, repeats=roi.collective_repeats)
    backend = "nccl" if is_cuda(roi.device) else "gloo"
    context = RoiContext(kernels=kernels, collectives=collectives, backend=backend, device=roi.device)
    return Workload(kind=ROI, body=measure_roi_kernels, context=context, schema=ROI_SCHEMA,
                    schema_version=SCHEMA_VERSION, resources=Resources.for_device(roi.device),
                    point_timeout_s=roi.point_timeout_s,
                    collectives=CollectiveGroups(backend=backend, device=roi.device, context=collectives))


def fit_key(sweep: str, op: str, world: int, placement: str, measurement_keys: Sequence[str]) -> str:
    """The lake key of one α-β fit (kind ``collective_fit``): its sweep, the fitting method, the
    collective, the ranks, the placement and the keys of the measurements it was fitted to."""
    return key_of([sweep, FIT_METHOD, op, world, placement, sorted(measurement_keys)])


def record_fits(lake, job: SweepJob, rows: pd.DataFrame, fits: Sequence[AlphaBetaFit], placement: str) -> None:
    """Commit the α-β fits of a ROI sweep (kind ``collective_fit``). A fit's key is its
    sweep, the fitting method and the measurements it was fitted to, so an unchanged
    ladder adds nothing."""
    if not fits:
        return
    devices = ", ".join(sorted(set(rows["device_model"].dropna())))
    fit_rows = []
    for f in fits:
        used = rows[(rows["op"] == f.op) & (rows["world"] == f.world) & (rows["status"] == "ok")]
        fit_rows.append(dict(
            key=fit_key(job.name, f.op, f.world, placement, used["key"]), op=f.op,
            world=f.world, placement=placement, device_model=devices, alpha_us=f.alpha_s * 1e6,
            busbw_GBps=f.busbw_Bps / 1e9, max_rel_error=f.max_rel_error, judged_from_bytes=f.judged_from_bytes,
            points=len(used), status="ok"))
    lake.commit(COLLECTIVE_FIT, job.partition, pa.Table.from_pylist(fit_rows, schema=FIT_SCHEMA),
                schema_version=FIT_SCHEMA_VERSION)


def measured_overlap(rows: pd.DataFrame, configs: Sequence[Dict[str, int]], *, passes: Sequence[str], world: int,
                     dtype_bytes: int, hardware: HardwareProfile) -> pd.DataFrame:
    """Per configuration: measured backward GEMM time, measured weight-gradient all-reduce,
    the overlap percent they give, and the spec model's overlap percent for the same."""
    ok = rows[rows["status"] == "ok"]
    gemm_time = {(r.m, r.n, r.k, r.batch): r.median_s for r in ok[ok["op"] == "gemm"].itertuples()}
    reduce_time = {r.message_bytes: r.median_s
                   for r in ok[(ok["op"] == "all_reduce") & (ok["world"] == world)].itertuples()}
    out = []
    for c in configs:
        shapes = [(int(g.m), int(g.n), int(g.k), int(g.batch))
                  for g in config_gemms(c["h"], c["heads"], c["sl"], c["b"], c["tp"], passes)]
        backward = sum(gemm_time[s] for s in shapes) if all(s in gemm_time for s in shapes) else np.nan
        size = int(layer.dp_gradient_bytes(c["h"], c["tp"], dtype_bytes))
        all_reduce = reduce_time.get(size, np.nan)
        point = dict(h=c["h"], heads=c["heads"], sl=c["sl"], b=c["b"], tp=c["tp"], dp=world, dtype_bytes=dtype_bytes,
                     flop_vs_bw=1.0, dp_slowdown=1.0)
        spec = project_columns({k: np.array([float(v)]) for k, v in point.items()} | {"placed": np.zeros(1, bool)},
                               hardware)
        out.append({**c, "slb": c["sl"] * c["b"], "backward_gemms_ms": 1e3 * backward,
                    "all_reduce_ms": 1e3 * all_reduce,
                    "overlap_percent_measured": float(metrics.overlap_percent(all_reduce, backward)),
                    f"overlap_percent_spec_{hardware.name}": float(spec["overlap_percent"][0])})
    return pd.DataFrame(out)
