"""Timing done right: warm-up, repeats until the noise is bounded, device-aware clocks.

On CUDA, each repeat is bracketed by CUDA events and the stream is synchronised; on the
CPU, by one of two clocks (``cpu_clock``): the wall clock, ``time.perf_counter_ns``
(monotonic), or the CPU time of the calling thread, ``time.thread_time_ns``
(``CLOCK_THREAD_CPUTIME_ID``). Repeats continue until the p10-p90 spread is within
``rel_spread`` of the median (after ``min_repeats``), or until ``max_repeats`` or the time
cap. ``sample_times`` returns a fixed number of timed calls as they came, for a caller
that judges them itself (``tasks.measure.stability``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List, Optional

import numpy as np

from tasks.device import is_cuda

__all__ = ["WALL", "THREAD_CPU", "TimingStats", "cpu_clock", "clock_ns", "synchronize", "time_kernel",
           "sample_times"]

#: The clocks a CPU step is timed by (``cpu_clock``).
WALL, THREAD_CPU = "wall", "thread-cpu"


def cpu_clock(threads: int) -> str:
    """The clock of a CPU step that torch runs on ``threads`` threads.

    One thread: the CPU time of that thread (torch runs every CPU kernel of the step, and
    autograd its CPU backward, on the calling thread). It leaves out the time the thread
    waits off its core while another process holds it, the delay a shared machine adds
    most; the wall clock counts it. What a load does to the thread's own time on the core
    (caches it evicted, memory bandwidth it took) is counted by both.

    More threads: the wall clock. Their CPU times add up, spin-waits included, to no step
    time; and a step on every core is slowed at each parallel region while a busy process
    holds one of its threads' cores (x2.6 on the fastest step of the CPU baseline beside one
    busy process on a 2-core machine), which no statistic of its repeats undoes.
    """
    return THREAD_CPU if threads == 1 else WALL


def clock_ns(clock: str) -> Callable[[], int]:
    """The nanosecond counter of ``clock`` (``WALL`` or ``THREAD_CPU``)."""
    if clock not in (WALL, THREAD_CPU):
        raise ValueError(f"clock={clock!r}: use {WALL!r} or {THREAD_CPU!r}")
    return time.thread_time_ns if clock == THREAD_CPU else time.perf_counter_ns


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
    timed = _timed(fn, device)
    while len(samples) < max_repeats:
        samples.append(timed())
        if len(samples) >= min_repeats:
            p10, p50, p90 = np.percentile(samples, [10, 50, 90])
            if (p90 - p10) <= rel_spread * p50 or time.perf_counter() - started > time_cap_s:
                break
    p10, p50, p90 = np.percentile(samples, [10, 50, 90])
    return TimingStats(float(p50), float(p10), float(p90), float(np.mean(samples)), len(samples))


def sample_times(fn: Callable[[], object], *, device: str = "cpu", repeats: int,
                 until: Optional[float] = None, clock: str = WALL) -> List[float]:
    """Seconds of each of ``repeats`` calls of ``fn()``, in order, no warm-up (the caller's),
    by ``clock`` on the CPU (CUDA events on a GPU); fewer (at least one) once
    ``time.perf_counter()`` (the wall clock) has passed ``until``."""
    timed = _timed(fn, device, clock)
    samples: List[float] = []
    while len(samples) < repeats and not (samples and until is not None and time.perf_counter() > until):
        samples.append(timed())
    return samples


def _timed(fn: Callable[[], object], device: str, clock: str = WALL) -> Callable[[], float]:
    """A function that calls ``fn()`` once and returns its seconds: by ``clock`` on the CPU,
    by CUDA events on a GPU."""
    if not is_cuda(device):
        now = clock_ns(clock)

        def on_cpu() -> float:
            t0 = now()
            fn()
            return (now() - t0) / 1e9

        return on_cpu
    import torch

    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def on_cuda() -> float:
        begin.record()
        fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3

    return on_cuda
