"""Search the parallel layout space with Optuna: ask a batch, evaluate it on Ray, tell.

Contract:

- **Storage.** The study lives in Optuna's journal file storage (``JournalStorage`` over a
  ``JournalFileBackend``), by default ``LAKE/_studies/STUDY.journal``, so any number of
  runs of the same search continue one study. The study's name carries a hash of what its
  results depend on (``SearchSetup.study_name``): a changed space is another study.
- **Budget.** ``trials`` is the number of completed trials the study ends with; a run
  asks only for what is missing, so a killed search resumes at its trial count.
- **Order.** A batch's rows are committed to the lake (kind ``search``, key = study and
  trial number) before the trials are told, so a trial never completes without its row.
- **Reconciliation.** Trials a dead driver left RUNNING are settled before asking: one
  whose row reached the lake is told its stored values; the others are marked FAIL and
  their layouts enqueued again (asked first).
- **Infeasible layouts** are rows with their reason, and are told the worst value (+inf
  when minimising, -inf when maximising), so samplers learn to avoid them.
- Trials are evaluated by ``tasks.model.search_rows.evaluate_trials`` as Ray tasks through
  ``sweeps.cluster`` (the only package that knows Ray), or in this process when an
  ``evaluator`` is given (benchmarks of sampler efficiency).
"""

from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import optuna
import pyarrow as pa
import pyarrow.compute as pc
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from sweeps.cluster.dispatch import execute
from sweeps.cluster.session import ray_session, slots
from sweeps.config import SearchSetup
from sweeps.errors import LakeError
from sweeps.jobs.search import trial_key, trial_points, trial_workload
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from tasks.model.search_rows import OBJECTIVES, SEARCH_SCHEMA_VERSION
from tasks.model.space import LayoutSpace
from tasks.outcomes import ChunkOutcome, run_chunk

__all__ = ["SearchReport", "run_search", "open_study", "study_path", "suggest_layout", "local_evaluator"]

#: An evaluator runs a table of trial points and hands each finished piece to the callback.
Evaluator = Callable[[pa.Table, Callable[[pa.Table, ChunkOutcome], None]], None]


@dataclass
class SearchReport:
    """What a run of a search did."""

    study: str
    storage: str
    trials: int
    completed_before: int
    completed_now: int
    told_from_lake: int
    reasked: int
    where: str
    elapsed_s: float
    failures: List[Dict[str, Any]] = field(default_factory=list)


def study_path(lake: Lake, setup: SearchSetup, storage: Optional[str] = None) -> Path:
    """The journal file of a study: ``storage`` if given, else under a local lake."""
    if storage:
        return Path(storage).expanduser()
    if lake.local_root is None:
        raise LakeError(f"lake {lake} is not a local path: give the study's journal file with --storage PATH")
    return Path(lake.local_root) / "_studies" / f"{setup.study_name}.journal"


def _sampler(setup: SearchSetup, seed: Optional[int]) -> optuna.samplers.BaseSampler:
    name = setup.sampler
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=min(50, max(8, setup.spec.batch * 2)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def open_study(setup: SearchSetup, path: Path, seed: Optional[int] = None) -> optuna.Study:
    """Create or load the study in its journal file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(JournalFileBackend(str(path)))
    directions = [direction for _, direction in OBJECTIVES[setup.spec.objective]]
    return optuna.create_study(storage=storage, study_name=setup.study_name, sampler=_sampler(setup, seed),
                               directions=directions, load_if_exists=True)


def suggest_layout(trial: optuna.trial.BaseTrial, space: LayoutSpace) -> Dict[str, Any]:
    """A layout from the trial's parameters; virtual stages only for the interleaved schedule."""
    layout = {
        "tp": trial.suggest_categorical("tp", space.tp),
        "pp": trial.suggest_categorical("pp", space.pp),
        "micro_batch": trial.suggest_categorical("micro_batch", space.micro_batch),
        "schedule": trial.suggest_categorical("schedule", space.schedule),
        "zero": trial.suggest_categorical("zero", space.zero),
        "sequence_parallel": trial.suggest_categorical("sequence_parallel", space.sequence_parallel),
        "recompute": trial.suggest_categorical("recompute", space.recompute),
    }
    stages = [v for v in space.virtual_stages if v > 1]
    interleaved = layout["schedule"] == "interleaved"
    layout["virtual_stages"] = trial.suggest_categorical("virtual_stages", stages) if interleaved else 1
    return layout


def _values(row: Dict[str, Any], objective: str) -> List[float]:
    """What to tell Optuna for a row: its objectives, or the worst value if infeasible."""
    values = []
    for column, direction in OBJECTIVES[objective]:
        value = row[column] if row["status"] == "ok" else None
        if value is None or (isinstance(value, float) and math.isnan(value)):
            value = math.inf if direction == "minimize" else -math.inf
        values.append(float(value))
    return values


def _stored_rows(lake: Lake, keys: List[str]) -> Dict[str, Dict[str, Any]]:
    if not keys or SEARCH not in lake.kinds():
        return {}
    table = lake.dataset(SEARCH).to_table(filter=pc.field("key").isin(keys))
    return {row["key"]: row for row in table.to_pylist()}


def _reconcile(study: optuna.Study, lake: Lake, setup: SearchSetup) -> tuple:
    """Settle trials left RUNNING by a dead driver; returns (told from lake, re-asked)."""
    running = [t for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))]
    stored = _stored_rows(lake, [trial_key(study.study_name, t.number) for t in running])
    told = reasked = 0
    for trial in running:
        row = stored.get(trial_key(study.study_name, trial.number))
        if row is not None:
            study.tell(trial.number, _values(row, setup.spec.objective))
            told += 1
        else:
            study.tell(trial.number, state=TrialState.FAIL)
            study.enqueue_trial(trial.params, skip_if_exists=False)
            reasked += 1
    return told, reasked


def _completed(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def local_evaluator(setup: SearchSetup) -> Evaluator:
    """Evaluate trials in this process (no Ray): for benchmarks of the samplers."""
    work = trial_workload(setup)

    def evaluate(points: pa.Table, on_outcome: Callable[[pa.Table, ChunkOutcome], None]) -> None:
        on_outcome(points, run_chunk(work.body, points, work.context, work.schema))
    return evaluate


def run_search(setup: SearchSetup, lake: Lake, *, storage: Optional[str] = None, address: Optional[str] = None,
               num_cpus: Optional[int] = None, evaluator: Optional[Evaluator] = None,
               on_batch: Optional[Callable[[optuna.Study, int], bool]] = None) -> SearchReport:
    """Run the study until it has ``setup.spec.trials`` completed trials.

    ``on_batch(study, completed)`` is called after each batch; returning True ends the
    run early (the study keeps what it has). Bad input must have been refused before
    (``sweeps.config.check_space``); this writes to the lake.
    """
    started = time.perf_counter()
    spec = setup.spec
    lake.ensure_writable()
    path = study_path(lake, setup, storage)
    study = open_study(setup, path, seed=spec.seed)
    told, reasked = _reconcile(study, lake, setup)
    before = _completed(study)
    report = SearchReport(setup.study_name, str(path), spec.trials, before, 0, told, reasked,
                          "nothing to run: the study has its trials", 0.0)
    partition = {"sweep": setup.study_name, "hardware": setup.hardware.name}
    work = trial_workload(setup)
    evaluate = evaluator
    with contextlib.ExitStack() as stack:
        if before < spec.trials and evaluate is None:
            session = stack.enter_context(ray_session(address, num_cpus))
            report.where = session.where
            width = slots(work.resources)

            def evaluate(points, on_outcome):  # the trials of a batch as Ray tasks
                execute(points, work, chunk_size=max(1, -(-points.num_rows // width)), max_in_flight=width,
                        on_outcome=on_outcome)
        elif before < spec.trials:
            report.where = "in this process"
        done = before
        while done < spec.trials and not report.failures:
            asked = [study.ask() for _ in range(min(spec.batch, spec.trials - done))]
            by_key = {trial_key(setup.study_name, t.number): t for t in asked}

            def commit_and_tell(piece: pa.Table, outcome: ChunkOutcome, by_key: Dict[str, Any] = by_key) -> None:
                nonlocal done
                if outcome.results is not None and outcome.results.num_rows:
                    lake.commit(SEARCH, partition, outcome.results, schema_version=SEARCH_SCHEMA_VERSION)
                    for row in outcome.results.to_pylist():
                        study.tell(by_key.pop(row["key"]), _values(row, spec.objective))
                        done += 1
                for failure in outcome.failures:
                    report.failures.append(failure)
                    study.tell(by_key.pop(failure["point_key"]), state=TrialState.FAIL)

            layouts = [(t.number, suggest_layout(t, setup.spec.space)) for t in asked]
            evaluate(trial_points(setup, setup.study_name, layouts), commit_and_tell)
            if on_batch and on_batch(study, done):
                break
        report.completed_now = done - before
    report.elapsed_s = time.perf_counter() - started
    return report
