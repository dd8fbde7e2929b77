"""How a measured calibration is built (``conf/calibration/*.yaml``, ``CalibrationSpec``):
a baseline layer on one device, each hyperparameter varied on its own around it, and
held-out configurations that no fit sees (method.md §5.3); and its checks.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Dict, List

from sweeps.config.checks import check_choices, check_non_negative, check_positive
from sweeps.config.limits import CALIBRATION, LAYER_POINT, check_fields, check_range
from sweeps.config.schemas import CalibrationSpec
from sweeps.errors import ConfigError
from tasks.device import DTYPE_BYTES, check_device

__all__ = ["VARIED", "fit_configs", "validate_calibration"]

#: The hyperparameters a calibration varies, one at a time.
VARIED = ("sl", "b", "h", "tp")


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
        check_range(f"{where}.{name}", point[name], LAYER_POINT[name])
    if point["h"] % point["heads"]:
        raise ConfigError(f"{where}.heads", point["heads"], f"does not divide h={point['h']}")
    if point["heads"] % point["tp"]:
        raise ConfigError(f"{where}.tp", point["tp"], f"does not divide heads={point['heads']}")


def validate_calibration(spec: CalibrationSpec) -> None:
    """Semantic checks; raises ``ConfigError`` naming the field and value."""
    check_choices("calibration.dtype", [spec.dtype], list(DTYPE_BYTES))
    if not check_device(spec.device):
        raise ConfigError("calibration.device", spec.device, "use cpu or cuda[:N]")
    for name in ("warmup", "threads", "remeasure"):
        check_non_negative(f"calibration.{name}", getattr(spec, name))
    for name in ("steps", "plain_repeats", "head_dim", "time_cap_s", "point_timeout_s", "rounds", "max_drift",
                 "max_excess"):
        check_positive(f"calibration.{name}", getattr(spec, name))
    if spec.rounds > spec.plain_repeats:
        raise ConfigError("calibration.rounds", spec.rounds,
                          f"is more than calibration.plain_repeats={spec.plain_repeats}: "
                          "every round times a plain step")
    if not 0.0 <= spec.dropout < 1.0:
        raise ConfigError("calibration.dropout", spec.dropout, "is a probability below 1")
    check_fields("calibration", spec, CALIBRATION)
    for name in VARIED:
        values = getattr(spec.vary, name)
        if values:  # a repeated value would measure one configuration twice, under one key
            check_positive(f"calibration.vary.{name}", values)
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
                              "is also a baseline or variation configuration: "
                              "a held-out configuration must stay out of the fit")
