"""Spec costs of kernels from a hardware profile: a roofline with a launch floor.

Every function is vectorised over NumPy arrays. Times are in seconds. Collective costs
are in ``tasks.model.collectives.nccl``.

``gemm_kernel_time`` is the GEMM law: tile and wave quantization over the device's compute
units, a K-loop prologue/epilogue, a per-dtype ceiling no shape exceeds, the memory roofline
and the launch floor.
"""

from __future__ import annotations

import math
import threading
from typing import Dict, Tuple

import numpy as np

from tasks.model.terms.specs import HardwareProfile

__all__ = ["memory_bound_time", "gemm_kernel_time", "gemm_kernel_times", "gemm_tflops", "peak_flops", "gemm_ceiling",
           "gemm_tile_ceiling", "GEMM_DTYPES", "GEMM_TILES", "TILE_STAGING", "DEFAULT_K_OVERHEAD", "tile_overhead_s",
           "k_overhead", "MissingFigure"]


def memory_bound_time(bytes_moved, hw: HardwareProfile, *, floored: bool = True):
    """Time of one element-wise kernel: bytes over achieved HBM bandwidth, floored at a
    kernel's launch (not ``floored``: the bytes' time alone, where the kernels that move them
    are charged their launches elsewhere)."""
    memory = bytes_moved / (hw.hbm_tbps * 1e12 * hw.memory_efficiency)
    return np.maximum(hw.kernel_launch_us * 1e-6, memory) if floored else memory


#: The dtypes the GEMM law knows, each with the profile field that holds its dense peak.
GEMM_DTYPES: Dict[str, str] = {"bf16": "peak_tflops", "fp16": "peak_tflops", "fp8": "peak_fp8_tflops"}

#: Output tiles (rows x columns of C) a cuBLAS- or hipBLASLt-like library picks among; the
#: kernel runs one tile per compute unit at a time (NVIDIA, "Matrix Multiplication
#: Background User's Guide", tile quantization). Assumption: one set for every profile.
GEMM_TILES: Tuple[Tuple[int, int], ...] = ((256, 128), (128, 256), (128, 128), (128, 64), (64, 128), (64, 64))

#: Operand staging per tile, in elements: per K step a tm x tn tile does tm*tn MACs and
#: stages tm + tn operand elements, so its throughput relative to an unbounded tile is
#: 1 / (1 + TILE_STAGING * (1/tm + 1/tn)). Fitted (one constant, all profiles) to the
#: A100 fp16 square-GEMM curve at 2048^3..4096^3 in conf/data/gemm_efficiency.csv, where
#: the smaller tiles that fill more SMs compete with the large ones.
TILE_STAGING = 32.0

#: A wave's K-loop prologue and epilogue (pipeline fill, writing C) where a profile gives no
#: ``gemm_tile_overhead_us``: the time of DEFAULT_K_OVERHEAD K steps of the largest tile at
#: the profile's 16-bit rate (about one pipeline stage; any value in 32..128 keeps every row
#: of conf/data/gemm_efficiency.csv in target). Assumption.
DEFAULT_K_OVERHEAD = 64.0


def _relative_tile_rate(tm: int, tn: int) -> float:
    return 1.0 / (1.0 + TILE_STAGING * (1.0 / tm + 1.0 / tn))


#: Each tile's duration per unit of K, in (FLOP of a best tile) units: area / relative rate.
_TILE_COST = tuple(tm * tn * max(_relative_tile_rate(*t) for t in GEMM_TILES) / _relative_tile_rate(tm, tn)
                   for tm, tn in GEMM_TILES)
_LARGEST_TILE_COST = max(_TILE_COST)


def _unit_rate(hw: HardwareProfile, dtype: str) -> float:
    """FLOP/s of one compute unit running the best tile: peak x tile ceiling / units."""
    return peak_flops(hw, dtype) * gemm_tile_ceiling(hw, dtype) / hw.compute_units


def tile_overhead_s(hw: HardwareProfile) -> float:
    """Seconds a wave of the largest tile spends outside its K loop (pipeline fill, writing C):
    ``hw.gemm_tile_overhead_us``, else ``DEFAULT_K_OVERHEAD`` K steps at the 16-bit rate.

    A fixed time, whatever the dtype: an fp8 GEMM, whose K steps run twice as fast, pays it
    as twice as many K steps. The K sweeps of conf/data/gemm_k_sweeps.csv (H800, M = N =
    8192) show it: throughput reaches half its plateau at K of about 250 in fp16 and about
    450 in fp8."""
    if hw.gemm_tile_overhead_us is not None:
        return hw.gemm_tile_overhead_us * 1e-6
    return DEFAULT_K_OVERHEAD * 2.0 * _LARGEST_TILE_COST / _unit_rate(hw, "bf16")


def k_overhead(hw: HardwareProfile, dtype: str = "bf16") -> float:
    """``tile_overhead_s(hw)`` as K elements of ``dtype``: a tile's time goes as K + this."""
    return _k_steps(hw, _unit_rate(hw, dtype))


def _k_steps(hw: HardwareProfile, unit_rate: float) -> float:
    """``tile_overhead_s(hw)`` as K steps of the largest tile at ``unit_rate`` (FLOP/s)."""
    return tile_overhead_s(hw) * unit_rate / (2.0 * _LARGEST_TILE_COST)


_TILE_SIDES = sorted({side for tile in GEMM_TILES for side in tile})
#: Below 1 by more than float32 rounding of a product of tile counts (2^-22), so that
#: ceil(k * units * _SLACK / units) is k, not k + 1.
_SLACK = 1.0 - 2.0**-20
_WORK = threading.local()
_WORKSPACE_MAX = 1 << 21


class MissingFigure(ValueError):
    """A hardware profile lacks the figure a dtype needs; ``field`` names it (dotted)."""

    def __init__(self, field: str, profile: str, dtype: str):
        self.field = field
        super().__init__(f"{field}: hardware profile '{profile}' gives no {dtype} figure; add {field} to its "
                         f"YAML (with a sources entry) to model {dtype} GEMMs")


def _check_dtype(dtype: str) -> None:
    if dtype not in GEMM_DTYPES:
        raise ValueError(f"dtype={dtype!r}: choose from {', '.join(GEMM_DTYPES)}")


def peak_flops(hw: HardwareProfile, dtype: str = "bf16") -> float:
    """The datasheet's dense peak of ``dtype`` on ``hw``, in FLOP/s (not TFLOP/s).

    Raises ``MissingFigure`` naming the field where the profile has none (fp8 on A100)."""
    _check_dtype(dtype)
    value = getattr(hw, GEMM_DTYPES[dtype])
    if value is None:
        raise MissingFigure(f"hardware.{GEMM_DTYPES[dtype]}", hw.name, dtype)
    return float(value) * 1e12


def gemm_ceiling(hw: HardwareProfile, dtype: str = "bf16") -> float:
    """The fraction of ``peak_flops(hw, dtype)`` the best-shaped large GEMM reaches.

    ``hw.gemm_ceiling[dtype]``; fp16 falls back to bf16's entry (the same tensor-core rate
    on every profile here). Raises ``MissingFigure`` naming ``hardware.gemm_ceiling.<dtype>``."""
    _check_dtype(dtype)
    key = _entry(hw.gemm_ceiling, dtype)
    if key not in hw.gemm_ceiling:
        raise MissingFigure(f"hardware.gemm_ceiling.{dtype}", hw.name, dtype)
    return float(hw.gemm_ceiling[key])


def _entry(table: Dict[str, float], dtype: str) -> str:
    """The key of ``table`` that holds ``dtype``'s figure: fp16 falls back to bf16's entry
    (the same tensor-core rate on every profile here) unless it has its own."""
    return "bf16" if dtype == "fp16" and "fp16" not in table else dtype


def gemm_tile_ceiling(hw: HardwareProfile, dtype: str = "bf16") -> float:
    """The fraction of ``peak_flops(hw, dtype)`` at which the law runs a full wave of its best
    tile, before short K, waves and tiles cost: ``hw.gemm_tile_ceiling[dtype]`` (fp16 falling
    back to bf16's entry) where the profile gives one, else ``gemm_ceiling(hw, dtype)``.

    A profile sets it above the ceiling where its maximum-achievable row's own shape loses
    to waves or short K in the law; ``gemm_kernel_time`` then still caps every shape at the
    ceiling, the best any shape reached in that search."""
    return float(hw.gemm_tile_ceiling.get(_entry(hw.gemm_tile_ceiling, dtype), gemm_ceiling(hw, dtype)))


def _workspace(shape: Tuple[int, ...]) -> np.ndarray:
    """Float32 scratch of ``(2 * len(_TILE_SIDES) + 2,) + shape``, reused by this thread's
    calls up to ``_WORKSPACE_MAX`` elements: at 1e5 elements the page faults of fresh arrays
    cost as much as the arithmetic. Valid until the thread's next call."""
    size = math.prod(shape)
    if size > _WORKSPACE_MAX:
        return np.empty((2 * len(_TILE_SIDES) + 2,) + shape, np.float32)
    work = getattr(_WORK, "array", None)
    if work is None or work.shape[1] < size:
        work = _WORK.array = np.empty((2 * len(_TILE_SIDES) + 2, size), np.float32)
    return work[:, :size].reshape(work.shape[:1] + shape)


def _wave_slots(m, n, batch, units: int, shape: Tuple[int, ...]) -> np.ndarray:
    """min over ``GEMM_TILES`` of waves * tile cost, waves = ceil(batch * ceil(m/tm) * ceil(n/tn) / units).

    Wave quantization (Volkov, "Understanding Latency Hiding on GPUs", 2016; NVIDIA's
    "Matrix Multiplication Background User's Guide"): a last partial wave costs a whole one.
    Counted in float32 (about 3x faster than float64 here): the tile counts are exact
    integers below 2^24, and ``_SLACK`` keeps an exact multiple of ``units`` from rounding up
    to one wave more; above about 2^20 tiles a wave may be miscounted by one, a relative
    error under 1e-3. Returns a new float32 array of ``shape`` (the inputs broadcast)."""
    work = _workspace(shape)
    rows, cols, slots = work[:len(_TILE_SIDES)], work[len(_TILE_SIDES):-2], work[-2, ...]
    for i, side in enumerate(_TILE_SIDES):
        np.multiply(m, 1.0 / side, out=rows[i, ...], casting="unsafe")
        np.multiply(n, 1.0 / side, out=cols[i, ...], casting="unsafe")
    np.ceil(rows, out=rows)
    np.ceil(cols, out=cols)
    np.multiply(rows, np.multiply(batch, _SLACK / units, dtype=np.float32), out=rows)
    best = np.full(shape, np.inf, np.float32)
    for (tm, tn), cost in zip(GEMM_TILES, _TILE_COST):
        np.multiply(rows[_TILE_SIDES.index(tm), ...], cols[_TILE_SIDES.index(tn), ...], out=slots)
        np.ceil(slots, out=slots)
        np.multiply(slots, np.float32(cost), out=slots)
        np.minimum(best, slots, out=best)
    return best


def gemm_kernel_time(m, n, k, batch, hw: HardwareProfile, dtype: str = "bf16", element_bytes: float = 2):
    """Time in seconds of one (batched) GEMM kernel C[batch, m, n] = A[batch, m, k] B[batch, k, n].

    Vectorised over NumPy arrays (or scalars) of ``m``, ``n``, ``k``, ``batch`` (element and
    matrix counts, >= 0, not checked here); returns a float64 array of their broadcast shape
    (float32 precision, relative 1e-7). ``dtype`` picks the peak and ceiling (``peak_flops``,
    ``gemm_ceiling``; ``MissingFigure`` where the profile lacks them), ``element_bytes``
    the width of each element moved. The law:

        compute = waves(tile) * cost(tile) * 2 (k + k_overhead) / (peak * tile_ceiling / units),
        t = max(kernel_launch_us, compute, 2 m n k batch / (peak * ceiling),
                bytes / (hbm_tbps * memory_efficiency)),

    compute minimised over ``GEMM_TILES``, with k_overhead = ``k_overhead(hw, dtype)`` (a
    fixed time per wave, ``tile_overhead_s``), waves = ceil(batch * tiles / compute_units),
    tile_ceiling = ``gemm_tile_ceiling``, ceiling = ``gemm_ceiling`` and bytes = element_bytes *
    batch * (m k + k n + m n). A large, well-shaped GEMM runs at peak * ceiling, the best a
    maximum-achievable search found over shapes, and none faster; tile and wave
    quantization and short K cost below it (NVIDIA, "Matrix
    Multiplication Background User's Guide"; Volkov 2016); the launch floor follows Erdil
    and Schneider-Joseph (arXiv 2411.01137).
    """
    unit_rate = _unit_rate(hw, dtype)
    f32 = np.float32  # every term in float32 in place (the speed of the step model), returned as float64
    shape = np.broadcast_shapes(np.shape(m), np.shape(n), np.shape(k), np.shape(batch))
    t = _wave_slots(m, n, batch, hw.compute_units, shape)
    np.multiply(t, np.add(k, f32(_k_steps(hw, unit_rate)), dtype=f32), out=t)
    np.multiply(t, f32(2.0 / unit_rate), out=t)
    moved = _workspace(shape)[-1, ...]
    np.add(k, m, out=moved, casting="unsafe")
    np.multiply(moved, n, out=moved, casting="unsafe")
    np.add(moved, np.multiply(m, k, dtype=f32), out=moved)
    np.multiply(moved, np.multiply(batch, element_bytes / (hw.hbm_tbps * 1e12 * hw.memory_efficiency), dtype=f32),
                out=moved)
    np.maximum(t, moved, out=t)
    best = peak_flops(hw, dtype) * gemm_ceiling(hw, dtype)
    if unit_rate * hw.compute_units > best:  # the law's tile rate above the best found: cap
        np.multiply(m, n, out=moved, casting="unsafe")
        np.multiply(moved, np.multiply(k, batch, dtype=f32), out=moved)
        np.multiply(moved, f32(2.0 / best), out=moved)
        np.maximum(t, moved, out=t)
    np.maximum(t, f32(hw.kernel_launch_us * 1e-6), out=t)
    return t.astype(np.float64)


def gemm_tflops(m, n, k, hw: HardwareProfile, dtype: str = "bf16", batch=1):
    """Achieved TFLOP/s (10^12 FLOP/s) of the GEMM (m x k)(k x n), ``batch`` of them, under
    ``gemm_kernel_time``: 2 m n k batch / time. Elements are 1 byte for fp8, else 2; the
    prediction of one published matmul benchmark row."""
    element_bytes = 1 if dtype == "fp8" else 2
    seconds = gemm_kernel_time(m, n, k, batch, hw, dtype, element_bytes)
    return 2.0 * np.multiply(batch, np.multiply(m, np.multiply(n, k))) / seconds / 1e12


def gemm_kernel_times(gemms, shape: Tuple[int, ...], hw: HardwareProfile, dtype: str = "bf16",
                      element_bytes: float = 2) -> np.ndarray:
    """``gemm_kernel_time`` of each of ``gemms`` (objects with ``m``, ``n``, ``k``, ``batch``, each
    broadcastable to ``shape``), shape ``(len(gemms),) + shape``: one call for them all (the law
    is elementwise, so each comes out as it does alone)."""
    m, n, k, batch = (np.stack([np.broadcast_to(getattr(g, dim), shape) for g in gemms])
                      for dim in ("m", "n", "k", "batch"))
    return gemm_kernel_time(m, n, k, batch, hw, dtype, element_bytes)
