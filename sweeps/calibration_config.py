"""The schema of ``conf/calibration/*.yaml``: how a measured calibration is built.

A calibration profiles a baseline layer on one device, varies one hyperparameter at a
time around it, fits operator models (``tasks.model.opmodel``), and judges them on held-out
configurations that no fit saw (method.md §5.3).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Dict, List

from omegaconf import MISSING

from sweeps.errors import ConfigError

__all__ = ["LayerPoint", "Variations", "CalibrationSpec", "validate_calibration", "fit_configs", "VARIED"]

#: The hyperparameters a calibration varies, one at a time.
VARIED = ("sl", "b", "h", "tp")


@dataclass
class LayerPoint:
    """One layer configuration (per-device shapes follow from ``tp``)."""

    h: int = MISSING
    heads: int = MISSING
    sl: int = MISSING
    b: int = MISSING
    tp: int = 1


@dataclass
class Variations:
    """Values each hyperparameter takes while the others stay at the baseline's."""

    sl: List[int] = field(default_factory=list)
    b: List[int] = field(default_factory=list)
    h: List[int] = field(default_factory=list)
    tp: List[int] = field(default_factory=list)


@dataclass
class CalibrationSpec:
    """One calibration preset. When ``h`` varies, heads = h / ``head_dim``."""

    name: str = MISSING
    description: str = ""
    device: str = "cpu"
    dtype: str = "fp32"
    causal: bool = True
    threads: int = 0                   # torch threads on the CPU (0: torch's default)
    baseline: LayerPoint = field(default_factory=LayerPoint)
    head_dim: int = 64
    vary: Variations = field(default_factory=Variations)
    held_out: List[LayerPoint] = field(default_factory=list)
    warmup: int = 2
    steps: int = 5                     # profiled steps per configuration (the fastest counts)
    plain_repeats: int = 10            # unprofiled steps per configuration
    time_cap_s: float = 10.0
    point_timeout_s: float = 600.0
    dropout: float = 0.1
    judged_from_ms: float = 10.0       # accuracy is judged on measured steps at least this long


def fit_configs(spec: CalibrationSpec) -> List[Dict[str, object]]:
    """The baseline and its one-at-a-time variations: dicts of h, heads, sl, b, tp plus
    ``role`` and ``varied``. A variation equal to the baseline is left out."""
    base = asdict(spec.baseline)
    configs = [dict(base, role="baseline", varied="none")]
    for name in VARIED:
        for value in getattr(spec.vary, name):
            config = dict(base, **{name: value})
            if name == "h":
                config["heads"] = value // spec.head_dim
            if config != base:
                configs.append(dict(config, role="variation", varied=name))
    return configs


def _shape_errors(where: str, point: Dict[str, object]) -> None:
    for name in ("h", "heads", "sl", "b", "tp"):
        if not isinstance(point[name], int) or point[name] <= 0:
            raise ConfigError(f"{where}.{name}", point[name], "must be a positive integer")
    if point["h"] % point["heads"]:
        raise ConfigError(f"{where}.heads", point["heads"], f"does not divide h={point['h']}")
    if point["heads"] % point["tp"]:
        raise ConfigError(f"{where}.tp", point["tp"], f"does not divide heads={point['heads']}")


def validate_calibration(spec: CalibrationSpec) -> None:
    """Semantic checks; raises ``ConfigError`` naming the field and value."""
    from tasks.device import DTYPE_BYTES as DTYPES

    if spec.dtype not in DTYPES:
        raise ConfigError("calibration.dtype", spec.dtype, f"choose from {', '.join(DTYPES)}")
    if not (spec.device == "cpu" or spec.device.startswith("cuda")):
        raise ConfigError("calibration.device", spec.device, "use cpu or cuda[:N]")
    for name in ("warmup", "threads"):
        if getattr(spec, name) < 0:
            raise ConfigError(f"calibration.{name}", getattr(spec, name), "must not be negative")
    for name in ("steps", "plain_repeats", "head_dim", "time_cap_s", "point_timeout_s"):
        if getattr(spec, name) <= 0:
            raise ConfigError(f"calibration.{name}", getattr(spec, name), "must be positive")
    if not 0.0 <= spec.dropout < 1.0:
        raise ConfigError("calibration.dropout", spec.dropout, "is a probability below 1")
    fits = fit_configs(spec)
    for config in fits:
        where = "calibration.baseline" if config["role"] == "baseline" else f"calibration.vary.{config['varied']}"
        if config["role"] == "variation" and config["varied"] == "h" and config["h"] % spec.head_dim:
            raise ConfigError(where, config["h"], f"is not a multiple of calibration.head_dim={spec.head_dim}")
        _shape_errors(where, config)
    if len(fits) < 3:
        raise ConfigError("calibration.vary", asdict(spec.vary), "needs at least two variations to fit")
    shapes = {tuple(c[k] for k in ("h", "heads", "sl", "b", "tp")) for c in fits}
    for i, point in enumerate(spec.held_out):
        _shape_errors(f"calibration.held_out[{i}]", asdict(point))
        if tuple(asdict(point)[k] for k in ("h", "heads", "sl", "b", "tp")) in shapes:
            raise ConfigError(f"calibration.held_out[{i}]", asdict(point),
                              "is also a baseline or variation configuration: a held-out configuration must stay out of the fit")
