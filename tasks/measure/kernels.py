"""Region-of-interest kernel microbenchmarks on PyTorch (method.md §5.2).

A point is one kernel at one shape and dtype: a GEMM (m x k by k x n, ``batch`` times,
as ``torch.matmul``), or a memory-bound kernel (LayerNorm, softmax, GeLU, dropout,
residual add) over a ``rows x cols`` tensor (``m`` x ``n``). It runs on any device torch
offers. A shape that does not fit, or a dtype the device cannot run, is a result row
with its status and reason, not an exception.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Tuple

import pyarrow as pa

from tasks.device import DTYPE_BYTES, torch_dtype
from tasks.measure.provenance import PROVENANCE_FIELDS, available_memory_bytes, device_provenance
from tasks.measure.timing import time_kernel
from tasks.model.terms.specs import HardwareProfile
from tasks.outcomes import InfeasibleError

__all__ = ["KERNEL_OPS", "KernelContext", "ROI_POINT_SCHEMA", "ROI_SCHEMA", "SCHEMA_VERSION",
           "measure_kernels", "kernel_flops", "kernel_bytes", "build_kernel"]

SCHEMA_VERSION = 1
KERNEL_OPS = ("gemm", "layernorm", "softmax", "gelu", "dropout", "residual_add")

ROI_POINT_SCHEMA = pa.schema([
    ("key", pa.string()), ("op", pa.string()), ("name", pa.string()),
    ("m", pa.int64()), ("n", pa.int64()), ("k", pa.int64()), ("batch", pa.int64()),
    ("dtype", pa.string()), ("device", pa.string()), ("device_model_spec", pa.string()),
    ("world", pa.int64()), ("message_bytes", pa.int64()), ("placement", pa.string()),
])
ROI_SCHEMA = pa.schema(list(ROI_POINT_SCHEMA) + [
    ("status", pa.string()), ("reason", pa.string()),
    ("median_s", pa.float64()), ("p10_s", pa.float64()), ("p90_s", pa.float64()), ("mean_s", pa.float64()),
    ("repeats", pa.int64()), ("flops", pa.float64()), ("bytes_moved", pa.float64()),
    ("achieved_tflops", pa.float64()), ("peak_fraction", pa.float64()),
    ("algbw_GBps", pa.float64()), ("busbw_GBps", pa.float64()),
    ("device_model", pa.string()), ("device_count", pa.string()), ("driver_version", pa.string()),
    ("torch_version", pa.string()), ("cuda_version", pa.string()), ("nccl_version", pa.string()),
    ("nccl_settings", pa.string()), ("host", pa.string()),
])


@dataclass(frozen=True)
class KernelContext:
    """Timing settings, and the hardware profile whose peak ``peak_fraction`` refers to."""

    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 50
    rel_spread: float = 0.05
    time_cap_s: float = 5.0
    hardware: HardwareProfile | None = None


def kernel_flops(op: str, m: int, n: int, k: int, batch: int) -> float:
    """FLOPs of one call: 2*batch*m*n*k for a GEMM; element-wise kernels count none."""
    return 2.0 * batch * m * n * k if op == "gemm" else 0.0


def kernel_bytes(op: str, m: int, n: int, k: int, batch: int, itemsize: int) -> float:
    """Bytes the kernel must touch at least (reads + writes), for memory-bound ops and the
    footprint check: A, B and C for a GEMM; element accesses per element otherwise."""
    if op == "gemm":
        return float(itemsize * batch * (m * k + k * n + m * n))
    accesses = {"layernorm": 2, "softmax": 2, "gelu": 2, "dropout": 3, "residual_add": 3}[op]
    return float(itemsize * m * n * accesses)


def build_kernel(op: str, m: int, n: int, k: int, batch: int, dtype: str, device: str) -> Tuple[Callable, Dict]:
    """Allocate the operands and return a zero-argument callable running the kernel once."""
    import torch

    make = lambda *shape: torch.randn(*shape, dtype=torch_dtype(dtype), device=device)  # noqa: E731
    if op == "gemm":
        a, b = (make(m, k), make(k, n)) if batch == 1 else (make(batch, m, k), make(batch, k, n))
        return (lambda: torch.matmul(a, b)), {"a": a, "b": b}
    x = make(m, n)
    if op == "layernorm":
        norm = torch.nn.LayerNorm(n, dtype=torch_dtype(dtype), device=device)
        return (lambda: norm(x)), {"x": x}
    if op == "softmax":
        return (lambda: torch.softmax(x, dim=-1)), {"x": x}
    if op == "gelu":
        return (lambda: torch.nn.functional.gelu(x)), {"x": x}
    if op == "dropout":
        return (lambda: torch.nn.functional.dropout(x, p=0.1, training=True)), {"x": x}
    if op == "residual_add":
        y = make(m, n)
        return (lambda: x + y), {"x": x, "y": y}
    raise InfeasibleError(f"unknown kernel op {op!r}")


def _measure_one(point: dict, context: KernelContext, provenance: Dict[str, str]) -> dict:
    op, m, n, k, batch, dtype, device = (point[f] for f in ("op", "m", "n", "k", "batch", "dtype", "device"))
    itemsize = DTYPE_BYTES[dtype]
    needed = kernel_bytes(op, m, n, k, batch, itemsize) * 1.5  # operands, result, allocator slack
    free = available_memory_bytes(device)
    if needed > free:
        raise InfeasibleError(f"needs about {needed / 2**30:.1f} GiB, {free / 2**30:.1f} GiB free on {device}")
    try:
        fn, _operands = build_kernel(op, m, n, k, batch, dtype, device)
        stats = time_kernel(fn, device=device, warmup=context.warmup, min_repeats=context.min_repeats,
                            max_repeats=context.max_repeats, rel_spread=context.rel_spread,
                            time_cap_s=context.time_cap_s)
    except RuntimeError as exc:
        if "not implemented" in str(exc) or "not supported" in str(exc):
            raise InfeasibleError(f"{dtype} {op} is not supported on {device}: {str(exc).splitlines()[0]}") from exc
        raise
    flops = kernel_flops(op, m, n, k, batch)
    achieved = flops / stats.median_s / 1e12 if flops else None
    peak = context.hardware.peak_tflops if context.hardware is not None else None
    return {**point, "status": "ok", "reason": None, "median_s": stats.median_s, "p10_s": stats.p10_s,
            "p90_s": stats.p90_s, "mean_s": stats.mean_s, "repeats": stats.repeats, "flops": flops,
            "bytes_moved": kernel_bytes(op, m, n, k, batch, itemsize), "achieved_tflops": achieved,
            "peak_fraction": achieved / peak if achieved and peak else None, "algbw_GBps": None,
            "busbw_GBps": None, **{f: provenance.get(f) for f in PROVENANCE_FIELDS}}


def measure_kernels(points: pa.Table, context: KernelContext) -> pa.Table:
    """Measure each kernel point in turn; returns ``ROI_SCHEMA`` rows.

    An infeasible point raises ``InfeasibleError`` (out of memory: ``MemoryError`` or
    torch's ``OutOfMemoryError``): the caller (``tasks.outcomes.run_chunk``) turns it into
    a row with its status and reason and measures the chunk's other points alone.
    """
    rows, provenance = [], None
    for point in points.to_pylist():
        if provenance is None:
            provenance = device_provenance(point["device"])
        rows.append(_measure_one(point, context, provenance))
    return pa.Table.from_pylist(rows, schema=ROI_SCHEMA)
