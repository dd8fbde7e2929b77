"""The summary a person reads after a run: per hardware scenario (flop-vs-bw m), the
serialized fraction over the study's highlighted configurations and the overlap percent
per SL*B (method.md §6). Computed from projection rows; rendered with rich."""

from __future__ import annotations

from typing import Sequence

import pandas as pd
from rich.console import Console
from rich.table import Table

from tasks.model.projection import HIGHLIGHT_PREFIX

__all__ = ["serialized_summary", "overlap_rows", "overlapped_summary", "render_summary"]



def _grid(rows: pd.DataFrame) -> pd.DataFrame:
    return rows[~rows["label"].str.startswith(HIGHLIGHT_PREFIX)]


def serialized_summary(rows: pd.DataFrame) -> pd.DataFrame:
    """Serialized fraction per m (columns): min, median and max over the grid at its
    smallest B (the study factors B out), then each highlighted model at its TP."""
    grid = _grid(rows)
    grid = grid[grid["b"] == grid["b"].min()]
    stats = grid.groupby("flop_vs_bw")["serialized_fraction"].agg(["min", "median", "max"]).T
    stats.index = [f"grid {s} ({grid.groupby('flop_vs_bw').size().iloc[0]} configs)" for s in stats.index]
    marked = rows[rows["label"].str.startswith(HIGHLIGHT_PREFIX)]
    if len(marked):
        marked = marked.assign(row=[
            f"{label[len(HIGHLIGHT_PREFIX):]} (H={h}, SL={sl}, TP={tp})"
            for label, h, sl, tp in zip(marked["label"], marked["h"], marked["sl"], marked["tp"], strict=True)
        ])
        per_model = marked.pivot_table(index="row", columns="flop_vs_bw", values="serialized_fraction", sort=False)
        stats = pd.concat([stats, per_model])
    stats.columns = [f"m={m:g}" for m in stats.columns]
    return stats


def overlap_rows(rows: pd.DataFrame, overlap_tp: int) -> pd.DataFrame:
    """The overlapped analysis' subset of the grid: rows at TP = ``overlap_tp`` (or the
    grid's nearest TP), with an ``slb`` column (SL*B); for an SL*B reached by several
    (SL, B), only the longest sequence (smallest B)."""
    grid = _grid(rows)
    tps = sorted(grid["tp"].unique())
    tp = min(tps, key=lambda t: (abs(t - overlap_tp), t))
    at_tp = grid[grid["tp"] == tp].assign(slb=lambda d: d["sl"] * d["b"])
    return at_tp[at_tp["b"] == at_tp.groupby("slb")["b"].transform("min")]


def overlapped_summary(rows: pd.DataFrame, overlap_tp: int) -> pd.DataFrame:
    """Overlap percent at TP = ``overlap_tp`` (or the grid's nearest TP) per distinct
    SL*B: the lowest and highest over H, and how many H expose communication (> 100%).
    One row per (SL*B, m)."""
    at_tp = overlap_rows(rows, overlap_tp)
    tp = int(at_tp["tp"].iloc[0]) if len(at_tp) else overlap_tp
    summary = at_tp.groupby(["slb", "flop_vs_bw"]).agg(
        min_percent=("overlap_percent", "min"),
        max_percent=("overlap_percent", "max"),
        exposed=("overlap_percent", lambda s: int((s > 100).sum())),
        hidden_sizes=("h", "nunique"),
    ).reset_index()
    summary.insert(0, "tp", tp)
    return summary


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_summary(console: Console, rows: pd.DataFrame, *, title: str, overlap_tp: int) -> None:
    """Print both summary tables for the rows of one run."""
    serialized = serialized_summary(rows)
    table = Table(title=f"Serialized (TP) communication, share of layer time: {title}", title_justify="left")
    table.add_column("configuration")
    for column in serialized.columns:
        table.add_column(column, justify="right")
    for name, values in serialized.iterrows():
        table.add_row(str(name), *(_percent(v) for v in values))
    console.print(table)

    overlapped = overlapped_summary(rows, overlap_tp)
    scenarios: Sequence[float] = sorted(overlapped["flop_vs_bw"].unique())
    tp = int(overlapped["tp"].iloc[0]) if len(overlapped) else overlap_tp
    table = Table(
        title=f"Overlapped (DP) all-reduce as % of backward GEMM time at TP={tp}, "
              "range over H (k/n: k of n hidden sizes exposed, > 100%)", title_justify="left")
    table.add_column("SL·B", justify="right")
    for m in scenarios:
        table.add_column(f"m={m:g}", justify="right")
    for slb, group in overlapped.groupby("slb"):
        cells = []
        for m in scenarios:
            r = group[group["flop_vs_bw"] == m].iloc[0]
            cells.append(f"{r.min_percent:.0f}-{r.max_percent:.0f}% ({int(r.exposed)}/{int(r.hidden_sizes)})")
        table.add_row(f"{slb:,}", *cells)
    console.print(table)
