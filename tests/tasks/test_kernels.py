"""Kernel microbenchmarks measured for real on this machine's CPU (tiny shapes)."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

from tasks.collectives import CollectiveMember, fit_alpha_beta
from tasks.kernels import ROI_POINT_SCHEMA, ROI_SCHEMA, KernelContext, kernel_flops, measure_kernels
from tasks.outcomes import run_chunk
from tasks.timing import time_kernel

FAST = KernelContext(warmup=1, min_repeats=3, max_repeats=5, time_cap_s=1.0)


def _point(key, op="gemm", m=64, n=32, k=16, batch=1, dtype="fp32", device="cpu"):
    return dict(key=key, op=op, name=op, m=m, n=n, k=k, batch=batch, dtype=dtype, device=device,
                device_model_spec="auto", world=1, message_bytes=0, placement="")


def _table(*points):
    return pa.Table.from_pylist(list(points), schema=ROI_POINT_SCHEMA)


def test_a_gemm_point_returns_positive_times_and_the_flops_of_its_shape():
    rows = measure_kernels(_table(_point("g", m=64, n=32, k=16, batch=3)), FAST).to_pylist()
    (row,) = rows
    assert row["status"] == "ok" and 0 < row["p10_s"] <= row["median_s"] <= row["p90_s"]
    assert row["flops"] == 2 * 3 * 64 * 32 * 16 == kernel_flops("gemm", 64, 32, 16, 3)
    assert row["achieved_tflops"] == pytest.approx(row["flops"] / row["median_s"] / 1e12)
    assert row["repeats"] >= 3 and row["device_model"].startswith("CPU") and row["torch_version"]


@pytest.mark.parametrize("op", ["layernorm", "softmax", "gelu", "dropout", "residual_add"])
def test_memory_bound_kernels_are_timed(op):
    (row,) = measure_kernels(_table(_point(op, op=op, m=128, n=256, k=0)), FAST).to_pylist()
    assert row["status"] == "ok" and row["median_s"] > 0 and row["flops"] == 0 and row["bytes_moved"] > 0


def test_an_impossible_shape_is_a_row_with_its_reason_not_an_exception():
    points = _table(_point("fits"), _point("huge", m=10**6, n=10**6, k=10**6))
    outcome = run_chunk(measure_kernels, points, FAST, ROI_SCHEMA)
    rows = {r["key"]: r for r in outcome.results.to_pylist()}
    assert not outcome.failures
    assert rows["fits"]["status"] == "ok"
    assert rows["huge"]["status"] == "infeasible" and "GiB" in rows["huge"]["reason"]


def test_time_kernel_stops_at_max_repeats_and_reports_ordered_percentiles():
    calls = []
    stats = time_kernel(lambda: calls.append(1), warmup=2, min_repeats=4, max_repeats=7, rel_spread=0.0)
    assert stats.repeats == 7 and len(calls) == 9
    assert stats.p10_s <= stats.median_s <= stats.p90_s


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


def test_collective_points_are_interleaved_in_batches_within_the_memory_budget():
    assert CollectiveMember.batches([10, 20, 30, 100, 5], budget_bytes=60) == [[0, 1, 2], [3], [4]]
    assert CollectiveMember.batches([70], budget_bytes=60) == [[0]]
    assert CollectiveMember.batches([], budget_bytes=60) == []


@pytest.mark.gpu
def test_a_gemm_on_one_gpu_uses_cuda_events():
    torch = pytest.importorskip("torch")
    if torch.cuda.device_count() < 1:
        pytest.skip("needs 1 CUDA GPU")
    (row,) = measure_kernels(_table(_point("g", m=1024, n=1024, k=1024, dtype="bf16", device="cuda")), FAST).to_pylist()
    assert row["status"] == "ok" and row["device_model"] and row["cuda_version"]
