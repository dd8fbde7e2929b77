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
from dataclasses import dataclass, replace
from typing import Iterator, List, Optional, Sequence

import numpy as np

from tasks.kernels import DTYPES
from tasks.provenance import available_memory_bytes, device_provenance
from tasks.timing import synchronize

__all__ = ["COLLECTIVE_OPS", "bus_factor", "ring_steps", "CollectiveContext", "CollectiveMember", "fit_alpha_beta",
           "AlphaBetaFit", "FIT_METHOD"]

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter")


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor for ``op`` among ``n`` ranks."""
    return 2.0 * (n - 1) / n if op == "all_reduce" else (n - 1) / n


def ring_steps(op: str, n: int) -> int:
    """Latency-paying steps of a ring: 2(n-1) for all-reduce, n-1 otherwise."""
    return 2 * (n - 1) if op == "all_reduce" else n - 1


@dataclass(frozen=True)
class CollectiveContext:
    """How collective points are timed: ``warmup`` untimed calls per point, then
    ``repeats`` rounds; a round takes one sample of every point in turn, so a slow spell
    of a shared host spreads over the whole ladder instead of biasing the few sizes it
    falls on (interleaved measurement). A sample is as many back-to-back calls as fill
    ``sample_s`` seconds (at most ``max_calls_per_sample``), started together after a
    barrier, as nccl-tests averages its iterations. Points are interleaved in batches
    whose buffers together hold at most ``interleave_bytes``; a point larger than that
    is measured alone."""

    warmup: int = 3
    repeats: int = 10
    timeout_s: float = 120.0
    sample_s: float = 0.05
    max_calls_per_sample: int = 1000
    pin_cpu_core: bool = True  # CPU ranks: bind each rank to one core while it measures
    interleave_bytes: int = 1 << 30


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

    def _calls_per_sample(self, fn, context: CollectiveContext) -> int:
        """Warm ``fn`` up and return how many back-to-back calls fill a sample; the
        group agrees on it (the slowest rank's warm-up decides), as every rank must run
        the same number of calls."""
        started = time.perf_counter()
        for _ in range(max(1, context.warmup)):
            fn()
        synchronize(self.device)
        (per_call,) = self._agree([(time.perf_counter() - started) / max(1, context.warmup)])
        return int(min(context.max_calls_per_sample, max(1, math.ceil(context.sample_s / max(per_call, 1e-9)))))

    def _sample(self, fn, calls: int) -> float:
        """Seconds per call of one sample on this rank: ``calls`` calls after a barrier."""
        import torch.distributed as dist

        dist.barrier()
        t0 = time.perf_counter_ns()
        for _ in range(calls):
            fn()
        synchronize(self.device)
        return (time.perf_counter_ns() - t0) / 1e9 / calls

    @staticmethod
    def held_bytes(op: tuple) -> int:
        """Bytes a rank holds for ``op`` ((op, elements, dtype)): an upper bound of its
        input and output buffers."""
        _, elements, dtype = op
        return 2 * elements * DTYPES[dtype]

    def _buffers(self, op: tuple):
        """``(fn, None)`` for ``op``, or ``(None, reason)`` when its buffers do not fit on
        some rank; the group agrees, so that every rank skips the same points."""
        needed = self.held_bytes(op) * 1.5  # allocator slack
        free = available_memory_bytes(self.device)
        fn, reason = None, f"needs about {needed / 2**30:.1f} GiB per rank, {free / 2**30:.1f} GiB free on {self.device}"
        if needed <= free:
            try:
                fn = self._op(*op)
            except (MemoryError, RuntimeError) as exc:  # torch's OutOfMemoryError is a RuntimeError
                reason = f"cannot allocate its buffers on {self.device}: {str(exc).splitlines()[0]}"
        (failed,) = self._agree([0.0 if fn is not None else 1.0])
        if failed:
            return None, reason if fn is None else "cannot allocate its buffers on another rank"
        return fn, None

    def _time_batch(self, ops: Sequence[tuple], context: CollectiveContext) -> tuple:
        """Samples of every op in ``ops`` ((op, elements, dtype) each), shape
        (ops, repeats), seconds per call, and per op the reason it could not run (None
        when it ran; its samples are then NaN): ``repeats`` rounds each sampling every op
        in turn; a sample's time is the slowest rank's."""
        built = [self._buffers(op) for op in ops]
        runnable = [i for i, (fn, _) in enumerate(built) if fn is not None]
        calls = {i: self._calls_per_sample(built[i][0], context) for i in runnable}
        samples = np.full((len(ops), max(1, context.repeats)), np.nan)
        for r in range(samples.shape[1]):
            for i in runnable:
                samples[i, r] = self._sample(built[i][0], calls[i])
        if runnable:
            samples[runnable] = np.asarray(self._agree(samples[runnable].ravel().tolist())).reshape(len(runnable), -1)
        return samples, [reason for _, reason in built]

    @staticmethod
    def batches(sizes: Sequence[int], budget_bytes: int) -> List[List[int]]:
        """Indices of ``sizes`` (bytes each point holds) in consecutive batches whose
        sizes add up to at most ``budget_bytes``; a point over the budget is alone."""
        out: List[List[int]] = []
        held = budget_bytes + 1
        for i, size in enumerate(sizes):
            if out and held + size <= budget_bytes:
                out[-1].append(i)
                held += size
            else:
                out.append([i])
                held = size
        return out

    def measure(self, points: Sequence[dict], context: CollectiveContext) -> List[dict]:
        """Time each point (``op``, ``message_bytes``, ``dtype``); every rank must call this
        with the same points. Statistics are over samples, each the slowest rank's."""
        provenance = device_provenance(self.device)
        with pinned_to_core(self.rank, context.pin_cpu_core and self.device == "cpu"):
            return self._measure(points, context, provenance)

    def _measure(self, points: Sequence[dict], context: CollectiveContext, provenance: dict) -> List[dict]:
        ops = [(p["op"], max(1, p["message_bytes"] // DTYPES[p["dtype"]]), p["dtype"]) for p in points]
        samples: List[np.ndarray] = [np.empty(0)] * len(points)
        reasons: List[Optional[str]] = [None] * len(points)
        for batch in self.batches([self.held_bytes(op) for op in ops], context.interleave_bytes):
            timed, why = self._time_batch([ops[i] for i in batch], context)
            for j, i in enumerate(batch):
                samples[i], reasons[i] = timed[j], why[j]
        recorded = {f: provenance.get(f) for f in ("device_model", "device_count", "driver_version", "torch_version",
                                                   "cuda_version", "nccl_version", "nccl_settings", "host")}
        rows = []
        for point, (_, elements, dtype), timed, reason in zip(points, ops, samples, reasons, strict=True):
            if reason is not None:
                rows.append({**point, "status": "infeasible", "reason": reason, **recorded})
                continue
            p10, median, p90 = (float(v) for v in np.percentile(timed, [10, 50, 90]))
            size = elements * DTYPES[dtype]
            algbw = size / median / 1e9
            rows.append({**point, "status": "ok", "reason": None, "median_s": median, "p10_s": p10, "p90_s": p90,
                         "mean_s": float(timed.mean()), "repeats": len(timed), "flops": 0.0,
                         "bytes_moved": float(size), "achieved_tflops": None, "peak_fraction": None,
                         "algbw_GBps": algbw, "busbw_GBps": algbw * bus_factor(point["op"], self.world), **recorded})
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
    fitted_from_bytes: int = 0  # the smallest message the fit was fitted to

    def predict(self, message_bytes) -> np.ndarray:
        b = np.asarray(message_bytes, dtype=np.float64)
        return ring_steps(self.op, self.world) * self.alpha_s + bus_factor(self.op, self.world) * b / self.busbw_Bps


def fit_alpha_beta(op: str, world: int, message_bytes: Sequence[float], times_s: Sequence[float],
                   judged_from_bytes: int = 1 << 20) -> AlphaBetaFit:
    """The α-β law t = a + b * bytes with the smallest worst relative error over the
    fitted sizes (a minimax fit: a linear program minimising e subject to
    |a + b * bytes - t| <= e * t, a >= 0, b >= 0), then α = a / ring steps and
    busbw = factor / b. Minimax, not least squares, because the fit's contract is a bound
    on every measured size (``max_rel_error``), which is what a projection built on it
    can promise.

    The fit is fitted to, and judged on, messages of at least ``judged_from_bytes``
    where the ladder has two sizes or more there (else to the whole ladder): below that,
    latency-bound messages follow the transport's small-message path (gloo's and
    NCCL's protocols change with size), which one straight line cannot share with the
    bandwidth-bound sizes that the projections use. The fit error is the worst relative
    error over messages of at least ``judged_from_bytes``.
    """
    from scipy.optimize import linprog

    x = np.asarray(message_bytes, dtype=np.float64)
    t = np.asarray(times_s, dtype=np.float64)
    judged = x >= judged_from_bytes
    fitted = judged if np.unique(x[judged]).size >= 2 else np.ones_like(judged)
    # Variables (a in s, b in s per GB, e), so that HiGHS sees numbers near one;
    # rows: a/t + b*x/t - e <= 1 and -(a/t + b*x/t) - e <= -1.
    fit_rate = np.stack([1.0 / t[fitted], x[fitted] / t[fitted] / 1e9], axis=1)
    e_column = -np.ones((fitted.sum(), 1))
    solved = linprog(c=[0.0, 0.0, 1.0], A_ub=np.vstack([np.hstack([fit_rate, e_column]), np.hstack([-fit_rate, e_column])]),
                     b_ub=np.concatenate([np.ones(len(e_column)), -np.ones(len(e_column))]), bounds=[(0, None)] * 3,
                     method="highs")
    if not solved.success:
        raise ValueError(f"the α-β fit of {op} over {world} ranks failed: {solved.message}")
    a, b = float(solved.x[0]), max(float(solved.x[1]) / 1e9, 1e-30)
    fit = AlphaBetaFit(op, world, a / max(1, ring_steps(op, world)), bus_factor(op, world) / b, 0.0, judged_from_bytes,
                       int(x[fitted].min()))
    errors = np.abs(fit.predict(x[judged]) - t[judged]) / t[judged] if judged.any() else np.array([np.nan])
    return replace(fit, max_rel_error=float(np.max(errors)))


#: One α-β fit of a collective (kind ``collective_fit`` in the lake).
FIT_SCHEMA_VERSION = 1
#: How ``fit_alpha_beta`` fits (part of a stored fit's key, so a new method adds rows).
FIT_METHOD = "minimax-from-judged-size"


def fit_schema():
    import pyarrow as pa

    return pa.schema([("key", pa.string()), ("op", pa.string()), ("world", pa.int64()), ("placement", pa.string()),
                      ("device_model", pa.string()), ("alpha_us", pa.float64()), ("busbw_GBps", pa.float64()),
                      ("max_rel_error", pa.float64()), ("judged_from_bytes", pa.int64()), ("points", pa.int64()),
                      ("status", pa.string())])
