"""Measure a search's winners (``commscale search --measure N``): each top layout's layer
GEMMs and collectives, with the ROI microbenchmarks on the cluster's workers, set beside
the projection.

For each layout, per layer and micro-batch:

- **GEMMs**: the forward, input-gradient and weight-gradient GEMMs of one device's layer
  share (the layout's H, heads, SL, micro-batch B and TP), measured one by one and summed.
- **TP and DP communication**: the layer's collectives (``step.parts.layer_collectives``) at
  their exact message sizes, measured among ``world`` ranks (what the cluster can form: 2 on
  a laptop), fitted α-β per op (``tasks.fit.alpha_beta.collective_fits``) and scaled to the layout's
  group size with the ring formula of the fit (``AlphaBetaFit.predict``).

The projection is the spec step model on the search's hardware profile; the measurement is
whatever devices the workers have (a CPU laptop measuring an H100 layout is far slower: the
ratio says how far, not that the model is wrong). Points are ``roi`` rows keyed by what they
measure, so a second run measures nothing. Times are in seconds, sizes in bytes.
"""

from __future__ import annotations

import dataclasses
from typing import Dict, List, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from sweeps.config import RoiSpec, SearchSetup
from sweeps.errors import ConfigError
from sweeps.jobs.job import SweepJob
from sweeps.jobs.roi import roi_workload
from sweeps.jobs.work import fingerprint_of
from tasks.device import DTYPE_BYTES, check_device
from tasks.fit.alpha_beta import collective_fits
from tasks.measure.roi import config_gemms, roi_point, roi_points
from tasks.model.terms.layout import Layout
from tasks.model.step.parts import layer_collectives, layer_parts

__all__ = ["MEASURED_PASSES", "LADDER_BYTES", "check_measure_options", "winner_points", "winner_job", "compare"]

#: The GEMM passes measured per layer: forward, input gradient, weight gradient.
MEASURED_PASSES = ("fwd", "ig", "wg")
#: Message sizes measured beside the exact ones, so that every op has an α-β fit.
LADDER_BYTES = (1 << 16, 1 << 20, 1 << 22)


def check_measure_options(n: int, device: str, dtype: str, world: int) -> None:
    """Refuse bad ``--measure`` options before any work (``ConfigError``: exit status 2)."""
    if n < 1:
        raise ConfigError("--measure", n, "the number of layouts to measure must be at least 1")
    if not check_device(device):
        raise ConfigError("--measure-device", device, "use cpu or cuda")
    if dtype not in DTYPE_BYTES:
        raise ConfigError("--measure-dtype", dtype, f"choose one of {', '.join(DTYPE_BYTES)}")
    if world < 2:
        raise ConfigError("--measure-world", world, "a collective needs at least 2 ranks")


def _config(setup: SearchSetup, layout: Layout) -> Dict[str, int]:
    model = setup.model
    return dict(h=model.hidden, heads=model.heads, sl=model.seq_len, b=layout.micro_batch, tp=layout.tp)


def winner_points(setup: SearchSetup, layouts: Sequence[Layout], *, device: str, dtype: str, world: int,
                  torch_version: str) -> pa.Table:
    """ROI points of ``layouts``: their layer GEMMs in ``dtype``, and each collective op they
    use at its exact message size (bytes as the search counts them) and at ``LADDER_BYTES``,
    among ``world`` ranks; deduplicated by key."""
    kernels = roi_points([_config(setup, layout) for layout in layouts], passes=MEASURED_PASSES, elementwise=False,
                         dtype=dtype, device=device, device_model_spec="auto", collective_ops=(), world=world,
                         placement="pack", ladder_bytes=(), torch_version=torch_version,
                         peak_tflops=setup.hardware.peak_tflops)
    sizes: Dict[str, set] = {}
    for layout in layouts:
        for c in layer_collectives(layout, setup.step_context):
            sizes.setdefault(c.op, set(LADDER_BYTES)).add(int(c.message_bytes))
    points = {row["key"]: row for row in kernels.to_pylist()}
    for op, op_sizes in sorted(sizes.items()):
        for size in sorted(op_sizes):
            point = roi_point(dtype=dtype, device=device, device_model_spec="auto", torch_version=torch_version,
                              op=op, name=f"{op}.measure", world=world, message_bytes=size, placement="pack")
            points.setdefault(point["key"], point)
    return pa.Table.from_pylist(list(points.values()), schema=kernels.schema)


def winner_job(setup: SearchSetup, points: pa.Table, *, device: str, dtype: str, world: int) -> SweepJob:
    """The ROI job measuring ``points`` on the cluster's workers (kind ``roi``, shared keys)."""
    import torch

    ops = sorted({op for op in points.column("op").to_pylist() if op != "gemm"})
    roi = RoiSpec(device=device, dtype=dtype, passes=list(MEASURED_PASSES), collective_ops=ops or ["all_reduce"],
                  world=world, ladder_bytes=list(LADDER_BYTES), max_repeats=20, time_cap_s=2.0)
    settings = {"measure.device": device, "measure.dtype": dtype, "measure.world": world,
                "measure.timing": [roi.warmup, roi.min_repeats, roi.max_repeats, roi.time_cap_s,
                                   roi.collective_repeats]}
    return SweepJob(name=f"measure-{setup.study_name}", hardware=device.replace(":", "_"), points=points,
                    workload=roi_workload(roi, setup.hardware), config=settings,
                    sweep_fingerprint=fingerprint_of(settings),
                    hardware_fingerprint=fingerprint_of([device, "auto", torch.__version__]), share_results=True)


def compare(setup: SearchSetup, layouts: Sequence[Layout], rows: pd.DataFrame) -> pd.DataFrame:
    """Per layout and layer (one micro-batch): projected and measured GEMM, TP and DP
    communication time in seconds, from the measured ``roi`` rows (status ok)."""
    ok = rows[rows["status"] == "ok"]
    gemm = {(r.m, r.n, r.k, r.batch): r.median_s for r in ok[ok["op"] == "gemm"].itertuples()}
    fits = {f.op: f for f in collective_fits(ok)}
    ctx = setup.step_context
    out: List[Dict[str, object]] = []
    for layout in layouts:
        c = _config(setup, layout)
        shapes = [(int(g.m), int(g.n), int(g.k), int(g.batch))
                  for g in config_gemms(c["h"], c["heads"], c["sl"], c["b"], c["tp"], MEASURED_PASSES)]
        measured = {"gemm_s": sum(gemm[s] for s in shapes) if all(s in gemm for s in shapes) else np.nan,
                    "tp_comm_s": 0.0, "dp_comm_s": 0.0}
        for coll in layer_collectives(layout, ctx):
            fit = fits.get(coll.op)
            scaled = dataclasses.replace(fit, world=coll.ranks).predict(coll.message_bytes) if fit else np.nan
            measured[f"{coll.group}_comm_s"] += coll.count * float(scaled)
        projected = layer_parts(layout, ctx)
        out.append({"layout": layout.describe(), **{f"projected_{k}": v for k, v in projected.items()},
                    **{f"measured_{k}": v for k, v in measured.items()}})
    return pd.DataFrame(out)
