"""A co-design study run end to end: an Optuna NSGA-II study of hardware knobs and layouts
(``sweeps.config.codesign``), kept in a journal beside the lake so a second run resumes it,
its trials costed in this process by the step model batch by batch
(``tasks.model.codesign.evaluate``), each batch's rows committed to the lake (kind
``codesign``) before the study is told them. Infeasible points are told as violating a
constraint (Deb et al. 2002's constrained domination, as Optuna's NSGA-II applies it).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional

import optuna
import pandas as pd
import pyarrow as pa

from sweeps.config.codesign import CodesignSetup
from sweeps.lake import Lake
from sweeps.lake.kinds import CODESIGN
from sweeps.lake.views import query
from sweeps.search.driver import journal_path
from sweeps.search.journal import driver_lock
from sweeps.search.params import suggest_layout
from sweeps.jobs.work import key_of
from tasks.model.codesign.evaluate import CODESIGN_SCHEMA, CODESIGN_SCHEMA_VERSION, CodesignProblem, evaluate_points
from tasks.model.codesign.knobs import KNOB_NAMES, Knobs
from tasks.model.codesign.pareto import front_indices
from tasks.model.search.space import LayoutSpace

__all__ = ["CodesignRun", "run_codesign", "optimize", "codesign_sampler", "suggest_point", "tell_point",
           "codesign_rows", "codesign_front", "codesign_key", "INFEASIBLE_STEP_S"]

#: The step time told for an infeasible point (beside its violated constraint): worse than any.
INFEASIBLE_STEP_S = 1e12


@dataclass
class CodesignRun:
    """What ``run_codesign`` did: the study, its journal, trials before and now, seconds, and
    every trial's row (read back from the lake)."""

    study: str
    journal: str
    before: int
    completed_now: int
    elapsed_s: float
    rows: pd.DataFrame


def codesign_sampler(population: int, seed: Optional[int]) -> optuna.samplers.BaseSampler:
    """NSGA-II (Deb et al. 2002) with ``population`` per generation, seeded."""
    return optuna.samplers.NSGAIISampler(population_size=population, seed=seed)


def suggest_point(trial: optuna.trial.BaseTrial, knobs: Knobs, space: LayoutSpace) -> Dict[str, Any]:
    """A point from the trial's parameters: each knob one categorical parameter, then the
    layout as a layout search asks it (``sweeps.search.params.suggest_layout``)."""
    point = {name: trial.suggest_categorical(name, list(getattr(knobs, name))) for name in KNOB_NAMES}
    return {**point, **suggest_layout(trial, space)}


def tell_point(study: optuna.Study, trial: optuna.trial.Trial, row: Dict[str, Any]) -> None:
    """Tell ``study`` a costed point: its step time and cost, or, infeasible, a violated constraint."""
    trial.set_constraint("infeasible", 0.0 if row["feasible"] else 1.0)
    step = row["step_time_s"] if row["feasible"] else INFEASIBLE_STEP_S
    study.tell(trial, [float(step), float(row["cost_usd"])])


def optimize(study: optuna.Study, problem: CodesignProblem, knobs: Knobs, space: LayoutSpace, *, trials: int,
             batch: int, on_rows: Optional[Callable[[List[optuna.trial.Trial], List[Dict[str, Any]]], None]] = None
             ) -> int:
    """Ask, cost and tell ``study`` batch by batch until it has ``trials`` completed trials;
    ``on_rows(trials, rows)`` sees each batch's costed points before the study is told them
    (where ``run_codesign`` commits them). Returns the completed trials."""
    done = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
    while done < trials:
        asked = [study.ask() for _ in range(min(batch, trials - done))]
        rows = evaluate_points(problem, [suggest_point(t, knobs, space) for t in asked])
        if on_rows:
            on_rows(asked, rows)
        for trial, row in zip(asked, rows, strict=True):
            tell_point(study, trial, row)
        done += len(asked)
    return done


def run_codesign(setup: CodesignSetup, lake: Lake, *, on_batch=None) -> CodesignRun:
    """Run or resume ``setup``'s study until it has ``trials`` completed trials (module docstring)."""
    started = time.perf_counter()
    spec, problem = setup.spec, setup.problem
    lake.ensure_writable()
    path = journal_path(lake, setup.study)
    path.parent.mkdir(parents=True, exist_ok=True)
    partition = {"sweep": setup.study, "hardware": problem.base.name}

    def commit(trials: List[optuna.trial.Trial], rows: List[Dict[str, Any]]) -> None:
        lake.commit(CODESIGN, partition, _table(setup, trials, rows), schema_version=CODESIGN_SCHEMA_VERSION)
        if on_batch:
            on_batch(trials[-1].number + 1)

    with driver_lock(path):     # one process runs a study at a time (UserError for a second)
        storage = optuna.storages.JournalStorage(optuna.storages.journal.JournalFileBackend(str(path)))
        study = optuna.create_study(study_name=setup.study, storage=storage, load_if_exists=True,
                                    directions=["minimize", "minimize"],
                                    sampler=codesign_sampler(spec.population, spec.seed))
        before = len(study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)))
        done = optimize(study, problem, spec.knobs, spec.space, trials=spec.trials, batch=spec.batch,
                        on_rows=commit)
    return CodesignRun(setup.study, str(path), before, done - before, time.perf_counter() - started,
                       codesign_rows(lake, setup))


def codesign_key(study: str, trial: int, fields: Dict[str, Any]) -> str:
    """The lake key of a trial's row: its study, its number and its point (kind ``codesign``)."""
    return key_of([CODESIGN, study, trial, fields])


def _table(setup: CodesignSetup, trials: List[optuna.trial.Trial], rows: List[Dict[str, Any]]) -> pa.Table:
    """The ``codesign`` rows of a batch, each keyed by the study, the trial and its point."""
    out = []
    for trial, row in zip(trials, rows, strict=True):
        fields = {name: row.get(name) for name in CODESIGN_SCHEMA.names
                  if name not in ("key", "study", "trial", "model", "hardware")}
        out.append({"key": codesign_key(setup.study, trial.number, fields), "study": setup.study,
                    "trial": trial.number, "model": setup.problem.model.name, "hardware": setup.problem.base.name,
                    **fields})
    return pa.Table.from_pylist(out, schema=CODESIGN_SCHEMA)


def codesign_rows(lake: Lake, setup: CodesignSetup) -> pd.DataFrame:
    """Every trial row of ``setup``'s study in the lake, in trial order."""
    return query(lake, f"SELECT * FROM {CODESIGN} WHERE study = '{setup.study}' ORDER BY trial").to_pandas()


def codesign_front(rows: pd.DataFrame) -> pd.DataFrame:
    """The feasible trials no other beats on both step time and cost, fastest first (of equal
    points, the first trial's)."""
    ok = rows[rows["feasible"]].reset_index(drop=True)
    return ok.iloc[front_indices(ok["step_time_s"], ok["cost_usd"])].reset_index(drop=True)
