"""The summary a person reads after a run, computed by DuckDB over one (sweep, hardware)
partition of the ``projection`` rows (no row is loaded into the driver): per hardware
scenario (flop-vs-bw m), the serialized fraction over the grid and the highlighted models,
and the overlap percent per SL·B at the overlap TP (method.md §6); rendered with rich."""

from __future__ import annotations

from typing import Sequence

import duckdb
import pandas as pd
from rich.console import Console
from rich.table import Table

from sweeps.lake.kinds import PROJECTION
from tasks.model.projection.grid import HIGHLIGHT_PREFIX

__all__ = ["serialized_rows", "serialized_summary", "overlap_rows", "overlapped_summary", "overlap_wording",
           "overlap_cell", "render_summary", "partition_count", "FIGURE_COLUMNS"]

#: What the figures of a partition read of its rows (and name in their captions); a network
#: scenario of a sweep is its (links, dp_slowdown) pair.
FIGURE_COLUMNS = ("sweep", "hardware", "label", "h", "sl", "b", "tp", "dp", "flop_vs_bw", "status", "calibration",
                  "cost_model_version", "serialized_fraction", "overlap_percent", "links", "dp_slowdown")

#: The ok rows of one partition, the grid (not the highlighted models), and its rows at the
#: overlap TP (or the grid's nearest), an SL·B reached by several (SL, B) taken at its
#: longest sequence (smallest B).
_PARTITION = f"""
WITH part AS (SELECT {', '.join(FIGURE_COLUMNS)} FROM "{PROJECTION}"
              WHERE sweep = $sweep AND hardware = $hardware AND status = 'ok'),
grid AS (SELECT * FROM part WHERE NOT starts_with(label, '{HIGHLIGHT_PREFIX}')),
near AS (SELECT tp FROM (SELECT DISTINCT tp FROM grid) ORDER BY abs(tp - $overlap_tp), tp LIMIT 1),
at_tp AS (SELECT *, sl * b AS slb FROM grid WHERE tp = (SELECT tp FROM near)),
overlap AS (SELECT * FROM at_tp WHERE b = (SELECT min(b) FROM at_tp AS o WHERE o.slb = at_tp.slb))
"""


def _sql(con: duckdb.DuckDBPyConnection, select: str, sweep: str, hardware: str, overlap_tp: int = 16) -> pd.DataFrame:
    return con.execute(_PARTITION + select, dict(sweep=sweep, hardware=hardware, overlap_tp=overlap_tp)).df()


def partition_count(con: duckdb.DuckDBPyConnection, sweep: str, hardware: str) -> int:
    """Rows of the partition, any status."""
    return int(con.execute(f'SELECT count(*) FROM "{PROJECTION}" WHERE sweep = ? AND hardware = ?',
                           [sweep, hardware]).fetchone()[0])


def serialized_rows(con: duckdb.DuckDBPyConnection, sweep: str, hardware: str) -> pd.DataFrame:
    """The serialized analysis' rows: the grid at its smallest B (the study factors B out)
    and the highlighted models, every m."""
    return _sql(con, f"""SELECT {', '.join(FIGURE_COLUMNS)} FROM part
                         WHERE starts_with(label, '{HIGHLIGHT_PREFIX}') OR b = (SELECT min(b) FROM grid)
                         ORDER BY label, h, sl, tp, flop_vs_bw""", sweep, hardware)


def serialized_summary(con: duckdb.DuckDBPyConnection, sweep: str, hardware: str) -> pd.DataFrame:
    """Serialized fraction per m (columns ``m=...``): min, median and max over the grid at
    its smallest B (the study factors B out), then each highlighted model at its TP."""
    stats = _sql(con, """SELECT flop_vs_bw, min(serialized_fraction) AS "min", median(serialized_fraction) AS median,
                         max(serialized_fraction) AS "max", count(DISTINCT (h, sl, tp)) AS configs
                         FROM grid WHERE b = (SELECT min(b) FROM grid) GROUP BY flop_vs_bw ORDER BY flop_vs_bw""",
                 sweep, hardware)
    marked = _sql(con, f"""SELECT substr(label, {len(HIGHLIGHT_PREFIX) + 1}) || ' (H=' || h || ', SL=' || sl
                           || ', TP=' || tp || ')' AS row, flop_vs_bw, serialized_fraction FROM part
                           WHERE starts_with(label, '{HIGHLIGHT_PREFIX}') ORDER BY label, flop_vs_bw""",
                  sweep, hardware)
    configs = int(stats["configs"].iloc[0]) if len(stats) else 0
    table = stats.set_index("flop_vs_bw")[["min", "median", "max"]].T
    table.index = [f"grid {s} ({configs} configs)" for s in table.index]
    if len(marked):
        marked["row"] = marked["row"].astype(str)
        per_model = marked.pivot_table(index="row", columns="flop_vs_bw", values="serialized_fraction", sort=False)
        table = pd.concat([table, per_model])
    table.columns = [f"m={m:g}" for m in table.columns]
    return table


def overlap_rows(con: duckdb.DuckDBPyConnection, sweep: str, hardware: str, overlap_tp: int) -> pd.DataFrame:
    """The overlapped analysis' rows: the grid at TP = ``overlap_tp`` (or its nearest TP),
    one row per (H, SL·B, m) at the longest sequence of that SL·B."""
    return _sql(con, f"SELECT {', '.join(FIGURE_COLUMNS)}, slb FROM overlap ORDER BY h, slb, flop_vs_bw", sweep,
                hardware, overlap_tp)


def overlapped_summary(con: duckdb.DuckDBPyConnection, sweep: str, hardware: str, overlap_tp: int) -> pd.DataFrame:
    """Overlap percent per distinct SL·B and m: the lowest and highest over the cases (each
    H under each network scenario), how many cases expose communication (> 100%) of how
    many (``exposed`` of ``cases``), and the counts of H and of scenarios behind them."""
    return _sql(con, """SELECT tp, slb, flop_vs_bw, min(overlap_percent) AS min_percent,
                        max(overlap_percent) AS max_percent,
                        count(DISTINCT (h, links, dp_slowdown)) FILTER (WHERE overlap_percent > 100) AS exposed,
                        count(DISTINCT (h, links, dp_slowdown)) AS cases, count(DISTINCT h) AS hidden_sizes,
                        count(DISTINCT (links, dp_slowdown)) AS scenarios FROM overlap GROUP BY tp, slb, flop_vs_bw
                        ORDER BY slb, flop_vs_bw""", sweep, hardware, overlap_tp)


def overlap_wording(summary: pd.DataFrame) -> str:
    """What an ``overlapped_summary``'s range spans and what its k/n counts, in words: over
    H, over network scenarios (one H), or over both."""
    hidden = int(summary["hidden_sizes"].max()) if len(summary) else 1
    scenarios = int(summary["scenarios"].max()) if len(summary) else 1
    if scenarios <= 1:
        return "range over H (k/n: k of n hidden sizes exposed, > 100%)"
    if hidden <= 1:
        return "range over network scenarios (k/n: k of n scenarios exposed, > 100%)"
    return "range over H and network scenarios (k/n: k of n (H, scenario) pairs exposed, > 100%)"


def overlap_cell(row) -> str:
    """One cell of the overlapped table: ``low-high% (k/n)``."""
    return f"{row.min_percent:.0f}-{row.max_percent:.0f}% ({int(row.exposed)}/{int(row.cases)})"


def _percent(x: float) -> str:
    return f"{100 * x:.1f}%"


def render_summary(console: Console, con: duckdb.DuckDBPyConnection, *, sweep: str, hardware: str, title: str,
                   overlap_tp: int) -> None:
    """Print both summary tables of one (sweep, hardware) partition."""
    serialized = serialized_summary(con, sweep, hardware)
    table = Table(title=f"Serialized (TP) communication, share of layer time: {title}", title_justify="left")
    table.add_column("configuration")
    for column in serialized.columns:
        table.add_column(column, justify="right")
    for name, values in serialized.iterrows():
        table.add_row(str(name), *(_percent(v) for v in values))
    console.print(table)

    overlapped = overlapped_summary(con, sweep, hardware, overlap_tp)
    scenarios: Sequence[float] = sorted(overlapped["flop_vs_bw"].unique())
    tp = int(overlapped["tp"].iloc[0]) if len(overlapped) else overlap_tp
    table = Table(title=f"Overlapped (DP) all-reduce as % of backward GEMM time at TP={tp}, "
                        f"{overlap_wording(overlapped)}", title_justify="left")
    table.add_column("SL·B", justify="right")
    for m in scenarios:
        table.add_column(f"m={m:g}", justify="right")
    for slb, group in overlapped.groupby("slb"):
        cells = []
        for m in scenarios:
            cells.append(overlap_cell(group[group["flop_vs_bw"] == m].iloc[0]))
        table.add_row(f"{slb:,}", *cells)
    console.print(table)
