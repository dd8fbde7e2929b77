"""The metrics of method.md §6, Eq. 10, and the study's trends as properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tasks.model.terms import metrics
from tasks.model.projection.grid import project_columns

powers = lambda lo, hi: st.integers(lo, hi).map(lambda e: 2**e)  # noqa: E731


def _project(hw, h, sl, b, tp, m=1.0, dp=4, heads=None):
    cols = np.broadcast_arrays(*(np.asarray(v, dtype=np.float64) for v in (h, sl, b, tp, m)))
    h, sl, b, tp, m = cols
    n = h.shape
    point = dict(h=h, heads=h / 128 if heads is None else np.full(n, heads), sl=sl, b=b, tp=tp,
                 dp=np.full(n, dp), dtype_bytes=np.full(n, 2.0), flop_vs_bw=m,
                 dp_slowdown=np.ones(n), placed=np.zeros(n, bool))
    return project_columns(point, hw)


def test_eq10_required_tp():
    # GPT-3 (175B) against Megatron-LM 8.3B at TP 8, memory grown 80/32 = 2.5x.
    assert metrics.required_tp(175 / 8.3, 80 / 32) == pytest.approx(8 * (175 / 8.3) / 2.5)
    assert metrics.required_tp(1.0, 1.0) == 8.0
    assert metrics.required_tp(4.0, 2.0, base_tp=4) == 8.0


def test_exposed_communication_hides_overlap_up_to_compute():
    assert metrics.exposed_communication(1.0, 2.0, 3.0) == 1.0
    assert metrics.exposed_communication(1.0, 5.0, 3.0) == 3.0
    assert metrics.exposed_communication(1.0, 2.0, 3.0, slowdown=2.0) == 2.0


def test_metric_definitions():
    assert metrics.serialized_fraction(3.0, 1.0) == 0.25
    assert metrics.overlap_percent(1.5, 1.0) == 150.0
    assert metrics.communication_share(1.0, 4.0) == 0.25


@settings(max_examples=60, deadline=None)
@given(h=powers(10, 16), sl=powers(10, 13), b=st.sampled_from([1, 4]), tp_exp=st.integers(2, 7))
def test_serialized_fraction_grows_with_tp(study_hw, h, sl, b, tp_exp):
    r = _project(study_hw, h, sl, b, [2**tp_exp, 2 ** (tp_exp + 1)])
    assert r["serialized_fraction"][1] > r["serialized_fraction"][0]


@settings(max_examples=60, deadline=None)
@given(h_exp=st.integers(10, 15), sl=powers(10, 13), b=st.sampled_from([1, 4]), tp=powers(2, 8))
def test_serialized_fraction_falls_with_h_at_fixed_tp(study_hw, h_exp, sl, b, tp):
    # Below one output tile's width per device (H/TP < 128), a GEMM's time stops shrinking
    # with its width (tile quantization), so doubling H doubles TP traffic for no compute.
    assume(2**h_exp / tp >= 128)
    r = _project(study_hw, [2**h_exp, 2 ** (h_exp + 1)], sl, b, tp)
    assert r["serialized_fraction"][1] < r["serialized_fraction"][0]


@settings(max_examples=60, deadline=None)
@given(h=powers(10, 16), slb_exp=st.integers(10, 14), tp=powers(2, 8))
def test_overlap_percent_falls_as_sl_b_grows(study_hw, h, slb_exp, tp):
    r = _project(study_hw, h, [2**slb_exp, 2 ** (slb_exp + 1)], 1, tp)
    assert r["overlap_percent"][1] < r["overlap_percent"][0]


@settings(max_examples=60, deadline=None)
@given(h=powers(10, 16), sl=powers(10, 13), b=st.sampled_from([1, 4]), tp=powers(2, 8),
       m=st.sampled_from([1.5, 2.0, 4.0]))
def test_both_metrics_rise_with_flop_vs_bw(study_hw, h, sl, b, tp, m):
    r = _project(study_hw, h, sl, b, tp, m=[1.0, m])
    assert r["serialized_fraction"][1] > r["serialized_fraction"][0]
    assert r["overlap_percent"][1] == pytest.approx(m * r["overlap_percent"][0])


def test_placed_groups_beyond_a_node_use_the_slower_tier(study_hw):
    base = dict(h=np.array([8192.0, 8192.0]), heads=np.array([64.0, 64.0]), sl=np.full(2, 2048.0),
                b=np.ones(2), tp=np.array([4.0, 8.0]), dp=np.full(2, 4.0), dtype_bytes=np.full(2, 2.0),
                flop_vs_bw=np.ones(2), dp_slowdown=np.ones(2))
    ideal = project_columns({**base, "placed": np.zeros(2, bool)}, study_hw)
    placed = project_columns({**base, "placed": np.ones(2, bool)}, study_hw)
    assert list(placed["tp_crosses_nodes"]) == [False, True]  # 4 devices per node
    assert placed["t_tp_comm_s"][0] == pytest.approx(ideal["t_tp_comm_s"][0])
    # TP 8 over two nodes of 4: NCCL's rings through the 4 NICs of each node (4 x 20 GB/s against
    # 150 GB/s of Infinity Fabric), not through one, which would cost 3 times the ideal
    from tasks.model.collectives.nccl import tier_time
    from tasks.model.kernels.layer import tp_allreduce_bytes
    message = tp_allreduce_bytes(8192.0, 2048.0, 1.0, 2.0)
    assert placed["t_tp_comm_s"][1] == pytest.approx(4 * tier_time("all_reduce", 8, message, True, study_hw,
                                                                    local_ranks=4))
    assert 1.5 * ideal["t_tp_comm_s"][1] < placed["t_tp_comm_s"][1] < 4 * tier_time("all_reduce", 8, message, True,
                                                                                     study_hw, local_ranks=1)
