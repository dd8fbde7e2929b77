"""The config of a layout search (``conf/search/*.yaml``), and its checks before any work.

A search preset names a model and a hardware preset, a device count, a global batch (in
sequences), the objective and the budget, and the layout space (``tasks.model.space``).
Overrides are ``FIELD=VALUE`` in OmegaConf dotlist syntax (``devices=512``,
``space.tp=[1,2,4,8]``). Every bad input raises ``ConfigError`` or ``UserError`` (exit
status 2) before any work starts, and before the lake is touched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Sequence, Tuple

from omegaconf import MISSING, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from sweeps.config import _NAME, _preset_path, _reason, _validate_hardware, _validate_model, load_preset
from sweeps.errors import ConfigError, UserError
from tasks.model.layout import RECOMPUTE_MODES, SCHEDULES, ZERO_MODES
from tasks.model.space import LayoutSpace, constraint_counts, enumerate_layouts
from tasks.model.search_rows import OBJECTIVES, no_fit_reason
from tasks.identity import content_hash
from tasks.model.specs import HardwareProfile, TransformerModel, fingerprint
from tasks.model.step import StepContext, step_columns

__all__ = ["ScalingSpec", "SearchSpec", "SearchSetup", "SAMPLERS", "load_search", "check_space", "DEFAULT_PRESET"]

DEFAULT_PRESET = "default"
#: "auto" picks TPE for one objective and NSGA-II for the Pareto case.
SAMPLERS = ("auto", "tpe", "nsga2", "random")


@dataclass
class ScalingSpec:
    """The scaling view: the best layout of ``space`` for each model and device count, at
    one global batch (sequences)."""

    models: List[str] = field(default_factory=lambda: ["llama3-70b", "gpt3"])
    devices: List[int] = field(default_factory=lambda: [2**k for k in range(3, 13)])
    global_batch: int = 2048


@dataclass
class SearchSpec:
    """One layout search (a preset of ``conf/search``).

    ``trials`` is the budget of completed trials; ``batch`` trials are asked at once and
    evaluated in parallel as Ray tasks; ``memory_fraction`` of HBM is usable.
    """

    name: str = MISSING
    description: str = ""
    model: str = MISSING
    hardware: str = MISSING
    devices: int = MISSING
    global_batch: int = MISSING
    objective: str = "step_time"
    sampler: str = "auto"
    trials: int = 200
    batch: int = 8
    seed: int = 0
    memory_fraction: float = 0.9
    dtype_bytes: int = 2
    top: int = 10
    space: LayoutSpace = field(default_factory=LayoutSpace)
    scaling: ScalingSpec = field(default_factory=ScalingSpec)


@dataclass
class SearchSetup:
    """A loaded, checked search: its spec and the presets it names."""

    spec: SearchSpec
    model: TransformerModel
    hardware: HardwareProfile

    @property
    def step_context(self) -> StepContext:
        return StepContext(self.model, self.hardware, devices=self.spec.devices, global_batch=self.spec.global_batch,
                           dtype_bytes=self.spec.dtype_bytes, memory_fraction=self.spec.memory_fraction)

    @property
    def sampler(self) -> str:
        if self.spec.sampler != "auto":
            return self.spec.sampler
        return "nsga2" if len(OBJECTIVES[self.spec.objective]) > 1 else "tpe"

    def identity(self) -> Dict[str, Any]:
        """What a study's results depend on (not its budget, batch or seed): two runs with
        the same identity continue one study."""
        from tasks.model.projection import COST_MODEL_VERSION
        from tasks.model.step import STEP_MODEL_VERSION

        spec = dataclasses.asdict(self.spec)
        for volatile in ("description", "trials", "batch", "seed", "top", "scaling", "name"):
            spec.pop(volatile)
        return {**spec, "sampler": self.sampler, "model_fp": fingerprint(self.model),
                "hardware_fp": fingerprint(self.hardware), "cost_model": f"{COST_MODEL_VERSION}+{STEP_MODEL_VERSION}"}

    @property
    def study_name(self) -> str:
        """``NAME-HASH``: a changed space, model, cluster or objective is another study."""
        return f"{self.spec.name}-{content_hash(self.identity(), length=8)}"


def _split(overrides: Sequence[str]) -> Tuple[str, List[str]]:
    preset, dotted = DEFAULT_PRESET, []
    for item in overrides:
        if "=" in item:
            dotted.append(item)
        else:
            preset = item
    return preset, dotted


def load_search(overrides: Sequence[str] = ()) -> SearchSetup:
    """``[PRESET] [FIELD=VALUE ...]``: the preset of ``conf/search`` (or a YAML path), then
    the overrides; checked (``validate``) but not yet against the space (``check_space``)."""
    preset, dotted = _split(overrides)
    path = _preset_path("search", preset)
    raw = OmegaConf.load(path)
    try:
        node = OmegaConf.merge(OmegaConf.structured(SearchSpec), raw)
    except OmegaConfBaseException as exc:
        key = getattr(exc, "full_key", "") or ""
        raise ConfigError(f"search.{key}" if key else "search", OmegaConf.select(raw, key, default=None) if key else None,
                          f"{_reason(exc)} (in {path})") from None
    for item in dotted:
        key, _, value = item.partition("=")
        try:
            node = OmegaConf.merge(node, OmegaConf.from_dotlist([item]))
        except OmegaConfBaseException as exc:
            raise ConfigError(f"search.{key}", value, _reason(exc)) from None
    try:
        spec: SearchSpec = OmegaConf.to_object(node)
    except OmegaConfBaseException as exc:
        raise ConfigError(f"search.{getattr(exc, 'full_key', '') or ''}", None, _reason(exc)) from None
    validate(spec)
    model, hardware = load_preset("model", spec.model), load_preset("hardware", spec.hardware)
    _validate_model(model)
    _validate_hardware(hardware)
    return SearchSetup(spec, model, hardware)


def _positive(name: str, values) -> None:
    for value in values if isinstance(values, list) else [values]:
        if value <= 0:
            raise ConfigError(f"search.{name}", value, "must be positive")
    if isinstance(values, list) and not values:
        raise ConfigError(f"search.{name}", values, "must list at least one value")


def validate(spec: SearchSpec) -> None:
    """Field checks OmegaConf's types cannot express; raises ``ConfigError``."""
    if not _NAME.match(spec.name):
        raise ConfigError("search.name", spec.name, "use letters, digits, '.', '_' and '-' only")
    for name in ("devices", "global_batch", "trials", "batch", "dtype_bytes", "top"):
        _positive(name, getattr(spec, name))
    if spec.objective not in OBJECTIVES:
        raise ConfigError("search.objective", spec.objective, f"choose one of {', '.join(OBJECTIVES)}")
    if spec.sampler not in SAMPLERS:
        raise ConfigError("search.sampler", spec.sampler, f"choose one of {', '.join(SAMPLERS)}")
    if not 0 < spec.memory_fraction <= 1:
        raise ConfigError("search.memory_fraction", spec.memory_fraction, "a fraction of HBM lies in (0, 1]")
    space = spec.space
    for name in ("tp", "pp", "micro_batch"):
        _positive(f"space.{name}", getattr(space, name))
    for name, allowed in (("schedule", SCHEDULES), ("zero", ZERO_MODES), ("recompute", RECOMPUTE_MODES)):
        values = getattr(space, name)
        if not values:
            raise ConfigError(f"search.space.{name}", values, "must list at least one value")
        for value in values:
            if value not in allowed:
                raise ConfigError(f"search.space.{name}", value, f"choose from {', '.join(allowed)}")
    if not space.sequence_parallel:
        raise ConfigError("search.space.sequence_parallel", [], "must list at least one value")
    if "interleaved" in space.schedule and not [v for v in space.virtual_stages if v > 1]:
        raise ConfigError("search.space.virtual_stages", space.virtual_stages,
                          "the interleaved schedule needs a value above 1")
    _positive("scaling.devices", spec.scaling.devices)
    _positive("scaling.global_batch", spec.scaling.global_batch)
    for name in spec.scaling.models:
        _preset_path("model", name)


def check_space(setup: SearchSetup) -> Tuple[int, int]:
    """Refuse a search in which no layout is feasible, naming each constraint that fails and
    for how many layouts (``UserError``). Returns (layouts, feasible layouts)."""
    spec, ctx = setup.spec, setup.step_context
    layouts = enumerate_layouts(spec.space, spec.devices)
    total = len(layouts["tp"])
    counts, _ = constraint_counts(layouts, heads=setup.model.heads, layers=setup.model.layers,
                                              devices=spec.devices, global_batch=spec.global_batch)
    if counts["tp_divides_heads"] == total:
        raise ConfigError("search.space.tp", spec.space.tp,
                          f"no TP in the space divides model.heads={setup.model.heads} of {setup.model.name} "
                          f"(tp_divides_heads fails for {total} of {total} layouts)")
    result = step_columns(layouts, ctx)
    feasible = int((result["status_code"] == 0).sum())
    if feasible == 0:
        raise UserError(f"search {spec.name}: {setup.model.name} on {spec.devices} x {setup.hardware.name} at global "
                        f"batch {spec.global_batch}: {no_fit_reason(layouts, result, setup.model, ctx)}")
    return total, feasible
