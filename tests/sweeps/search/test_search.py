"""Layout search end to end: bad input refused before any work, infeasible layouts kept as
rows, reconciliation of trials a dead driver left RUNNING, a search that finds the
enumerated optimum on real Ray, a SIGKILLed driver resumed to the exact trial count, and
the scaling view in the lake."""

from __future__ import annotations

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner
from optuna.trial import TrialState

from analysis.query import query
from sweeps.cli import main
from sweeps.lake import Lake
from sweeps.jobs.search import trial_key
from sweeps.lake.kinds import SEARCH as KIND
from sweeps.search import local_evaluator, open_study, run_search, study_path, suggest_layout
from sweeps.config import load_search
from tasks.model.search.space import best_index, exhaustive
from tasks.model.search.rows import SEARCH_SCHEMA_VERSION, TRIAL_FIELDS, SearchContext, evaluate_trials

COMMSCALE = str(Path(sys.executable).with_name("commscale"))
TINY = ["small", "space.tp=[2,4,8]", "space.pp=[1,2]", "space.micro_batch=[1]", "space.schedule=[1f1b]",
        "space.zero=[none,zero3]", "space.sequence_parallel=[true]", "space.recompute=[none,selective]"]


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


@pytest.mark.parametrize("overrides, message", [
    (["space.tp=[5,7]"], "no TP in the space divides model.heads=24"),
    (["devices=7"], "tp_pp_divides_devices fails for"),
    (["space.tp=[1]", "space.pp=[1]", "global_batch=24", "trials=36"], "batch_divisible fails for 36 of 36"),
    (["model=gpt3"], "memory: all"),
    (["objective=fastest"], "search.objective='fastest'"),
    (["space.zero=[zero2]"], "search.space.zero='zero2'"),
    (["model.kv_heads=5"], "model.kv_heads=5: does not divide model.heads=24"),
    (["model.kv_heads=48"], "model.kv_heads=48: does not divide model.heads=24"),
    (["model.heads=7"], "model.heads=7: does not divide model.hidden="),
])
def test_bad_input_exits_2_with_the_failed_constraint_and_leaves_no_lake(tmp_path, overrides, message):
    lake = tmp_path / "lake"
    result = CliRunner().invoke(main, ["search", "small", *overrides, "--lake", str(lake)])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not lake.exists()


def test_an_unknown_preset_exits_2(tmp_path):
    result = CliRunner().invoke(main, ["search", "no-such-search", "--lake", str(tmp_path / "lake")])
    assert result.exit_code == 2 and "unknown preset" in result.output


def test_infeasible_layouts_are_recorded_not_crashed_on(tmp_path):
    setup = load_search(["small", "trials=30"])
    lake = Lake(str(tmp_path / "lake"))
    report = run_search(setup, lake, evaluator=local_evaluator(setup))
    assert report.completed_now == 30 and not report.failures
    rows = query(lake, "SELECT status, reason, objective, trial FROM search").to_pylist()
    assert len(rows) == 30 and sorted(r["trial"] for r in rows) == list(range(30))
    infeasible = [r for r in rows if r["status"] == "infeasible"]
    assert infeasible and all(r["reason"] and math.isnan(r["objective"]) for r in infeasible)
    assert all(r["reason"] is None and r["objective"] > 0 for r in rows if r["status"] == "ok")
    study = open_study(setup, study_path(lake, setup))
    told = {t.number: t.value for t in study.trials}
    # a structural break is told the worst value; a layout over memory its stretched time (search.penalty)
    assert all(told[r["trial"]] == math.inf for r in infeasible if not r["reason"].startswith("memory"))
    assert all(0 < told[r["trial"]] < math.inf for r in infeasible if r["reason"].startswith("memory"))
    assert sum(v == math.inf for v in told.values()) == sum(not r["reason"].startswith("memory")
                                                            for r in infeasible)


def test_trials_left_running_are_settled_from_the_lake_or_asked_again(tmp_path):
    setup = load_search(["small", "trials=12", "batch=3"])
    lake = Lake(str(tmp_path / "lake"))
    study = open_study(setup, study_path(lake, setup), seed=0)
    stranded = [study.ask() for _ in range(2)]  # a driver that died mid-batch
    layouts = [suggest_layout(t, setup.spec.space) for t in stranded]
    committed = pa.Table.from_pylist([{
        "key": trial_key(setup.study_name, stranded[0].number, layouts[0]), "study": setup.study_name,
        "model": setup.model.name,
        "hardware": setup.hardware.name, "devices": setup.spec.devices, "global_batch": setup.spec.global_batch,
        "trial": stranded[0].number, "dp": 0, **layouts[0]}], schema=TRIAL_FIELDS)
    row = evaluate_trials(committed, SearchContext(setup.step_context, setup.spec.objective,
                                                   tuple(setup.record().items())))
    lake.commit(KIND, {"sweep": setup.study_name, "hardware": setup.hardware.name}, row,
                schema_version=SEARCH_SCHEMA_VERSION)  # its row landed, no tell

    report = run_search(setup, lake, evaluator=local_evaluator(setup))
    assert (report.told_from_lake, report.reasked, report.completed_before) == (1, 1, 1)
    study = open_study(setup, study_path(lake, setup))
    states = [t.state for t in study.trials]
    assert states.count(TrialState.COMPLETE) == 12 and states.count(TrialState.FAIL) == 1
    assert TrialState.RUNNING not in states
    again = study.trials[2]  # the failed trial's layout, enqueued, is asked first
    assert again.params == stranded[1].params and again.state == TrialState.COMPLETE
    keys = {r["key"] for r in query(lake, "SELECT key FROM search").to_pylist()}
    assert keys == {trial_key(setup.study_name, t.number, suggest_layout(t, setup.spec.space))
                    for t in study.trials if t.state == TrialState.COMPLETE}



def test_a_second_journal_of_one_study_is_rebuilt_from_the_lake_not_mixed_into_it(tmp_path):
    """A trial number means a layout only within its journal: a second journal of a study
    whose rows are in the lake is told those rows first, so the lake holds one sequence of
    trials (it held two, 12 rows for a 6-trial study), and both journals read the same layouts."""
    lake = Lake(str(tmp_path / "lake"))
    setups = {seed: load_search(["small", "trials=6", "batch=3", f"seed={seed}"]) for seed in (1, 2)}
    assert setups[1].study_name == setups[2].study_name  # the seed is no part of a study's name
    for seed, setup in setups.items():
        report = run_search(setup, lake, storage=str(tmp_path / f"{seed}.journal"), evaluator=local_evaluator(setup),
                            warm_start=False)
        assert report.failures == []
    assert report.completed_now == 0 and any("rebuilt from the lake's 6 rows" in n for n in report.notes)
    rows = query(lake, f"SELECT key, trial, tp, pp, micro_batch, schedule, zero, recompute FROM {KIND}").to_pylist()
    assert len(rows) == 6 and sorted(r["trial"] for r in rows) == list(range(6))
    setup = setups[1]
    for seed in setups:
        study = open_study(setup, tmp_path / f"{seed}.journal")
        assert len(study.trials) == 6
        for trial in study.trials:
            layout = suggest_layout(trial, setup.spec.space)
            (row,) = [r for r in rows if r["key"] == trial_key(setup.study_name, trial.number, layout)]
            assert (row["tp"], row["pp"], row["zero"], row["recompute"]) == (
                layout["tp"], layout["pp"], layout["zero"], layout["recompute"])
            assert row["trial"] == trial.number


def test_scaling_rows_name_the_winner_or_why_nothing_fits(tmp_path):
    from sweeps.jobs.scaling import scaling_job

    setup = load_search(["small", "scaling.models=[megatron-8.3b,gpt3]", "scaling.devices=[8,64]",
                         "scaling.global_batch=64"], scaling=True)
    job = scaling_job(setup)
    rows = {(r["model"], r["devices"]): r for r in job.workload.body(job.points, job.workload.context).to_pylist()}
    assert rows[("gpt3", 8)]["status"] == "infeasible" and "memory: all" in rows[("gpt3", 8)]["reason"]
    best = rows[("megatron-8.3b", 64)]
    assert best["status"] == "ok" and best["tp"] * best["pp"] * best["dp"] == 64
    assert best["winner_family"] and best["latency_s"] > 0 and best["feasible_layouts"] > 0



def test_the_scaling_view_costs_layouts_with_the_search_stack():
    from sweeps.jobs.scaling import scaling_job

    point = ["small", "scaling.models=[megatron-8.3b]", "scaling.devices=[16]", "scaling.global_batch=64"]
    setups = [load_search(point, scaling=True), load_search(point + ["stack=megatron-core-2024"], scaling=True)]
    jobs = [scaling_job(setup) for setup in setups]
    assert jobs[0].points.column("key") != jobs[1].points.column("key")  # another stack, other rows
    for setup, job in zip(setups, jobs, strict=True):
        (row,) = job.workload.body(job.points, job.workload.context).to_pylist()
        _, costs = exhaustive(setup.spec.space, setup.step_context)  # the search's own context, stack included
        assert row["step_time_s"] == pytest.approx(costs["step_time_s"][best_index(costs)], rel=1e-12)

@pytest.mark.ray
@pytest.mark.slow
def test_a_search_on_a_small_space_finds_the_enumerated_optimum_on_ray(tmp_path):
    lake = tmp_path / "lake"
    result = subprocess.run([COMMSCALE, "search", *TINY, "trials=24", "batch=4", "--lake", str(lake),
                             "--num-cpus", "2"], env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "embedded Ray on 127.0.0.1" in result.stdout and "auth: token" in result.stdout
    setup = load_search(TINY)
    _, costs = exhaustive(setup.spec.space, setup.step_context)
    optimum = costs["step_time_s"][best_index(costs)]
    (found,) = query(Lake(str(lake)), "SELECT min(objective) AS best, count(*) AS n FROM search WHERE status = 'ok'")\
        .to_pylist()
    assert found["best"] == pytest.approx(optimum, rel=1e-12)
    assert "within 0.00%" in result.stdout


@pytest.mark.ray
@pytest.mark.slow
@pytest.mark.chaos
def test_a_killed_search_resumes_at_its_trial_count(tmp_path):
    lake = tmp_path / "lake"
    args = [COMMSCALE, "search", "small", "trials=120", "batch=2", "--lake", str(lake), "--num-cpus", "1"]
    driver = subprocess.Popen(args, env=_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                              start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while not (lake / "_log").exists() or len(Lake(str(lake)).keys(KIND)) < 10:
            assert driver.poll() is None, "the search ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
    before = len(Lake(str(lake)).keys(KIND))
    assert 10 <= before < 120

    resumed = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    assert "120 trials:" in resumed.stdout
    setup = load_search(["small"])
    study = open_study(setup, study_path(Lake(str(lake)), setup))
    complete = [t for t in study.trials if t.state == TrialState.COMPLETE]
    assert len(complete) == 120 and not [t for t in study.trials if t.state == TrialState.RUNNING]
    keys = [r["key"] for r in query(Lake(str(lake)), "SELECT key FROM search").to_pylist()]
    assert len(keys) == len(set(keys)) == 120
    assert set(keys) == {trial_key(setup.study_name, t.number, suggest_layout(t, setup.spec.space))
                         for t in complete}


@pytest.mark.ray
@pytest.mark.slow
def test_the_scaling_view_lands_in_the_lake(tmp_path):
    lake = tmp_path / "lake"
    args = [COMMSCALE, "search", "small", "scaling.models=[megatron-8.3b,gpt3]", "scaling.devices=[8,32,128]",
            "scaling.global_batch=128", "--scaling", "--lake", str(lake), "--num-cpus", "2"]
    result = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "Best layout per device count" in result.stdout and "no layout fits" in result.stdout
    rows = query(Lake(str(lake)), "SELECT model, devices, status, winner_family, tokens_per_s_per_device "
                                  "FROM scaling ORDER BY model, devices").to_pylist()
    assert len(rows) == 6 and {r["status"] for r in rows} == {"ok", "infeasible"}
    again = subprocess.run(args, env=_env(), capture_output=True, text=True, timeout=300)
    assert again.returncode == 0 and "0 new, 6 already in the lake" in again.stdout
