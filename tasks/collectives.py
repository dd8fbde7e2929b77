"""Collective microbenchmarks among processes joined by torch.distributed, and the α-β fit.

``CollectiveMember`` is one rank: a plain class the dispatch layer runs as a Ray actor (so
this module never imports Ray). Every rank runs the same points in the same order with a
fixed number of repeats, as collectives need. Bandwidths follow nccl-tests
(PERFORMANCE.md): algbw = bytes / time, busbw = algbw x factor, with factor 2(n-1)/n for
all-reduce and (n-1)/n for all-gather and reduce-scatter.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from tasks.kernels import DTYPES
from tasks.provenance import device_provenance
from tasks.timing import time_kernel

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
    warmup: int = 3
    repeats: int = 10
    timeout_s: float = 120.0


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

    def measure(self, points: Sequence[dict], context: CollectiveContext) -> List[dict]:
        """Time each point (``op``, ``message_bytes``, ``dtype``); every rank must call this
        with the same points. The slowest rank's median is the collective's time."""
        import torch
        import torch.distributed as dist

        provenance = device_provenance(self.device)
        rows = []
        for point in points:
            elements = max(1, point["message_bytes"] // DTYPES[point["dtype"]])
            fn = self._op(point["op"], elements, point["dtype"])
            dist.barrier()
            stats = time_kernel(fn, device=self.device, warmup=context.warmup, min_repeats=context.repeats,
                                max_repeats=context.repeats, time_cap_s=float("inf"))
            slowest = torch.tensor([stats.median_s, stats.p10_s, stats.p90_s, stats.mean_s], dtype=torch.float64)
            dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
            median, p10, p90, mean = slowest.tolist()
            size = elements * DTYPES[point["dtype"]]
            algbw = size / median / 1e9
            rows.append({**point, "status": "ok", "reason": None, "median_s": median, "p10_s": p10, "p90_s": p90,
                         "mean_s": mean, "repeats": stats.repeats, "flops": 0.0, "bytes_moved": float(size),
                         "achieved_tflops": None, "peak_fraction": None, "algbw_GBps": algbw,
                         "busbw_GBps": algbw * bus_factor(point["op"], self.world),
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
