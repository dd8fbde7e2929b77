"""A run's config: ``conf/defaults.yaml``, the chosen presets and the overrides, composed
and checked before any work.

A run config has four groups, each one YAML preset validated against its schema
(``schemas.GROUPS``): ``model`` (optional), ``hardware``, ``sweep`` and ``calibration``
(optional). Overrides are ``GROUP=NAME`` (a preset of ``conf/GROUP/``, or a path to a YAML
file) and ``GROUP.FIELD=VALUE`` (OmegaConf dotlist syntax: ``sweep.tp=[8,16]``). Every bad
input raises ``ConfigError`` naming the field and the value.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from omegaconf import OmegaConf

from sweeps.config.calibration import validate_calibration
from sweeps.config.checks import check_at_least, check_choices, check_name, check_positive
from sweeps.config.compose import CONF_DIR, check_preset, compose, load_preset
from sweeps.config.limits import ROI, SWEEP, check_fields, check_range
from sweeps.config.schemas import GROUPS, OPTIONAL_GROUPS, RoiSpec, RunConfig, SweepMode
from sweeps.config.specs import validate_hardware, validate_model
from sweeps.errors import ConfigError
from tasks.device import DTYPE_BYTES, check_device
from tasks.model.collectives.nccl import COLLECTIVE_OPS
from tasks.model.kernels.layer import PASSES

__all__ = ["load_run_config", "validate_run"]


def _split_overrides(overrides: Sequence[str]) -> Tuple[Dict[str, Optional[str]], List[str]]:
    choices: Dict[str, Optional[str]] = {}
    dotted: List[str] = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ConfigError(item, item, "an override is KEY=VALUE (e.g. hardware=h100 or sweep.tp=[8,16])")
        group = key.split(".", 1)[0]
        if group not in GROUPS:
            raise ConfigError(key, value, f"unknown config key; known groups: {', '.join(GROUPS)}")
        if "." in key:
            dotted.append(item)
        else:
            choices[key] = None if value in ("null", "none", "") and key in OPTIONAL_GROUPS else value
    return choices, dotted


def _defaults() -> Dict[str, Optional[str]]:
    return dict(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "defaults.yaml"))["defaults"])


def load_run_config(overrides: Sequence[str] = (), *, allow_large: bool = False) -> RunConfig:
    """Compose ``conf/defaults.yaml``, the chosen presets and the dotted overrides
    (``allow_large``: a preset file beyond ``bounds.MAX_YAML_BYTES`` is read all the same)."""
    choices, dotted = _split_overrides(overrides)
    selected = {**_defaults(), **choices}
    groups = {g: (load_preset(g, c, allow_large=allow_large) if c is not None else None) for g, c in selected.items()}
    for group in OPTIONAL_GROUPS:
        if groups.get(group) is None and any(o.startswith(group + ".") for o in dotted):
            raise ConfigError(group, None,
                              f"no {group} is selected; choose one with {group}=NAME before {group}.FIELD=...")
    config: RunConfig = compose(OmegaConf.structured(RunConfig(**groups)), dotted)
    validate_run(config)
    return config


def validate_run(config: RunConfig) -> None:
    """Semantic checks OmegaConf's types cannot express; raises ``ConfigError``."""
    sweep, model = config.sweep, config.model
    check_name("sweep.name", sweep.name)
    for name in ("h", "sl", "b", "tp", "flop_vs_bw", "dp", "head_dim", "dtype_bytes", "overlap_tp", "reference_tp",
                 "reference_hbm_gb"):
        check_positive(f"sweep.{name}", getattr(sweep, name))
    if sweep.mode == SweepMode.roi:
        _validate_roi(sweep.roi)
        for h in ([model.hidden] if model is not None else sweep.h):
            if h % sweep.overlap_tp:
                raise ConfigError("sweep.overlap_tp", sweep.overlap_tp, f"does not divide H={h}: the ROI's overlap "
                                                                      "GEMMs are one TP rank's share of the layer")
    check_at_least("sweep.dp_slowdown", sweep.dp_slowdown, 1.0, "an interference slowdown is at least 1")
    for i, scenario in enumerate(sweep.scenarios):
        check_at_least(f"sweep.scenarios[{i}].dp_slowdown", scenario.dp_slowdown, 1.0,
                       "an interference slowdown is at least 1")
        check_range(f"sweep.scenarios[{i}].dp_slowdown", scenario.dp_slowdown, SWEEP["dp_slowdown"])
    check_fields("sweep", sweep, SWEEP)
    check_fields("sweep.roi", sweep.roi, ROI)
    validate_hardware(config.hardware)
    if config.calibration is not None:
        validate_calibration(config.calibration)
    if model is not None:
        validate_model(model)
        for tp in sweep.tp:
            if model.heads % tp:
                raise ConfigError("sweep.tp", tp, f"does not divide model.heads={model.heads} of model {model.name}")
    else:
        for h in sweep.h:
            if h % sweep.head_dim:
                raise ConfigError("sweep.h", h, f"is not a multiple of sweep.head_dim={sweep.head_dim}")
            for tp in sweep.tp:
                if h % tp:
                    raise ConfigError("sweep.tp", tp, f"does not divide sweep.h={h}")
    for name in sweep.highlights:
        check_preset("sweep.highlights", "model", name)
    check_preset("sweep.reference_model", "model", sweep.reference_model)


def _validate_roi(roi: RoiSpec) -> None:
    if not check_device(roi.device):
        raise ConfigError("sweep.roi.device", roi.device, "use cpu or cuda")
    check_choices("sweep.roi.dtype", [roi.dtype], list(DTYPE_BYTES), verb="choose one of")
    if not roi.passes:
        raise ConfigError("sweep.roi.passes", roi.passes, f"must list at least one of {', '.join(PASSES)}: the "
                                                          "overlap is measured against these GEMMs")
    check_choices("sweep.roi.passes", roi.passes, PASSES)
    check_choices("sweep.roi.collective_ops", roi.collective_ops, COLLECTIVE_OPS)
    if roi.placement not in ("pack", "spread"):
        raise ConfigError("sweep.roi.placement", roi.placement, "use pack (inside a node) or spread (across nodes)")
    for name in ("world", "warmup", "min_repeats", "max_repeats", "collective_repeats", "point_timeout_s",
                 "time_cap_s"):
        check_positive(f"sweep.roi.{name}", getattr(roi, name))
    check_positive("sweep.roi.ladder_bytes", roi.ladder_bytes or [1])
    check_at_least("sweep.roi.max_repeats", roi.max_repeats, roi.min_repeats,
                   f"is below sweep.roi.min_repeats={roi.min_repeats}")
