"""The layer algebra of method.md §3 against the closed forms the study states."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasks.model.kernels import layer

powers = lambda lo, hi: st.integers(lo, hi).map(lambda e: 2**e)  # noqa: E731


@given(h=powers(10, 16), sl=powers(9, 14), b=st.integers(1, 8), tp=powers(0, 8))
def test_gemm_shapes_sum_to_the_studys_training_flops(h, sl, b, tp):
    heads = h // 128
    total = sum(g.flops for g in layer.gemm_shapes(h, heads, sl, b, tp))
    closed_form = 72 * b * sl * h**2 * (1 + sl / (6 * h)) / tp
    assert total == pytest.approx(closed_form, rel=1e-12)
    assert layer.layer_training_flops(h, sl, b, tp) == pytest.approx(closed_form, rel=1e-12)


def test_backward_passes_each_cost_the_forward():
    gemms = layer.gemm_shapes(4096, 32, 2048, 2, 8)
    by_pass = {p: sum(g.flops for g in gemms if g.pass_ == p) for p in layer.PASSES}
    assert by_pass["ig"] == pytest.approx(by_pass["fwd"])
    assert by_pass["wg"] == pytest.approx(by_pass["fwd"])
    assert by_pass["fwd"] == pytest.approx(24 * 2048 * 2 * 4096**2 / 8 + 4 * 2 * 2048**2 * 4096 / 8)


def test_gradient_gemms_are_the_transposed_products():
    """dX = dY W^T is (m x n)(n x k); dW = X^T dY is (k x m)(m x n)."""
    fwd, ig, wg = [g for g in layer.gemm_shapes(1024, 8, 512, 1, 4) if g.name == "fc1"]
    assert (fwd.m, fwd.n, fwd.k) == (512, 4 * 1024 / 4, 1024)
    assert (ig.m, ig.n, ig.k) == (fwd.m, fwd.k, fwd.n)
    assert (wg.m, wg.n, wg.k) == (fwd.k, fwd.n, fwd.m)
    assert fwd.bytes(2) == ig.bytes(2) == wg.bytes(2)


def test_tp_bytes_per_layer_are_four_p_sl_b_h():
    p, sl, b, h = 2, 2048, 4, 12288
    per_layer = layer.tp_allreduces_per_layer * layer.tp_allreduce_bytes(h, sl, b, p)
    assert per_layer == 4 * p * sl * b * h


def test_dp_bytes_are_twelve_p_h_squared_over_tp():
    assert layer.dp_gradient_bytes(8192, 16, 2) == 12 * 2 * 8192**2 / 16


def test_formulas_broadcast_over_arrays():
    h = np.array([1024, 2048, 4096])
    flops = layer.layer_training_flops(h, 1024, 1, 4)
    assert flops.shape == (3,)
    assert np.all(np.diff(flops) > 0)
