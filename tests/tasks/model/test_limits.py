"""How far training can scale (tasks.model.limits): the family scaled with its compute, the
best run of one member within a duration, and where a curve of utilisation turns."""

from __future__ import annotations

import dataclasses
import math

import pyarrow as pa
import pytest

from sweeps.config import load_preset
from sweeps.config.search import load_stack
from tasks.model.kernels.roofline import peak_flops
from tasks.model.limits.curve import curve_thresholds, floor_fits, thresholds
from tasks.model.limits.family import Family, family_point, rounded
from tasks.model.limits.frontier import best_run, lower_latency
from tasks.model.limits.rows import LIMITS_SCHEMA, LimitsContext, Scenario, limit_rows
from tasks.model.search.space import LayoutSpace

DAY = 86400.0
SMALL_SPACE = LayoutSpace(tp=[1, 2, 4, 8], pp=[1, 2, 4], micro_batch=[1, 2], schedule=["1f1b"], zero=["zero1", "fsdp"],
                          sequence_parallel=[True], recompute=["none", "full"])


@pytest.fixture(scope="module")
def cluster():
    hw = dataclasses.replace(load_preset("hardware", "h100"), kernel_launch_us=4.5)
    return hw, dataclasses.replace(load_stack("megatron-core-2024", hw), host_launch_us=0.0)


def test_shapes_round_to_powers_of_two_within_six_percent():
    for value, expected in ((359.0, 352), (77.0, 80), (5.0, 5), (1.0, 1), (1e6 / 3, 327680)):
        assert rounded(value) == expected
        assert abs(rounded(value) - value) <= value / 16 + 0.5


@pytest.mark.parametrize("flop", [1e22, 1e25, 1e28, 1e31])
def test_a_member_is_chinchilla_optimal_at_the_stated_shape_and_batch(flop):
    """N = 12 L d², D = 20 N, 6 N D near the target; d / L near 128; the batch DeepSeek LLM's
    0.2920 C^0.3271 tokens to the nearest power of two of 8,192-token sequences."""
    point = family_point(flop, Family())
    m = point.model
    assert point.params == 12 * m.layers * m.hidden**2 and point.tokens == 20 * point.params
    assert point.flop == pytest.approx(6 * point.params * point.tokens)
    assert 0.6 < point.flop / flop < 1.6 and 100 < m.hidden / m.layers < 170 and m.hidden == 128 * m.heads
    tokens = point.batch_sequences * m.seq_len
    assert math.log2(point.batch_sequences).is_integer()
    assert tokens / (0.2920 * point.flop ** 0.3271) == pytest.approx(1.0, rel=0.42)
    assert point.steps == pytest.approx(point.tokens / tokens)
    bigger = family_point(flop, Family(batch_scale=8.0))
    assert bigger.batch_sequences == 8 * point.batch_sequences or point.batch_sequences == 1


def test_the_drop_is_where_utilisation_stays_under_its_share_and_the_wall_where_runs_stop_finishing():
    flop = [1e24, 1e25, 1e26, 1e27, 1e28, 1e29]
    util = [0.5, 0.45, 0.2, 0.3, 0.1, 0.0]            # a dip at 1e26 that recovers does not set the drop
    turn = thresholds(flop, util, [True] * 5 + [False], 0.5)
    assert turn.plateau == 0.5
    assert turn.drop_flop == pytest.approx(10 ** (27 + (0.3 - 0.25) / (0.3 - 0.1)))
    assert turn.wall_flop == pytest.approx(math.sqrt(1e28 * 1e29))
    flat = thresholds(flop[:3], [0.5, 0.5, 0.5], [True] * 3, 0.5)
    assert flat.drop_flop is None and flat.wall_flop is None
    assert thresholds(flop[:2], [0.0, 0.0], [False, False], 0.5).plateau == 0.0


def test_the_floor_wall_is_where_the_runs_latency_floors_alone_stop_fitting_the_duration():
    """Erdil and Schneider-Joseph's wall is one of latency: the floor wall reads each run's
    latency floor times its steps against the duration, from the first run that finishes."""
    flop = [1e24, 1e25, 1e26, 1e27, 1e28, 1e29]
    latency = [0.1, 0.2, float("nan"), 2.0, 80.0, None]  # s a step; no floor where a point has no layout
    steps = [1e5] * 6
    fits = floor_fits(latency, steps, [90.0] * 6)         # 90 days: 77.8 s a step at most
    assert fits == [True, True, False, True, False, False]
    turn = thresholds(flop, [0.5, 0.5, 0.0, 0.4, 0.0, 0.0], [True, True, False, True, False, False], 0.5, fits)
    assert turn.wall_flop == turn.floor_wall_flop == pytest.approx(math.sqrt(1e25 * 1e26))
    later = thresholds(flop, [0.5] * 4 + [0.0] * 2, [True] * 4 + [False] * 2, 0.5, [True] * 5 + [False])
    assert later.wall_flop == pytest.approx(math.sqrt(1e27 * 1e28))
    assert later.floor_wall_flop == pytest.approx(math.sqrt(1e28 * 1e29))
    assert thresholds(flop, [0.5] * 6, [True] * 6, 0.5).floor_wall_flop is None
    rows = {"flop": flop[::-1], "utilization": [0.0, 0.0, 0.5, 0.5, 0.5, 0.5],
            "status": ["too_slow", "too_slow"] + ["ok"] * 4, "latency_s": [80.0, 1.0, 1.0, 1.0, 1.0, 1.0],
            "steps": steps, "duration_days": [90.0] * 6}         # out of order, as a query may return them
    both = curve_thresholds(rows, 0.5)
    assert both.wall_flop == pytest.approx(math.sqrt(1e27 * 1e28))
    assert both.floor_wall_flop == pytest.approx(math.sqrt(1e28 * 1e29))


def test_lower_latency_divides_every_latency_and_nothing_else(cluster):
    hw, stack = cluster
    fast_hw, fast_stack = lower_latency(hw, dataclasses.replace(stack, host_launch_us=53.0), 10.0)
    assert fast_hw.kernel_launch_us == pytest.approx(0.45) and fast_stack.host_launch_us == pytest.approx(5.3)
    for tier in ("intra_node", "inter_node"):
        assert getattr(fast_hw, tier).latency_us == pytest.approx(getattr(hw, tier).latency_us / 10)
        assert getattr(fast_hw, tier).bandwidth_GBps == getattr(hw, tier).bandwidth_GBps
    assert fast_hw.peak_tflops == hw.peak_tflops
    with pytest.raises(ValueError, match="latency factor"):
        lower_latency(hw, stack, 0.0)


def test_the_best_run_is_the_fewest_devices_that_finish_in_time(cluster):
    hw, stack = cluster
    point = family_point(1e22, Family(seq_len=2048))
    run = best_run(point, hw, stack, SMALL_SPACE, duration_s=30 * DAY, max_devices=2**20)
    assert run.status == "ok" and run.run_s <= 30 * DAY
    assert run.utilization == pytest.approx(point.flop / (run.devices * peak_flops(hw) * run.run_s))
    assert 0 < run.utilization < 1
    half = best_run(point, hw, stack, SMALL_SPACE, duration_s=30 * DAY, max_devices=run.devices // 2)
    assert half.status != "ok" and half.utilization == 0.0
    slower = best_run(point, hw, stack, SMALL_SPACE, duration_s=run.run_s / 1.5, max_devices=2**20)
    assert slower.status == "ok" and slower.devices > run.devices
    never = best_run(point, hw, stack, SMALL_SPACE, duration_s=60.0, max_devices=2**20)
    assert never.status == "too_slow" and never.run_s > 60.0


def test_rows_hold_the_member_and_its_run(cluster):
    hw, stack = cluster
    context = LimitsContext({"baseline": Scenario(Family(seq_len=2048), hw, stack, SMALL_SPACE, 30 * DAY, 2**20)})
    points = pa.table({"key": ["a", "b"], "scenario": ["baseline"] * 2, "flop_target": [1e21, 1e22],
                       "hardware": ["h100"] * 2})
    rows = limit_rows(points, context)
    assert rows.schema == LIMITS_SCHEMA
    first, second = rows.to_pylist()
    assert first["status"] == second["status"] == "ok" and first["flop"] < second["flop"]
    assert first["devices"] == first["tp"] * first["pp"] * first["dp"] * first["cp"]
    assert second["run_days"] == pytest.approx(second["step_time_s"] * second["steps"] / DAY)
    assert all(0 < row["latency_s"] < row["step_time_s"] for row in (first, second))  # a floor of the step


def test_a_sparse_member_uses_the_dense_members_active_weights_and_holds_experts_over_topk_times_its_mlp():
    dense, sparse = family_point(1e26, Family()), family_point(1e26, Family(experts=64, topk=8))
    m = sparse.model
    assert (m.experts, m.topk, m.moe_ffn_hidden) == (64, 8, 4 * m.hidden // 8)
    assert (m.layers, m.hidden) == (dense.model.layers, dense.model.hidden)
    assert sparse.params == pytest.approx(dense.params) and sparse.flop == pytest.approx(dense.flop)
    assert sparse.total_params == pytest.approx(m.layers * (4 + 8 * 8) * m.hidden**2)
    assert dense.total_params == dense.params
