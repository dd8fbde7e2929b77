"""The α-β fit of measured collectives, in the model's own terms (``tasks.model.collectives``).

A fit finds the α (per ring step) and bus bandwidth with which ``collective_time``
reproduces a measured ladder of message sizes, so a measured calibration and a spec
hardware profile speak the same language. Seconds, bytes, B/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.model.collectives import bus_factor, collective_time, ring_steps

__all__ = ["AlphaBetaFit", "fit_alpha_beta", "collective_fits", "FIT_METHOD", "FIT_SCHEMA", "FIT_SCHEMA_VERSION",
           "JUDGED_FROM_BYTES"]

#: Messages from this size up are the bandwidth-bound ones a fit is fitted to and judged on.
JUDGED_FROM_BYTES = 1 << 20
#: How ``fit_alpha_beta`` fits (part of a stored fit's key, so a new method adds rows).
FIT_METHOD = "minimax-from-judged-size"
#: One α-β fit of a collective (kind ``collective_fit`` in the lake).
FIT_SCHEMA_VERSION = 1
FIT_SCHEMA = pa.schema([("key", pa.string()), ("op", pa.string()), ("world", pa.int64()), ("placement", pa.string()),
                        ("device_model", pa.string()), ("alpha_us", pa.float64()), ("busbw_GBps", pa.float64()),
                        ("max_rel_error", pa.float64()), ("judged_from_bytes", pa.int64()), ("points", pa.int64()),
                        ("status", pa.string())])


@dataclass(frozen=True)
class AlphaBetaFit:
    """``collective_time(op, world, bytes, alpha_s, busbw_Bps)``, fitted to a measured ladder."""

    op: str
    world: int
    alpha_s: float
    busbw_Bps: float
    max_rel_error: float  # over the sizes the error is judged on
    judged_from_bytes: int
    fitted_from_bytes: int = 0  # the smallest message the fit was fitted to

    def predict(self, message_bytes) -> np.ndarray:
        return collective_time(self.op, self.world, message_bytes, self.alpha_s, self.busbw_Bps)


def fit_alpha_beta(op: str, world: int, message_bytes: Sequence[float], times_s: Sequence[float],
                   judged_from_bytes: int = JUDGED_FROM_BYTES) -> AlphaBetaFit:
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
    bounds_ub = np.vstack([np.hstack([fit_rate, e_column]), np.hstack([-fit_rate, e_column])])
    solved = linprog(c=[0.0, 0.0, 1.0], A_ub=bounds_ub,
                     b_ub=np.concatenate([np.ones(len(e_column)), -np.ones(len(e_column))]), bounds=[(0, None)] * 3,
                     method="highs")
    if not solved.success:
        raise ValueError(f"the α-β fit of {op} over {world} ranks failed: {solved.message}")
    a, b = float(solved.x[0]), max(float(solved.x[1]) / 1e9, 1e-30)
    steps = max(1.0, float(ring_steps(op, world)))
    fit = AlphaBetaFit(op, world, a / steps, float(bus_factor(op, world)) / b, 0.0, judged_from_bytes,
                       int(x[fitted].min()))
    errors = np.abs(fit.predict(x[judged]) - t[judged]) / t[judged] if judged.any() else np.array([np.nan])
    return replace(fit, max_rel_error=float(np.max(errors)))


def collective_fits(rows: pd.DataFrame, judged_from_bytes: int = JUDGED_FROM_BYTES) -> List[AlphaBetaFit]:
    """One α-β fit per (op, world, placement) of measured collective ``roi`` rows (status
    ok, more than one rank, at least two message sizes)."""
    ok = rows[(rows["status"] == "ok") & (rows["world"] > 1)]
    fits = []
    for (op, world, _placement), group in ok.groupby(["op", "world", "placement"]):
        if group["message_bytes"].nunique() >= 2:
            fits.append(fit_alpha_beta(op, int(world), group["message_bytes"], group["median_s"], judged_from_bytes))
    return fits
