"""The layout search's figures (Fernandez et al., arXiv 2411.13055; Erdil and
Schneider-Joseph, arXiv 2411.01137), from ``search`` and ``scaling`` rows (``commscale
search``):

- the Pareto front of the trials: exposed communication share against tokens per second
  per device (more throughput and less exposed communication are both better);
- per-device throughput against device count, the winning layout family at each count;
- the latency floor: the share of step time due to latency terms against device count,
  for a fixed model and global batch.
"""

from __future__ import annotations

import pandas as pd

from analysis.figures.common import MARK, SERIES, caption, finish, log2_ticks, new_figure, require
from sweeps.lake.kinds import SCALING, SEARCH
from tasks.model.metrics import latency_share

__all__ = ["draw_pareto", "draw_scaling", "draw_latency_floor", "pareto_front"]

_TRIAL = ["study", "status", "exposed_comm_share", "tokens_per_s_per_device"]
_SCALING = ["model", "hardware", "devices", "global_batch", "tokens_per_s_per_device"]


def pareto_front(trials: pd.DataFrame) -> pd.DataFrame:
    """The trials no other trial beats on both throughput (higher) and exposed
    communication share (lower), sorted by throughput."""
    ordered = trials.sort_values(["tokens_per_s_per_device", "exposed_comm_share"], ascending=[False, True])
    best_share, keep = float("inf"), []
    for index, share in zip(ordered.index, ordered["exposed_comm_share"], strict=True):
        if share < best_share:
            keep.append(index)
            best_share = share
    return ordered.loc[keep].sort_values("tokens_per_s_per_device")


def draw_pareto(rows: pd.DataFrame):
    """Every feasible trial as a point, one Pareto front line per study."""
    rows = require(rows, SEARCH, _TRIAL, "search rows")
    ok = require(rows[rows["status"] == "ok"].dropna(subset=_TRIAL[2:]), SEARCH, [], "feasible search trials")
    fig, ax = new_figure(7.5, 5.2)
    for study, trials in ok.groupby("study"):
        points = ax.plot(trials["tokens_per_s_per_device"], 100 * trials["exposed_comm_share"], ls="none", marker="o",
                         ms=4, alpha=0.45, gid=MARK)
        front = pareto_front(trials)
        ax.plot(front["tokens_per_s_per_device"], 100 * front["exposed_comm_share"], color=points[0].get_color(),
                marker="s", ms=5, lw=1.6, drawstyle="steps-post", gid=SERIES,
                label=f"{study}: front of {len(front)} / {len(trials)} trials")
        if {"tp", "pp", "dp", "micro_batch"} <= set(front.columns):
            for r in front.itertuples():
                ax.annotate(f"tp{r.tp} pp{r.pp} dp{r.dp} mb{r.micro_batch}",
                            (r.tokens_per_s_per_device, 100 * r.exposed_comm_share),
                            textcoords="offset points", xytext=(4, 4), fontsize=6.5)
    infeasible = int((rows["status"] != "ok").sum())
    ax.set_xlabel("throughput (tokens / s / device)")
    ax.set_ylabel("exposed communication (% of step time)")
    finish(fig, ax, f"Layout search · Pareto front ({infeasible} infeasible trials not drawn)",
           caption(rows, ("model", "model"), ("devices", "devices"), ("global batch", "global_batch")), loc="best")
    return fig


def _series(rows: pd.DataFrame):
    return rows.groupby(["model", "hardware", "global_batch"])


def _feasible(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows with a layout that fits (all rows where the kind has no ``status``)."""
    return rows[rows["status"] == "ok"] if "status" in rows.columns else rows


def draw_scaling(rows: pd.DataFrame):
    """Tokens per second per device against device count, one line per (model,
    hardware, global batch), each point labelled with its winning layout family."""
    rows = require(rows, SCALING, _SCALING, "scaling rows")
    rows = require(_feasible(rows).dropna(subset=["tokens_per_s_per_device"]), SCALING, [],
                   "scaling rows with a feasible layout")
    fig, ax = new_figure(7.5, 5.0)
    for (model, hardware, batch), group in _series(rows):
        group = group.sort_values("devices")
        ax.plot(group["devices"], group["tokens_per_s_per_device"], marker="o", lw=1.6, gid=SERIES,
                label=f"{model} on {hardware}, global batch {batch:,}")
        if "winner_family" in group.columns:
            for r in group.itertuples():
                ax.annotate(str(r.winner_family), (r.devices, r.tokens_per_s_per_device), textcoords="offset points",
                            xytext=(3, 5), fontsize=6.5)
    log2_ticks(ax, rows["devices"])
    ax.set_xlabel("devices")
    ax.set_ylabel("throughput (tokens / s / device)")
    ax.set_ylim(0, 1.15 * rows["tokens_per_s_per_device"].max())  # room for the labels
    finish(fig, ax, "Layout search · per-device throughput vs device count (best layout at each count)",
           caption(rows, ("model", "model")), loc="lower left")
    return fig


def draw_latency_floor(rows: pd.DataFrame):
    """The share of step time due to latency terms (``tasks.model.metrics.latency_share`` of the
    rows' latency_s and step_time_s) against device count, one line per (model, hardware,
    global batch)."""
    rows = require(rows, SCALING, _SCALING + ["latency_s", "step_time_s"], "scaling rows")
    rows = require(_feasible(rows).dropna(subset=["latency_s", "step_time_s"]), SCALING, [],
                   "scaling rows with latency terms")
    fig, ax = new_figure(7.5, 5.0)
    for (model, hardware, batch), group in _series(rows):
        group = group.sort_values("devices")
        share = 100 * latency_share(group["latency_s"], group["step_time_s"])
        ax.plot(group["devices"], share, marker="o", lw=1.6, gid=SERIES,
                label=f"{model} on {hardware}, global batch {batch:,}")
    log2_ticks(ax, rows["devices"])
    ax.set_xlabel("devices")
    ax.set_ylabel("latency terms (% of step time)")
    ax.set_ylim(bottom=0)
    finish(fig, ax, "Latency floor · share of the step spent in latency terms vs device count",
           caption(rows, ("model", "model")), loc="best")
    return fig
