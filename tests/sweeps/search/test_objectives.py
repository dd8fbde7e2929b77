"""Every objective ends a search with the optimum line and the "why it wins" line, a zero
optimum included, and ties on an objective are broken by step time, then memory: in the
winner, the top layouts and the optimum gap."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.config import load_search
from sweeps.lake import Lake
from sweeps.search import run_search
from sweeps.search.results import exhaustive_frame, optimum_gap, study_rows, top_layouts
from tasks.model.search.rows import OBJECTIVES

#: 12 layouts of Megatron 8.3B on 4 A100 whose best exposes nothing: one replica (DP 1: no
#: gradient reduction, whose last bucket no backward hides) of an interleaved pipeline whose
#: sends hide behind its compute.
ZERO_BEST = ["small", "stack=megatron-core-2024", "devices=4", "space.tp=[1]", "space.pp=[2,4]",
             "space.micro_batch=[2]", "space.schedule=[interleaved]", "space.virtual_stages=[2]",
             "space.zero=[none,zero3]", "space.sequence_parallel=[false]", "space.recompute=[none,selective,full]",
             "trials=8", "batch=4"]
#: A space with several layouts exposing nothing whose step times differ, a slower one
#: enumerated before the fastest of them.
TIES = ["small", "stack=megatron-core-2024", "devices=4", "space.tp=[1]", "space.pp=[2,4]", "space.micro_batch=[2]",
        "space.schedule=[interleaved]", "space.virtual_stages=[2]", "space.zero=[none,zero3]",
        "space.sequence_parallel=[false]", "space.recompute=[none,selective,full]", "objective=exposed_comm"]


def test_the_spaces_best_exposes_nothing():
    for objective in ("exposed_comm", "exposed_comm_share"):
        frame = exhaustive_frame(load_search([*ZERO_BEST, f"objective={objective}"]))
        assert frame[OBJECTIVES[objective][0][0]].iloc[0] == 0.0


@pytest.mark.parametrize("objective", list(OBJECTIVES))
def test_every_objective_ends_with_the_optimum_and_why_lines_when_the_best_exposes_nothing(tmp_path, objective):
    lake = str(tmp_path / "lake")
    for run in range(2):  # a rerun resumes the study and prints the same lines
        result = CliRunner().invoke(main, ["search", *ZERO_BEST, f"objective={objective}", "--lake", lake])
        assert result.exit_code == 0, (run, result.output)
        assert "Exhaustive optimum of the space" in result.stdout or "Exhaustive Pareto front" in result.stdout
        assert "Why " in result.stdout, result.stdout
    space = [item for item in ZERO_BEST if not item.startswith(("trials=", "batch="))]
    exhaustive = CliRunner().invoke(main, ["search", *space, f"objective={objective}", "--exhaustive"])
    assert exhaustive.exit_code == 0, exhaustive.output
    assert "Why " in exhaustive.stdout


def _tie_broken(frame):
    """The rows at the best objective value, fastest first, then the leanest."""
    return frame.sort_values(["step_time_s", "memory_per_device_bytes"], kind="stable")


def test_ties_on_the_objective_are_broken_by_step_time_then_memory_not_by_order(tmp_path):
    setup = load_search([*TIES, "trials=6", "batch=6"])
    frame = exhaustive_frame(setup)
    zero = frame[frame["exposed_comm_s"] == 0.0]
    assert len(zero) >= 4 and zero["step_time_s"].nunique() > 1
    fastest = _tie_broken(zero).iloc[0]
    assert frame.iloc[0]["step_time_s"] == fastest["step_time_s"]  # the exhaustive winner
    assert list(frame.head(len(zero))["step_time_s"]) == sorted(zero["step_time_s"])  # and its table

    lake = Lake(str(tmp_path / "lake"))
    report = run_search(setup, lake)
    rows = study_rows(lake, setup.study_name).sort_values("trial")
    # the fastest layout exposing nothing tried last: the winner must not follow the trial order
    rows["trial"] = rows["trial"].max() - rows["trial"]
    ok = rows[rows["status"] == "ok"]
    top = top_layouts(rows, setup.spec.objective)
    best_zero = _tie_broken(ok[ok["exposed_comm_s"] == 0.0])
    assert top.iloc[0]["step_time_s"] == best_zero.iloc[0]["step_time_s"]
    assert list(top.head(len(best_zero))["step_time_s"]) == list(best_zero.drop_duplicates(
        subset=["tp", "pp", "zero", "recompute"])["step_time_s"])
    gap = optimum_gap(setup, rows, warm_start=report.warm_start)
    assert gap.optimum == 0.0 and gap.gap == 0.0
    assert gap.optimum_step_time_s == fastest["step_time_s"] and gap.step_time_gap == 0.0
