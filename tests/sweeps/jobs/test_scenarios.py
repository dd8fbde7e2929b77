"""Network scenarios of a sweep (``sweep.scenarios``) and the case-study preset."""

from __future__ import annotations

import pytest

from sweeps.config import load_run_config
from sweeps.errors import ConfigError
from sweeps.jobs.projection import projection_job
from sweeps.jobs.projection import plan_points
from tasks.model.projection.grid import project_table


def test_the_case_study_plans_every_m_under_every_scenario():
    config = load_run_config(["sweep=casestudy"])
    points = plan_points(config).points.to_pandas()
    assert len(points) == 3 * 3 and points["key"].nunique() == 9
    assert sorted(set(zip(points["links"], points["dp_slowdown"], strict=True))) == [
        ("ideal", 1.0), ("placed", 1.0), ("placed", 1.3)]
    rows = project_table(plan_points(config).points, config.hardware).to_pandas()
    assert set(rows["tp_tier"]) == {"intra_node"}  # TP stays inside a node
    assert set(rows.loc[rows["links"] == "placed", "dp_tier"]) == {"inter_node"}
    at_1 = rows[rows["flop_vs_bw"] == 1].set_index(["links", "dp_slowdown"])["exposed_comm_s"]
    assert at_1[("ideal", 1.0)] <= at_1[("placed", 1.0)] < at_1[("placed", 1.3)]


def test_a_sweep_without_scenarios_keeps_its_single_placement_and_fingerprint():
    job, plan = projection_job(load_run_config(["sweep=smoke"]))
    assert "sweep.scenarios" not in job.config
    assert set(plan.points.column("links").to_pylist()) == {"ideal"}
    with_one = projection_job(
        load_run_config(["sweep=smoke", "sweep.scenarios=[{links: placed, dp_slowdown: 1.5}]"]))[0]
    assert with_one.config["sweep.scenarios"] == [{"links": "placed", "dp_slowdown": 1.5}]
    assert with_one.sweep_fingerprint != job.sweep_fingerprint
    assert set(with_one.points.column("dp_slowdown").to_pylist()) == {1.5}


@pytest.mark.parametrize("override, key", [
    ("sweep.scenarios=[{links: placed, dp_slowdown: 0.5}]", "sweep.scenarios[0].dp_slowdown"),
    ("sweep.scenarios=[{links: nowhere}]", "sweep.scenarios"),
])
def test_bad_scenarios_fail_naming_the_field(override, key):
    with pytest.raises(ConfigError, match=key.replace("[", r"\[").replace("]", r"\]")):
        load_run_config(["sweep=smoke", override])
