"""Timing done right: warm-up, repeats until the noise is bounded, device-aware clocks.

On CUDA, each repeat is bracketed by CUDA events and the stream is synchronised; on the
CPU, ``time.perf_counter_ns`` (monotonic) brackets each repeat. Repeats continue until the
p10-p90 spread is within ``rel_spread`` of the median (after ``min_repeats``), or until
``max_repeats`` or the time cap.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable

import numpy as np

from tasks.device import is_cuda

__all__ = ["TimingStats", "synchronize", "time_kernel"]


@dataclass(frozen=True)
class TimingStats:
    """Seconds per call: median, p10, p90, mean, and how many timed repeats."""

    median_s: float
    p10_s: float
    p90_s: float
    mean_s: float
    repeats: int


def synchronize(device: str) -> None:
    """Wait for the device's queued work (a no-op on the CPU)."""
    if is_cuda(device):
        import torch

        torch.cuda.synchronize(device)


def time_kernel(fn: Callable[[], object], *, device: str = "cpu", warmup: int = 3, min_repeats: int = 5,
                max_repeats: int = 100, rel_spread: float = 0.05, time_cap_s: float = 10.0) -> TimingStats:
    """Time ``fn()`` (one kernel launch, or a collective) on ``device``.

    Warm-up calls run first (allocations, kernel selection, caches); then timed repeats.
    The time cap bounds the timed loop, but at least ``min_repeats`` run.
    """
    for _ in range(warmup):
        fn()
    synchronize(device)
    samples = []
    started = time.perf_counter()
    cuda = is_cuda(device)
    if cuda:
        import torch

        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    while len(samples) < max_repeats:
        if cuda:
            begin.record()
            fn()
            end.record()
            end.synchronize()
            samples.append(begin.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - t0) / 1e9)
        if len(samples) >= min_repeats:
            p10, p50, p90 = np.percentile(samples, [10, 50, 90])
            if (p90 - p10) <= rel_spread * p50 or time.perf_counter() - started > time_cap_s:
                break
    p10, p50, p90 = np.percentile(samples, [10, 50, 90])
    return TimingStats(float(p50), float(p10), float(p90), float(np.mean(samples)), len(samples))
