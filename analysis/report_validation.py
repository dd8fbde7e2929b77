"""The report's validation topic, from ``validation`` rows (``commscale validate``): predicted
against published for the newest cost-model version (``analysis.figures.validation``), and
a table of each source's mean and max |error| per cost-model version, so versions compare,
with how many of its rows a figure was fitted to. The finding opens with the headline
(``tasks.validation.headline``: shipped rows no figure was fitted to, then with the fitted
ones, then the held-out runs apart). The figure is keyed by the digest of the kind's rows
(``analysis.report_cache``).
"""

from __future__ import annotations

from typing import List, Optional

import pandas as pd

from analysis import figures
from analysis.figures.validation import BAND, newest_records, version_order
from analysis.report_cache import FigureCache, digest_sql
from analysis.report_render import Finding, Section, Topic
from sweeps.lake.kinds import VALIDATION
from tasks.validation.headline import headline, headline_lines
from tasks.validation.records import DATASETS

__all__ = ["validation_topic", "version_table", "TOPIC_NAME"]

#: The name the validation topic answers to (``commscale report --first validation``).
TOPIC_NAME = "validation"


def _digest(con) -> str:
    n, digest = con.execute(f'SELECT {digest_sql(alias="t")} FROM "{VALIDATION}" t').fetchone()
    return f"{n}:{digest}"


def version_table(rows: pd.DataFrame) -> pd.DataFrame:
    """Per cost-model version (oldest first) and source: the figures predicted, how many of
    them a figure was fitted to, and their mean and max |error| in percent, to 0.1 (the newest
    record of each figure of that version, fitted ones included: the headline leaves them out)."""
    frames = []
    for version in version_order(rows):
        mine = newest_records(rows, version).assign(abs_error=lambda r: 100 * r["error"].abs(),
                                                    was_fitted=lambda r: _fitted(r).astype(int))
        per_source = mine.groupby(["dataset", "source"], sort=True).agg(
            n=("abs_error", "size"), fitted=("was_fitted", "sum"), mean_abs_error_pct=("abs_error", "mean"),
            max_abs_error_pct=("abs_error", "max")).reset_index()
        frames.append(per_source.assign(cost_model_version=version))
    table = pd.concat(frames, ignore_index=True).round({"mean_abs_error_pct": 1, "max_abs_error_pct": 1})
    return table[["cost_model_version", "dataset", "source", "n", "fitted", "mean_abs_error_pct",
                  "max_abs_error_pct"]]


def _fitted(rows: pd.DataFrame) -> pd.Series:
    """Whether a figure was fitted to each row (a non-empty ``fitted_to``)."""
    return rows["fitted_to"].fillna("").astype(str).str.len() > 0


def _rank(dataset: str) -> int:
    return DATASETS.index(dataset) if dataset in DATASETS else len(DATASETS)


def _lines(rows: pd.DataFrame) -> List[str]:
    """The newest version's error over every figure and per dataset, and its worst figure."""
    versions = version_order(rows)
    newest = newest_records(rows, versions[-1])
    error = newest["error"].abs()
    worst = newest.loc[error.idxmax()]
    inside = int((error <= BAND).sum())
    lines = [f"{line}." for line in headline_lines(headline(newest["dataset"], newest["error"], _fitted(newest),
                                                                 newest["unit"]))]
    lines.append(f"Cost model {versions[-1]}: {len(newest)} published figures from {newest['source'].nunique()} "
                 f"sources, {inside} of {len(newest)} within ±{100 * BAND:.0f}%; worst {worst['source']} row "
                 f"{worst['row']} ({worst['metric']}, {100 * worst['error']:+.1f}%).")
    for dataset, group in sorted(newest.groupby("dataset"), key=lambda g: _rank(g[0])):
        fitted = int(_fitted(group).sum())
        lines.append(f"{dataset}: {len(group)} figures ({fitted} fitted), mean |error| "
                     f"{100 * group['error'].abs().mean():.1f}%, max {100 * group['error'].abs().max():.1f}%.")
    if len(versions) > 1:
        before = newest_records(rows, versions[-2])
        lines.append(f"The cost model before ({versions[-2]}): mean |error| {100 * before['error'].abs().mean():.1f}% "
                     f"over {len(before)} figures.")
    return lines


def _about(rows: pd.DataFrame) -> str:
    version = version_order(rows)[-1]
    return (f"Each point is one published figure (a training run's step time or throughput, a layer's forward or "
            f"backward time, a collective's bus bandwidth, a GEMM's throughput) against commscale's prediction with "
            f"cost model {version}; one panel per dataset and metric, one marker per source. On the dashed line the "
            f"prediction is exact; the grey band is ±{100 * BAND:.0f}%.")


def validation_topic(cache: FigureCache, con, rows: Optional[pd.DataFrame]) -> Topic:
    """The figure (skipped, naming ``commscale validate``, without rows), the table of
    error per source and version, and the finding of the newest version."""
    section = Section("Validation against published measurements",
                      "Published training runs, layer times and microbenchmarks, each predicted by the cost model "
                      "the search uses (`commscale validate`); error = predicted / published - 1.")
    entry = cache.make("validation", "Predicted vs published, newest cost model", _digest(con),
                       lambda: figures.draw_validation(rows), lambda: _about(rows))
    section.figures.append(entry)
    if entry.skipped:
        return Topic(section)
    section.tables.append(("Error per source and cost-model version (|error| in %, newest record of each figure)",
                           version_table(rows)))
    recorded = float(rows["validated_at"].max())
    finding = Finding("Validation against published measurements", section.anchor, tuple(_lines(rows)))
    return Topic(section, finding, frozenset({TOPIC_NAME}), recorded)
