"""Hardware co-design: every feasible trial of a study by step time and cluster cost, and its
Pareto front (``codesign`` rows, ``commscale codesign``)."""

from __future__ import annotations

import pandas as pd

from analysis.figures.common import MARK, SERIES, caption, finish, new_figure, require
from sweeps.lake.kinds import CODESIGN
from tasks.model.codesign.pareto import front_indices

__all__ = ["draw_codesign", "study_fronts"]

_COLUMNS = ["study", "step_time_s", "cost_usd", "feasible"]


def study_fronts(rows: pd.DataFrame):
    """(study, its feasible trials, their Pareto front fastest first) for each study."""
    for study, trials in rows.groupby("study", sort=True):
        ok = trials[trials["feasible"].astype(bool)].reset_index(drop=True)
        yield study, ok, ok.iloc[front_indices(ok["step_time_s"], ok["cost_usd"])]


def draw_codesign(rows: pd.DataFrame):
    """Cluster cost ($M) against step time (s), log-scaled: each study's feasible trials as
    dots, its front as a line."""
    rows = require(rows, CODESIGN, _COLUMNS, "codesign rows")
    rows = require(rows[rows["feasible"].astype(bool)], CODESIGN, [], "feasible codesign rows")
    fig, ax = new_figure(7.5, 5.0)
    for study, trials, front in study_fronts(rows):
        dots = ax.scatter(trials["step_time_s"], trials["cost_usd"] / 1e6, s=5, alpha=0.25, gid=MARK)
        ax.plot(front["step_time_s"], front["cost_usd"] / 1e6, marker="o", ms=3.5, lw=1.5, gid=SERIES,
                color=dots.get_facecolor()[0][:3], label=f"{study}: front of {len(front)} of {len(trials):,} trials")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("step time (s)")
    ax.set_ylabel("cluster cost ($M, assumed prices)")
    finish(fig, ax, "Hardware co-design · step time vs cluster cost (NSGA-II over hardware knobs and layouts)",
           caption(rows, ("model", "model")), loc="upper right")
    return fig
