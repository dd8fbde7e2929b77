"""Hardware co-design (tasks.model.codesign): knobs applied to a profile, their assumed cost,
points costed by the step model, and the front and hypervolume a sampler is judged by."""

from __future__ import annotations

import math

import numpy as np
import pytest

from sweeps.config import load_preset
from sweeps.config.search import load_stack
from tasks.model.codesign.evaluate import CodesignProblem, evaluate_points, exhaustive_points, knob_points
from tasks.model.codesign.knobs import HBM_PARTS, CostModel, Knobs, apply, cluster_cost, device_cost
from tasks.model.codesign.pareto import front_indices, hypervolume
from tasks.model.search.space import LayoutSpace, exhaustive
from tasks.model.step.plan import StepContext

POINT = {"devices": 1024, "domain": 72, "scale_up": 2.0, "scale_out": 0.5, "hbm_gb": 192, "flops": 4.0}
SPACE = LayoutSpace(tp=[2, 4, 8], pp=[1, 2, 4], micro_batch=[1, 2], schedule=["1f1b"], zero=["zero1", "fsdp"],
                    sequence_parallel=[True], recompute=["none", "full"])


@pytest.fixture(scope="module")
def problem():
    h100 = load_preset("hardware", "h100")
    return CodesignProblem(load_preset("model", "llama3-70b"), h100, load_stack("megatron-core-2024", h100),
                           global_batch=1024, tokens=1.5e13, cost=CostModel())


def test_knobs_change_the_profile_as_stated(problem):
    base = problem.base
    hw = apply(base, POINT)
    assert hw.devices_per_node == 72 and hw.hbm_gb == 192 and hw.hbm_tbps == HBM_PARTS[192] == 8.0
    assert hw.peak_tflops == 4 * base.peak_tflops and hw.peak_fp8_tflops == 4 * base.peak_fp8_tflops
    assert hw.intra_node.bandwidth_GBps == 2 * base.intra_node.bandwidth_GBps
    assert hw.inter_node.bandwidth_GBps == 0.5 * base.inter_node.bandwidth_GBps
    assert hw.intra_node.latency_us == base.intra_node.latency_us and hw.compute_units == base.compute_units
    with pytest.raises(ValueError, match="hbm_gb=100"):
        apply(base, {**POINT, "hbm_gb": 100})


def test_the_assumed_cost_grows_with_every_knob():
    cost = CostModel()
    one = device_cost(POINT, cost)
    expected = (20000 * 4 ** 0.7 + 15 * 192 + 3000 * 2 * (1 + math.log2(72 / 8) * 0.33) + 2500 * 0.5)
    assert one == pytest.approx(expected) and cluster_cost(POINT, cost) == pytest.approx(1024 * one)
    for knob, more in (("flops", 8.0), ("hbm_gb", 288), ("scale_up", 4.0), ("scale_out", 1.0), ("domain", 144)):
        assert device_cost({**POINT, knob: more}, cost) > one, knob


def test_points_are_costed_as_the_step_model_costs_their_layouts(problem):
    layout = {"tp": 8, "pp": 2, "micro_batch": 1, "schedule": "1f1b", "virtual_stages": 1, "zero": "zero1",
              "sequence_parallel": True, "recompute": "none", "cp": 1, "cp_comm": "p2p", "ep": 1, "etp": 1,
              "dispatcher": "alltoall"}
    impossible = {**layout, "tp": 3}
    rows = evaluate_points(problem, [{**POINT, **layout}, {**POINT, **impossible}, {**POINT, "flops": 1.0, **layout}])
    fast, broken, slow = rows
    assert fast["feasible"] and not broken["feasible"] and broken["step_time_s"] is None
    assert fast["train_days"] == pytest.approx(fast["step_time_s"] * problem.steps / 86400)
    assert fast["cost_usd"] == pytest.approx(cluster_cost(POINT, problem.cost))
    assert slow["step_time_s"] > fast["step_time_s"] and slow["cost_usd"] < fast["cost_usd"]
    ctx = StepContext(problem.model, apply(problem.base, POINT), devices=1024, global_batch=1024, stack=problem.stack)
    _, costs = exhaustive(LayoutSpace(tp=[8], pp=[2], micro_batch=[1], schedule=["1f1b"], zero=["zero1"],
                                      sequence_parallel=[True], recompute=["none"]), ctx)
    assert fast["step_time_s"] == pytest.approx(float(costs["step_time_s"][0]), rel=1e-12)


def test_a_reduced_space_is_every_knob_choice_times_every_layout(problem):
    knobs = Knobs(devices=[512, 1024], domain=[8], scale_up=[1.0], scale_out=[1.0, 2.0], hbm_gb=[80], flops=[1.0])
    points = exhaustive_points(problem, knobs, SPACE)
    assert len(knob_points(knobs)) == knobs.size == 4
    assert len(points["step_time_s"]) == knobs.size * SPACE.size
    assert np.isfinite(points["step_time_s"]).any() and np.isnan(points["step_time_s"]).any()
    assert sorted(set(points["cost_usd"])) == sorted({cluster_cost(k, problem.cost) for k in knob_points(knobs)})


def test_the_front_and_its_hypervolume():
    time = [1.0, 2.0, 3.0, 2.5, 1.0]
    cost = [5.0, 3.0, 1.0, 4.0, 6.0]
    assert list(front_indices(time, cost)) == [0, 1, 2]
    # up to (4, 7): 3 x 2 + 2 x 2 + 1 x 2
    assert hypervolume(time, cost, (4.0, 7.0)) == pytest.approx(12.0)
    assert hypervolume([5.0], [1.0], (4.0, 7.0)) == 0.0
    assert hypervolume(time[:1], cost[:1], (4.0, 7.0)) / hypervolume(time, cost, (4.0, 7.0)) == pytest.approx(0.5)
