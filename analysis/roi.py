"""What a region-of-interest sweep measured: kernel rates, α-β fits of the collectives,
and the overlap percent of method.md §6 from measurements beside the spec prediction."""

from __future__ import annotations

from typing import Dict, List, Sequence

import numpy as np
import pandas as pd

from tasks.fit.alpha_beta import AlphaBetaFit
from tasks.measure.roi import config_gemms
from tasks.model import layer, metrics
from tasks.model.projection import project_columns
from tasks.model.specs import HardwareProfile

__all__ = ["measured_overlap", "render_roi"]


def measured_overlap(rows: pd.DataFrame, configs: Sequence[Dict[str, int]], *, passes: Sequence[str], world: int,
                     dtype_bytes: int, hardware: HardwareProfile) -> pd.DataFrame:
    """Per configuration: measured backward GEMM time, measured weight-gradient all-reduce,
    the overlap percent they give, and the spec model's overlap percent for the same."""
    ok = rows[rows["status"] == "ok"]
    gemm_time = {(r.m, r.n, r.k, r.batch): r.median_s for r in ok[ok["op"] == "gemm"].itertuples()}
    reduce_time = {r.message_bytes: r.median_s for r in ok[(ok["op"] == "all_reduce") & (ok["world"] == world)].itertuples()}
    out = []
    for c in configs:
        shapes = [(int(g.m), int(g.n), int(g.k), int(g.batch)) for g in config_gemms(c["h"], c["heads"], c["sl"], c["b"], c["tp"], passes)]
        backward = sum(gemm_time[s] for s in shapes) if all(s in gemm_time for s in shapes) else np.nan
        size = int(layer.dp_gradient_bytes(c["h"], c["tp"], dtype_bytes))
        all_reduce = reduce_time.get(size, np.nan)
        point = dict(h=c["h"], heads=c["heads"], sl=c["sl"], b=c["b"], tp=c["tp"], dp=world, dtype_bytes=dtype_bytes,
                     flop_vs_bw=1.0, dp_slowdown=1.0)
        spec = project_columns({k: np.array([float(v)]) for k, v in point.items()} | {"placed": np.zeros(1, bool)},
                               hardware)
        out.append({**c, "slb": c["sl"] * c["b"], "backward_gemms_ms": 1e3 * backward, "all_reduce_ms": 1e3 * all_reduce,
                    "overlap_percent_measured": float(metrics.overlap_percent(all_reduce, backward)),
                    f"overlap_percent_spec_{hardware.name}": float(spec["overlap_percent"][0])})
    return pd.DataFrame(out)


def render_roi(console, rows: pd.DataFrame, fits: List[AlphaBetaFit], overlap: pd.DataFrame) -> None:
    """Print the kernels, the collective fits and the measured overlap."""
    from rich.table import Table

    kernels = rows[rows["op"] != "all_reduce"].sort_values("flops", ascending=False)
    table = Table(title="Kernels measured (median, p10-p90; achieved TFLOP/s)", title_justify="left")
    for column in ("kernel", "shape (m x n x k, batch)", "dtype", "median ms", "p10-p90 ms", "TFLOP/s", "status"):
        table.add_column(column, justify="left" if column in ("kernel", "status", "dtype") else "right")
    for r in kernels.head(12).itertuples():
        ok = r.status == "ok"
        table.add_row(r.name, f"{r.m} x {r.n} x {r.k}, {r.batch}", r.dtype,
                      f"{1e3 * r.median_s:.3f}" if ok else "", f"{1e3 * r.p10_s:.3f}-{1e3 * r.p90_s:.3f}" if ok else "",
                      f"{r.achieved_tflops:.3f}" if ok and r.achieved_tflops == r.achieved_tflops else "",
                      r.status if ok else f"{r.status}: {r.reason}")
    if len(kernels) > 12:
        table.caption = f"{len(kernels) - 12} more kernels: commscale query \"SELECT * FROM roi WHERE op = 'gemm'\""
    console.print(table)
    table = Table(title="Collectives: α-β fit of t = steps·α + factor·bytes / busbw (minimax, messages >= 1 MiB)",
                  title_justify="left")
    for column in ("op", "ranks", "α µs", "busbw GB/s", "worst error, messages >= 1 MiB"):
        table.add_column(column, justify="right")
    for fit in fits:
        table.add_row(fit.op, str(fit.world), f"{fit.alpha_s * 1e6:.1f}", f"{fit.busbw_Bps / 1e9:.2f}",
                      f"{100 * fit.max_rel_error:.1f}%")
    console.print(table)
    spec = [c for c in overlap.columns if c.startswith("overlap_percent_spec_")]
    table = Table(title="Overlap from the ROI: weight-gradient all-reduce as % of the backward GEMMs",
                  title_justify="left")
    for column in ("H", "SL·B", "TP", "backward GEMMs ms", "all-reduce ms", "measured %", *(c.replace("overlap_percent_", "") + " %" for c in spec)):
        table.add_column(column, justify="right")
    for r in overlap.itertuples(index=False):
        d = r._asdict()
        table.add_row(str(d["h"]), f"{d['slb']:,}", str(d["tp"]), f"{d['backward_gemms_ms']:.3f}", f"{d['all_reduce_ms']:.3f}",
                      f"{d['overlap_percent_measured']:.1f}", *(f"{d[c]:.1f}" for c in spec))
    console.print(table)
