"""The report's topics from ``projection`` rows: one per (sweep, hardware) partition, the
study's grid (Figs. 10 and 11, one pair per flop-vs-bw multiplier m) or, for a sweep that
places its links, the case study (Fig. 12); each with its finding, figures and tables.

Keys (``analysis.report_cache``): a grid figure at m is keyed by the digest of the
partition's ok rows at m (the columns ``analysis.summary.FIGURE_COLUMNS``) and of the
grid's (SL, B, TP) points, which decide the rows each analysis selects; a case study by
the digest of its whole partition. At most ``max_m`` multipliers of a sweep are drawn
(``choose_m``); the section says which were left out and how to draw them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import pandas as pd

from analysis import figures
from analysis.figures.common import CASE_STUDY
from analysis.report_cache import FigureCache, digest_sql
from analysis.report_render import Finding, Section, Topic, anchor_of
from analysis.summary import (FIGURE_COLUMNS, overlap_cell, overlap_rows, overlap_wording, overlapped_summary,
                              serialized_rows, serialized_summary)
from sweeps.lake.kinds import PROJECTION
from tasks.model.projection.grid import HIGHLIGHT_PREFIX

__all__ = ["Partition", "partitions", "choose_m", "grid_topic", "case_topic", "no_projection_topics",
           "no_case_study_topic", "DEFAULT_MAX_M"]

#: Multipliers m drawn per sweep unless told otherwise (0: every one).
DEFAULT_MAX_M = 4
_DRAW_ALL = "`commscale report --max-m 0` draws every one"


@dataclass(frozen=True)
class Partition:
    """One (sweep, hardware) of ``projection``: its row count, whether it places its links,
    the digest of its ok rows at each m and of its grid's (SL, B, TP) points, and how many
    layer configurations (H, SL, B, TP, DP) it holds."""

    sweep: str
    hardware: str
    rows: int
    placed: bool
    digests: Dict[float, str]
    shape: str
    configs: int = 0

    @property
    def case_study(self) -> bool:
        """Drawn as a case study (Fig. 12: a bar per configuration and network scenario):
        links placed and at most ``CASE_STUDY_MAX_CONFIGS`` configurations. A whole grid
        with placed links is drawn as a grid."""
        return self.placed and self.configs <= CASE_STUDY_MAX_CONFIGS


#: The most layer configurations a case-study figure draws as bars.
CASE_STUDY_MAX_CONFIGS = 8


def partitions(con) -> List[Partition]:
    """Every partition of ``projection`` with its digests: two aggregate queries, no row loaded."""
    grid = f"status = 'ok' AND NOT starts_with(label, '{HIGHLIGHT_PREFIX}')"
    heads = con.execute(f"""SELECT sweep, hardware, count(*), bool_or(links = 'placed'),
                            coalesce(sum(DISTINCT hash(sl, b, tp)::HUGEINT) FILTER (WHERE {grid}), 0)::VARCHAR,
                            count(DISTINCT (h, sl, b, tp, dp)) FILTER (WHERE {grid})
                            FROM "{PROJECTION}" GROUP BY ALL ORDER BY ALL""").fetchall()
    per_m: Dict[Tuple[str, str], Dict[float, str]] = {}
    for sweep, hardware, m, n, digest in con.execute(
            f"""SELECT sweep, hardware, flop_vs_bw, {digest_sql(FIGURE_COLUMNS)} FROM "{PROJECTION}"
                WHERE status = 'ok' GROUP BY ALL""").fetchall():
        per_m.setdefault((sweep, hardware), {})[float(m)] = f"{n}:{digest}"
    return [Partition(s, h, int(n), bool(placed), per_m.get((s, h), {}), shape, int(configs))
            for s, h, n, placed, shape, configs in heads]


def choose_m(values: Sequence[float], cap: int) -> Tuple[List[float], List[float]]:
    """The multipliers to draw and those left out: every one when ``cap`` is 0 or enough;
    else m = 1 (today's hardware) if present, the largest (the hardware furthest out), the
    smallest, then evenly spread between them, ``cap`` in all."""
    values = sorted(set(values))
    if cap <= 0 or len(values) <= cap:
        return values, []
    wanted = [1.0] if 1.0 in values else []
    spread = [values[round(i * (len(values) - 1) / (cap - 1))] for i in range(cap)] if cap > 1 else [values[0]]
    wanted += [spread[-1], spread[0]] + spread[1:-1]
    kept = sorted(list(dict.fromkeys(wanted))[:cap])
    return kept, [m for m in values if m not in kept]


def _left_out(left: Sequence[float], total: int) -> str:
    shown = ", ".join(f"{m:g}" for m in left[:12]) + (f" and {len(left) - 12} more" if len(left) > 12 else "")
    return f"Not drawn: m = {shown} ({len(left)} of {total} multipliers; {_DRAW_ALL})."


class _Once:
    """A value computed on first use (rows loaded only when some figure needs drawing)."""

    def __init__(self, make: Callable[[], pd.DataFrame]) -> None:
        self._make, self._value = make, None

    def __call__(self) -> pd.DataFrame:
        if self._value is None:
            self._value = self._make()
        return self._value


def _grid_figures(cache: FigureCache, con, part: Partition, overlap_tp: int, kept: Sequence[float]) -> list:
    s, h = part.sweep, part.hardware
    serial = _Once(lambda: serialized_rows(con, s, h))
    overlap = _Once(lambda: overlap_rows(con, s, h, overlap_tp))
    entries = []
    for m in kept:
        tag, key = f"{s}-{h}-m{m:g}", f"{part.digests[m]}|{part.shape}"
        entries.append(cache.make(
            f"serialized-{tag}", f"{figures.study.figure_number(m, 'a')}: serialized fraction vs TP, {s} on {h}, "
            f"m = {m:g}", key, lambda m=m: figures.draw_serialized(serial(), m=m),
            lambda m=m: _serialized_about(serial()[serial()["flop_vs_bw"] == m])))
        entries.append(cache.make(
            f"overlapped-{tag}", f"{figures.study.figure_number(m, 'b')}: overlapped communication vs SL·B, {s} on "
            f"{h}, m = {m:g}", f"{key}|{overlap_tp}", lambda m=m: figures.draw_overlapped(overlap(), m=m),
            lambda m=m: _overlap_about(overlap()[overlap()["flop_vs_bw"] == m])))
    return entries


def _serialized_about(at_m: pd.DataFrame) -> str:
    return ("Each line is one (H, SL) of the grid at its smallest B: the share of a layer's forward and backward "
            f"time spent in TP all-reduces, which nothing hides. Over the grid it spans "
            f"{100 * at_m['serialized_fraction'].min():.1f}-{100 * at_m['serialized_fraction'].max():.1f}%; stars "
            "mark models at the TP Eq. 10 requires of them.")


def _overlap_about(at: pd.DataFrame) -> str:
    exposed = int((at["overlap_percent"] > 100).sum())
    return (f"Each line is one H at TP = {int(at['tp'].iloc[0])}: the DP weight-gradient all-reduce as a percent of "
            f"the backward GEMMs it overlaps. Above the dashed 100% line the excess is exposed: {exposed} of "
            f"{len(at)} configurations here.")


def grid_topic(cache: FigureCache, con, part: Partition, *, overlap_tp: int, max_m: int, recorded: float) -> Topic:
    """The study's grid of one partition: a serialized and an overlapped figure per drawn m,
    the summary tables at those m, and the finding."""
    s, h = part.sweep, part.hardware
    kept, left = choose_m(list(part.digests), max_m)
    columns = [f"m={m:g}" for m in kept]
    serial = serialized_summary(con, s, h)
    serial = serial[[c for c in columns if c in serial.columns]]
    overlap = overlapped_summary(con, s, h, overlap_tp)
    overlap = overlap[overlap["flop_vs_bw"].isin(kept)]
    section = Section(f"Sweep {s} on {h}: the study's grid (Figs. 10 and 11)",
                      "Serialized (TP) communication against TP and overlapped (DP) communication against SL·B, "
                      "for each flop-vs-bw multiplier m (compute m times faster relative to network bandwidth)."
                      + (" " + _left_out(left, len(part.digests)) if left else ""), anchor=anchor_of(f"sweep {s} {h}"))
    section.figures += _grid_figures(cache, con, part, overlap_tp, kept)
    section.tables.append((f"Serialized share of layer time, {s} on {h}",
                           serial.map(lambda v: f"{100 * v:.1f}%").reset_index(names="configuration")))
    if len(overlap):
        table = overlap.assign(cell=[overlap_cell(r) for r in overlap.itertuples()])
        table = table.pivot(index="slb", columns="flop_vs_bw", values="cell")
        table.columns = [f"m={m:g}" for m in table.columns]
        section.tables.append((f"Overlapped DP all-reduce as % of backward GEMM time, {overlap_wording(overlap)}, "
                               f"{s} on {h}", table.reset_index(names="SL·B")))
    lines = _grid_lines(serial, overlap) + ([_left_out(left, len(part.digests))] if left else [])
    finding = Finding(f"Sweep {s} on {h} ({part.rows:,} rows)", section.anchor, tuple(lines)) if lines else None
    return Topic(section, finding, frozenset({s}), recorded)


def _grid_lines(serial: pd.DataFrame, overlap: pd.DataFrame) -> List[str]:
    """Serialized share over the grid at each m, overlap exposure at each m, the highlighted models."""
    lines = []
    grid = [i for i in serial.index if str(i).startswith("grid ")]
    if grid and len(serial.columns):
        median, low, high = (serial.loc[next(i for i in grid if f"grid {w} " in i)] for w in ("median", "min", "max"))
        configs = grid[0][grid[0].index("(") + 1:grid[0].index(" configs")]
        lines.append(f"Serialized (TP) communication, share of layer time, median (range) over {configs} "
                     "configurations at the smallest B: " + " · ".join(
                         f"{c} {100 * median[c]:.1f}% ({100 * low[c]:.1f}-{100 * high[c]:.1f}%)"
                         for c in serial.columns))
    if len(overlap):
        per_m = overlap.groupby("flop_vs_bw").agg(exposed=("exposed", "sum"), cases=("cases", "sum"),
                                                  worst=("max_percent", "max"))
        lines.append(f"Overlapped (DP) all-reduce exposed (> 100% of the backward GEMMs) at TP = "
                     f"{int(overlap['tp'].iloc[0])}, of the (H, SL·B) cases: " + " · ".join(
                         f"m={m:g} {int(r.exposed)} of {int(r.cases)} (up to {r.worst:.0f}%)"
                         for m, r in per_m.iterrows()))
    models = [i for i in serial.index if not str(i).startswith("grid ")]
    if models and len(serial.columns):
        first, last = serial.columns[0], serial.columns[-1]
        lines.append(f"Models at their Eq. 10 TP, serialized share {first} → {last}: " + "; ".join(
            f"{i} {100 * serial.loc[i, first]:.1f}% → {100 * serial.loc[i, last]:.1f}%" for i in models))
    return lines


def _scenario_order(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows by configuration, m, then network scenario: DP inside a node, across nodes, with interference."""
    tier = rows["dp_tier"].map({"intra_node": 0, "inter_node": 1}).fillna(2)
    return rows.assign(_tier=tier).sort_values(["h", "sl", "b", "tp", "dp", "flop_vs_bw", "_tier", "dp_slowdown"]) \
        .drop(columns="_tier")


def case_topic(cache: FigureCache, con, part: Partition, *, max_m: int, recorded: float) -> Topic:
    """The case study of one partition (links placed): its figure at the drawn m, its rows
    sorted by m and scenario, and the exposed communication share of each scenario."""
    s, h = part.sweep, part.hardware
    n, digest = con.execute(f'SELECT {digest_sql(alias="p")} FROM "{PROJECTION}" p WHERE sweep = ? AND hardware = ?',
                            [s, h]).fetchone()
    rows = con.execute(f'SELECT * FROM "{PROJECTION}" WHERE sweep = ? AND hardware = ?', [s, h]).df()
    kept, left = choose_m(rows.loc[rows["status"] == "ok", "flop_vs_bw"].unique(), max_m)
    rows = rows[rows["flop_vs_bw"].isin(kept)]
    ok = _scenario_order(rows[rows["status"] == "ok"])
    section = Section(f"Case study {s} on {h} (Fig. 12)", "One large layer with TP inside a node and DP across nodes: "
                      "compute, serialized and exposed overlapped communication, as the DP links move off the node "
                      "and interference slows them." + (" " + _left_out(left, len(kept) + len(left)) if left else ""),
                      anchor=anchor_of(f"case study {s} {h}"))
    section.figures.append(cache.make(
        f"casestudy-{s}-{h}", f"Fig. 12: case study, {s} on {h}", f"{n}:{digest}|{kept}",
        lambda: figures.draw_case_study(rows),
        lambda: (f"Time per layer for each scenario; the communication share (on each bar) ranges from "
                 f"{100 * ok['comm_share'].min():.0f}% to {100 * ok['comm_share'].max():.0f}%. The hatched outline "
                 "is the whole DP all-reduce, hidden or not.")))
    scenario = [figures.casestudy.scenario_label(t, x).replace("\n", " ")
                for t, x in zip(ok["dp_tier"], ok["dp_slowdown"], strict=True)]
    table = ok.assign(scenario=scenario, **{c + "_ms": 1e3 * ok[c] for c in ("t_compute_s", "t_tp_comm_s",
                                                                              "exposed_comm_s")},
                      comm_share=(100 * ok["comm_share"]).round(1))
    section.tables.append((f"Case study rows, {s} on {h}, by m and network scenario (ms per layer; comm share in %)",
                           table[["h", "sl", "b", "tp", "dp", "flop_vs_bw", "scenario", "t_compute_s_ms",
                                  "t_tp_comm_s_ms", "exposed_comm_s_ms", "comm_share"]]))
    return Topic(section, _case_finding(s, h, table, section.anchor), frozenset({s}), recorded)


def _case_finding(sweep: str, hardware: str, table: pd.DataFrame, anchor: str):
    if table.empty:
        return None
    lines = []
    for (hs, sl, b, tp, dp), config in table.groupby(["h", "sl", "b", "tp", "dp"], sort=False):
        lines.append(f"H={hs:,}, SL={sl:,}, B={b}, TP={tp} in a node, DP={dp} across nodes: exposed communication, "
                     "share of the step, per network scenario: " + " · ".join(
                         f"m={m:g}: " + ", ".join(f"{r.scenario} {r.comm_share:.1f}%" for r in at.itertuples())
                         for m, at in config.groupby("flop_vs_bw", sort=False)))
    return Finding(f"Case study {sweep} on {hardware}", anchor, tuple(lines))


def no_case_study_topic(cache: FigureCache) -> Topic:
    """The case study's figure, skipped, when no sweep of the lake places its links."""
    return Topic(Section("Case study (Fig. 12)", figures=[
        cache.skip("casestudy", "Fig. 12: case study", CASE_STUDY, "case-study rows")]))


def no_projection_topics(cache: FigureCache) -> List[Topic]:
    """The grid's and the case study's figures, skipped, when the lake holds no projection rows."""
    grid = Section("The study's grid (Figs. 10 and 11)", figures=[
        cache.skip("serialized", "Fig. 10a: serialized fraction vs TP", PROJECTION, "projection rows"),
        cache.skip("overlapped", "Fig. 10b: overlapped communication vs SL·B", PROJECTION, "projection rows")])
    return [Topic(grid), no_case_study_topic(cache)]
