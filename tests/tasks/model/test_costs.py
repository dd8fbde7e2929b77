"""Roofline and α-β collective costs against hand-computed cases."""

from __future__ import annotations


import numpy as np
import pytest

from tasks.model.collectives import nccl as collectives
from tasks.model.kernels import roofline
from tasks.model.terms.specs import LinkTier


def test_ring_allreduce_matches_hand_computation():
    # 4 devices, 64 MiB, α = 2 us (LL), 150 GB/s bus bandwidth: Simple wins at this size,
    # 2*3 steps * (14/2.7) * 2 us + 2*3/4 * 64 MiB / 150 GB/s
    expected = 6 * (14.0 / 2.7) * 2e-6 + 1.5 * (64 * 2**20) / 150e9
    assert collectives.collective_time("all_reduce", 4, 64 * 2**20, 2e-6, 150e9) == pytest.approx(expected, rel=1e-12)
    line = (collectives.Protocol("line", 1.0, 1.0),)
    assert collectives.collective_time("all_reduce", 4, 64 * 2**20, 2e-6, 150e9, protocols=line) == pytest.approx(
        6 * 2e-6 + 1.5 * (64 * 2**20) / 150e9, rel=1e-12)


def test_ring_allreduce_of_one_device_is_free():
    assert collectives.collective_time("all_reduce", 1, 1e9, 5e-6, 1e9) == 0.0


def test_ring_bandwidth_term_grows_as_2_n_minus_1_over_n():
    n = np.array([2, 4, 8, 256])
    t = collectives.collective_time("all_reduce", n, 1e9, 0.0, 1e9)
    assert t == pytest.approx(2 * (n - 1) / n)


def test_link_tier_applies_efficiency_and_units():
    tier = LinkTier(bandwidth_GBps=100.0, latency_us=1.0, efficiency=0.5)
    alpha, busbw = collectives.tier_figures(tier)
    assert (alpha, busbw) == pytest.approx((1e-6, 50e9))
    assert collectives.collective_time("all_reduce", 2, 1e9, alpha, busbw) == pytest.approx(
        2 * (14.0 / 2.7) * 1e-6 + 1e9 / 50e9)


def test_memory_bound_kernel_runs_at_achieved_hbm_bandwidth(study_hw):
    moved = 1e9
    expected = moved / (study_hw.hbm_tbps * 1e12 * study_hw.memory_efficiency)
    assert roofline.memory_bound_time(moved, study_hw) == pytest.approx(expected)
