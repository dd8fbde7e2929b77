"""The layout search's figures (Fernandez et al., arXiv 2411.13055; Erdil and
Schneider-Joseph, arXiv 2411.01137), from ``search`` and ``scaling`` rows (``commscale
search``):

- the Pareto front of the trials, one panel per model: exposed communication share against tokens per second
  per device (more throughput and less exposed communication are both better);
- per-device throughput against device count, the winning layout family at each count;
- the latency floor: the share of step time due to latency terms against device count,
  for a fixed model and global batch.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures.common import (LABEL, MARK, SERIES, caption, data_labels, data_lines, finish, log2_ticks,
                                     new_figure, new_panels, require)
from sweeps.lake.kinds import SCALING, SEARCH
from tasks.model.layout import LAYOUT_FIELDS, Layout
from tasks.model.metrics import latency_share

__all__ = ["draw_pareto", "draw_scaling", "draw_latency_floor", "pareto_front", "layout_label", "label_points"]

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
    """A row's layout in the words of ``tasks.model.layout.Layout.describe`` (e.g. ``tp8 pp4 dp2 b1 zero1``)."""
    values = {name: getattr(row, name) for name in LAYOUT_FIELDS}
    return Layout(**{name: v if isinstance(v, str) else bool(v) if name == "sequence_parallel" else int(v)
                     for name, v in values.items()}).describe()


#: Where a label may go around its point (points right and up, then the other corners, then further out).
_OFFSETS = ((5, 4), (5, -11), (-5, 4), (-5, -11), (5, 13), (-5, 13), (5, -20), (-5, -20))


def _obstacles(ax, renderer) -> list:
    """Display boxes a label must not cover: the labels already placed, the legend, and
    every marker of a data line (``SERIES``) or of marked points (``MARK``)."""
    from matplotlib.transforms import Bbox

    boxes = [t.get_window_extent(renderer) for t in data_labels(ax)]
    if ax.get_legend() is not None:
        boxes.append(ax.get_legend().get_window_extent(renderer))
    for line in data_lines(ax) + data_lines(ax, MARK):
        for px, py in ax.transData.transform(np.column_stack([line.get_xdata(), line.get_ydata()])):
            boxes.append(Bbox.from_extents(px - 4, py - 4, px + 4, py + 4))
    return boxes


def label_points(ax, points: pd.DataFrame, x: str, y: str, text, *, limit: int = 6) -> int:
    """Label at most ``limit`` of ``points`` (spread over them, ends first) with ``text(row)``,
    each at the first offset where it covers no other label, the legend or a marker of a
    data line, and stays inside the axes; a label that fits nowhere is left out. Call it
    once the figure is otherwise complete (it draws the figure to settle the layout).
    Returns the labels of ``ax``."""
    if points.empty:
        return len(data_labels(ax))
    fig = ax.figure
    fig.draw_without_rendering()
    renderer = fig.canvas.get_renderer()
    inside = ax.get_window_extent(renderer)
    placed = _obstacles(ax, renderer)
    order = sorted(set(np.linspace(0, len(points) - 1, min(limit, len(points))).round().astype(int)))
    for r in points.iloc[order].itertuples():
        for dx, dy in _OFFSETS:
            label = ax.annotate(text(r), (getattr(r, x), getattr(r, y)), textcoords="offset points", xytext=(dx, dy),
                                ha="left" if dx > 0 else "right", fontsize=6.5, gid=LABEL, annotation_clip=False)
            label.set_in_layout(False)
            box = label.get_window_extent(renderer)
            fits = inside.x0 <= box.x0 and box.x1 <= inside.x1 and inside.y0 <= box.y0 and box.y1 <= inside.y1
            if fits and not any(box.overlaps(other) for other in placed):
                placed.append(box)
                break
            label.remove()
    return len(data_labels(ax))


def draw_pareto(rows: pd.DataFrame):
    """Every feasible trial as a point, one Pareto front line per study, one panel per
    model (trials of different models are not comparable on one axis); the front's
    layouts are labelled where their labels do not overlap."""
    rows = require(rows, SEARCH, _TRIAL, "search rows")
    ok = require(rows[rows["status"] == "ok"].dropna(subset=_TRIAL[2:]), SEARCH, [], "feasible search trials")
    by_model = list(ok.groupby("model")) if "model" in ok.columns else [("", ok)]
    fig, axes = new_panels(len(by_model), 7.5, 5.2 if len(by_model) == 1 else 4.4)
    fronts = []
    for ax, (model, trials_of_model) in zip(axes, by_model, strict=True):
        for study, trials in trials_of_model.groupby("study"):
            points = ax.plot(trials["tokens_per_s_per_device"], 100 * trials["exposed_comm_share"], ls="none",
                             marker="o", ms=4, alpha=0.45, gid=MARK)
            front = pareto_front(trials).assign(share_pct=lambda f: 100 * f["exposed_comm_share"])
            ax.plot(front["tokens_per_s_per_device"], front["share_pct"], color=points[0].get_color(),
                    marker="s", ms=5, lw=1.6, drawstyle="steps-post", gid=SERIES,
                    label=f"{study}: front of {len(front)} / {len(trials)} trials")
            fronts.append((ax, front))
        ax.set_xlabel("throughput (tokens / s / device)")
        ax.set_ylabel("exposed communication (% of step time)")
        infeasible = int(((rows["status"] != "ok") & (rows["model"] == model)).sum()) if model else \
            int((rows["status"] != "ok").sum())
        finish(fig, ax, f"Layout search · Pareto front{' of ' + model if model else ''} ({infeasible} infeasible "
               "trials not drawn)", caption(rows, ("model", "model"), ("devices", "devices"),
                                            ("global batch", "global_batch")), loc="best")
    if set(LAYOUT_FIELDS) <= set(ok.columns):
        for ax, front in fronts:
            shared = sum(a is ax for a, _ in fronts)  # fronts on the same panel share its labels
            label_points(ax, front, "tokens_per_s_per_device", "share_pct", layout_label, limit=max(2, 6 // shared))
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
