"""What the report's tables and findings say: the best layouts of a search are distinct
layouts with the reason the first one wins, and the case study's overlap summary counts
network scenarios, not hidden sizes, and says its range is over scenarios."""

from __future__ import annotations

import re

import pandas as pd
from rich.console import Console

from analysis.report_search import _study_line, best_layouts, objective_of
from analysis.summary import render_summary
from sweeps.lake.views import connect


def _repeated(search_rows: pd.DataFrame) -> pd.DataFrame:
    """Study a's best layout (trial 4) tried by eight trials, as a sampler re-proposes it."""
    best = search_rows[search_rows["trial"] == 4]
    again = pd.concat([best.assign(trial=10 + i, key=f"again{i}") for i in range(8)])
    return pd.concat([search_rows, again], ignore_index=True).assign(objective=lambda r: r["tokens_per_s_per_device"])


def test_best_layouts_are_distinct_and_count_their_trials(search_rows):
    best = best_layouts(_repeated(search_rows))
    a = best[best["study"] == "a"]
    assert len(a) == len(a["layout"].unique()) == 4  # four distinct feasible layouts, not eight copies of one
    assert list(a["tokens_per_s_per_device"]) == [1500.0, 1200.0, 1000.0, 900.0]
    assert a["trials"].iloc[0] == 9 and a["layout"].iloc[0] == "tp2 pp8 dp4 b1 zero1"
    assert list(best["study"].unique()) == ["a", "b"]


def test_the_objective_is_read_from_the_rows_and_the_finding_says_why(search_rows):
    rows = _repeated(search_rows)
    assert objective_of(rows[rows["status"] == "ok"]) == ("tokens_per_s_per_device", "maximize")
    by_step = rows.assign(objective=rows["step_time_s"] * rows["trial"])  # no column matches: the default
    assert objective_of(by_step.dropna(subset=["objective"])) == ("tokens_per_s_per_device", "maximize")
    a = rows[rows["study"] == "a"]
    line = _study_line("a", a[a["status"] == "ok"], a)
    assert "best layout tp2 pp8 dp4 b1 zero1 at 1,500 tokens/s/device" in line
    assert "highest tokens/s/device of the 4 distinct feasible layouts tried" in line
    assert "the runner-up tp8 pp4 dp2 b1 zero1 has 1200" in line and "(1 infeasible trials)" in line


def _summary(lake, sweep: str, overlap_tp: int) -> str:
    console = Console(record=True, width=200)
    con = connect(lake)
    try:
        render_summary(console, con, sweep=sweep, hardware="mi210x4", title=sweep, overlap_tp=overlap_tp)
    finally:
        con.close()
    return " ".join(console.export_text().split())  # titles wrap to the width of their table


def test_the_case_study_summary_counts_network_scenarios(study_lake, projection_rows):
    text = _summary(study_lake, "casestudy", 4)
    assert "range over network scenarios (k/n: k of n scenarios exposed" in text and "range over H" not in text
    case = projection_rows[projection_rows["sweep"] == "casestudy"]
    exposed = (case["overlap_percent"] > 100).groupby(case["flop_vs_bw"]).sum()  # of three scenarios at each m
    cells = re.findall(r"\((\d+)/(\d+)\)", text)
    assert [(int(k), int(n)) for k, n in cells] == [(int(exposed[m]), 3) for m in sorted(exposed.index)]
    assert exposed.max() > 1  # more exposed scenarios than hidden sizes: the old count read "(2/1)"
    assert "grid median (1 configs)" in text  # one configuration under three scenarios


def test_a_grid_summary_still_ranges_over_hidden_sizes(study_lake):
    text = _summary(study_lake, "smoke", 16)
    assert "range over H (k/n: k of n hidden sizes exposed" in text and "(2/2)" in text
