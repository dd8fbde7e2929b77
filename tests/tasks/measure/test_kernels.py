"""Kernel microbenchmarks measured for real on this machine's CPU (tiny shapes)."""

from __future__ import annotations

import time

import pyarrow as pa
import pytest

from tasks.measure.collectives import CollectiveMember
from tasks.measure.kernels import ROI_POINT_SCHEMA, ROI_SCHEMA, KernelContext, kernel_flops, measure_kernels
from tasks.measure.timing import sample_times, time_kernel
from tasks.outcomes import run_chunk

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


def test_sample_times_takes_its_repeats_or_stops_at_its_deadline_after_one():
    calls = []
    assert len(sample_times(lambda: calls.append(1), repeats=5)) == 5
    assert len(sample_times(lambda: calls.append(1), repeats=5, until=time.perf_counter() - 1.0)) == 1
    assert len(calls) == 6


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
