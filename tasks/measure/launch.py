"""What a kernel costs before it does any work: the host's launch path and the device's floor.

A training step is a stream of kernels that the host enqueues and the device runs. When the
kernels are small, either side can set the pace:

- **The host's path** (``host_us``): Python, torch's dispatcher and autograd, and the CUDA
  launch call, per kernel. Measured by launching ``count`` tiny kernels back to back in
  eager mode and synchronising once at the end: the device runs each in less time than the
  host takes to launch the next, so the wall time per kernel is the host's.
- **The device's floor** (``device_us``, CUDA only): the same kernels captured once in a CUDA
  graph and replayed, so no host work lies between them: the time per kernel is what a tiny
  kernel costs the device itself (Erdil and Schneider-Joseph, arXiv 2411.01137, take about
  4.5 us per GEMM on an A100 as this floor). It is also what CUDA graphs leave of the
  launch cost.

``layer_launch`` does the same for a real training layer (``tasks.measure.transformer_layer``,
forward and backward with autograd) at a shape small enough that the host sets the pace
(its every operator inside a profiler region of its own, which costs the host too), and
``plain_layer_launch`` for the same layer written as plain ``torch.nn`` modules with fused
attention (``scaled_dot_product_attention``), as an eager training script writes it:
the kernels one step launches (counted by ``torch.profiler``), the eager step's wall time,
and the device's busy time inside it. The host's time per kernel of a training step is then
the wall time over the kernels, every host cost of the step (autograd's included) spread
over them. All times in microseconds; each figure is the fastest of ``repeats`` timed runs
(a shared machine only ever adds time).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Dict, Optional

from tasks.device import is_cuda, torch_dtype
from tasks.measure.timing import synchronize
from tasks.measure.transformer_layer import LayerShape, build_layer

__all__ = ["KernelLaunch", "LayerLaunch", "tiny_kernel_launch", "layer_launch", "plain_layer_launch",
           "TINY_KERNELS"]

#: The tiny kernels timed: a GEMM of 16 x 16 x 16 and an element-wise add of 16 elements.
TINY_KERNELS = ("matmul", "add")


@dataclass(frozen=True)
class KernelLaunch:
    """Per-kernel cost of ``count`` tiny ``kernel`` launches on ``device`` (microseconds)."""

    kernel: str
    device: str
    dtype: str
    count: int
    host_us: float                   # eager: wall time per kernel, host-bound
    device_us: Optional[float]       # CUDA graph replay: the device's own time per kernel

    def as_dict(self) -> Dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class LayerLaunch:
    """One training step (forward and backward) of a layer at ``shape`` in eager mode."""

    shape: Dict[str, int]
    device: str
    dtype: str
    kernels: int                     # kernels one step launches (profiler count; CPU: operators)
    step_us: float                   # eager step, wall time
    device_busy_us: Optional[float]  # CUDA: the step's kernels' summed device time
    host_us_per_kernel: float        # step_us / kernels

    def as_dict(self) -> Dict[str, object]:
        return asdict(self)


def _fastest_wall_us(run: Callable[[], None], device: str, repeats: int, per_run: int) -> float:
    """The fastest of ``repeats`` runs of ``run`` by the wall clock, synchronised before and
    after, divided by ``per_run`` (microseconds)."""
    best = float("inf")
    for _ in range(repeats):
        synchronize(device)
        started = time.perf_counter_ns()
        run()
        synchronize(device)
        best = min(best, (time.perf_counter_ns() - started) / 1e3)
    return best / per_run


def _tiny_op(kernel: str, device: str, dtype: str) -> Callable[[], None]:
    import torch

    a = torch.randn(16, 16, device=device).to(torch_dtype(dtype))
    b = torch.randn(16, 16, device=device).to(torch_dtype(dtype))
    out = torch.empty_like(a)
    if kernel == "matmul":
        return lambda: torch.matmul(a, b, out=out)
    if kernel == "add":
        return lambda: torch.add(a, b, out=out)
    raise ValueError(f"kernel={kernel!r}: one of {TINY_KERNELS}")


def _graph_us(op: Callable[[], None], count: int, repeats: int, device: str) -> float:
    """Capture ``count`` calls of ``op`` in one CUDA graph; the fastest replay per call (us)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm up off the capture, as torch.cuda.graphs asks
        for _ in range(3):
            op()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(count):
            op()
    graph.replay()
    return _fastest_wall_us(graph.replay, device, repeats, count)


def tiny_kernel_launch(kernel: str, *, device: str = "cpu", dtype: str = "fp32", count: int = 2000,
                       repeats: int = 5) -> KernelLaunch:
    """The host's and (CUDA) the device's cost per tiny ``kernel`` (``TINY_KERNELS``)."""
    if count <= 0 or repeats <= 0:
        raise ValueError(f"count={count}, repeats={repeats}: must be positive")
    op = _tiny_op(kernel, device, dtype)
    for _ in range(min(count, 100)):  # warm up the dispatcher and the allocator
        op()

    def eager() -> None:
        for _ in range(count):
            op()

    host = _fastest_wall_us(eager, device, repeats, count)
    device_us = _graph_us(op, count, repeats, device) if is_cuda(device) else None
    return KernelLaunch(kernel, device, dtype, count, host, device_us)


def _kernels_and_busy_us(step: Callable[[], None], cuda: bool) -> tuple:
    """Kernels one ``step`` launches and their summed device time (us; None on the CPU, where
    the count is of operators: a CPU kernel is an operator's own work)."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step()
        synchronize("cuda" if cuda else "cpu")
    events = prof.events()
    if cuda:
        kernels = [e for e in events if str(getattr(e, "device_type", "")).endswith("CUDA")
                   and not getattr(e, "is_user_annotation", False)]  # regions laid on the device
        return len(kernels), sum(e.time_range.elapsed_us() for e in kernels)
    ops = [e for e in events if e.name.startswith("aten::")  # the outermost operators only
           and not (e.cpu_parent is not None and e.cpu_parent.name.startswith("aten::"))]
    return len(ops), None


def layer_launch(shape: LayerShape, *, device: str = "cpu", dtype: str = "fp32", repeats: int = 20,
                 warmup: int = 3) -> LayerLaunch:
    """One eager training step of a layer at ``shape``: kernels, wall time, device busy time."""
    layer = build_layer(shape, dtype=dtype, device=device, causal=True, dropout=0.0)
    return _eager_step_launch(layer.step, shape, device, dtype, repeats, warmup)


def _eager_step_launch(step: Callable[[], None], shape: LayerShape, device: str, dtype: str, repeats: int,
                       warmup: int) -> LayerLaunch:
    for _ in range(warmup):
        step()
    kernels, busy = _kernels_and_busy_us(step, is_cuda(device))
    step_us = _fastest_wall_us(step, device, repeats, 1)
    return LayerLaunch(shape.as_dict(), device, dtype, kernels, step_us, busy, step_us / max(kernels, 1))


def _plain_step(shape: LayerShape, device: str, dtype: str) -> Callable[[], None]:
    """One pre-LayerNorm decoder layer of ``torch.nn`` modules at ``shape``'s per-device
    sizes (no regions, no dropout): forward, a sum as the loss, backward."""
    import torch
    import torch.nn.functional as F

    h, local, heads = shape.h, shape.h // shape.tp, shape.heads // shape.tp
    kind = torch_dtype(dtype)
    modules = torch.nn.ModuleDict(dict(ln1=torch.nn.LayerNorm(h), qkv=torch.nn.Linear(h, 3 * local),
                                       out=torch.nn.Linear(local, h), ln2=torch.nn.LayerNorm(h),
                                       fc1=torch.nn.Linear(h, 4 * local), fc2=torch.nn.Linear(4 * local, h)))
    modules.to(device=device, dtype=kind)
    x = torch.randn(shape.b, shape.sl, h, device=device, dtype=kind, requires_grad=True)

    def step() -> None:
        q, k, v = modules["qkv"](modules["ln1"](x)).view(shape.b, shape.sl, 3, heads, -1).unbind(2)
        attn = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True)
        y = x + modules["out"](attn.transpose(1, 2).reshape(shape.b, shape.sl, local))
        y = y + modules["fc2"](F.gelu(modules["fc1"](modules["ln2"](y))))
        y.sum().backward()

    return step


def plain_layer_launch(shape: LayerShape, *, device: str = "cpu", dtype: str = "fp32", repeats: int = 20,
                       warmup: int = 3) -> LayerLaunch:
    """``layer_launch`` for the layer written as plain ``torch.nn`` modules (``_plain_step``)."""
    return _eager_step_launch(_plain_step(shape, device, dtype), shape, device, dtype, repeats, warmup)
