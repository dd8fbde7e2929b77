"""Compose a run's config from ``conf/`` presets and command-line overrides.

A run config has three groups, each one YAML file validated by OmegaConf against a
dataclass schema: ``model`` (optional, ``tasks.model.specs.TransformerModel``), ``hardware``
(``tasks.model.specs.HardwareProfile``) and ``sweep`` (``SweepSpec`` below). Overrides are
``GROUP=NAME`` (a preset of ``conf/GROUP/``, or a path to a YAML file) and
``GROUP.FIELD=VALUE`` (OmegaConf dotlist syntax: ``sweep.tp=[8,16]``).

Every bad input raises ``ConfigError`` naming the field and the value, before any work.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from conf import CONF_DIR
from sweeps.calibration_config import CalibrationSpec, validate_calibration
from sweeps.errors import ConfigError
from tasks.model.specs import HardwareProfile, TransformerModel

__all__ = ["LinkPlacement", "SweepMode", "RoiSpec", "Scenario", "SweepSpec", "RunConfig", "load_run_config", "load_preset", "list_presets", "GROUPS"]


class LinkPlacement(enum.Enum):
    """Which link tier a collective group uses.

    ``ideal``: every group on the scale-up tier (the study's assumption: results from
    four devices stand in for larger groups, method.md §5). ``placed``: a group wider
    than a node crosses the scale-out tier.
    """

    ideal = "ideal"
    placed = "placed"


class SweepMode(enum.Enum):
    projection = "projection"
    roi = "roi"


@dataclass
class RoiSpec:
    """Measurement settings of a ``mode: roi`` sweep.

    ``device`` is "cpu" or "cuda" (one GPU per kernel task); ``device_model`` names the
    device for the measurement keys ("auto": whatever the workers are; each row records
    the model it ran on). The ladder sizes the α-β fit of each collective.
    """

    device: str = "cpu"
    device_model: str = "auto"
    dtype: str = "bf16"
    passes: List[str] = field(default_factory=lambda: ["ig", "wg"])
    elementwise: bool = False
    collective_ops: List[str] = field(default_factory=lambda: ["all_reduce"])
    world: int = 2
    placement: str = "pack"
    ladder_bytes: List[int] = field(default_factory=lambda: [2**k for k in range(16, 27, 2)])
    warmup: int = 3
    min_repeats: int = 5
    max_repeats: int = 50
    rel_spread: float = 0.05
    time_cap_s: float = 5.0
    collective_repeats: int = 10
    point_timeout_s: float = 300.0


@dataclass
class Scenario:
    """One network scenario of a projection (method.md §5.5): where the groups' links
    are placed and how much interference slows the overlapped (DP) all-reduce (>= 1)."""

    links: LinkPlacement = LinkPlacement.ideal
    dp_slowdown: float = 1.0


@dataclass
class SweepSpec:
    """A grid of configurations and hardware scenarios (one preset of ``conf/sweep``).

    The grid is the cross product h x sl x b x tp x flop_vs_bw. The serialized analysis
    reads it at the smallest b; the overlapped analysis at ``overlap_tp`` by SL*B.
    ``highlights`` names model presets projected at the TP that Eq. 10 requires of
    them on this hardware (reference: Megatron-LM 8.3B at TP 8 on ``reference_hbm_gb``).
    """

    name: str = MISSING
    description: str = ""
    h: List[int] = MISSING
    sl: List[int] = MISSING
    b: List[int] = MISSING
    tp: List[int] = MISSING
    dp: int = 4
    head_dim: int = 128
    dtype_bytes: int = 2
    flop_vs_bw: List[float] = field(default_factory=lambda: [1.0])
    dp_slowdown: float = 1.0
    links: LinkPlacement = LinkPlacement.ideal
    # When set, the grid is projected under every scenario, each replacing (links,
    # dp_slowdown): the case study's DP links inside a node, across nodes, with interference.
    scenarios: List[Scenario] = field(default_factory=list)
    overlap_tp: int = 16
    highlights: List[str] = field(default_factory=list)
    reference_model: str = "megatron-8.3b"
    reference_tp: int = 8
    reference_hbm_gb: float = 32.0
    # What the sweep does: "projection" (the cost model) or "roi" (measure the region of
    # interest of the overlapped grid, h x sl x b at overlap_tp, on real devices).
    mode: SweepMode = SweepMode.projection
    roi: RoiSpec = field(default_factory=lambda: RoiSpec())


@dataclass
class RunConfig:
    """A composed run: which presets were chosen and their (overridden) content."""

    hardware: HardwareProfile = MISSING
    sweep: SweepSpec = MISSING
    model: Optional[TransformerModel] = None
    # A measured calibration (``commscale calibrate``) whose operator models replace the
    # spec roofline; None projects with the hardware profile's spec.
    calibration: Optional[CalibrationSpec] = None


GROUPS: Dict[str, type] = {"model": TransformerModel, "hardware": HardwareProfile, "sweep": SweepSpec,
                           "calibration": CalibrationSpec}
#: Groups that may be chosen as null (none).
OPTIONAL_GROUPS = ("model", "calibration")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def list_presets(group: str) -> List[str]:
    """Names of the presets of a group (the YAML files of ``conf/GROUP/``)."""
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _preset_path(group: str, choice: str) -> Path:
    if choice.endswith((".yaml", ".yml")):
        path = Path(choice)
        if not path.is_file():
            raise ConfigError(group, choice, "no such YAML file")
        return path
    path = CONF_DIR / group / f"{choice}.yaml"
    if not path.is_file():
        raise ConfigError(group, choice, f"unknown preset; choose one of {', '.join(list_presets(group))}")
    return path


def _reason(exc: OmegaConfBaseException) -> str:
    """A one-line reason for an OmegaConf error, in the user's terms."""
    kind = type(exc).__name__
    if kind == "ConfigKeyError":
        return "unknown key"
    if kind == "MissingMandatoryValue":
        return "missing field (it has no default and the YAML does not set it)"
    message = str(getattr(exc, "msg", None) or exc).splitlines()[0]
    if "ListConfig" in message:
        return "expected a list, e.g. [1, 2]"
    if "is not a subclass of" in message or "Merge error" in message:
        return "expected a mapping of fields here, not a single value"
    return message


def load_preset(group: str, choice: str):
    """Load and validate one preset; returns the schema's dataclass instance."""
    path = _preset_path(group, choice)
    raw = OmegaConf.load(path)
    try:
        return OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(GROUPS[group]), raw))
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        value = OmegaConf.select(raw, key, default=None) if key else None
        raise ConfigError(f"{group}.{key}" if key else group, value, f"{_reason(exc)} (in {path})") from None


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


def load_run_config(overrides: Sequence[str] = ()) -> RunConfig:
    """Compose ``conf/defaults.yaml``, the chosen presets and the dotted overrides."""
    choices, dotted = _split_overrides(overrides)
    selected = {**_defaults(), **choices}
    groups = {g: (load_preset(g, c) if c is not None else None) for g, c in selected.items()}
    for group in OPTIONAL_GROUPS:
        if groups.get(group) is None and any(o.startswith(group + ".") for o in dotted):
            raise ConfigError(group, None, f"no {group} is selected; choose one with {group}=NAME before {group}.FIELD=...")
    node = OmegaConf.structured(RunConfig(**groups))
    for item in dotted:  # one at a time, so an error names the override that caused it
        key, _, value = item.partition("=")
        try:
            node = OmegaConf.merge(node, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as exc:
            raise ConfigError(key, value, _reason(exc)) from None
    try:
        config: RunConfig = OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        raise ConfigError(getattr(exc, "full_key", "") or "config", None, _reason(exc)) from None
    validate(config)
    return config


def _check_positive(field_name: str, values) -> None:
    values = values if isinstance(values, list) else [values]
    if not values:
        raise ConfigError(field_name, values, "must list at least one value")
    for value in values:
        if value <= 0:
            raise ConfigError(field_name, value, "must be positive")


def validate(config: RunConfig) -> None:
    """Semantic checks OmegaConf's types cannot express; raises ``ConfigError``."""
    sweep, hw, model = config.sweep, config.hardware, config.model
    if not _NAME.match(sweep.name):
        raise ConfigError("sweep.name", sweep.name, "use letters, digits, '.', '_' and '-' only")
    for name in ("h", "sl", "b", "tp", "flop_vs_bw", "dp", "head_dim", "dtype_bytes", "overlap_tp", "reference_tp", "reference_hbm_gb"):
        _check_positive(f"sweep.{name}", getattr(sweep, name))
    if sweep.mode == SweepMode.roi:
        _validate_roi(sweep.roi)
    if sweep.dp_slowdown < 1.0:
        raise ConfigError("sweep.dp_slowdown", sweep.dp_slowdown, "an interference slowdown is at least 1")
    for i, scenario in enumerate(sweep.scenarios):
        if scenario.dp_slowdown < 1.0:
            raise ConfigError(f"sweep.scenarios[{i}].dp_slowdown", scenario.dp_slowdown,
                              "an interference slowdown is at least 1")
    _validate_hardware(hw)
    if config.calibration is not None:
        validate_calibration(config.calibration)
    if model is not None:
        _validate_model(model)
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
    for name in sweep.highlights + [sweep.reference_model]:
        _preset_path("model", name)


def _validate_roi(roi: RoiSpec) -> None:
    from tasks.model.collectives import COLLECTIVE_OPS
    from tasks.device import DTYPE_BYTES as DTYPES

    if roi.device != "cpu" and not roi.device.startswith("cuda"):
        raise ConfigError("sweep.roi.device", roi.device, "use cpu or cuda")
    if roi.dtype not in DTYPES:
        raise ConfigError("sweep.roi.dtype", roi.dtype, f"choose one of {', '.join(DTYPES)}")
    for p in roi.passes:
        if p not in ("fwd", "ig", "wg"):
            raise ConfigError("sweep.roi.passes", p, "choose from fwd, ig, wg")
    for op in roi.collective_ops:
        if op not in COLLECTIVE_OPS:
            raise ConfigError("sweep.roi.collective_ops", op, f"choose from {', '.join(COLLECTIVE_OPS)}")
    if roi.placement not in ("pack", "spread"):
        raise ConfigError("sweep.roi.placement", roi.placement, "use pack (inside a node) or spread (across nodes)")
    for name in ("world", "warmup", "min_repeats", "max_repeats", "collective_repeats", "point_timeout_s", "time_cap_s"):
        _check_positive(f"sweep.roi.{name}", getattr(roi, name))
    _check_positive("sweep.roi.ladder_bytes", roi.ladder_bytes or [1])


def _validate_hardware(hw: HardwareProfile) -> None:
    if not _NAME.match(hw.name):
        raise ConfigError("hardware.name", hw.name, "use letters, digits, '.', '_' and '-' only")
    for name in ("devices_per_node", "peak_tflops", "hbm_gb", "hbm_tbps", "gemm_half_efficiency_gflop"):
        _check_positive(f"hardware.{name}", getattr(hw, name))
    if hw.kernel_launch_us < 0:
        raise ConfigError("hardware.kernel_launch_us", hw.kernel_launch_us, "must not be negative")
    for name in ("gemm_efficiency_max", "memory_efficiency"):
        value = getattr(hw, name)
        if not 0 < value <= 1:
            raise ConfigError(f"hardware.{name}", value, "an efficiency lies in (0, 1]")
    for tier_name in ("intra_node", "inter_node"):
        tier = getattr(hw, tier_name)
        _check_positive(f"hardware.{tier_name}.bandwidth_GBps", tier.bandwidth_GBps)
        if tier.latency_us < 0:
            raise ConfigError(f"hardware.{tier_name}.latency_us", tier.latency_us, "must not be negative")
        if not 0 < tier.efficiency <= 1:
            raise ConfigError(f"hardware.{tier_name}.efficiency", tier.efficiency, "an efficiency lies in (0, 1]")


def _validate_model(model: TransformerModel) -> None:
    for name in ("layers", "hidden", "heads", "ffn_hidden", "params_b", "seq_len"):
        _check_positive(f"model.{name}", getattr(model, name))
    if model.hidden % model.heads:
        raise ConfigError("model.heads", model.heads, f"does not divide model.hidden={model.hidden}")
