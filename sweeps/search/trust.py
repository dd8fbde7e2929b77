"""How far to trust a search's ranking: the cost model's measured error on comparable
published runs, set against how close the top layouts lie, and a winner that needs nearly
all of a device's usable memory.

The error is the validation's own (``tasks.validation``: each published run of
``conf/data``, shipped and held out, predicted by the same step model), taken over the runs
on the search's device class (``predict_runs.find_profile`` calls the search's profile by
the run's hardware name) and, where at least ``MIN_RUNS`` of them ran it, the search's stack
(``STACK_SWITCHES``, as ``predict_runs.run_stack`` reads a run's). Runs a profile figure was
fitted to (``fitted_to``) are left out. A search of a mixture of experts reads the published
mixture-of-experts runs instead (``MOE_RUNS``; rows the model cannot price, a dropping router's,
left out): the dense runs' error says nothing of its experts. It is computed once per device,
stack and kind of model in a process.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import pandas as pd

from sweeps.config import SearchSetup
from tasks.model.terms.specs import HardwareProfile, fingerprint
from tasks.model.terms.stack import Stack

__all__ = ["MOE_RUNS", "STACK_SWITCHES", "MIN_RUNS", "TIE_LIMIT", "MEMORY_MARGIN", "ModelError", "published_error",
           "Trust", "trust", "memory_margin"]

#: The published mixture-of-experts runs (conf/data) a MoE search's error is taken over.
MOE_RUNS = "moe_bridge_runs.csv"
#: The stack switches two runs must share to count as "this stack": the attention kernel,
#: the GEMMs' precision and whether TP communication overlaps compute (what sets a stack's
#: era apart; DP and pipeline overlap follow from them in the published rows).
STACK_SWITCHES = ("attention", "gemm_precision", "tp_overlap")
#: The fewest runs of the search's stack its error is taken over; with fewer, every run on
#: the device class counts.
MIN_RUNS = 2
#: The most top layouts a tie names.
TIE_LIMIT = 10
#: A winner needing more than this share of usable memory is flagged (the memory model's own
#: error could decide whether it fits).
MEMORY_MARGIN = 0.95


@dataclass(frozen=True)
class ModelError:
    """The mean |error| (a fraction) of the step model's predictions of ``runs`` published
    runs on ``hardware``, of ``scope`` ("this stack and device class", "this device class",
    each prefixed "mixtures of experts on" for a MoE search)."""

    mean: float
    runs: int
    scope: str
    hardware: str


_ERRORS: Dict[Tuple[str, str, Tuple, bool], Optional[ModelError]] = {}


def _switches(stack: Stack) -> Tuple:
    return tuple(getattr(stack, name) for name in STACK_SWITCHES)


def _class_profile(hardware: HardwareProfile) -> HardwareProfile:
    """The shipped profile of ``hardware``'s device class: the preset of its name, else the
    preset of its accelerator (a cluster file with ``base: a100-80gb`` and its own nodes and
    network, or a shipped cluster preset such as h100-a3-high), else ``hardware`` itself. A
    published run is predicted on the cluster it ran on, as ``commscale validate`` predicts
    it: a user's 4-GPU nodes or 100 Gb/s NICs would price other clusters' runs on the wrong
    network, and call that the model's error."""
    from sweeps.config import list_presets, load_preset
    from sweeps.jobs.validation import load_profiles
    from tasks.validation.predict_runs import cluster_preset, find_profile

    profiles = load_profiles()
    if hardware.name in list_presets("hardware") and not cluster_preset(hardware, profiles):
        return load_preset("hardware", hardware.name)
    return find_profile(hardware.accelerator, profiles) or hardware


def _run_errors(profile: HardwareProfile, moe: bool = False) -> List[Tuple[Tuple, float]]:
    """(stack switches, signed error) of each published run on ``profile``'s device class
    (``_class_profile``) that no figure was fitted to, predicted with ``profile``; runs the
    profile cannot cost (an fp8 run on a part without an fp8 peak) are left out. ``moe``: the
    mixture-of-experts runs (``MOE_RUNS``) instead of the dense ones."""
    from sweeps.jobs.validation import DATA_DIR
    from tasks.validation.predict_runs import find_profile, run_stack
    from tasks.validation.records import DATA_FILES, HELD_OUT, RowError
    from tasks.validation.runs import read_runs
    from tasks.validation.validate import validate_runs

    profiles = {profile.name: profile}
    found = []
    files = [("runs", DATA_DIR / MOE_RUNS)] if moe else [(name, DATA_DIR / DATA_FILES[name]) for name in
                                                         ("runs", HELD_OUT)]
    for dataset, path in files:
        for run in read_runs(path, skipped=[]):
            if find_profile(run.hw, profiles) is None:
                continue
            try:
                (record,) = validate_runs([run], profiles, dataset=dataset)
            except RowError:
                continue
            if not record.fitted_to:
                found.append((_switches(run_stack(run)), record.error))
    return found


def published_error(hardware: HardwareProfile, stack: Stack, moe: bool = False) -> Optional[ModelError]:
    """The model's mean |error| on published runs of ``stack`` (``STACK_SWITCHES``) on
    ``hardware``'s device class, or of every stack there with fewer than ``MIN_RUNS`` of
    it; None without a run on the device class. ``moe``: on mixture-of-experts runs. Cached
    per process."""
    key = (hardware.name, fingerprint(hardware), _switches(stack), moe)
    if key not in _ERRORS:
        profile = _class_profile(hardware)
        runs, mine = _run_errors(profile, moe), _switches(stack)
        same = [error for switches, error in runs if switches == mine]
        kind = "mixtures of experts on " if moe else ""
        errors, scope = (same, f"{kind}this stack and device class") if len(same) >= MIN_RUNS else \
            ([error for _, error in runs], f"{kind}this device class")
        _ERRORS[key] = ModelError(sum(abs(e) for e in errors) / len(errors), len(errors), scope,
                                  profile.name) if errors else None
    return _ERRORS[key]


@dataclass(frozen=True)
class Trust:
    """The top layouts against the model's error: how many of the first lie within
    ``error.mean`` of the best's step time (``tied``, 1 where the runner-up is further; at
    most ``TIE_LIMIT``), how far apart those lie in step time (a fraction of the best's), and
    how far the next one lies (None where there is none; within the error too where the tie
    reached ``TIE_LIMIT``)."""

    tied: int
    spread: float
    next_gap: Optional[float]
    error: ModelError


def trust(top: pd.DataFrame, setup: SearchSetup) -> Optional[Trust]:
    """``Trust`` of ``top`` (distinct feasible layouts, best first) by step time; None with
    fewer than two layouts or no published run on the device class."""
    if len(top) < 2:
        return None
    error = published_error(setup.hardware, setup.stack, moe=bool(setup.model.experts))
    if error is None:
        return None
    steps = top["step_time_s"].to_numpy(dtype=float)[:TIE_LIMIT + 1]
    gaps = abs(steps - steps[0]) / steps[0]
    tied = 1
    while tied < min(len(gaps), TIE_LIMIT) and gaps[tied] <= error.mean:
        tied += 1
    return Trust(tied, float(gaps[:tied].max()), float(gaps[tied]) if tied < len(gaps) else None, error)


def memory_margin(top: pd.DataFrame, setup: SearchSetup) -> Optional[Tuple[float, float]]:
    """(GB the winner needs per device, GB usable) where the first layout of ``top`` needs
    more than ``MEMORY_MARGIN`` of the usable memory; else None."""
    if top.empty:
        return None
    needs, usable = float(top["memory_per_device_bytes"].iloc[0]), setup.step_context.memory_limit_bytes
    return (needs / 1e9, usable / 1e9) if needs > MEMORY_MARGIN * usable else None
