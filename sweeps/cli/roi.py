"""What a ROI sweep prints: the kernels it measured, the α-β fits of its collectives, and the
overlap percent its measurements give beside the spec model's."""

from __future__ import annotations

from typing import List

import pandas as pd
from rich.console import Console
from rich.table import Table

from tasks.fit.alpha_beta import AlphaBetaFit

__all__ = ["render_roi"]


def render_roi(console: Console, rows: pd.DataFrame, fits: List[AlphaBetaFit], overlap: pd.DataFrame) -> None:
    """Print the kernels, the collective fits and the measured overlap."""
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
    for column in ("H", "SL·B", "TP", "backward GEMMs ms", "all-reduce ms", "measured %",
                   *(c.replace("overlap_percent_", "") + " %" for c in spec)):
        table.add_column(column, justify="right")
    for r in overlap.itertuples(index=False):
        d = r._asdict()
        table.add_row(str(d["h"]), f"{d['slb']:,}", str(d["tp"]), f"{d['backward_gemms_ms']:.3f}",
                      f"{d['all_reduce_ms']:.3f}", f"{d['overlap_percent_measured']:.1f}",
                      *(f"{d[c]:.1f}" for c in spec))
    console.print(table)
