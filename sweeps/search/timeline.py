"""The timeline of one projected step: which layout, and its events (``tasks.model.step.timeline``).

The layout is a search preset's best stored layout (its study's, in the lake), or the space's
exhaustive optimum when the lake holds none; ``layout.FIELD=VALUE`` overrides replace fields
of it (``dp`` follows TP and PP unless given). A layout that breaks a structural constraint
is refused before anything is drawn.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from sweeps.config import SearchSetup, load_search
from sweeps.errors import ConfigError
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from tasks.model.terms.layout import CODED_FIELDS, STRUCTURAL_CONSTRAINTS, Layout, cp_problem
from tasks.model.step.plan import step_plan
from tasks.model.step.plan import STATUS_CODES, step_columns
from tasks.model.step.context import as_layouts
from tasks.model.step.timeline import TimelineEvent, shown_stages, step_timeline, trace_json

__all__ = ["StepTimeline", "LAYOUT_PREFIX", "split_overrides", "build_timeline"]

#: The prefix of a layout field's override: ``layout.tp=4``.
LAYOUT_PREFIX = "layout."
#: The largest degree or count a layout field takes (more devices than any cluster holds).
LARGEST_DEGREE = 2**24


@dataclass(frozen=True)
class StepTimeline:
    """One layout's projected step: the search it belongs to, the layout and where it came
    from, its events, the stages drawn (index: name), the step time the step model gives and
    whether the layout fits the device's memory, and the step model's figures of it
    (``step_columns``: compute, exposed communication, bubble share, memory)."""

    setup: SearchSetup
    layout: Layout
    source: str
    events: List[TimelineEvent]
    stage_names: Dict[int, str]
    step_time_s: float
    fits_memory: bool
    figures: Dict[str, float]

    @property
    def end_s(self) -> float:
        return max(e.start_s + e.duration_s for e in self.events)

    def metadata(self) -> Dict[str, object]:
        setup = self.setup
        return {"study": setup.study_name, "model": setup.model.name, "hardware": setup.hardware.name,
                "devices": setup.spec.devices, "global_batch": setup.spec.global_batch, "stack": setup.spec.stack,
                "layout": self.layout.describe(), "layout_source": self.source, "step_time_s": self.step_time_s}

    def trace(self) -> Dict[str, object]:
        """The Trace Event JSON object of the step."""
        return trace_json(self.events, self.stage_names, self.metadata())


def split_overrides(args: Sequence[str]) -> Tuple[List[str], Dict[str, str]]:
    """(the search preset and its overrides, the ``layout.FIELD=VALUE`` overrides by field)."""
    search, layout = [], {}
    for item in args:
        key, eq, value = item.partition("=")
        if eq and key.startswith(LAYOUT_PREFIX):
            layout[key[len(LAYOUT_PREFIX):]] = value
        else:
            search.append(item)
    return search, layout


def _typed(name: str, text: str) -> object:
    """``text`` as the type of ``Layout``'s field ``name`` (``ConfigError`` naming it)."""
    fields = {f.name: f for f in dataclasses.fields(Layout)}
    if name not in fields:
        raise ConfigError(f"{LAYOUT_PREFIX}{name}", text, f"is no layout field; one of {', '.join(fields)}")
    if name in CODED_FIELDS:
        if text not in CODED_FIELDS[name]:
            raise ConfigError(f"{LAYOUT_PREFIX}{name}", text, f"must be one of {', '.join(CODED_FIELDS[name])}")
        return text
    if name == "sequence_parallel":
        if text.lower() not in ("true", "false"):
            raise ConfigError(f"{LAYOUT_PREFIX}{name}", text, "must be true or false")
        return text.lower() == "true"
    try:
        value = int(text)
    except ValueError:
        raise ConfigError(f"{LAYOUT_PREFIX}{name}", text, "must be a whole number") from None
    if value > LARGEST_DEGREE:
        raise ConfigError(f"{LAYOUT_PREFIX}{name}", text, f"is larger than any layout takes ({LARGEST_DEGREE:,})")
    if value < (0 if name == "recompute_layers" else 1):
        raise ConfigError(f"{LAYOUT_PREFIX}{name}", text, "must be at least 1" if name != "recompute_layers"
                          else "must be 0 (every layer) or a count of layers")
    return value


def _chosen_layout(setup: SearchSetup, lake: Optional[Lake]) -> Tuple[Layout, str]:
    """The study's best stored layout, or the space's exhaustive optimum."""
    from sweeps.search.results import exhaustive_frame, layout_of, study_rows, top_layouts

    if lake is not None and SEARCH in lake.kinds():
        rows = study_rows(lake, setup.study_name)
        if len(rows) and (rows["status"] == "ok").any():
            return layout_of(top_layouts(rows, setup.spec.objective).iloc[0]), \
                f"the best stored layout of study {setup.study_name}"
    frame = exhaustive_frame(setup)
    if frame.empty:
        raise ConfigError("search", setup.preset, "no layout of its space is feasible: nothing to draw")
    return layout_of(frame.iloc[0]), "the exhaustive optimum of the space (no study of it is stored)"


def _overridden(layout: Layout, setup: SearchSetup, typed: Dict[str, object], overrides: Dict[str, str]) -> Layout:
    """``layout`` with the ``typed`` fields (``overrides`` as given, for a message); DP follows
    TP, PP and CP unless given."""
    fields = dict(typed)
    if "dp" not in fields and ("tp" in fields or "pp" in fields or "cp" in fields):
        model_parallel = int(fields.get("tp", layout.tp)) * int(fields.get("pp", layout.pp)) \
            * int(fields.get("cp", layout.cp))
        fields["dp"] = max(setup.spec.devices // model_parallel, 1)
    if fields.get("schedule") == "1f1b" and "virtual_stages" not in fields:
        fields["virtual_stages"] = 1
    try:
        return dataclasses.replace(layout, **fields)
    except ValueError as exc:
        raise ConfigError(LAYOUT_PREFIX.rstrip("."), ", ".join(f"{k}={v}" for k, v in overrides.items()),
                          str(exc)) from None


def build_timeline(args: Sequence[str], lake: Optional[Lake]) -> StepTimeline:
    """``[PRESET] [FIELD=VALUE ...] [layout.FIELD=VALUE ...]``: the step of the preset's
    layout (``_chosen_layout``, then the overrides), laid out in time. Bad input raises
    ``ConfigError`` before any work."""
    search_args, layout_args = split_overrides(args)
    setup = load_search(search_args, exhaustive=True)
    typed = {name: _typed(name, text) for name, text in layout_args.items()}
    layout, source = _chosen_layout(setup, lake)
    if layout_args:
        layout = _overridden(layout, setup, typed, layout_args)
        source = "overridden (" + ", ".join(f"{LAYOUT_PREFIX}{k}={v}" for k, v in layout_args.items()) + ")"
    ctx = setup.step_context
    problem = cp_problem(layout.cp, ctx.model.seq_len, ctx.stack.flash)
    if problem:
        raise ConfigError(f"{LAYOUT_PREFIX}cp", layout.cp, problem + f" (stack {setup.spec.stack})")
    # judged for structure only: a layout over memory is still drawn, and said to be
    columns = step_columns(layout.columns(), dataclasses.replace(ctx, memory_fraction=float("inf")))
    status = int(columns["status_code"][0])
    if status:
        name = STATUS_CODES[status]
        raise ConfigError(LAYOUT_PREFIX.rstrip("."), layout.describe(),
                          f"breaks {name}: {STRUCTURAL_CONSTRAINTS[name]}")
    ranks = layout.tp * layout.pp * layout.cp * layout.dp
    if ranks != setup.spec.devices:
        raise ConfigError(f"{LAYOUT_PREFIX}dp", layout.dp, f"TP x PP x CP x DP = {ranks:,} "
                          f"is not the search's {setup.spec.devices:,} devices")
    plan = step_plan(as_layouts(layout.columns(), np.asarray([float(layout.dp)]), ctx), ctx)
    stages = shown_stages(layout.pp)
    names = {s: f"stage {s}" + (" (first)" if s == 0 and layout.pp > 1 else "")
             + (" (last)" if s == layout.pp - 1 and s > 0 else "") for s in stages}
    figures = {name: float(columns[name][0]) for name in ("compute_s", "exposed_comm_s", "bubble_fraction",
                                                          "memory_per_device_bytes")}
    return StepTimeline(setup, layout, source, step_timeline(plan, stages=stages), names,
                        float(plan.step_time[0]), figures["memory_per_device_bytes"] <= ctx.memory_limit_bytes, figures)
