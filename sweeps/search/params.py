"""How a trial's parameters spell a layout, and what a trial is told for a row.

Six categorical parameters (``sweeps.config.search.TRIAL_PARAMETERS``), none conditional on
another: ``tensor`` (TP, with SP where it is a layout of its own), ``pp``, ``micro_batch``,
``pipeline`` (the schedule with its virtual stages), ``zero`` and ``recompute``; and a
seventh, ``context`` (CP with its exchange of keys and values), in a space that holds more
than one (a space without context parallelism asks the six, as it did before CP), and an
eighth, ``experts`` (EP, ETP and the dispatcher), likewise. The same
choices are asked of the sampler (``suggest_layout``), read back from a journal
(``trial_layout``) and told again when a study is rebuilt from the lake's rows
(``trial_distributions``, ``layout_params``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, List, Optional

import optuna
from optuna.distributions import CategoricalDistribution
from optuna.trial import FrozenTrial, TrialState

from sweeps.errors import UserError
from sweeps.search.journal import REPAIR_HINT
from tasks.model.terms.layout import CP_COMMS, MOE_DISPATCHERS, decode
from tasks.model.search.rows import OBJECTIVES
from tasks.model.search.space import LayoutSpace

__all__ = ["suggest_layout", "layout_params", "trial_distributions", "trial_layout", "trial_values", "STATUS_ATTR",
           "trial_attrs", "feasible_trials"]

#: The user attribute holding a told trial's row status ("ok" or "infeasible"): a layout
#: over memory is told a penalised value (``trial_values``), so a study's values alone do
#: not say which of its trials fit.
STATUS_ATTR = "status"


def _tensor_choices(space: LayoutSpace) -> Dict[str, tuple]:
    """The ``tensor`` parameter's values: TP, and SP where it is a layout of its own
    (``LayoutSpace.sequence_parallel_choices``), e.g. ``tp4`` and ``tp4 sp``."""
    return {f"tp{tp}" + (" sp" if sp else ""): (tp, sp) for tp in space.tp
            for sp in space.sequence_parallel_choices(tp)}


def _pipeline_choices(space: LayoutSpace) -> Dict[str, tuple]:
    """The ``pipeline`` parameter's values: ``1f1b``, or ``interleaved:V`` per virtual-stage count."""
    return {name if v == 1 else f"{name}:{v}": (name, v)
            for name, v in ((decode("schedule", [c])[0], v) for c, v in space.schedule_choices())}


def _context_choices(space: LayoutSpace) -> Dict[str, tuple]:
    """The ``context`` parameter's values: ``cp1``, or ``cpN:EXCHANGE`` per CP above 1 and
    exchange (``layout.CP_COMMS``), e.g. ``cp4:p2p``."""
    return {f"cp{cp}" if cp == 1 else f"cp{cp}:{CP_COMMS[comm]}": (cp, CP_COMMS[comm])
            for cp, comm in space.context_choices()}


def _expert_choices(space: LayoutSpace) -> Dict[str, tuple]:
    """The ``experts`` parameter's values: ``ep1``, or ``epN`` with ``:etpM`` where ETP is
    above 1 and ``:DISPATCHER`` per EP above 1 (``layout.MOE_DISPATCHERS``), e.g.
    ``ep8:flex`` or ``ep8:etp2:alltoall``."""
    return {f"ep{ep}" + (f":etp{etp}" if etp > 1 else "") + (f":{MOE_DISPATCHERS[d]}" if ep > 1 else ""):
            (ep, etp, MOE_DISPATCHERS[d]) for ep, etp, d in space.expert_choices()}


def trial_distributions(space: LayoutSpace) -> Dict[str, CategoricalDistribution]:
    """Each parameter's choices, in the order the sampler is asked them (``context`` and
    ``experts`` only where the space holds more than one)."""
    choices = {"tensor": list(_tensor_choices(space)), "pp": space.pp, "micro_batch": space.micro_batch,
               "pipeline": list(_pipeline_choices(space)), "zero": space.zero, "recompute": space.recompute}
    if space.context_varies:
        choices["context"] = list(_context_choices(space))
    if space.experts_vary:
        choices["experts"] = list(_expert_choices(space))
    return {name: CategoricalDistribution(list(values)) for name, values in choices.items()}


def _layout(params: Dict[str, Any], space: LayoutSpace) -> Dict[str, Any]:
    tp, sp = _tensor_choices(space)[params["tensor"]]
    schedule, stages = _pipeline_choices(space)[params["pipeline"]]
    cp, cp_comm = _context_choices(space)[params["context"]] if "context" in params else \
        next(iter(_context_choices(space).values()))
    ep, etp, dispatcher = _expert_choices(space)[params["experts"]] if "experts" in params else \
        next(iter(_expert_choices(space).values()))
    return {"tp": tp, "pp": params["pp"], "micro_batch": params["micro_batch"], "schedule": schedule,
            "virtual_stages": stages, "zero": params["zero"], "sequence_parallel": sp,
            "recompute": params["recompute"], "cp": cp, "cp_comm": cp_comm, "ep": ep, "etp": etp,
            "dispatcher": dispatcher}


def suggest_layout(trial: optuna.trial.BaseTrial, space: LayoutSpace) -> Dict[str, Any]:
    """A layout from the trial's parameters. TP with SP (``tensor``) and the schedule with
    its virtual stages (``pipeline``) are one parameter each, so no parameter depends on
    another's value: the multivariate TPE models them all together, and SP at TP = 1 is
    one choice, not two."""
    params = {name: trial.suggest_categorical(name, list(dist.choices))
              for name, dist in trial_distributions(space).items()}
    return _layout(params, space)


def trial_layout(trial: FrozenTrial, space: LayoutSpace, journal: str) -> Optional[Dict[str, Any]]:
    """The layout a journal's trial costs; None for a trial that holds no layout (one
    waiting to be asked, a failed placeholder, or one asked by a write that never finished,
    unless it completed). ``UserError`` naming the journal and the trial for a value the
    space does not hold, or a completed trial missing a parameter: the journal is damaged."""
    distributions = trial_distributions(space)
    missing = [name for name in distributions if name not in trial.params]
    if missing and trial.state != TrialState.COMPLETE:
        return None
    if missing:
        raise UserError(f"journal {journal}: trial {trial.number} completed without its parameter {missing[0]} "
                        f"(a damaged journal); {REPAIR_HINT}")
    for name, dist in distributions.items():
        value = trial.params[name]
        if value not in dist.choices:
            raise UserError(f"journal {journal}: trial {trial.number}'s parameter {name}={value!r} is not a choice of "
                            f"this study's space {list(dist.choices)} (a damaged journal); {REPAIR_HINT}")
    return _layout(trial.params, space)


def layout_params(layout: Dict[str, Any], space: LayoutSpace) -> Dict[str, Any]:
    """The trial parameters ``suggest_layout`` turns into ``layout`` (a mapping of names).
    ``UserError`` for a layout the space does not hold."""
    sp = bool(layout["sequence_parallel"]) and int(layout["tp"]) > 1
    stages = int(layout["virtual_stages"]) if layout["schedule"] == "interleaved" else 1
    tensor = next((k for k, v in _tensor_choices(space).items() if v == (int(layout["tp"]), sp)), None)
    pipeline = next((k for k, v in _pipeline_choices(space).items() if v == (layout["schedule"], stages)), None)
    cp = int(layout.get("cp", 1))
    context = next((k for k, v in _context_choices(space).items()
                    if v == (cp, layout.get("cp_comm", "p2p") if cp > 1 else "p2p")), None)
    ep = int(layout.get("ep", 1) or 1)
    experts = next((k for k, v in _expert_choices(space).items()
                    if v == (ep, int(layout.get("etp", 1) or 1),
                             (layout.get("dispatcher") or "alltoall") if ep > 1 else "alltoall")), None)
    params = {"tensor": tensor, "pp": int(layout["pp"]), "micro_batch": int(layout["micro_batch"]),
              "pipeline": pipeline, "zero": layout["zero"], "recompute": layout["recompute"], "context": context,
              "experts": experts}
    distributions = trial_distributions(space)
    for name, dist in distributions.items():
        if params[name] not in dist.choices:
            raise UserError(f"trial {layout.get('trial', '?')}'s layout is not in this study's space: its {name} "
                            f"is none of {list(dist.choices)}")
    if "context" not in distributions and context is None:
        raise UserError(f"trial {layout.get('trial', '?')}'s layout is not in this study's space: its context "
                        f"cp{cp} is none of {list(_context_choices(space))}")
    if "experts" not in distributions and experts is None:
        raise UserError(f"trial {layout.get('trial', '?')}'s layout is not in this study's space: its experts "
                        f"ep{ep} is none of {list(_expert_choices(space))}")
    return {name: params[name] for name in distributions}


def trial_attrs(row: Dict[str, Any]) -> Dict[str, Any]:
    """The user attributes a trial told ``row`` carries: its status (``STATUS_ATTR``)."""
    return {STATUS_ATTR: row["status"]}


def feasible_trials(study: optuna.Study) -> List[FrozenTrial]:
    """The study's completed trials whose layout was feasible (``STATUS_ATTR`` "ok"), in
    trial order."""
    return [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.user_attrs.get(STATUS_ATTR) == "ok"]


def trial_values(row: Dict[str, Any], objective: str) -> List[float]:
    """What to tell Optuna for a row: its objectives, or the worst value if infeasible; a
    single objective tells the row's ``sampler_value`` where it holds one (a layout over
    memory's penalised step time, ``tasks.model.search.penalty``)."""
    columns = OBJECTIVES[objective]
    told = row.get("sampler_value") if len(columns) == 1 else None
    if told is not None and not math.isnan(told):
        return [float(told)]
    values = []
    for column, direction in columns:
        value = row[column] if row["status"] == "ok" else None
        if value is None or (isinstance(value, float) and math.isnan(value)):
            value = math.inf if direction == "minimize" else -math.inf
        values.append(float(value))
    return values
