"""Fit operator models (``tasks.model.projection.opmodel``) to measured times, one class at a time.

The fit minimises relative error (weights 1/t) over ``alpha, beta >= 0`` (a bounded
linear least-squares problem, ``scipy.optimize.lsq_linear``), with ``d_half`` chosen on a
log grid (0 for memory-bound classes). Its residuals, with the degrees of freedom it
used, give each projection an uncertainty band.
"""

from __future__ import annotations

from typing import Dict, Mapping, Sequence, Tuple

import numpy as np

from tasks.model.projection.opmodel import HYPERPARAMETERS, OperatorModel, work

__all__ = ["fit_operator", "fit_operators", "weighted_fit"]

_D_HALF_GRID = np.concatenate([[0.0], np.geomspace(1.0, 8192.0, 53)])


def weighted_fit(w: np.ndarray, t: np.ndarray) -> Tuple[float, float]:
    """alpha, beta >= 0 minimising sum(((alpha + beta w) - t) / t)^2 (bounded least squares)."""
    from scipy.optimize import lsq_linear

    design = np.stack([np.ones_like(w), w], axis=1) / t[:, None]
    scale = np.maximum(np.abs(design).max(axis=0), 1e-300)  # columns near one, for the solver
    solved = lsq_linear(design / scale, np.ones_like(t), bounds=(0.0, np.inf), method="bvls")
    alpha, beta = solved.x / scale
    return float(alpha), float(beta)


def fit_operator(op_class: str, configs: Mapping[str, Sequence[float]], times_s: Sequence[float]) -> OperatorModel:
    """Fit one class to measured times; ``configs`` maps each of ``HYPERPARAMETERS`` to
    an array of the measured configurations. Needs at least two positive times, or none: a
    class that ran no kernel in any configuration (on a GPU the residual add's backward
    passes its gradient on without one) is a model of zero time."""
    t = np.asarray(times_s, dtype=np.float64)
    w, d_min = work(op_class, *(configs[k] for k in HYPERPARAMETERS))
    keep = t > 0
    if len(t) and (t == 0).all():
        return OperatorModel(op_class, 0.0, 0.0, 0.0, 0.0, 0.0, 0)
    if keep.sum() < 2:
        raise ValueError(f"{op_class}: {int(keep.sum())} positive times; a fit needs at least 2")
    t, w, d_min = t[keep], np.asarray(w)[keep], np.asarray(d_min)[keep]
    grid = _D_HALF_GRID if np.isfinite(d_min).any() else np.array([0.0])
    best = None
    for d_half in grid:
        effective = w * (1.0 + d_half / d_min)
        alpha, beta = weighted_fit(effective, t)
        rel = (alpha + beta * effective - t) / t
        score = float(np.sqrt(np.mean(rel**2)))
        if best is None or score < best[0] - 1e-12:
            best = (score, alpha, beta, float(d_half), float(np.max(np.abs(rel))))
    score, alpha, beta, d_half, worst = best
    # Residual spread with the degrees of freedom the fit used (alpha, beta, d_half).
    dof = max(1, len(t) - (3 if len(grid) > 1 else 2))
    rms = score * np.sqrt(len(t) / dof)
    return OperatorModel(op_class, alpha, beta, d_half, float(rms), worst, int(len(t)))


def fit_operators(configs: Mapping[str, Sequence[float]],
                  times: Mapping[str, Sequence[float]]) -> Dict[str, OperatorModel]:
    """One model per class in ``times`` (class -> measured seconds per configuration)."""
    return {c: fit_operator(c, configs, t) for c, t in times.items()}
