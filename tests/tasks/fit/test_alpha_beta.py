"""The α-β fit of a measured collective ladder: a known law recovered, the small-message
plateau left out, and a worst error no larger than the generating law's."""

from __future__ import annotations

import numpy as np
import pytest

from tasks.fit.alpha_beta import fit_alpha_beta


def test_alpha_beta_fit_recovers_a_known_law():
    sizes = np.array([2.0**k for k in range(10, 28)])
    alpha, busbw, n = 20e-6, 50e9, 4
    times = 2 * (n - 1) * alpha + 2 * (n - 1) / n * sizes / busbw
    fit = fit_alpha_beta("all_reduce", n, sizes, times)
    assert fit.alpha_s == pytest.approx(alpha, rel=1e-6) and fit.busbw_Bps == pytest.approx(busbw, rel=1e-6)
    assert fit.max_rel_error < 1e-9


def test_alpha_beta_fit_is_fitted_to_the_judged_sizes_not_the_small_message_plateau():
    sizes = np.array([2.0**k for k in range(12, 27)])
    law = 2 * 100e-6 + sizes / 2e9
    times = np.where(sizes < 1 << 20, np.maximum(law, 600e-6), law)  # a flat small-message path
    fit = fit_alpha_beta("all_reduce", 2, sizes, times)
    assert fit.fitted_from_bytes == 1 << 20 and fit.max_rel_error < 1e-9
    assert fit.alpha_s == pytest.approx(100e-6, rel=1e-6) and fit.busbw_Bps == pytest.approx(2e9, rel=1e-6)
    whole = fit_alpha_beta("all_reduce", 2, sizes, times, judged_from_bytes=1 << 30)  # nothing to judge on
    assert whole.fitted_from_bytes == 1 << 12 and np.isnan(whole.max_rel_error)


def test_alpha_beta_fit_bounds_the_worst_error_no_worse_than_the_true_law():
    sizes = np.array([2.0**k for k in range(20, 28)])
    law = 2 * 50e-6 + sizes / 5e9
    times = law * (1 + 0.08 * np.array([1, -1, 1, 1, -1, -1, 1, -1]))  # ±8% noise
    fit = fit_alpha_beta("all_reduce", 2, sizes, times)
    worst = np.max(np.abs(fit.predict(sizes) - times) / times)
    assert fit.max_rel_error == pytest.approx(worst)
    assert worst <= np.max(np.abs(law - times) / times) + 1e-9  # the generating law misses by 8/0.92 ≈ 8.7%
