"""Collective microbenchmarks among processes joined by torch.distributed.

``CollectiveMember`` is one rank: a plain class the cluster layer runs as a Ray actor (so
this module never imports Ray). Every rank runs the same points in the same order with a
fixed number of repeats, as collectives need. Bandwidths follow nccl-tests
(PERFORMANCE.md): algbw = bytes / time, busbw = algbw x ``collectives.bus_factor``. The
α-β fit of what this measures is ``tasks.fit.alpha_beta``.
"""

from __future__ import annotations

import math
import os
import socket
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence

import numpy as np

from tasks.device import DTYPE_BYTES, is_cuda, torch_dtype
from tasks.measure.provenance import PROVENANCE_FIELDS, available_memory_bytes, device_provenance
from tasks.measure.timing import synchronize
from tasks.model.collectives.nccl import bus_factor

__all__ = ["CollectiveContext", "CollectiveMember", "pinned_to_core"]


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

        kind = torch_dtype(dtype)
        if op == "all_reduce":
            x = torch.ones(elements, dtype=kind, device=self.device)
            return lambda: dist.all_reduce(x)
        shard = max(1, elements // self.world)
        if op == "all_gather":
            x = torch.ones(shard, dtype=kind, device=self.device)
            out = torch.empty(shard * self.world, dtype=kind, device=self.device)
            return lambda: dist.all_gather_into_tensor(out, x)
        x = torch.ones(shard * self.world, dtype=kind, device=self.device)
        out = torch.empty(shard, dtype=kind, device=self.device)
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
        return 2 * elements * DTYPE_BYTES[dtype]

    def _buffers(self, op: tuple):
        """``(fn, None)`` for ``op``, or ``(None, reason)`` when its buffers do not fit on
        some rank; the group agrees, so that every rank skips the same points."""
        needed = self.held_bytes(op) * 1.5  # allocator slack
        free = available_memory_bytes(self.device)
        fn, reason = None, (f"needs about {needed / 2**30:.1f} GiB per rank, "
                            f"{free / 2**30:.1f} GiB free on {self.device}")
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
        with pinned_to_core(self.rank, context.pin_cpu_core and not is_cuda(self.device)):
            return self._measure(points, context, provenance)

    def _measure(self, points: Sequence[dict], context: CollectiveContext, provenance: dict) -> List[dict]:
        ops = [(p["op"], max(1, p["message_bytes"] // DTYPE_BYTES[p["dtype"]]), p["dtype"]) for p in points]
        samples: List[np.ndarray] = [np.empty(0)] * len(points)
        reasons: List[Optional[str]] = [None] * len(points)
        for batch in self.batches([self.held_bytes(op) for op in ops], context.interleave_bytes):
            timed, why = self._time_batch([ops[i] for i in batch], context)
            for j, i in enumerate(batch):
                samples[i], reasons[i] = timed[j], why[j]
        recorded = {f: provenance.get(f) for f in PROVENANCE_FIELDS}
        rows = []
        for point, (_, elements, dtype), timed, reason in zip(points, ops, samples, reasons, strict=True):
            if reason is not None:
                rows.append({**point, "status": "infeasible", "reason": reason, **recorded})
                continue
            p10, median, p90 = (float(v) for v in np.percentile(timed, [10, 50, 90]))
            size = elements * DTYPE_BYTES[dtype]
            algbw = size / median / 1e9
            rows.append({**point, "status": "ok", "reason": None, "median_s": median, "p10_s": p10, "p90_s": p90,
                         "mean_s": float(timed.mean()), "repeats": len(timed), "flops": 0.0,
                         "bytes_moved": float(size), "achieved_tflops": None, "peak_fraction": None,
                         "algbw_GBps": algbw, "busbw_GBps": algbw * float(bus_factor(point["op"], self.world)),
                         **recorded})
        return rows if self.rank == 0 else []

    def leave(self) -> None:
        import torch.distributed as dist

        if dist.is_initialized():
            dist.destroy_process_group()
