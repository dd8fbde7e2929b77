"""Collective microbenchmarks among processes joined by torch.distributed, and the α-β fit.

``CollectiveMember`` is one rank: a plain class the dispatch layer runs as a Ray actor (so
this module never imports Ray). Every rank runs the same points in the same order with a
fixed number of repeats, as collectives need. Bandwidths follow nccl-tests
(PERFORMANCE.md): algbw = bytes / time, busbw = algbw x factor, with factor 2(n-1)/n for
all-reduce and (n-1)/n for all-gather and reduce-scatter.
"""

from __future__ import annotations

import math
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List, Sequence

import numpy as np

from tasks.kernels import DTYPES
from tasks.provenance import device_provenance
from tasks.timing import synchronize

__all__ = ["COLLECTIVE_OPS", "bus_factor", "ring_steps", "CollectiveContext", "CollectiveMember", "fit_alpha_beta",
           "AlphaBetaFit"]

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor for ``op`` among ``n`` ranks."""
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def ring_steps(op: str, n: int) -> int:
    """Latency-paying steps of a ring: 2(n-1) for all-reduce, n-1 otherwise."""
    return 2 * (n - 1) if op == "all_reduce" else n - 1


@dataclass(frozen=True)
class CollectiveContext:
    """How each collective point is timed: ``warmup`` untimed calls, then ``repeats``
    samples; a sample is as many back-to-back calls as fill ``sample_s`` seconds (at most
    ``max_calls_per_sample``), started together after a barrier, as nccl-tests averages
    its iterations."""

    warmup: int = 3
    repeats: int = 10
    timeout_s: float = 120.0
    sample_s: float = 0.05
    max_calls_per_sample: int = 1000
    pin_cpu_core: bool = True  # CPU ranks: bind each rank to one core while it measures


@contextmanager
def pinned_to_core(rank: int, enabled: bool) -> Iterator[None]:
    """Bind this process to one core of its allowed set (``rank`` modulo their count) and
    restore the set afterwards, as MPI launchers bind ranks: co-scheduled ranks on one
    core are what makes loopback collectives noisy."""
    allowed = sorted(os.sched_getaffinity(0)) if enabled and hasattr(os, "sched_setaffinity") else []
    if len(allowed) > 1:
        os.sched_setaffinity(0, {allowed[rank % len(allowed)]})
    try:
        yield
    finally:
        if len(allowed) > 1:
            os.sched_setaffinity(0, set(allowed))


class CollectiveMember:
    """One rank of a collective group (``backend`` "gloo" on CPUs, "nccl" on GPUs)."""

    def __init__(self, rank: int, world: int, backend: str, device: str) -> None:
        self.rank, self.world, self.backend, self.device = rank, world, backend, device

    def free_port(self) -> int:
        with socket.socket() as s:
            s.bind(("", 0))
            return s.getsockname()[1]

    def join(self, master_addr: str, master_port: int, timeout_s: float = 120.0) -> bool:
        import datetime

        import torch.distributed as dist

        dist.init_process_group(self.backend, init_method=f"tcp://{master_addr}:{master_port}", rank=self.rank,
                                world_size=self.world, timeout=datetime.timedelta(seconds=timeout_s))
        return True

    def check(self) -> float:
        """All-reduce a tensor of ones: the sum must equal the group size."""
        import torch
        import torch.distributed as dist

        x = torch.ones(4, device=self.device)
        dist.all_reduce(x)
        return float(x[0])

    def _op(self, op: str, elements: int, dtype: str):
        import torch
        import torch.distributed as dist

        torch_dtype = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[dtype]
        if op == "all_reduce":
            x = torch.ones(elements, dtype=torch_dtype, device=self.device)
            return lambda: dist.all_reduce(x)
        shard = max(1, elements // self.world)
        if op == "all_gather":
            x = torch.ones(shard, dtype=torch_dtype, device=self.device)
            out = torch.empty(shard * self.world, dtype=torch_dtype, device=self.device)
            return lambda: dist.all_gather_into_tensor(out, x)
        x = torch.ones(shard * self.world, dtype=torch_dtype, device=self.device)
        out = torch.empty(shard, dtype=torch_dtype, device=self.device)
        return lambda: dist.reduce_scatter_tensor(out, x)

    def _agree(self, values: Sequence[float]) -> List[float]:
        """Element-wise maximum of ``values`` over the group (every rank gets it)."""
        import torch
        import torch.distributed as dist

        tensor = torch.tensor(list(values), dtype=torch.float64)
        if self.backend == "nccl":
            tensor = tensor.to(self.device)
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
        return tensor.cpu().tolist()

    def _time_samples(self, fn, context: CollectiveContext) -> np.ndarray:
        """Seconds per call, one per sample: each sample runs the same number of calls on
        every rank after a barrier; a sample's time is the slowest rank's."""
        import torch.distributed as dist

        started = time.perf_counter()
        for _ in range(max(1, context.warmup)):
            fn()
        synchronize(self.device)
        (per_call,) = self._agree([(time.perf_counter() - started) / max(1, context.warmup)])
        calls = int(min(context.max_calls_per_sample, max(1, math.ceil(context.sample_s / max(per_call, 1e-9)))))
        samples = []
        for _ in range(context.repeats):
            dist.barrier()
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                fn()
            synchronize(self.device)
            samples.append((time.perf_counter_ns() - t0) / 1e9 / calls)
        return np.asarray(self._agree(samples))

    def measure(self, points: Sequence[dict], context: CollectiveContext) -> List[dict]:
        """Time each point (``op``, ``message_bytes``, ``dtype``); every rank must call this
        with the same points. Statistics are over samples, each the slowest rank's."""
        provenance = device_provenance(self.device)
        with pinned_to_core(self.rank, context.pin_cpu_core and self.device == "cpu"):
            return self._measure(points, context, provenance)

    def _measure(self, points: Sequence[dict], context: CollectiveContext, provenance: dict) -> List[dict]:
        rows = []
        for point in points:
            elements = max(1, point["message_bytes"] // DTYPES[point["dtype"]])
            fn = self._op(point["op"], elements, point["dtype"])
            samples = self._time_samples(fn, context)
            p10, median, p90 = (float(v) for v in np.percentile(samples, [10, 50, 90]))
            size = elements * DTYPES[point["dtype"]]
            algbw = size / median / 1e9
            rows.append({**point, "status": "ok", "reason": None, "median_s": median, "p10_s": p10, "p90_s": p90,
                         "mean_s": float(samples.mean()), "repeats": len(samples), "flops": 0.0,
                         "bytes_moved": float(size), "achieved_tflops": None, "peak_fraction": None,
                         "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(point["op"], self.world),
                         **{f: provenance.get(f) for f in ("device_model", "device_count", "driver_version",
                                                           "torch_version", "cuda_version", "nccl_version",
                                                           "nccl_settings", "host")}})
        return rows if self.rank == 0 else []

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()


@dataclass(frozen=True)
class AlphaBetaFit:
    """t(bytes) = steps * alpha + factor * bytes / busbw, fitted to a measured ladder."""

    op: str
    world: int
    alpha_s: float
    busbw_Bps: float
    max_rel_error: float  # over the sizes the error is judged on
    judged_from_bytes: int

    def predict(self, message_bytes) -> np.ndarray:
        b = np.asarray(message_bytes, dtype=np.float64)
        return ring_steps(self.op, self.world) * self.alpha_s + bus_factor(self.op, self.world) * b / self.busbw_Bps


def fit_alpha_beta(op: str, world: int, message_bytes: Sequence[float], times_s: Sequence[float],
                   judged_from_bytes: int = 1 << 20) -> AlphaBetaFit:
    """Least squares on relative error of t = a + b * bytes (weights 1/t), then
    α = a / ring steps and busbw = factor / b. The fit error is the worst relative error
    over messages of at least ``judged_from_bytes``."""
    x = np.asarray(message_bytes, dtype=np.float64)
    t = np.asarray(times_s, dtype=np.float64)
    design = np.stack([np.ones_like(x), x], axis=1) / t[:, None]
    (a, b), *_ = np.linalg.lstsq(design, np.ones_like(t), rcond=None)
    a, b = max(float(a), 0.0), max(float(b), 1e-30)
    fit = AlphaBetaFit(op, world, a / max(1, ring_steps(op, world)), bus_factor(op, world) / b, 0.0, judged_from_bytes)
    judged = x >= judged_from_bytes
    errors = np.abs(fit.predict(x[judged]) - t[judged]) / t[judged] if judged.any() else np.array([np.nan])
    return AlphaBetaFit(op, world, fit.alpha_s, fit.busbw_Bps, float(np.max(errors)), judged_from_bytes)


#: One α-β fit of a collective (kind ``collective_fit`` in the lake).
FIT_SCHEMA_VERSION = 1


def fit_schema():
    import pyarrow as pa

    return pa.schema([("key", pa.string()), ("op", pa.string()), ("world", pa.int64()), ("placement", pa.string()),
                      ("device_model", pa.string()), ("alpha_us", pa.float64()), ("busbw_GBps", pa.float64()),
                      ("max_rel_error", pa.float64()), ("judged_from_bytes", pa.int64()), ("points", pa.int64()),
                      ("status", pa.string())])
