"""The GEMM law's one per-profile timing figure fitted to a microbenchmark: the time a wave of
output tiles spends outside its K loop (``HardwareProfile.gemm_tile_overhead_us``, read by
``roofline.tile_overhead_s``).

A K sweep (one M x N, K from a few hundred to many thousands) isolates it: the K loop's time
grows with K while the prologue and epilogue do not, so the throughput rises as K / (K + K0)
towards the plateau that ``gemm_ceiling`` sets. The fit is minimax over the sweep's points
with every other figure of the profile held. Seconds in, microseconds out.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
from scipy.optimize import minimize_scalar

from tasks.model.kernels.gemm_published import GemmRow, predict_row
from tasks.model.terms.specs import HardwareProfile

__all__ = ["OverheadFit", "fit_tile_overhead", "MAX_OVERHEAD_US"]

#: The search's upper bound, in microseconds: far above any wave's fill and drain.
MAX_OVERHEAD_US = 50.0


@dataclass(frozen=True)
class OverheadFit:
    """``overhead_us``: the fitted time per wave; ``worst_error``: the largest |predicted /
    published - 1| over the ``points`` it was fitted to, at that time."""

    overhead_us: float
    worst_error: float
    points: int


def _worst(rows: Sequence[GemmRow], hw: HardwareProfile, overhead_us: float) -> float:
    profile = replace(hw, gemm_tile_overhead_us=overhead_us)
    return max(abs(predict_row(row, profile)[0] / row.tflops - 1.0) for row in rows)


def fit_tile_overhead(rows: Sequence[GemmRow], hw: HardwareProfile) -> OverheadFit:
    """The minimax ``gemm_tile_overhead_us`` of ``hw`` over ``rows`` (points with a shape, of
    one dtype the profile models). Raises ``ValueError`` for no rows or a row without a shape."""
    if not rows or any(row.shape is None for row in rows):
        raise ValueError("fit_tile_overhead needs rows, each with its shape (m, n, k)")
    grid = np.linspace(0.0, MAX_OVERHEAD_US, 201)
    coarse = grid[int(np.argmin([_worst(rows, hw, float(us)) for us in grid]))]
    step = grid[1] - grid[0]
    best = minimize_scalar(lambda us: _worst(rows, hw, float(us)), method="bounded",
                           bounds=(max(0.0, coarse - step), coarse + step), options={"xatol": 1e-4})
    overhead_us = float(best.x)
    return OverheadFit(overhead_us=overhead_us, worst_error=_worst(rows, hw, overhead_us), points=len(rows))
