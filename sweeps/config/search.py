"""The config of a layout search (``conf/search/*.yaml``), and its checks before any work.

A search preset names a model and a hardware preset, a device count, a global batch (in
sequences), the objective and the budget, and the layout space (``tasks.model.search.space``).
Overrides are ``FIELD=VALUE`` in OmegaConf dotlist syntax (``devices=512``,
``space.tp=[1,2,4,8]``); ``model.FIELD=VALUE``, ``hardware.FIELD=VALUE`` and
``stack.FIELD=VALUE`` change one field of the preset the search names (``model.layers=40``).
Every bad input raises ``ConfigError`` or ``UserError`` (exit
status 2) before any work starts, and before the lake is touched.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from conf import CONF_DIR
from sweeps.config.checks import check_choices, check_fraction, check_name, check_positive
from sweeps.config.compose import check_preset, compose, load_preset, preset_node, preset_path
from sweeps.config.limits import SCALING, SEARCH, SPACE, check_fields
from sweeps.config.schemas import SearchSpec
from sweeps.config.specs import validate_hardware, validate_model
from sweeps.errors import ConfigError, UserError
from tasks.identity import content_hash
from tasks.model.terms.layout import CODED_FIELDS, cp_problem
from tasks.model.projection.grid import COST_MODEL_VERSION
from tasks.model.search.rows import OBJECTIVES, no_fit_reason
from tasks.model.search.space import LayoutSpace, constraint_counts, enumerate_layouts
from tasks.model.kernels.roofline import MissingFigure, gemm_ceiling, peak_flops
from tasks.model.terms.specs import HardwareProfile, TransformerModel, fingerprint
from tasks.model.terms.stack import Stack
from tasks.model.step.plan import STEP_MODEL_VERSION, StepContext, step_columns

__all__ = ["SearchSetup", "SAMPLERS", "DEFAULT_PRESET", "TRIALS_BOUND", "CONFIG_GROUPS", "load_search",
           "split_overrides", "compose_stack", "load_stack", "composed_config", "validate_search", "check_layout_space",
           "check_budget",
           "check_space", "check_context_parallel"]

DEFAULT_PRESET = "default"
#: How a trial's parameters spell a layout (``sweeps.search.suggest_layout``): part of a
#: study's identity, so trials asked in another spelling are never mixed into one study.
TRIAL_PARAMETERS = "tensor,pp,micro_batch,pipeline,zero,recompute"
#: "auto" picks TPE for one objective and NSGA-II for the Pareto case.
SAMPLERS = ("auto", "tpe", "nsga2", "random")


#: The fields of a search that are no part of what a study's results depend on (its
#: budget, batch, seed, output, prose and name): left out of its identity and of the
#: overrides it records.
VOLATILE_FIELDS = ("description", "trials", "batch", "seed", "top", "scaling", "name")
#: How long each part of a derived study name may be (model, hardware, stack): the name,
#: with its device count and hash, stays within a lake partition value's 128 characters.
_NAME_PART = {"model": 32, "hardware": 24, "stack": 32}


def _name_part(value: str, limit: int) -> str:
    """``value`` as a piece of a lake name: a path's stem, characters other than letters,
    digits, '.', '_' and '-' turned into '-', no '..', at most ``limit`` characters."""
    stem = Path(value).stem if value.endswith((".yaml", ".yml")) else value
    return re.sub(r"\.{2,}", ".", re.sub(r"[^A-Za-z0-9_.-]", "-", stem))[:limit].strip(".-_") or "x"


@dataclass
class SearchSetup:
    """A loaded, checked search: its spec, the presets it names, the preset it was read
    from and the command-line overrides that decide it (``FIELD=VALUE`` as given, the
    budget, batch, seed, output and name left out), and whether the user named the study
    (``name=`` given, or a search file of their own rather than a preset of ``conf/search``)."""

    spec: SearchSpec
    model: TransformerModel
    hardware: HardwareProfile
    stack: Stack = field(default_factory=Stack)
    preset: str = DEFAULT_PRESET
    overrides: Tuple[str, ...] = ()
    user_named: bool = False

    @property
    def step_context(self) -> StepContext:
        return StepContext(self.model, self.hardware, devices=self.spec.devices, global_batch=self.spec.global_batch,
                           dtype_bytes=self.spec.dtype_bytes, memory_fraction=self.spec.memory_fraction,
                           stack=self.stack)

    @property
    def sampler(self) -> str:
        if self.spec.sampler != "auto":
            return self.spec.sampler
        return "nsga2" if len(OBJECTIVES[self.spec.objective]) > 1 else "tpe"

    def identity(self) -> Dict[str, Any]:
        """What a study's results depend on (not its budget, batch or seed): two runs with
        the same identity continue one study."""
        spec = dataclasses.asdict(self.spec)
        for volatile in VOLATILE_FIELDS:
            spec.pop(volatile)
        parameters = TRIAL_PARAMETERS + (",context" if self.spec.space.context_varies else "")
        return {**spec, "sampler": self.sampler, "parameters": parameters, "model_fp": fingerprint(self.model),
                "hardware_fp": fingerprint(self.hardware), "stack_fp": fingerprint(self.stack),
                "cost_model": f"{COST_MODEL_VERSION}+{STEP_MODEL_VERSION}"}

    @property
    def study_name(self) -> str:
        """``MODEL-HARDWARExDEVICES-STACK-HASH`` (``llama3-70b-h100x256-megatron-core-2024-1a2b3c4d``),
        or ``NAME-HASH`` for a study the user named: the hash is of ``identity``, so a changed
        space, model, cluster, stack or objective is another study."""
        digest = content_hash(self.identity(), length=8)
        if self.user_named:
            return f"{self.spec.name}-{digest}"
        parts = {"model": self.model.name, "hardware": self.hardware.name, "stack": self.spec.stack}
        model, hardware, stack = (_name_part(parts[key], limit) for key, limit in _NAME_PART.items())
        return f"{model}-{hardware}x{self.spec.devices}-{stack}-{digest}"

    def record(self) -> Dict[str, str]:
        """What decided the study, as its rows and its Optuna user attributes record it:
        the stack (as named) and the ``specs.fingerprint`` of the stack, model and hardware
        as costed, the preset, the overrides (``shlex``-joined) and the objective's name."""
        return {"stack": self.spec.stack, "stack_fp": fingerprint(self.stack), "model_fp": fingerprint(self.model),
                "hardware_fp": fingerprint(self.hardware), "preset": self.preset,
                "overrides": shlex.join(self.overrides), "objective_name": self.spec.objective}


#: The presets a search names whose single fields the command line may override as
#: ``GROUP.FIELD=VALUE``: ``model.layers=40``, ``hardware.devices_per_node=4``,
#: ``stack.tp_overlap=false``. Each changes the study (its fingerprint is part of the name).
PRESET_FIELD_GROUPS = ("model", "hardware", "stack")


#: The fields of a search preset that a mode of ``commscale search`` does not read: given on
#: the command line there, each is refused rather than ignored.
UNUSED_FIELDS: Dict[str, Tuple[str, ...]] = {
    "search": ("scaling",),
    "exhaustive": ("scaling", "trials", "batch", "seed", "sampler"),
    "scaling": ("model", "devices", "global_batch", "trials", "batch", "seed", "sampler", "top"),
}


def split_overrides(overrides: Sequence[str], *, group: str = "search",
                    default: str = DEFAULT_PRESET) -> Tuple[str, List[str], Dict[str, List[str]]]:
    """(the preset of ``group``, its own ``FIELD=VALUE`` overrides, each of
    ``PRESET_FIELD_GROUPS``' field overrides with the group's name left off). A second
    preset name is refused (``ConfigError``): only one would be run."""
    preset, dotted, fields = None, [], {name: [] for name in PRESET_FIELD_GROUPS}
    for item in overrides:
        key = item.partition("=")[0]
        prefix, dot, _ = key.partition(".")
        if "=" not in item:
            if preset is not None:
                raise ConfigError(group, item, f"names a second preset after {preset!r}; give one")
            preset = item
        elif dot and prefix in fields:
            fields[prefix].append(item[len(prefix) + 1:])
        else:
            dotted.append(item)
    return preset or default, dotted, fields


#: How an error names each mode of ``UNUSED_FIELDS``.
_MODE_NAMES = {"search": "a search", "exhaustive": "--exhaustive", "scaling": "--scaling"}


def _refuse_unused(dotted: Sequence[str], mode: str) -> None:
    """``ConfigError`` for the first override of a field ``mode`` does not read."""
    for item in dotted:
        key, _, value = item.partition("=")
        if key.partition(".")[0] in UNUSED_FIELDS[mode]:
            raise ConfigError(f"search.{key}", value, f"is not read by {_MODE_NAMES[mode]}; leave it out")


def load_search(overrides: Sequence[str] = (), *, scaling: bool = False, exhaustive: bool = False,
                allow_large: bool = False) -> SearchSetup:
    """``[PRESET] [FIELD=VALUE ...] [model.FIELD=VALUE ...]``: the preset of ``conf/search``
    (or a YAML path), then the overrides; checked (``validate``) but not yet against the
    space (``check_space``). A field the mode does not read (``UNUSED_FIELDS``: ``scaling``
    for the scaling view, ``exhaustive`` for the enumeration) is refused, and so is
    ``model.FIELD`` in the scaling view, which searches ``scaling.models``' own presets,
    and an objective of more than one value there. ``allow_large``: a preset file beyond
    ``bounds.MAX_YAML_BYTES`` is read all the same."""
    preset, dotted, fields = split_overrides(overrides)
    _refuse_unused(dotted, "scaling" if scaling else "exhaustive" if exhaustive else "search")
    if scaling and fields["model"]:
        key, _, value = fields["model"][0].partition("=")
        raise ConfigError(f"model.{key}", value, "the scaling view searches the presets of search.scaling.models "
                                                  "as they are; a model field cannot be overridden there")
    path = preset_path("search", preset)
    spec: SearchSpec = compose(preset_node(SearchSpec, path, prefix="search", allow_large=allow_large), dotted,
                               prefix="search.")
    validate_search(spec)
    if scaling and len(OBJECTIVES[spec.objective]) > 1:
        raise ConfigError("search.objective", spec.objective, "the scaling view keeps one best layout per point; "
                                                             "choose a single objective")
    model = load_preset("model", spec.model, fields["model"], allow_large=allow_large)
    hardware = load_preset("hardware", spec.hardware, fields["hardware"], allow_large=allow_large)
    validate_model(model)
    validate_hardware(hardware)
    decisive = tuple(item for item in overrides if "=" in item and item.partition("=")[0] not in VOLATILE_FIELDS)
    stack = load_stack(spec.stack, hardware, fields["stack"], allow_large=allow_large)
    models = [load_preset("model", name) for name in spec.scaling.models] if scaling else [model]
    check_context_parallel(spec.space, models, stack)
    return SearchSetup(spec, model, hardware, stack,
                       preset=preset, overrides=decisive,
                       user_named=(path.resolve().parent != CONF_DIR / "search"
                                   or any(item.startswith("name=") for item in dotted)))


def compose_stack(name: str, switches: Sequence[str] = (), *, allow_large: bool = False) -> Stack:
    """The stack preset ``name`` of ``conf/stack`` (or a YAML path) with ``switches``
    (``FIELD=VALUE``) applied, refused (``ConfigError`` naming the field) when a switch is
    unknown or of the wrong type."""
    path = preset_path("stack", name)
    try:
        return compose(preset_node(Stack, path, prefix="stack", allow_large=allow_large), switches, prefix="stack.",
                       source=f"in {path}")
    except ConfigError:
        raise
    except ValueError as exc:  # Stack's own checks name the field: "stack.attention='x': choose one of ..."
        raise UserError(f"config error: {exc} (in {path})") from None


def load_stack(name: str, hardware: HardwareProfile, switches: Sequence[str] = (), *,
               allow_large: bool = False) -> Stack:
    """``compose_stack``, also refused when ``hardware`` lacks what the stack needs (an fp8
    peak for fp8 GEMMs)."""
    stack = compose_stack(name, switches, allow_large=allow_large)
    try:
        peak_flops(hardware, stack.gemm_precision)
        gemm_ceiling(hardware, stack.gemm_precision)
    except MissingFigure as exc:
        raise ConfigError("search.stack", name, f"runs {stack.gemm_precision} GEMMs, but {exc}") from None
    return stack


#: The groups ``commscale config GROUP ...`` composes beside a run config.
CONFIG_GROUPS = ("search", "stack")


def composed_config(group: str, args: Sequence[str], *, allow_large: bool = False) -> Dict[str, Any]:
    """What ``commscale config search [PRESET] [FIELD=VALUE ...]`` or ``commscale config
    stack NAME [FIELD=VALUE ...]`` prints: a search composed and checked as ``commscale
    search`` composes it (its spec, model, hardware and stack, the study's name and record),
    or a stack preset with its switches. Bad input raises ``ConfigError`` naming the field."""
    if group == "stack":
        if not args or "=" in args[0]:
            raise ConfigError("stack", " ".join(args), "name a stack preset first: commscale config stack NAME "
                                                       "[FIELD=VALUE ...]")
        return dataclasses.asdict(compose_stack(args[0], args[1:], allow_large=allow_large))
    setup = load_search(args, allow_large=allow_large)
    return {"search": dataclasses.asdict(setup.spec), "model": dataclasses.asdict(setup.model),
            "hardware": dataclasses.asdict(setup.hardware), "stack": dataclasses.asdict(setup.stack),
            "study": setup.study_name, "record": setup.record()}


def validate_search(spec: SearchSpec) -> None:
    """Field checks OmegaConf's types cannot express; raises ``ConfigError``."""
    check_name("search.name", spec.name)
    for name in ("devices", "global_batch", "trials", "batch", "dtype_bytes", "top"):
        check_positive(f"search.{name}", getattr(spec, name))
    check_choices("search.objective", [spec.objective], list(OBJECTIVES), verb="choose one of")
    check_choices("search.sampler", [spec.sampler], SAMPLERS, verb="choose one of")
    check_fraction("search.memory_fraction", spec.memory_fraction, "a fraction of HBM")
    check_layout_space("search.space", spec.space)
    check_positive("search.scaling.devices", spec.scaling.devices)
    check_positive("search.scaling.global_batch", spec.scaling.global_batch)
    check_fields("search", spec, SEARCH)
    check_fields("search.scaling", spec.scaling, SCALING)
    for name in spec.scaling.models:
        check_preset("search.scaling.models", "model", name)


def check_layout_space(prefix: str, space: LayoutSpace) -> None:
    """A layout space's checks (``ConfigError`` naming ``PREFIX.FIELD``): positive degrees and
    micro-batches, every coded field a non-empty list of its choices, a sequence-parallel
    choice, a virtual-stage count above 1 for the interleaved schedule, and sane ranges."""
    for name in ("tp", "pp", "micro_batch", "cp", "ep", "etp"):
        check_positive(f"{prefix}.{name}", getattr(space, name))
    for name, allowed in CODED_FIELDS.items():
        values = getattr(space, name)
        if not values:
            raise ConfigError(f"{prefix}.{name}", values, "must list at least one value")
        check_choices(f"{prefix}.{name}", values, allowed)
    if not space.sequence_parallel:
        raise ConfigError(f"{prefix}.sequence_parallel", [], "must list at least one value")
    if "interleaved" in space.schedule and not [v for v in space.virtual_stages if v > 1]:
        raise ConfigError(f"{prefix}.virtual_stages", space.virtual_stages,
                          "the interleaved schedule needs a value above 1")
    check_fields(prefix, space, SPACE)


#: The most trials a search runs without ``--allow-large``, however large its space
#: (10^6 trials of the step model: about 5 hours in this process).
TRIALS_BOUND = 1_000_000


def check_budget(spec: SearchSpec, *, allow_large: bool) -> None:
    """Refuse (``ConfigError`` naming ``search.trials``) more trials than the space holds
    layouts (a study that long only repeats layouts), or more than ``TRIALS_BOUND``, unless
    ``allow_large``. Counts the space, enumerates nothing: before any work."""
    if allow_large:
        return
    size = spec.space.size
    if spec.trials > size:
        raise ConfigError("search.trials", spec.trials, f"exceeds the {size:,} layouts of the search's space (more "
                                                        "trials only repeat layouts); give --allow-large to go on")
    if spec.trials > TRIALS_BOUND:
        raise ConfigError("search.trials", spec.trials, f"exceeds the bound of {TRIALS_BOUND:,} trials for one search; "
                                                        "give --allow-large to go on")


def check_context_parallel(space: LayoutSpace, models: Sequence[TransformerModel], stack: Stack) -> None:
    """Refuse (``ConfigError`` naming ``search.space.cp``) a CP degree the stack or a model's
    sequence cannot run (``layout.cp_problem``): before any work."""
    for model in models:
        for cp in space.cp:
            problem = cp_problem(cp, model.seq_len, stack.flash)
            if problem:
                raise ConfigError("search.space.cp", space.cp, f"{problem} ({model.name}, seq_len {model.seq_len}, "
                                                               f"attention {stack.attention})")


def check_space(setup: SearchSetup) -> Tuple[int, int]:
    """Refuse a search in which no layout is feasible, naming each constraint that fails and
    for how many layouts (``UserError``). Returns (layouts, feasible layouts)."""
    spec, ctx = setup.spec, setup.step_context
    layouts = enumerate_layouts(spec.space, spec.devices)
    total = len(layouts["tp"])
    counts, _ = constraint_counts(layouts, heads=setup.model.heads, layers=setup.model.layers,
                                  devices=spec.devices, global_batch=spec.global_batch,
                                  kv_heads=setup.model.kv_heads or 0, experts=setup.model.experts)
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
