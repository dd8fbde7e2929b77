"""What a device sustains on one large GEMM over a long run, and what it draws doing it.

A short benchmark reads a GEMM's rate at the clocks of a cool, idle device; a training run
holds the device at its power limit, where the clocks settle lower, and data that toggles
more bits draws more power (He, "Strangely, Matrix Multiplications on GPUs Run Faster When
Given Predictable Data", 2024). ``sustained_gemm`` runs back-to-back ``n x n x n`` products
on ``fill`` data (``random``: normal values; ``zeros``) for ``seconds`` and returns the rate
of every window of ``window`` products (CUDA events on a GPU, the wall clock on a CPU), beside
the board's power, SM clock and temperature sampled by NVML every ``sample_s`` while it runs
(on a GPU with NVML; none elsewhere). ``summary`` gives the first window's rate, the median
of the last third (the sustained rate), and the median power and clock over that third.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from tasks.device import is_cuda, torch_dtype
from tasks.measure.timing import synchronize

__all__ = ["GemmWindow", "BoardSample", "SustainedGemm", "sustained_gemm", "FILLS"]

FILLS = ("random", "zeros")


@dataclass(frozen=True)
class GemmWindow:
    """``products`` back-to-back GEMMs ending ``t_s`` seconds into the run, at ``tflops``."""

    t_s: float
    products: int
    tflops: float


@dataclass(frozen=True)
class BoardSample:
    """NVML's reading ``t_s`` seconds into the run: power (W), SM clock (MHz), temperature (C)."""

    t_s: float
    watts: float
    sm_mhz: float
    celsius: float


@dataclass
class SustainedGemm:
    n: int
    dtype: str
    fill: str
    device: str
    windows: List[GemmWindow] = field(default_factory=list)
    board: List[BoardSample] = field(default_factory=list)
    power_limit_w: Optional[float] = None

    def summary(self) -> Dict[str, object]:
        """First window's TFLOP/s; medians of the last third of the run (rate, power, clock)."""
        import numpy as np

        if not self.windows:
            raise ValueError("no window was timed")
        end = self.windows[-1].t_s
        late = [w.tflops for w in self.windows if w.t_s >= 2 * end / 3] or [self.windows[-1].tflops]
        board = [s for s in self.board if s.t_s >= 2 * end / 3]

        def median(values: List[float]) -> Optional[float]:
            return float(np.median(values)) if values else None

        return dict(n=self.n, dtype=self.dtype, fill=self.fill, device=self.device, seconds=round(end, 2),
                    first_tflops=self.windows[0].tflops, sustained_tflops=median(late),
                    best_tflops=max(w.tflops for w in self.windows),
                    sustained_watts=median([s.watts for s in board]),
                    sustained_sm_mhz=median([s.sm_mhz for s in board]),
                    max_celsius=max((s.celsius for s in self.board), default=None), power_limit_w=self.power_limit_w)


def _nvml_handle(device: str):
    """NVML's handle of ``device``, or None where NVML (nvidia-ml-py) or the GPU is missing."""
    if not is_cuda(device):
        return None
    try:
        import pynvml

        pynvml.nvmlInit()
        index = int(device.partition(":")[2] or 0)
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:  # noqa: BLE001 - no NVML is a run without board readings, not an error
        return None


def _sample_board(handle, started: float, stop: threading.Event, out: List[BoardSample], every_s: float) -> None:
    import pynvml

    while not stop.is_set():
        out.append(BoardSample(time.perf_counter() - started,
                               pynvml.nvmlDeviceGetPowerUsage(handle) / 1e3,
                               float(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM)),
                               float(pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU))))
        stop.wait(every_s)


def sustained_gemm(n: int, *, fill: str = "random", dtype: str = "bf16", device: str = "cpu",
                   seconds: float = 30.0, window: int = 20, sample_s: float = 0.2) -> SustainedGemm:
    """Back-to-back ``n``-cubed products for ``seconds``; see the module's docstring."""
    import torch

    if fill not in FILLS:
        raise ValueError(f"fill={fill!r}: one of {FILLS}")
    if n <= 0 or seconds <= 0 or window <= 0:
        raise ValueError(f"n={n}, seconds={seconds}, window={window}: must be positive")
    kind = torch_dtype(dtype)
    make = torch.randn if fill == "random" else torch.zeros
    a, b = (make(n, n, device=device).to(kind) for _ in range(2))
    out = torch.empty(n, n, device=device, dtype=kind)
    result = SustainedGemm(n, dtype, fill, device)
    handle = _nvml_handle(device)
    stop, sampler = threading.Event(), None
    torch.matmul(a, b, out=out)
    synchronize(device)
    started = time.perf_counter()
    if handle is not None:
        import pynvml

        result.power_limit_w = pynvml.nvmlDeviceGetEnforcedPowerLimit(handle) / 1e3
        sampler = threading.Thread(target=_sample_board, args=(handle, started, stop, result.board, sample_s),
                                   daemon=True)
        sampler.start()
    flop = 2.0 * n ** 3 * window
    try:
        while time.perf_counter() - started < seconds:
            t0 = time.perf_counter_ns()
            if is_cuda(device):
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
            for _ in range(window):
                torch.matmul(a, b, out=out)
            if is_cuda(device):
                end.record()
                end.synchronize()
                elapsed_s = begin.elapsed_time(end) / 1e3
            else:
                elapsed_s = (time.perf_counter_ns() - t0) / 1e9
            result.windows.append(GemmWindow(time.perf_counter() - started, window, flop / elapsed_s / 1e12))
    finally:
        stop.set()
        if sampler is not None:
            sampler.join()
    return result
