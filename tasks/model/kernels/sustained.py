"""What a device sustains through training, against what a short benchmark reaches.

A maximum-achievable matmul search (a profile's ``gemm_ceiling``) times each shape for a
few hundred iterations: a shape that draws well under the power limit runs at the boost
clock. A training step keeps the tensor cores busy for seconds on end; the device then
runs at its power limit and its clock settles lower, and high-entropy data (random
weights and activations, not zeros) draws the most power (He 2024, "Strangely, matrix
multiplications on GPUs run faster when given 'predictable' data"). The maximum
sustainable matmul FLOP/s (MSMF) is measured after a thermal soak, at the power limit,
on random data (stas00/ml-engineering, compute/accelerator/README.md and
benchmarks/mamf-finder.py, branch fast-mamf at 082816f: an H200 bf16 GEMM at 1980 MHz and
176 W bursts to 841.9 TFLOP/s and sustains 708.5 at 1465 MHz and 693 W). A profile's
``gemm_sustained`` holds that figure as a fraction of the dtype's peak.

``training_device`` is the device a training step's compute runs on: each dtype's peak
scaled by ``sustained_ratio`` (sustained over ceiling: the settled clock against the
burst), so the best-shaped GEMM runs at the sustained fraction and every other shape,
and fused attention, at the law's burst time over that ratio. Memory-bound kernels and
collectives are left at the profile's figures (the memory clock does not settle with the
SM clock). A dtype without a ``gemm_sustained`` entry sustains its ceiling: an assumption,
which ``sustained_basis`` names so that ``validate`` can show the rows resting on it.

A device capped below its datasheet's limit (``HardwareProfile.power_limit_w`` under
``tdp_w``) settles lower still. ``power_scale`` takes the sustained clock to scale as the
cube root of the power left once the part that does not follow the SM clock is paid (CMOS
dynamic power is C·V²·f, and across the DVFS range the voltage rises with the clock, so it
grows as f³; memory, I/O and leakage do not follow the SM clock). Both figures,
``DVFS_EXPONENT`` and ``STATIC_POWER_SHARE``, are assumptions: no GEMM rate measured on a
capped device is on hand, so ``sustained_basis`` names a capped device's rate "assumed".
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict

from tasks.model.kernels.roofline import gemm_ceiling
from tasks.model.terms.specs import HardwareProfile

__all__ = ["SUSTAINED_BASES", "STATIC_POWER_SHARE", "DVFS_EXPONENT", "sustained_ratio", "sustained_basis",
           "static_power_w", "power_scale", "power_limit_problem", "training_device"]

#: Assumption: the share of the datasheet's board limit (``tdp_w``) that does not follow the
#: SM clock while a GEMM runs at the limit (HBM, NVLink and host I/O, leakage).
STATIC_POWER_SHARE = 0.25

#: Assumption: the power that follows the SM clock grows as its cube (dynamic power C·V²·f
#: with the voltage rising in step with the clock across the DVFS range).
DVFS_EXPONENT = 3.0

#: Where a profile's sustained rate for a dtype comes from: "measured" (a sustained matmul
#: measurement of that device), "assumed" (a ``gemm_sustained`` entry whose source is an
#: assumption, such as a sibling device's measurement) or "none" (no entry: the short-run
#: ceiling is taken to hold through training).
SUSTAINED_BASES = ("measured", "assumed", "none")


def _entry(hw: HardwareProfile, dtype: str) -> str:
    """The key of ``hw.gemm_sustained`` holding ``dtype`` (fp16 falls back to bf16's)."""
    return "bf16" if dtype == "fp16" and "fp16" not in hw.gemm_sustained else dtype


def sustained_ratio(hw: HardwareProfile, dtype: str = "bf16") -> float:
    """Sustained over short-run rate of ``dtype`` on ``hw``, in (0, 1]: 1 where no sustained
    figure is given."""
    key = _entry(hw, dtype)
    if key not in hw.gemm_sustained:
        return 1.0
    return float(hw.gemm_sustained[key]) / gemm_ceiling(hw, dtype)


def sustained_basis(hw: HardwareProfile, dtype: str = "bf16") -> str:
    """One of ``SUSTAINED_BASES`` for ``dtype`` on ``hw``: "none" without an entry, "assumed"
    where the entry's source (``sources['gemm_sustained.<dtype>']``) starts with
    "assumption", else "measured"."""
    key = _entry(hw, dtype)
    if power_scale(hw) < 1.0:
        return "assumed"
    if key not in hw.gemm_sustained:
        return "none"
    source = str(hw.sources.get(f"gemm_sustained.{key}", "")).strip().lower()
    return "assumed" if source.startswith("assumption") else "measured"


def static_power_w(hw: HardwareProfile) -> float:
    """Watts of the board's limit that do not follow the SM clock (``STATIC_POWER_SHARE`` of
    ``tdp_w``; 0 without one)."""
    return STATIC_POWER_SHARE * float(hw.tdp_w or 0.0)


def power_scale(hw: HardwareProfile) -> float:
    """The sustained clock at ``power_limit_w`` over the one at ``tdp_w``, in (0, 1]:
    ((cap - static) / (tdp - static)) ** (1 / ``DVFS_EXPONENT``); 1 where no cap below the
    datasheet's limit is set. Raises ``ValueError`` for a cap at or below the static part."""
    cap, tdp = hw.power_limit_w, hw.tdp_w
    if cap is None or tdp is None or cap >= tdp:
        return 1.0
    problem = power_limit_problem(hw)
    if problem:
        raise ValueError(f"hardware.power_limit_w={cap:g}: {problem}")
    static = static_power_w(hw)
    return float(((cap - static) / (tdp - static)) ** (1.0 / DVFS_EXPONENT))


def power_limit_problem(hw: HardwareProfile) -> str:
    """Why ``hw``'s ``power_limit_w`` cannot be priced ("" where it can, or none is set): no
    datasheet limit (``tdp_w``) to compare it with, or a limit at or below the static part."""
    if hw.power_limit_w is None:
        return ""
    if hw.tdp_w is None:
        return f"cannot be priced: hardware profile {hw.name} states no datasheet limit (needs hardware.tdp_w)"
    static = static_power_w(hw)
    if hw.power_limit_w <= static:
        return f"at or below the {static:g} W of the board that does not follow its clock"
    return ""


def training_device(hw: HardwareProfile) -> HardwareProfile:
    """``hw`` as a training step's compute sees it: the bf16/fp16 and fp8 peaks scaled by
    their ``sustained_ratio`` and the ``power_scale`` of a capped device, and a wave's fixed
    overhead (``gemm_tile_overhead_us``, a time at the burst clock) stretched by the 16-bit
    scale. ``hw`` itself where nothing is sustained below its ceiling."""
    capped = power_scale(hw)
    if not hw.gemm_sustained and capped == 1.0:
        return hw
    ratio16 = sustained_ratio(hw, "bf16") * capped
    changes: Dict[str, object] = {"peak_tflops": hw.peak_tflops * ratio16}
    if hw.peak_fp8_tflops is not None and "fp8" in hw.gemm_ceiling:
        changes["peak_fp8_tflops"] = hw.peak_fp8_tflops * sustained_ratio(hw, "fp8") * capped
    if hw.gemm_tile_overhead_us is not None:
        changes["gemm_tile_overhead_us"] = hw.gemm_tile_overhead_us / ratio16
    return replace(hw, **changes)
