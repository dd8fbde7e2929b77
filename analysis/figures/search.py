"""The layout search's figures (Fernandez et al., arXiv 2411.13055; Erdil and
Schneider-Joseph, arXiv 2411.01137), from ``search`` and ``scaling`` rows (``commscale
search``):

- the Pareto front of the trials, one panel per study: exposed communication share against tokens per second
  per device (more throughput and less exposed communication are both better);
- per-device throughput against device count, the winning layout family at each count;
- the latency floor: the share of step time due to latency terms against device count,
  for a fixed model and global batch.
"""

from __future__ import annotations

import pandas as pd

from analysis.figures.common import (MARK, SERIES, caption, finish, fit_width, footer, log2_ticks, new_figure,
                                     new_panels, require)
from analysis.figures.labels import label_points
from sweeps.lake.kinds import SCALING, SEARCH
from tasks.model.terms.layout import LATER_LAYOUT_FIELDS, LAYOUT_FIELDS, layout_from_row
from tasks.model.terms.metrics import latency_share

__all__ = ["draw_pareto", "draw_scaling", "draw_latency_floor", "pareto_front", "layout_label", "has_layout"]

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


def layout_label(row) -> str:
    """A row's layout in the words of ``tasks.model.terms.layout.Layout.describe`` (e.g. ``tp8 pp4 dp2 b1 zero1``)."""
    return layout_from_row(lambda name: getattr(row, name, None)).describe()


def has_layout(columns) -> bool:
    """Whether ``columns`` hold a layout (every field but those of ``LATER_LAYOUT_FIELDS``)."""
    return set(LAYOUT_FIELDS) - set(LATER_LAYOUT_FIELDS) <= set(columns)


def _panel_title(fig, study: str, trials: pd.DataFrame, infeasible: int, width: float) -> str:
    """The study's name, then what it searched (model, devices x hardware, global batch and,
    where the rows carry them, the stack and the objective's column), fitted to ``width`` inches."""
    def one(column: str) -> str:
        values = sorted({str(v) for v in trials[column].dropna()}) if column in trials.columns else []
        return ", ".join(values)

    what = f"{one('model')} on {one('devices')} x {one('hardware')}, global batch {one('global_batch')}"
    what += f", stack {one('stack')}" if one("stack") else ""
    return fit_width(fig, f"{study}\n{what} ({_count(infeasible, 'infeasible trial')} not drawn)", 8.5, width)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def draw_pareto(rows: pd.DataFrame):
    """One panel per study (two a row): its feasible trials as points, its Pareto front as a
    line, the front's layouts labelled where their labels cover no other label and no point
    of the front (``analysis.figures.labels``; they may cross the other trials); each panel
    titled with the study and what it searched.
    Studies are never drawn on one axis: each has its own model, cluster and objective."""
    rows = require(rows, SEARCH, _TRIAL, "search rows")
    ok = require(rows[rows["status"] == "ok"].dropna(subset=_TRIAL[2:]), SEARCH, [], "feasible search trials")
    studies = list(ok.groupby("study"))
    columns = 1 if len(studies) == 1 else 2
    width = 7.5 if columns == 1 else 5.6
    fig, axes = new_panels(len(studies), width, 5.2 if columns == 1 else 4.4, columns)
    fronts = [_study_panel(fig, ax, study, trials, rows, width)
              for ax, (study, trials) in zip(axes, studies, strict=True)]
    footer(fig, "Layout search · a panel per study, its model, cluster and stack in its title; more throughput and "
                "less exposed communication are both better · " + caption(rows))
    if has_layout(ok.columns):
        fig.draw_without_rendering()  # one layout for every panel's labels
        for ax, front in zip(axes, fronts, strict=True):
            label_points(ax, front, "tokens_per_s_per_device", "share_pct", layout_label, avoid=[SERIES],
                         renderer=fig.canvas.get_renderer())
    return fig


def _study_panel(fig, ax, study, trials: pd.DataFrame, rows: pd.DataFrame, width: float) -> pd.DataFrame:
    """Draw one study's panel of ``draw_pareto`` on ``ax`` (``width`` inches wide): its feasible
    ``trials`` as points, its Pareto front as a line, its title (the infeasible trials counted
    from ``rows``); returns the front, with its exposed share in percent (``share_pct``)."""
    points = ax.plot(trials["tokens_per_s_per_device"], 100 * trials["exposed_comm_share"], ls="none",
                     marker="o", ms=4, alpha=0.45, gid=MARK, label=_count(len(trials), "feasible trial"))
    front = pareto_front(trials).assign(share_pct=lambda f: 100 * f["exposed_comm_share"])
    ax.plot(front["tokens_per_s_per_device"], front["share_pct"], color=points[0].get_color(), marker="s", ms=5,
            lw=1.6, drawstyle="steps-post", gid=SERIES, label=f"Pareto front: {_count(len(front), 'trial')}")
    ax.set_xlabel("throughput (tokens / s / device)", fontsize=9)
    ax.set_ylabel("exposed communication (% of step time)", fontsize=9)
    infeasible = int(((rows["status"] != "ok") & (rows["study"] == study)).sum())
    ax.set_title(_panel_title(fig, str(study), trials, infeasible, 0.8 * width), fontsize=8.5)
    ax.legend(fontsize=7, loc="best")
    ax.grid(True, which="major", alpha=0.3)
    return front


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
    """The share of step time due to latency terms (``tasks.model.terms.metrics.latency_share`` of the
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
