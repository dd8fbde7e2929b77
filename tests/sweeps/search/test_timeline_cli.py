"""``commscale timeline``: which layout it draws (a stored study's best, else the exhaustive
optimum, then layout overrides), the trace it writes, and bad input refused before any work."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.config import load_search
from sweeps.lake import Lake
from sweeps.search.results import exhaustive_frame, layout_of, study_rows, top_layouts


def _timeline(tmp_path, *args: str):
    result = CliRunner().invoke(main, ["timeline", *args, "--lake", str(tmp_path / "lake"),
                                       "-o", str(tmp_path / "t.json")])
    return result, (json.loads((tmp_path / "t.json").read_text()) if (tmp_path / "t.json").exists() else None)


def _processes(trace) -> list:
    return sorted(e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "process_name")


def _end_s(trace) -> float:
    return max(e["ts"] + e["dur"] for e in trace["traceEvents"] if e["ph"] == "X") / 1e6


def test_without_a_stored_study_it_draws_the_exhaustive_optimum_and_writes_no_lake(tmp_path):
    result, trace = _timeline(tmp_path, "small")
    assert result.exit_code == 0, result.output
    best = exhaustive_frame(load_search(["small"], exhaustive=True)).iloc[0]
    assert trace["otherData"]["layout"] == layout_of(best).describe()
    assert "exhaustive optimum" in trace["otherData"]["layout_source"]
    assert _end_s(trace) == pytest.approx(best["step_time_s"], rel=1e-3)
    assert "https://ui.perfetto.dev" in result.output and not (tmp_path / "lake").exists()


def test_a_stored_study_gives_its_best_layout(tmp_path):
    search = CliRunner().invoke(main, ["search", "small", "trials=8", "batch=4", "--lake", str(tmp_path / "lake")])
    assert search.exit_code == 0, search.output
    setup = load_search(["small"])
    stored = layout_of(top_layouts(study_rows(Lake(str(tmp_path / "lake")), setup.study_name), "step_time").iloc[0])
    result, trace = _timeline(tmp_path, "small")
    assert result.exit_code == 0, result.output
    assert trace["otherData"]["layout"] == stored.describe()
    assert trace["otherData"]["layout_source"] == f"the best stored layout of study {setup.study_name}"


@pytest.mark.parametrize("pp, shown", [(4, ["stage 0 (first)", "stage 1", "stage 2", "stage 3 (last)"]),
                                       (16, ["stage 0 (first)", "stage 15 (last)"])])
def test_layout_overrides_choose_the_layout_and_each_stage_drawn_is_a_process(tmp_path, pp, shown):
    result, trace = _timeline(tmp_path, "default", f"layout.pp={pp}", "layout.tp=4", "layout.micro_batch=1",
                              "layout.schedule=1f1b", "layout.virtual_stages=1")
    assert result.exit_code == 0, result.output
    assert trace["otherData"]["layout"].startswith(f"tp4 pp{pp} dp{256 // (4 * pp)} b1")
    assert _processes(trace) == sorted(shown)
    assert _end_s(trace) == pytest.approx(trace["otherData"]["step_time_s"], rel=1e-3)


def test_a_context_parallel_layout_draws_its_exchange_and_dp_follows_cp(tmp_path):
    result, trace = _timeline(tmp_path, "default", "layout.cp=2", "layout.cp_comm=all_gather", "layout.tp=8",
                              "layout.pp=1", "layout.schedule=1f1b", "layout.virtual_stages=1")
    assert result.exit_code == 0, result.output
    assert trace["otherData"]["layout"].startswith("tp8 cp2(ag) pp1 dp16")
    tracks = {e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    exchanged = [e for e in trace["traceEvents"] if e.get("cat") == "cp"]
    assert "cp" in tracks and exchanged and all(e["args"]["exposed_us"] == pytest.approx(e["dur"]) for e in exchanged)
    assert _end_s(trace) == pytest.approx(trace["otherData"]["step_time_s"], rel=1e-3)


@pytest.mark.parametrize("args, says", [(["layout.tp=3"], "tp_divides_heads"), (["layout.dp=7"], "256 devices"),
                                        (["layout.zero=zero2"], "must be one of"), (["-o", "."], "is a folder"),
                                        (["small", "layout.cp=2"], "layout.cp=2: needs fused (flash) attention"),
                                        (["layout.cp_comm=ring"], "must be one of p2p, all_gather")])
def test_bad_input_is_refused_in_one_line_and_nothing_is_written(tmp_path, args, says):
    result = CliRunner().invoke(main, ["timeline", *args, "--lake", str(tmp_path / "lake")] +
                                ([] if "-o" in args else ["-o", str(tmp_path / "t.json")]))
    assert result.exit_code == 2 and says in result.output and len(result.output.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == []
