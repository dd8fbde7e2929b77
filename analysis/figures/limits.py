"""How far training can scale: the best utilisation of a family's run against its training
compute, a line per scenario (``limits`` rows, ``commscale limits``), with where each falls
where no layout finishes in time and where the runs' latency floors alone outlast the
duration, beside Erdil and Schneider-Joseph's thresholds."""

from __future__ import annotations

import pandas as pd

from analysis.figures.common import MARK, SERIES, caption, finish, new_figure, require
from sweeps.lake.kinds import LIMITS
from tasks.model.limits.curve import curve_thresholds

__all__ = ["draw_limits", "limit_curves", "PAPER_THRESHOLDS"]

#: Erdil and Schneider-Joseph's baseline thresholds (arXiv 2411.01137, abstract): data movement
#: begins to lower utilisation beyond about 1e28 FLOP; beyond about 1e31 no run is feasible.
PAPER_THRESHOLDS = {"utilisation falls (paper)": 1e28, "latency wall (paper)": 1e31}

_COLUMNS = ["sweep", "scenario", "flop", "utilization", "status", "utilization_drop", "latency_s", "steps",
            "duration_days"]


def limit_curves(rows: pd.DataFrame):
    """(sweep, scenario, curve rows by FLOP, ``curve.thresholds``) of each curve the rows hold."""
    for (sweep, scenario), curve in rows.groupby(["sweep", "scenario"], sort=True):
        curve = curve.sort_values("flop")
        turn = curve_thresholds(curve, float(curve["utilization_drop"].iloc[0]))
        yield sweep, scenario, curve, turn


def draw_limits(rows: pd.DataFrame):
    """Utilisation (% of the 16-bit dense peak) against training FLOP, log-scaled, one line per
    (preset, scenario); a run that does not finish within the duration is a cross at 0; each
    curve's fall and wall dotted in its colour, where its runs' latency floors alone stop
    fitting dash-dotted, the paper's dashed in grey."""
    rows = require(rows, LIMITS, _COLUMNS, "limits rows")
    fig, ax = new_figure(7.5, 5.0)
    for sweep, scenario, curve, turn in limit_curves(rows):
        finished = curve["status"] == "ok"
        line, = ax.plot(curve["flop"][finished], 100 * curve["utilization"][finished], marker="o", lw=1.6, gid=SERIES,
                        label=f"{sweep}: {scenario}")
        ax.plot(curve["flop"][~finished], [0.0] * int((~finished).sum()), "x", color=line.get_color(), gid=MARK)
        for flop, style in ((turn.drop_flop, ":"), (turn.wall_flop, ":"), (turn.floor_wall_flop, "-.")):
            if flop is not None:
                ax.axvline(flop, color=line.get_color(), ls=style, lw=1.0)
    for label, flop in PAPER_THRESHOLDS.items():
        ax.axvline(flop, color="0.55", ls="--", lw=1.0)
        ax.annotate(label, (flop, 1.0), xycoords=("data", "axes fraction"), rotation=90, fontsize=6.5, va="top",
                    ha="right", color="0.4")
    ax.set_xscale("log")
    ax.set_xlabel("training compute (FLOP)")
    ax.set_ylabel("utilisation (% of 16-bit dense peak)")
    ax.set_ylim(bottom=-2)
    finish(fig, ax, "Limits of scale · best utilisation within the duration vs training compute",
           caption(rows, ("duration (days)", "duration_days")), loc="lower left")
    return fig
