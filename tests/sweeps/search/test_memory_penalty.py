"""A layout over memory tells the sampler how near it came: its step time had it fit,
stretched by its overshoot (``tasks.model.search.penalty``), under the ``step_time``
objective; its row stays infeasible, a study's best is picked among feasible trials, each
told trial carries its row's status, and a study rebuilt from the lake is told the same.

Real searches of the ``moe`` preset (in this process, the step model, no Ray), real
journals, a real lake."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweeps.config import load_search
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.search import local_evaluator, open_study, run_search, study_path
from sweeps.search.params import STATUS_ATTR, feasible_trials
from sweeps.search.results import optimum_gap
from tasks.model.search.penalty import MEMORY_PENALTY_EXPONENT, sampler_values
from tasks.model.search.space import exhaustive
from tasks.model.step.plan import STATUS_CODES

#: The ``moe`` search, TPE alone: most of its layouts do not fit an H100.
MOE = ["moe", "seed=4", "trials=48", "batch=8"]


def _search(root, *extra: str):
    setup = load_search([*MOE, *extra])
    lake = Lake(str(root))
    run_search(setup, lake, evaluator=local_evaluator(setup), warm_start=False)
    rows = lake.dataset(SEARCH).to_table().to_pandas().sort_values("trial").reset_index(drop=True)
    return setup, lake, rows


def test_step_columns_keep_a_layout_over_memorys_step_time_and_only_its():
    setup = load_search(["moe"])
    _, costs = exhaustive(setup.spec.space, setup.step_context)
    status = costs["status_code"]
    over = status == len(STATUS_CODES) - 1     # the last code: over memory
    structural = (status != 0) & ~over
    assert over.sum() > 1000 and structural.sum() > 1000 and (status == 0).sum() > 1000
    assert np.array_equal(costs["step_time_if_fit_s"][status == 0], costs["step_time_s"][status == 0])
    assert np.all(np.isfinite(costs["step_time_if_fit_s"][over])) and np.all(np.isnan(costs["step_time_s"][over]))
    assert np.all(np.isnan(costs["step_time_if_fit_s"][structural]))


def test_the_penalty_grows_with_the_overshoot_and_other_objectives_tell_the_worst():
    feasible = np.array([True, False, False, False])
    values = np.array([10.0, np.nan, np.nan, np.nan])
    if_fit = np.array([10.0, 8.0, 8.0, np.nan])
    memory = np.array([50.0, 105.0, 200.0, np.nan])
    told = sampler_values("step_time", values, feasible, if_fit, memory, 100.0)
    assert told[0] == 10.0 and math.isnan(told[3])
    assert told[1] == pytest.approx(8.0 * 1.05 ** MEMORY_PENALTY_EXPONENT) and told[2] > told[1] > 8.0
    assert np.isnan(sampler_values("exposed_comm", values, feasible, if_fit, memory, 100.0)[1:]).all()


def test_a_layout_over_memory_is_told_its_penalised_step_time_and_stays_infeasible(tmp_path):
    setup, lake, rows = _search(tmp_path / "lake")
    limit = setup.step_context.memory_limit_bytes
    over = rows["reason"].fillna("").str.startswith("memory")
    structural = (rows["status"] == "infeasible") & ~over
    assert over.sum() >= 3 and structural.any() and (rows["status"] == "ok").any()
    assert rows.loc[over, "objective"].isna().all() and rows.loc[over, "step_time_s"].isna().all()
    expected = rows.loc[over, "step_time_if_fit_s"] * (rows.loc[over, "memory_per_device_bytes"] / limit) \
        ** MEMORY_PENALTY_EXPONENT
    assert np.allclose(rows.loc[over, "sampler_value"], expected)

    study = open_study(setup, study_path(lake, setup))
    trials = {t.number: t for t in study.trials}
    for _, row in rows.iterrows():
        trial = trials[row["trial"]]
        assert trial.user_attrs[STATUS_ATTR] == row["status"]
        if row["status"] == "ok":
            assert trial.value == row["objective"]
        elif over[_]:
            assert trial.value == pytest.approx(row["sampler_value"]) and math.isfinite(trial.value)
        else:
            assert trial.value == math.inf
    assert [t.number for t in feasible_trials(study)] == rows.loc[rows["status"] == "ok", "trial"].tolist()
    # Layouts over memory told less than the feasible best do not become the search's best.
    gap = optimum_gap(setup, rows)
    assert gap.best == rows.loc[rows["status"] == "ok", "objective"].min() >= gap.optimum
    assert (rows.loc[over, "sampler_value"] < gap.best).any()    # told less, yet not the best


def test_a_study_rebuilt_from_the_lake_is_told_the_same_values_and_statuses(tmp_path):
    setup, lake, _ = _search(tmp_path / "lake")
    path = study_path(lake, setup)
    before = [(t.number, t.value, t.user_attrs.get(STATUS_ATTR)) for t in open_study(setup, path).trials]
    path.unlink()
    run_search(setup, lake, evaluator=local_evaluator(setup), warm_start=False)
    after = [(t.number, t.value, t.user_attrs.get(STATUS_ATTR)) for t in open_study(setup, path).trials]
    assert after == before and any(math.isfinite(v) and s == "infeasible" for _, v, s in after)
