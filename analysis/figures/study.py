"""The study's grid figures from ``projection`` rows (Pati et al., arXiv 2302.02825):
serialized fraction against TP (Fig. 10a) and overlapped communication as a percent of
compute against SL·B (Fig. 10b), each for one flop-vs-bw multiplier m (Fig. 11 for m > 1).

Each takes the rows of its analysis, selected by ``analysis.summary`` (``serialized_rows``:
the grid at its smallest B and the highlighted models; ``overlap_rows``: the grid at the
overlap TP), and plots the metrics the rows carry (``serialized_fraction``,
``overlap_percent``); nothing is recomputed here.
"""

from __future__ import annotations

import pandas as pd

from analysis.figures.common import MARK, SERIES, caption, finish, log2_ticks, new_figure, require
from analysis.figures.labels import label_points
from sweeps.lake.kinds import PROJECTION
from tasks.model.projection.grid import HIGHLIGHT_PREFIX

__all__ = ["draw_serialized", "draw_overlapped", "figure_number"]

_STYLES = ["-", "--", "-.", ":", (0, (5, 1, 1, 1, 1, 1)), (0, (1, 3))]
#: The size (points) of the star that marks a highlighted model.
_STAR = 13


def figure_number(m: float, panel: str) -> str:
    """The study's figure number: 10a/10b today (m = 1), 11 for hardware m times ahead."""
    return f"Fig. 10{panel}" if m == 1 else f"Fig. 11{panel}"


def _at_m(rows: pd.DataFrame, m: float, what: str) -> pd.DataFrame:
    rows = require(rows, PROJECTION, ["flop_vs_bw", "h", "sl", "b", "tp", "label", "status"], what)
    rows = rows[(rows["flop_vs_bw"] == m) & (rows["status"] == "ok")]
    return require(rows, PROJECTION, [], f"{what} at m = {m:g}")


def _colors(values):
    from matplotlib import colormaps

    values = sorted(values)
    cmap = colormaps["viridis"]
    return {v: cmap(i / max(1, len(values) - 1) * 0.9) for i, v in enumerate(values)}


def _legend_handles(colors: dict, styles: dict, color_label: str, style_label: str):
    from matplotlib.lines import Line2D

    handles = [Line2D([], [], color=c, lw=2, label=f"{color_label} = {v:,}") for v, c in colors.items()]
    handles += [Line2D([], [], color="#555555", ls=s, label=f"{style_label} = {v:,}") for v, s in styles.items()]
    return handles


def draw_serialized(rows: pd.DataFrame, *, m: float = 1.0):
    """Serialized (TP) share of a layer's time against TP, one line per (H, SL) of the
    grid at its smallest B (the study factors B out), the highlighted models marked.

    ``rows``: ``analysis.summary.serialized_rows`` of one sweep and hardware. Raises
    ``MissingRows`` when none is at multiplier ``m``."""
    rows = _at_m(rows, m, "projection rows")
    grid = rows[~rows["label"].str.startswith(HIGHLIGHT_PREFIX)]
    marked = rows[rows["label"].str.startswith(HIGHLIGHT_PREFIX)]
    fig, ax = new_figure(8.2, 5.2)
    colors = _colors(grid["h"].unique())
    styles = {sl: _STYLES[i % len(_STYLES)] for i, sl in enumerate(sorted(grid["sl"].unique()))}
    for (h, sl), group in grid.groupby(["h", "sl"]):
        group = group.sort_values("tp")
        ax.plot(group["tp"], 100 * group["serialized_fraction"], color=colors[h], ls=styles[sl], marker="o", ms=3,
                lw=1.4, gid=SERIES, label=f"H={h:,}, SL={sl:,}")
    handles = _legend_handles(colors, styles, "H", "SL")
    if len(marked):
        from matplotlib.lines import Line2D

        ax.plot(marked["tp"], 100 * marked["serialized_fraction"], ls="none", marker="*", ms=_STAR, color="crimson",
                markeredgecolor="black", gid=MARK, zorder=5)
        handles.append(Line2D([], [], ls="none", marker="*", ms=11, color="crimson", markeredgecolor="black",
                              label="model at its Eq. 10 TP"))
    log2_ticks(ax, pd.concat([grid["tp"], marked["tp"]]))
    ax.set_xlabel("tensor-parallel degree TP (devices)")
    ax.set_ylabel("serialized communication (% of layer time, fwd + bwd)")
    ax.set_ylim(0, 100)
    b = int(grid["b"].min()) if len(grid) else int(rows["b"].min())
    finish(fig, ax, f"{figure_number(m, 'a')} · serialized (TP) communication vs TP, B = {b}, m = {m:g}",
           caption(rows, ("sweep", "sweep"), ("cost model", "cost_model_version")), handles,
           loc="upper left", bbox_to_anchor=(1.01, 1.0), title="colour: H\nstyle: SL", title_fontsize=7.5)
    _label_models(ax, marked)
    return fig


def _label_models(ax, marked: pd.DataFrame) -> None:
    """Name each highlighted model beside its star, where the label covers no other label or
    star (``analysis.figures.labels``), crossing the grid's lines on a white ground."""
    points = marked.assign(percent=100 * marked["serialized_fraction"]).sort_values(["tp", "percent"])
    label_points(ax, points, "tp", "percent", lambda r: f"{r.label[len(HIGHLIGHT_PREFIX):]} (TP {r.tp})",
                 limit=len(points), avoid=[MARK], clearance=_STAR / 2 + 2, required=True, fontsize=7, color="crimson",
                 bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8))


def draw_overlapped(rows: pd.DataFrame, *, m: float = 1.0):
    """The DP weight-gradient all-reduce as a percent of the backward GEMMs it hides
    behind, against SL·B at the overlap TP, one line per H; above the drawn 100% line the
    excess is exposed. ``rows``: ``analysis.summary.overlap_rows`` of one sweep and hardware."""
    at_tp = _at_m(rows, m, "projection rows at the overlap TP")
    at_tp = require(at_tp, PROJECTION, ["slb"], "projection rows at the overlap TP")
    fig, ax = new_figure(8.2, 5.2)
    colors = _colors(at_tp["h"].unique())
    for h, group in at_tp.groupby("h"):
        group = group.sort_values("slb")
        ax.plot(group["slb"], group["overlap_percent"], color=colors[h], marker="o", ms=3, lw=1.5, gid=SERIES,
                label=f"H = {h:,}")
    ax.axhline(100, color="crimson", lw=1.2, ls="--", gid="threshold", label="100%: exposed above")
    log2_ticks(ax, at_tp["slb"])
    ax.set_yscale("log")
    ax.set_xlabel("tokens per micro-batch SL·B")
    ax.set_ylabel("DP all-reduce time (% of backward GEMM time)")
    tp = int(at_tp["tp"].iloc[0])
    finish(fig, ax, f"{figure_number(m, 'b')} · overlapped (DP) communication vs SL·B, TP = {tp}, m = {m:g}",
           caption(at_tp, ("sweep", "sweep"), ("DP", "dp"), ("cost model", "cost_model_version")),
           loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig
