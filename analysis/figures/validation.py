"""Predicted against published measurements, from ``validation`` rows (``commscale validate``):
one log-log panel per dataset and metric (each in its own unit), one marker per source, the
y = x line and a ±10 % band, for the newest cost-model version in the lake.

Columns read: dataset, source, row, metric, unit, published, predicted, error,
cost_model_version, validated_at (seconds since the epoch), hardware.
"""

from __future__ import annotations

from typing import Dict, Tuple

import numpy as np
import pandas as pd

from analysis.figures.common import SERIES, caption, footer, new_panels, require
from sweeps.lake.kinds import VALIDATION
from tasks.validation.records import DATASETS

__all__ = ["draw_validation", "newest_records", "version_order", "COLUMNS", "BAND"]

COLUMNS = ["dataset", "source", "row", "metric", "unit", "published", "predicted", "error", "cost_model_version",
           "validated_at"]
#: The band drawn around y = x: predictions within ±10 % of the published figure.
BAND = 0.10
#: What identifies one published figure across commits.
_FIGURE = ["dataset", "source", "row", "metric"]
_MARKERS = "osD^vPX*h<>p"


def version_order(rows: pd.DataFrame) -> list:
    """The cost-model versions of ``rows``, oldest first: by when each was first validated."""
    first = rows.groupby("cost_model_version")["validated_at"].min().sort_values(kind="stable")
    return list(first.index)


def newest_records(rows: pd.DataFrame, version: str) -> pd.DataFrame:
    """The rows of cost-model ``version``, the newest of each published figure (dataset,
    source, row, metric): a data file edited since keeps only its latest record."""
    mine = rows[rows["cost_model_version"] == version].sort_values("validated_at", ascending=False, kind="stable")
    return mine.drop_duplicates(subset=_FIGURE).sort_values(_FIGURE, kind="stable")


def _styles(sources) -> Dict[str, Tuple[str, object]]:
    """A (marker, colour) per source, the same in every panel."""
    from matplotlib import colormaps

    cmap = colormaps["tab10"]
    return {s: (_MARKERS[i % len(_MARKERS)], cmap(i % 10)) for i, s in enumerate(sorted(sources))}


def _panel(ax, group: pd.DataFrame, styles: Dict[str, Tuple[str, object]], title: str) -> None:
    """One dataset and metric: a series per source, y = x, the band, log-log."""
    from matplotlib.ticker import LogFormatter

    span = np.array([group[["published", "predicted"]].min().min(), group[["published", "predicted"]].max().max()])
    span = span * np.array([0.7, 1.4])
    ax.fill_between(span, span * (1 - BAND), span * (1 + BAND), color="#bbbbbb", alpha=0.35, lw=0,
                    label=f"±{100 * BAND:.0f} %")
    ax.plot(span, span, color="#777777", lw=1, ls="--", gid="identity", label="predicted = published")
    for source, points in group.groupby("source", sort=True):
        marker, color = styles[source]
        mean = 100 * points["error"].abs().mean()
        ax.plot(points["published"], points["predicted"], ls="none", marker=marker, ms=6, color=color, mfc=color,
                mec="black", mew=0.4, gid=SERIES, label=f"{source} (n={len(points)}, mean |error| {mean:.1f}%)")
    unit = group["unit"].iloc[0]
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers on the ticks (20, not 2 x 10^1)
        axis.set_major_formatter(LogFormatter(labelOnlyBase=False))
        axis.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1.5, 0.6)))
    ax.set_xlabel(f"published ({unit})")
    ax.set_ylabel(f"predicted ({unit})")
    ax.set_title(title, fontsize=9.5)
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(True, which="major", alpha=0.3)


def draw_validation(rows: pd.DataFrame):
    """Predicted against published for the newest cost-model version of ``rows``: a panel
    per (dataset, metric), two panels a row, one marker style per source (legend: its row
    count and mean |error|), the y = x line and the ±10 % band. ``MissingRows`` without rows."""
    rows = require(rows, VALIDATION, COLUMNS, "validation rows")
    version = version_order(rows)[-1]
    newest = newest_records(rows, version)
    newest = newest[(newest["published"] > 0) & (newest["predicted"] > 0)]
    newest = require(newest, VALIDATION, [], "validation rows with positive values")
    panels = sorted(newest.groupby(["dataset", "metric"]),
                    key=lambda p: (DATASETS.index(p[0][0]) if p[0][0] in DATASETS else len(DATASETS), p[0][1]))
    fig, axes = new_panels(len(panels), 6.0, 4.6, columns=1 if len(panels) == 1 else 2)
    styles = _styles(newest["source"].unique())
    for ax, ((dataset, metric), group) in zip(axes, panels, strict=True):
        _panel(ax, group, styles, f"{dataset} · {metric}")
    mean = 100 * newest["error"].abs().mean()
    fig.suptitle(f"Predicted vs published, cost model {version}: {len(newest)} figures, mean |error| {mean:.1f}%",
                 fontsize=10.5)
    footer(fig, caption(newest, ("cost model", "cost_model_version")))
    return fig
