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
``tdp_w``) settles lower still, and a device whose figure is a sibling's measured at a
lower limit (``gemm_sustained_w`` under ``tdp_w``: GB200 runs the B200 die at 1,200 W,
where the B200's MSMF was measured at its own 1,000 W) settles higher. ``power_scale``
takes the sustained clock to scale as the cube root of the power left once the part that
does not follow the SM clock is paid (CMOS dynamic power is C·V²·f, and across the DVFS
range the voltage rises with the clock, so it grows as f³; memory, I/O and leakage do not
follow the SM clock). Both figures, ``DVFS_EXPONENT`` and ``STATIC_POWER_SHARE``, are
assumptions: no GEMM rate measured at two limits of one device is on hand, so
``sustained_basis`` names a rate moved by them "assumed". A device never sustains more than
its burst ceiling.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Dict, Optional

from tasks.model.kernels.roofline import gemm_ceiling
from tasks.model.terms.specs import HardwareProfile

__all__ = ["SUSTAINED_BASES", "STATIC_POWER_SHARE", "DVFS_EXPONENT", "sustained_ratio", "sustained_basis",
           "measured_at_w", "runs_at_w", "static_power_w", "power_scale", "power_limit_problem", "training_device"]

#: Assumption: the share of the board limit the sustained figure was measured at
#: (``gemm_sustained_w``, else ``tdp_w``) that does not follow the SM clock while a GEMM runs
#: at the limit (HBM, NVLink and host I/O, leakage).
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
    if power_scale(hw) != 1.0:
        return "assumed"
    if key not in hw.gemm_sustained:
        return "none"
    return "assumed" if hw.source_is_assumption(f"gemm_sustained.{key}") else "measured"


def measured_at_w(hw: HardwareProfile) -> Optional[float]:
    """The board limit (W) ``hw``'s ``gemm_sustained`` was measured at: ``gemm_sustained_w``,
    else ``tdp_w`` (``None`` without either)."""
    return hw.gemm_sustained_w if hw.gemm_sustained_w is not None else hw.tdp_w


def runs_at_w(hw: HardwareProfile) -> Optional[float]:
    """The board limit (W) ``hw``'s devices run at: ``power_limit_w`` where it is under
    ``tdp_w`` (a limit above the datasheet's is not granted), else ``tdp_w``."""
    cap, tdp = hw.power_limit_w, hw.tdp_w
    if cap is None or tdp is None:
        return tdp
    return min(cap, tdp)


def static_power_w(hw: HardwareProfile) -> float:
    """Watts of the measured board's limit that do not follow the SM clock
    (``STATIC_POWER_SHARE`` of ``measured_at_w``; 0 without one)."""
    return STATIC_POWER_SHARE * float(measured_at_w(hw) or 0.0)


def power_scale(hw: HardwareProfile) -> float:
    """The sustained clock at the limit ``hw`` runs at over the one its figure was measured
    at (``runs_at_w`` over ``measured_at_w``): ((runs - static) / (measured - static)) **
    (1 / ``DVFS_EXPONENT``); below 1 for a capped device, above 1 for a sibling's figure
    measured at a lower limit, 1 where both are the same or either is unknown. Raises
    ``ValueError`` for a cap at or below the static part."""
    runs, measured = runs_at_w(hw), measured_at_w(hw)
    if runs is None or measured is None or runs == measured:
        return 1.0
    problem = power_limit_problem(hw)
    if problem:
        raise ValueError(f"hardware.power_limit_w={hw.power_limit_w:g}: {problem}")
    static = static_power_w(hw)
    return float(((runs - static) / (measured - static)) ** (1.0 / DVFS_EXPONENT))


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
    their ``sustained_ratio`` times the ``power_scale`` of the limit it runs at (at most its
    burst ceiling), and a wave's fixed
    overhead (``gemm_tile_overhead_us``, a time at the burst clock) stretched by the 16-bit
    scale. ``hw`` itself where nothing is sustained below its ceiling."""
    scale = power_scale(hw)
    if not hw.gemm_sustained and scale == 1.0:
        return hw

    def ratio(dtype: str) -> float:  # at most the burst ceiling
        return min(1.0, sustained_ratio(hw, dtype) * scale)

    ratio16 = ratio("bf16")
    changes: Dict[str, object] = {"peak_tflops": hw.peak_tflops * ratio16}
    if hw.peak_fp8_tflops is not None and "fp8" in hw.gemm_ceiling:
        changes["peak_fp8_tflops"] = hw.peak_fp8_tflops * ratio("fp8")
    if hw.gemm_tile_overhead_us is not None:
        changes["gemm_tile_overhead_us"] = hw.gemm_tile_overhead_us / ratio16
    return replace(hw, **changes)
