"""Operator-level models: how each operator class's time scales with the configuration.

method.md §5.3 (Pati et al., arXiv 2302.02825, §5.3): profile a baseline, vary one
hyperparameter at a time, and learn each operator's scaling. The algebra fixes the
exponents: a model's *work* ``W`` is the class's FLOPs (GEMMs, ``layer.gemm_shapes``:
linear in SL and B, quadratic in H, 1/TP; attention quadratic in SL) or elements touched
(memory-bound kernels, ``layer.elementwise_elements`` without sequence parallelism, as
``tasks.measure.transformer_layer`` runs them: LayerNorm, dropout and residual adds on the
whole SL*B*H on every TP rank). What the algebra does not know is fitted
(``tasks.fit.opmodel``):

    t = alpha + beta * W * (1 + d_half / d_min)

- ``alpha``: a launch floor, seconds (Erdil and Schneider-Joseph, arXiv 2411.01137);
- ``beta``: seconds per unit of work at full efficiency;
- ``d_half``: efficiency against size; a GEMM whose smallest dimension ``d_min`` is
  ``d_half`` runs at half its large-size efficiency (0 for memory-bound classes, whose
  ``d_min`` is not defined).

This module evaluates fitted models; the fit's residuals give each projection a band.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Dict, Iterable, Mapping, Sequence, Tuple

import numpy as np

from tasks.model.kernels import layer
from tasks.model.projection.operators import GEMM_CLASSES, UNATTRIBUTED

__all__ = ["OPMODEL_VERSION", "OperatorModel", "work", "predict", "HYPERPARAMETERS", "MeasuredRange", "BAND_SIGMAS"]

#: Bumped whenever the model's form or a class's work changes: part of a calibration's id,
#: so a changed model never reuses stored fits.
OPMODEL_VERSION = "opmodel-2"

#: The hyperparameters a configuration is given by (and the fit's measured range spans).
HYPERPARAMETERS = ("h", "heads", "sl", "b", "tp")

#: Width of the uncertainty band, in root-mean-square relative residuals (about 95%).
BAND_SIGMAS = 2.0


def work(op_class: str, h, heads, sl, b, tp) -> Tuple[np.ndarray, np.ndarray]:
    """``(W, d_min)`` of ``op_class`` for configurations given as arrays (broadcast).

    GEMM classes: W in FLOPs, d_min the GEMM's smallest dimension. Memory-bound classes:
    W in elements, d_min infinite. ``head_reshape`` copies QKV into heads (3 SL*B*H/TP
    elements) and merges the context back (SL*B*H/TP).
    """
    h, heads, sl, b, tp = (np.asarray(v, dtype=np.float64) for v in (h, heads, sl, b, tp))
    shape = np.broadcast(h, heads, sl, b, tp).shape
    inf = np.full(shape, np.inf)
    name, _, pass_ = op_class.partition(".")
    if op_class in GEMM_CLASSES:
        for gemm in layer.gemm_shapes(h, heads, sl, b, tp):
            if gemm.name == name and gemm.pass_ == pass_:
                d_min = np.minimum(np.minimum(gemm.m, gemm.n), gemm.k)
                return np.broadcast_to(gemm.flops, shape), np.broadcast_to(d_min, shape)
    if name == "head_reshape":
        elements = 4.0 * sl * b * h / tp
    elif name in layer.ELEMENTWISE_KERNELS:
        # The measured layer is Megatron's without sequence parallelism.
        elements = layer.elementwise_elements(name, h, heads, sl, b, tp, sequence_parallel=False)
    elif op_class == UNATTRIBUTED:
        elements = sl * b * h
    else:
        raise KeyError(f"unknown operator class {op_class!r}")
    return np.broadcast_to(elements, shape), inf


@dataclass(frozen=True)
class OperatorModel:
    """A fitted ``t = alpha + beta * W * (1 + d_half / d_min)`` and its fit's residuals."""

    op_class: str
    alpha_s: float
    beta_s: float
    d_half: float
    rms_rel_error: float     # root mean square of (predicted - measured) / measured
    max_rel_error: float
    points: int

    def predict(self, h, heads, sl, b, tp) -> np.ndarray:
        w, d_min = work(self.op_class, h, heads, sl, b, tp)
        return self.alpha_s + self.beta_s * w * (1.0 + self.d_half / d_min)

    def as_row(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class MeasuredRange:
    """The hyperparameter box the fits saw; a configuration outside it extrapolates."""

    low: Dict[str, float]
    high: Dict[str, float]

    @classmethod
    def of(cls, configs: Mapping[str, Sequence[float]]) -> "MeasuredRange":
        return cls({k: float(np.min(configs[k])) for k in HYPERPARAMETERS if k != "heads"},
                   {k: float(np.max(configs[k])) for k in HYPERPARAMETERS if k != "heads"})

    def outside(self, configs: Mapping[str, Sequence[float]]) -> np.ndarray:
        """True where any hyperparameter lies outside the measured range."""
        flags = None
        for k, low in self.low.items():
            v = np.asarray(configs[k], dtype=np.float64)
            out = (v < low) | (v > self.high[k])
            flags = out if flags is None else flags | out
        return flags


def predict(models: Mapping[str, OperatorModel], classes: Iterable[str], configs: Mapping[str, Sequence[float]]
            ) -> Tuple[np.ndarray, np.ndarray]:
    """Total predicted seconds of ``classes`` and its band half-width (seconds).

    Class errors are taken as independent: half-width = BAND_SIGMAS * sqrt(sum((rms_i * t_i)^2)).
    """
    total, variance = 0.0, 0.0
    args = [configs[k] for k in HYPERPARAMETERS]
    for c in classes:
        t = models[c].predict(*args)
        total = total + t
        variance = variance + (models[c].rms_rel_error * t) ** 2
    return np.asarray(total, dtype=np.float64), BAND_SIGMAS * np.sqrt(variance)
