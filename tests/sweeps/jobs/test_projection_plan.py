"""Planning: the study's grid sizes, highlights by Eq. 10, stable keys."""

from __future__ import annotations

import dataclasses

import pyarrow.compute as pc

from sweeps.config import load_preset, load_run_config
from sweeps.jobs.projection import plan_points


def test_table2_plans_the_studys_analyses():
    plan = plan_points(load_run_config())
    points = plan.points.to_pandas()
    grid = points[points["label"] == ""]
    m1 = grid[grid["flop_vs_bw"] == 1.0]
    serialized = m1[m1["b"] == 1]
    assert len(serialized) == 196  # H x SL x TP, B factored out
    overlapped = m1[m1["tp"] == 16]
    assert (overlapped["sl"] * overlapped["b"]).nunique() == 6
    assert overlapped.groupby(overlapped["sl"] * overlapped["b"])["h"].nunique().eq(7).all()  # 7 x 6 = 42
    assert sorted(points["flop_vs_bw"].unique()) == [1.0, 2.0, 4.0]
    assert len(grid) == 7 * 4 * 2 * 7 * 3


def test_highlights_take_the_tp_of_eq10_rounded_up_to_a_power_of_two():
    config = load_run_config(["sweep.highlights=[gpt3]"])
    plan = plan_points(config)
    (gpt3,) = plan.highlights
    hbm = config.hardware.hbm_gb
    expected = 8 * (load_preset("model", "gpt3").params_b / load_preset("model", "megatron-8.3b").params_b) / (hbm / 32)
    assert abs(gpt3.tp_eq10 - expected) < 1e-9
    assert gpt3.tp >= gpt3.tp_eq10 > gpt3.tp / 2
    rows = plan.points.filter(pc.equal(plan.points.column("label"), "highlight:gpt3"))
    assert set(rows.column("tp").to_pylist()) == {gpt3.tp}
    assert set(rows.column("h").to_pylist()) == {12288}


def test_keys_are_unique_and_stable():
    first = plan_points(load_run_config()).points.column("key").to_pylist()
    second = plan_points(load_run_config()).points.column("key").to_pylist()
    assert first == second
    assert len(set(first)) == len(first)


def test_keys_change_with_the_hardware_figures_not_its_prose():
    config = load_run_config(["sweep=smoke"])
    base = set(plan_points(config).points.column("key").to_pylist())
    reworded = dataclasses.replace(config, hardware=dataclasses.replace(config.hardware, description="other words"))
    assert set(plan_points(reworded).points.column("key").to_pylist()) == base
    faster = load_run_config(["sweep=smoke", "hardware.peak_tflops=362.0"])
    assert set(plan_points(faster).points.column("key").to_pylist()).isdisjoint(base)


def test_the_same_point_in_two_sweeps_has_two_keys():
    first = set(plan_points(load_run_config(["sweep=smoke"])).points.column("key").to_pylist())
    renamed = set(plan_points(load_run_config(["sweep=smoke", "sweep.name=smoke2"])).points.column("key").to_pylist())
    assert len(first) == len(renamed) and first.isdisjoint(renamed)


def test_a_selected_model_replaces_the_grid_of_hidden_sizes():
    plan = plan_points(load_run_config(["model=gpt3", "sweep=smoke", "sweep.highlights=[]"]))
    points = plan.points.to_pandas()
    assert set(points["h"]) == {12288}
    assert set(points["heads"]) == {96}
    assert set(points["label"]) == {"gpt3"}
