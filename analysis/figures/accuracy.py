"""Projected against measured time per operator class (Pati et al., arXiv 2302.02825,
Fig. 13), from ``accuracy`` rows (``commscale calibrate``).

Columns read: op_class ("step" for a whole step), measured_s, projected_s, band_low_s,
band_high_s, rel_error, extrapolated, calibration, device_model. Times in seconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.figures.common import MARK, SERIES, caption, finish, new_figure, require
from sweeps.lake.kinds import ACCURACY

__all__ = ["draw_accuracy", "COLUMNS"]

COLUMNS = ["op_class", "measured_s", "projected_s", "band_low_s", "band_high_s", "rel_error", "extrapolated"]


def draw_accuracy(rows: pd.DataFrame):
    """A log-log scatter of projected against measured time, one series per operator
    family (GEMM forward, input- and weight-gradient, element-wise, unattributed, the
    whole step; each point one class of one held-out configuration, its band as error
    bars; hollow markers where the projection extrapolates beyond what was measured),
    with the y = x line. Only each calibration's newest fit is drawn."""
    from matplotlib import colormaps

    from tasks.fit.accuracy import newest_fit
    from tasks.model.projection.operators import op_family

    rows = require(rows, ACCURACY, COLUMNS, "accuracy rows")
    rows = newest_fit(rows).assign(op_class=lambda r: r["op_class"].map(op_family))
    rows = rows.dropna(subset=["measured_s", "projected_s"])
    rows = require(rows[(rows["measured_s"] > 0) & (rows["projected_s"] > 0)], ACCURACY, [], "accuracy rows with times")
    fig, ax = new_figure(7.0, 5.6)
    classes = sorted(rows["op_class"].unique(), key=lambda c: (c.startswith("step"), c))
    cmap = colormaps["tab10"]
    for i, op_class in enumerate(classes):
        group = rows[rows["op_class"] == op_class]
        step = op_class.startswith("step")
        color = "black" if step else cmap(i % 10)
        low = (group["projected_s"] - group["band_low_s"].fillna(group["projected_s"])).clip(lower=0)
        high = (group["band_high_s"].fillna(group["projected_s"]) - group["projected_s"]).clip(lower=0)
        median_error = 100 * group["rel_error"].abs().median()
        bars = ax.errorbar(group["measured_s"] * 1e3, group["projected_s"] * 1e3, yerr=[low * 1e3, high * 1e3],
                           ls="none", marker="D" if step else "o", ms=5, color=color, mfc=color,
                           elinewidth=0.8, capsize=2, label=f"{op_class} (median |error| {median_error:.0f}%)")
        bars.lines[0].set_gid(SERIES)  # the points; caps and bars are the band
        extrapolated = group[group["extrapolated"].astype(bool)]
        if len(extrapolated):
            ax.plot(extrapolated["measured_s"] * 1e3, extrapolated["projected_s"] * 1e3, ls="none", marker="o", ms=9,
                    mfc="none", mec=color, gid=MARK)
    span = np.array([rows[["measured_s", "projected_s"]].min().min(), rows[["measured_s", "projected_s"]].max().max()])
    span = span * 1e3 * np.array([0.7, 1.4])
    ax.plot(span, span, color="#777777", lw=1, ls="--", gid="identity", label="projected = measured")
    if rows["extrapolated"].astype(bool).any():
        ax.plot([], [], ls="none", marker="o", ms=9, mfc="none", mec="#555555", label="extrapolated (ring)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time (ms)")
    ax.set_ylabel("projected time (ms); bars: the projection's band")
    finish(fig, ax, "Fig. 13 · projected vs measured time, held-out configurations",
           caption(rows, ("device", "device_model")), loc="upper left")
    return fig
