"""The config of ``commscale codesign`` (``conf/codesign/*.yaml``): the model and token budget,
the base hardware and stack, the hardware knobs and the layout space searched together, the
assumed cost of each knob, the budget of the NSGA-II study, and a reduced space its front is
measured against; with its checks before any work.

Overrides are ``FIELD=VALUE`` (``trials=5000``, ``knobs.domain=[8,72]``, ``cost.die=30000``);
``model.FIELD``, ``hardware.FIELD`` and ``stack.FIELD`` change a field of the named preset.
Every bad input raises ``ConfigError`` (exit status 2) before any work and before the lake is
touched.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Tuple

from sweeps.config.checks import check_choices, check_name
from sweeps.config.compose import compose, load_preset, preset_node, preset_path
from sweeps.config.limits import Range, check_fields
from sweeps.config.search import check_layout_space, load_stack, split_overrides
from sweeps.config.specs import validate_hardware, validate_model
from sweeps.errors import ConfigError
from tasks.identity import content_hash
from tasks.model.codesign.evaluate import CodesignProblem
from tasks.model.codesign.knobs import HBM_PARTS, KNOB_NAMES, CostModel, Knobs
from tasks.model.projection.grid import COST_MODEL_VERSION
from tasks.model.search.space import LayoutSpace
from tasks.model.step.plan import STEP_MODEL_VERSION
from tasks.model.terms.specs import fingerprint

__all__ = ["ReducedSpace", "CodesignSpec", "CodesignSetup", "load_codesign", "MIN_FULL_POINTS"]

#: A co-design space must be far too large to enumerate: at least this many points.
MIN_FULL_POINTS = 10**9


@dataclass
class ReducedSpace:
    """Knobs and a layout space small enough to enumerate (the sampler's yardstick)."""

    knobs: Knobs = field(default_factory=Knobs)
    space: LayoutSpace = field(default_factory=LayoutSpace)


@dataclass
class CodesignSpec:
    """One ``commscale codesign`` preset (module docstring)."""

    name: str = "default"
    description: str = ""
    model: str = "llama3-70b"
    hardware: str = "h100"
    stack: str = "megatron-core-2024"
    global_batch: int = 2048
    tokens: float = 1.5e13
    trials: int = 3000
    batch: int = 100
    population: int = 100
    seed: int = 0
    knobs: Knobs = field(default_factory=Knobs)
    space: LayoutSpace = field(default_factory=LayoutSpace)
    cost: CostModel = field(default_factory=CostModel)
    reduced: ReducedSpace = field(default_factory=ReducedSpace)


_FIELDS = {"global_batch": Range(1, 1e9), "tokens": Range(1, 1e18), "trials": Range(1, 1e7), "batch": Range(1, 1e5),
           "population": Range(2, 1e5), "seed": Range(0, 2.0**63 - 1)}
_COST = {name: Range(0, 1e9) for name in ("die", "hbm_per_gb", "scale_up", "scale_out")} | \
    {"die_exponent": Range(0, 4), "switch_stage": Range(0, 100)}
_KNOBS = {"devices": Range(1, 1e8), "domain": Range(1, 1e6), "scale_up": Range(0, 1e3, True),
          "scale_out": Range(0, 1e3, True), "flops": Range(0, 1e3, True)}


@dataclass
class CodesignSetup:
    """A loaded, checked co-design preset: its spec, the problem every point shares, the
    study's name (the preset's and a hash of what its results depend on) and its overrides."""

    spec: CodesignSpec
    problem: CodesignProblem
    study: str
    overrides: Tuple[str, ...] = ()

    @property
    def full_size(self) -> int:
        return self.spec.knobs.size * self.spec.space.size


def load_codesign(overrides=(), *, allow_large: bool = False) -> CodesignSetup:
    """``[PRESET] [FIELD=VALUE ...]``: the preset of ``conf/codesign`` (or a YAML path), then the
    overrides; checked (``validate_codesign``) with its model, hardware and stack."""
    preset, own, fields = split_overrides(overrides, group="codesign", default="default")
    path = preset_path("codesign", preset)
    spec: CodesignSpec = compose(preset_node(CodesignSpec, path, prefix="codesign", allow_large=allow_large), own,
                                 prefix="codesign.")
    validate_codesign(spec)
    model = load_preset("model", spec.model, fields["model"], allow_large=allow_large)
    hardware = load_preset("hardware", spec.hardware, fields["hardware"], allow_large=allow_large)
    validate_model(model)
    validate_hardware(hardware)
    stack = load_stack(spec.stack, hardware, fields["stack"], allow_large=allow_large)
    problem = CodesignProblem(model, hardware, stack, spec.global_batch, spec.tokens, spec.cost)
    identity = {**{k: v for k, v in dataclasses.asdict(spec).items() if k not in ("description", "trials", "batch")},
                "model_fp": fingerprint(model), "hardware_fp": fingerprint(hardware), "stack_fp": fingerprint(stack),
                "cost_model": f"{COST_MODEL_VERSION}+{STEP_MODEL_VERSION}"}
    return CodesignSetup(spec, problem, f"codesign-{spec.name}-{content_hash(identity, length=8)}",
                         tuple(item for item in overrides if "=" in item))


def _check_space(prefix: str, knobs: Knobs, space: LayoutSpace) -> None:
    for name in KNOB_NAMES:
        if not getattr(knobs, name):
            raise ConfigError(f"{prefix}.knobs.{name}", getattr(knobs, name), "must list at least one value")
    check_fields(f"{prefix}.knobs", knobs, _KNOBS)
    check_choices(f"{prefix}.knobs.hbm_gb", [str(v) for v in knobs.hbm_gb], [str(v) for v in HBM_PARTS])
    check_layout_space(f"{prefix}.space", space)


def validate_codesign(spec: CodesignSpec) -> None:
    """Field checks OmegaConf's types cannot express; raises ``ConfigError`` naming the field."""
    check_name("codesign.name", spec.name)
    check_fields("codesign", spec, _FIELDS)
    check_fields("codesign.cost", spec.cost, _COST)
    _check_space("codesign", spec.knobs, spec.space)
    _check_space("codesign.reduced", spec.reduced.knobs, spec.reduced.space)
    if spec.batch > spec.trials:
        raise ConfigError("codesign.batch", spec.batch, f"exceeds trials={spec.trials}")
