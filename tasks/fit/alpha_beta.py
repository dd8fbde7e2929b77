"""The α-β fit of measured collectives, in the model's own terms (``tasks.model.collectives.nccl``).

A fit finds the two figures of a link tier, α (the per-step latency of NCCL's LL
protocol) and the saturated bus bandwidth, with which ``collective_time`` (the fastest of
the LL / LL128 / Simple protocol lines, their structure fixed) reproduces a measured
ladder of message sizes, so a measured calibration and a spec hardware profile speak the
same language: ``LinkTier(bandwidth_GBps=busbw / 1e9, latency_us=α * 1e6, efficiency=1)``
costs what was measured. Seconds, bytes, B/s.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import List, Sequence

import numpy as np
import pandas as pd
import pyarrow as pa

from tasks.model.collectives.nccl import PROTOCOLS, bus_factor, collective_time, ring_steps

__all__ = ["AlphaBetaFit", "fit_alpha_beta", "collective_fits", "FIT_METHOD", "FIT_SCHEMA", "FIT_SCHEMA_VERSION",
           "JUDGED_FROM_BYTES"]

#: Messages from this size up are the bandwidth-bound ones a fit is fitted to and judged on.
JUDGED_FROM_BYTES = 1 << 20
#: How ``fit_alpha_beta`` fits (part of a stored fit's key, so a new method adds rows).
FIT_METHOD = "minimax-protocol-curve-from-judged-size"
#: One α-β fit of a collective (kind ``collective_fit`` in the lake). Version 2: ``alpha_us``
#: is the LL per-step α and ``busbw_GBps`` the saturated bus bandwidth of the protocol curve
#: (version 1 held one straight line's).
FIT_SCHEMA_VERSION = 2
FIT_SCHEMA = pa.schema([("key", pa.string()), ("op", pa.string()), ("world", pa.int64()), ("placement", pa.string()),
                        ("device_model", pa.string()), ("alpha_us", pa.float64()), ("busbw_GBps", pa.float64()),
                        ("max_rel_error", pa.float64()), ("judged_from_bytes", pa.int64()), ("points", pa.int64()),
                        ("status", pa.string())])
#: Points of the coarse search over the latency-to-bandwidth ratio, and the cells refined.
_GRID, _REFINED = 400, 3


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


def _shape(ratio, wire_bytes):
    """The protocol curve's time per unit of C = factor / busbw, for A = ratio * C
    (A = steps * α): min_p(latency_scale_p * ratio + wire_bytes / bandwidth_share_p), with
    ``ratio`` (bytes) broadcast against ``wire_bytes`` (bytes each point moves)."""
    return np.min([p.latency_scale * ratio + wire_bytes / p.bandwidth_share for p in PROTOCOLS], axis=0)


def _scale_and_error(ratio, wire_bytes, times):
    """For each ``ratio`` (rows) the scale C with the smallest worst relative error over
    the points (columns), in closed form: with q = shape / t, C = 2 / (max q + min q) and
    the error (max q - min q) / (max q + min q)."""
    q = _shape(ratio, wire_bytes) / times
    high, low = q.max(axis=-1), q.min(axis=-1)
    return 2.0 / (high + low), (high - low) / (high + low)


def _best_ratio(wire_bytes: np.ndarray, times: np.ndarray) -> float:
    """The latency-to-bandwidth ratio A / C (bytes) whose minimax scale fits best: a
    log-spaced grid from far below the smallest message (no latency) to far above the
    largest (latency only), then a bounded scalar search in the best cells."""
    from scipy.optimize import minimize_scalar

    logs = np.linspace(np.log(wire_bytes.min()) - 12.0, np.log(wire_bytes.max()) + 6.0, _GRID)
    _, errors = _scale_and_error(np.exp(logs)[:, None], wire_bytes[None, :], times[None, :])
    best = (errors[0], logs[0])
    for i in np.argsort(errors, kind="stable")[:_REFINED]:
        lo, hi = logs[max(i - 1, 0)], logs[min(i + 1, _GRID - 1)]
        found = minimize_scalar(lambda g: float(_scale_and_error(np.exp(g), wire_bytes, times)[1]),
                                bounds=(lo, hi), method="bounded", options={"xatol": 1e-10})
        best = min(best, (float(found.fun), float(found.x)), (float(errors[i]), float(logs[i])))
    return float(np.exp(best[1]))


def fit_alpha_beta(op: str, world: int, message_bytes: Sequence[float], times_s: Sequence[float],
                   judged_from_bytes: int = JUDGED_FROM_BYTES) -> AlphaBetaFit:
    """The α and bus bandwidth of ``collective_time``'s protocol curve (its structure
    fixed: ``tasks.model.collectives.nccl.PROTOCOLS``) with the smallest worst relative error
    over the fitted sizes (a minimax fit). With A = steps x α and C = factor / busbw the
    curve is C x min_p(s_p A / C + bytes / b_p): for each ratio A / C the best C and its
    error are in closed form, so the fit searches that one ratio (a log grid, then a
    bounded scalar search). Minimax, not least squares, because the fit's contract is a
    bound on every measured size (``max_rel_error``), which is what a projection built on
    it can promise.

    The fit is fitted to, and judged on, messages of at least ``judged_from_bytes``
    where the ladder has two sizes or more there (else to the whole ladder): below that,
    latency-bound messages follow the transport's own small-message path (gloo's is not
    NCCL's), which the bandwidth-bound sizes the projections use need not share. The fit
    error is the worst relative error over messages of at least ``judged_from_bytes``.
    """
    x = np.asarray(message_bytes, dtype=np.float64)
    t = np.asarray(times_s, dtype=np.float64)
    judged = x >= judged_from_bytes
    fitted = judged if np.unique(x[judged]).size >= 2 else np.ones_like(judged)
    if not (np.all(t[fitted] > 0) and np.all(x[fitted] > 0)):
        raise ValueError(f"the α-β fit of {op} over {world} ranks needs positive sizes and times")
    ratio = _best_ratio(x[fitted], t[fitted])
    scale, _ = _scale_and_error(ratio, x[fitted], t[fitted])
    steps = max(1.0, float(ring_steps(op, world)))
    fit = AlphaBetaFit(op, world, float(ratio * scale) / steps, float(bus_factor(op, world)) / float(scale), 0.0,
                       judged_from_bytes, int(x[fitted].min()))
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
