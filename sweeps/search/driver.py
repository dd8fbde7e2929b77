"""Search the parallel layout space with Optuna: ask a batch, evaluate it, commit, tell.

Contract:

- **Storage.** The study lives in Optuna's journal file storage, by default
  ``LAKE/_studies/STUDY.journal``, so any number of runs of the same search continue one
  study, one run at a time (``journal.driver_lock``). The study's name carries a hash of
  what its results depend on (``SearchSetup.study_name``): a changed space is another
  study. A run writes the journal a batch at a time (``journal.BatchedJournal``): the
  asked trials and their parameters reach the file before any of their rows can reach
  the lake, the tells with the next batch (or at the end).
- **Budget.** ``trials`` is the number of completed trials the study ends with; a run
  asks only for what is missing, so a killed search resumes at its trial count.
- **Order.** A batch's rows are committed to the lake (kind ``search``, key = study and
  trial number) before the trials are told, so a trial never completes without its row.
- **Reconciliation.** Before asking, the journal and the lake are made one record of one
  sequence of trials (``recovery.settle``): trials a dead driver left RUNNING are settled
  (told their stored row's values, or marked FAIL and their layouts enqueued again, asked
  first); rows the lake lost (``lake verify`` set them aside) are recomputed; a study with
  no trials (its journal lost) whose lake holds rows is rebuilt from them; rows its journal
  does not know are refused. ``repair_journal`` sets the journal aside first, so the study
  is rebuilt from the lake's rows.
- **The journal file** is checked as it is opened (``journal``): a torn last line is
  dropped, a damaged line or a file that is no journal refused in one line (``UserError``),
  before the lake is touched.
- **Infeasible layouts** are rows with their reason. Under the ``step_time`` objective a
  layout over memory is told its step time had it fit, stretched by its overshoot
  (``tasks.model.search.penalty``), so the sampler learns how near it came; every other
  infeasible layout is told the worst value (+inf when minimising, -inf when maximising).
  Each told trial carries its row's status as user attribute ``status``
  (``params.feasible_trials``: the study's values alone no longer say which fit).
- **Where trials run.** ``tasks.model.search.rows.evaluate_trials`` (the whole-step model,
  NumPy, about 3 ms a batch) runs in this process unless a Ray cluster is asked for: an
  ``address`` (or ``RAY_ADDRESS``), or ``embedded_ray`` / ``num_cpus`` for an embedded one.
  Then each batch runs as Ray tasks through ``sweeps.cluster`` (the only package that
  knows Ray, imported only then). An ``evaluator`` given by the caller replaces both.
- **Warm start.** A fresh single-objective study over a space of at most
  ``WARM_START_LIMIT`` layouts first asks for the ``batch`` best layouts of the whole space
  by the step model (enumerated and costed in milliseconds), then samples; the count is
  kept in the study (user attribute ``warm_start``), so the sampler's own trials can be
  judged apart. ``warm_start=False`` leaves the sampler alone from the first trial.
- **The record.** Each study holds what decided it as Optuna user attributes
  (``study_attributes``: the stack, the fingerprints of the stack, model and hardware, the
  preset, the overrides, the objective), written by the run that made it; each of its
  ``search`` rows holds the same (``tasks.model.search.rows.RECORD_FIELDS``).
- **Reproducible.** In this process the trials are evaluated and told in order, so a seed
  gives the same trials, layouts and values on every fresh study.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import optuna
import pyarrow as pa
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from sweeps.config import SearchSetup
from sweeps.errors import LakeError, UserError
from sweeps.jobs.search import trial_key, trial_partition, trial_points, trial_workload
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.search.journal import REPAIR_HINT, BatchedJournal, driver_lock, journal_problem, set_aside
from sweeps.search.params import layout_params, suggest_layout, trial_attrs, trial_values
from sweeps.search.recovery import settle
from tasks.model.search.rows import OBJECTIVES, SEARCH_SCHEMA_VERSION
from tasks.outcomes import ChunkOutcome, run_chunk

__all__ = ["SearchReport", "run_search", "open_study", "study_path", "journal_path", "study_attributes",
           "suggest_layout", "layout_params", "local_evaluator", "WARM_START_LIMIT", "IN_PROCESS"]

#: The largest space a fresh study enumerates for its warm start (13,824 layouts: ~10 ms).
WARM_START_LIMIT = 1_000_000
#: The study's user attribute holding how many of its first trials the warm start asked.
WARM_START_ATTR = "warm_start"

#: Where trials run when no Ray cluster is asked for.
IN_PROCESS = "in this process (the analytic step model; no Ray)"

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
    #: The study's first trials that were the step model's best layouts (``warm_start``).
    warm_start: int = 0
    #: Rows the lake had lost (set aside by ``lake verify``), recomputed and committed again.
    restored: int = 0
    #: What was done to the journal before the run, one line each (a torn line dropped,
    #: the study rebuilt from the lake's rows).
    notes: List[str] = field(default_factory=list)


def study_path(lake: Lake, setup: SearchSetup, storage: Optional[str] = None) -> Path:
    """The journal file of a study: ``storage`` if given, else under a local lake."""
    return journal_path(lake, setup.study_name, storage)


def journal_path(lake: Lake, study: str, storage: Optional[str] = None) -> Path:
    """The journal file of the study named ``study`` (a layout search's or a co-design's):
    ``storage`` if given, else ``LAKE/_studies/STUDY.journal`` under a local lake."""
    if storage:
        return Path(storage).expanduser()
    if lake.local_root is None:
        raise LakeError(f"lake {lake} is not a local path: give the study's journal file with --storage PATH")
    return Path(lake.local_root) / "_studies" / f"{study}.journal"


def _sampler(setup: SearchSetup, seed: Optional[int]) -> optuna.samplers.BaseSampler:
    name = setup.sampler
    if name == "nsga2":
        return optuna.samplers.NSGAIISampler(seed=seed, population_size=min(50, max(8, setup.spec.batch * 2)))
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    return optuna.samplers.TPESampler(seed=seed, constant_liar=True)


def open_study(setup: SearchSetup, path: Path, seed: Optional[int] = None,
               journal: Optional[BatchedJournal] = None) -> optuna.Study:
    """Create or load the study in its journal file (written at once), or through
    ``journal`` (written at its flushes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if journal is None:
        storage = JournalStorage(JournalFileBackend(str(path)))
    else:
        try:
            storage = JournalStorage(journal)  # replays the file's records
        except (KeyError, ValueError, TypeError, AssertionError, AttributeError, IndexError, OverflowError) as exc:
            raise journal.damage(exc) from None
    directions = [direction for _, direction in OBJECTIVES[setup.spec.objective]]
    return optuna.create_study(storage=storage, study_name=setup.study_name, sampler=_sampler(setup, seed),
                               directions=directions, load_if_exists=True)


def _best_params(setup: SearchSetup, count: int) -> Optional[List[Dict[str, Any]]]:
    """The parameters of the ``count`` best layouts of the space by the step model, best
    first; None where no warm start applies (several objectives, or a space of more than
    ``WARM_START_LIMIT`` layouts)."""
    from sweeps.search.results import exhaustive_frame

    spec = setup.spec
    if len(OBJECTIVES[spec.objective]) > 1 or spec.space.size > WARM_START_LIMIT:
        return None
    return [layout_params(row, spec.space) for _, row in exhaustive_frame(setup).head(count).iterrows()]


def _warm_start(study: optuna.Study, setup: SearchSetup) -> int:
    """Ask first for the ``batch`` best layouts of the space by the step model, in a fresh
    single-objective study over a space of at most ``WARM_START_LIMIT`` layouts; returns how many."""
    best = None if study.trials else _best_params(setup, min(setup.spec.batch, setup.spec.trials))
    if best is None:
        return 0
    for params in best:
        study.enqueue_trial(params)
    study.set_user_attr(WARM_START_ATTR, len(best))
    return len(best)


def _rebuilt_warm_start(study: optuna.Study, setup: SearchSetup) -> None:
    """Mark a study rebuilt from the lake's rows with its warm start: its first trials
    that were the step model's best layouts, in order (at most ``batch``)."""
    best = _best_params(setup, setup.spec.batch) or []
    count = 0
    for params, trial in zip(best, study.trials):
        if trial.params != params:
            break
        count += 1
    if count:
        study.set_user_attr(WARM_START_ATTR, count)


def study_attributes(setup: SearchSetup) -> Dict[str, Any]:
    """What decided a study, as its Optuna user attributes hold it: ``SearchSetup.record``,
    the model and hardware by name, the device count and the global batch."""
    return {**setup.record(), "model": setup.model.name, "hardware": setup.hardware.name,
            "devices": setup.spec.devices, "global_batch": setup.spec.global_batch}


def _record(study: optuna.Study, setup: SearchSetup) -> None:
    """Write ``study_attributes`` the study does not hold yet: a study keeps the record of
    the run that made it (a resumed run may spell its overrides otherwise)."""
    held = study.user_attrs
    for name, value in study_attributes(setup).items():
        if name not in held:
            study.set_user_attr(name, value)


def _completed(study: optuna.Study) -> int:
    return len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))


def local_evaluator(setup: SearchSetup) -> Evaluator:
    """Evaluate trials in this process (no Ray), each batch one vectorised call of the
    step model; bugs become failures as on a worker (``tasks.outcomes.run_chunk``)."""
    work = trial_workload(setup)

    def evaluate(points: pa.Table, on_outcome: Callable[[pa.Table, ChunkOutcome], None]) -> None:
        on_outcome(points, run_chunk(work.body, points, work.context, work.schema))
    return evaluate




def _wants_ray(address: Optional[str], num_cpus: Optional[int], embedded_ray: bool) -> bool:
    return bool(address or os.environ.get("RAY_ADDRESS") or num_cpus is not None or embedded_ray)


@contextlib.contextmanager
def _evaluation(setup: SearchSetup, report: SearchReport, *, address: Optional[str], num_cpus: Optional[int],
                embedded_ray: bool, evaluator: Optional[Evaluator]) -> Iterator[Evaluator]:
    """Where the trials run: the caller's evaluator, Ray tasks (a cluster joined or an
    embedded Ray asked for), or this process."""
    if evaluator is not None or not _wants_ray(address, num_cpus, embedded_ray):
        report.where = "in this process" if evaluator is not None else IN_PROCESS
        yield evaluator or local_evaluator(setup)
        return
    from sweeps.cluster.dispatch import execute
    from sweeps.cluster.session import ray_session, slots

    work = trial_workload(setup)
    with ray_session(address, num_cpus) as session:
        report.where = session.where
        width = slots(work.resources)

        def evaluate(points: pa.Table, on_outcome: Callable[[pa.Table, ChunkOutcome], None]) -> None:
            execute(points, work, chunk_size=max(1, -(-points.num_rows // width)), max_in_flight=width,
                    on_outcome=on_outcome)
        yield evaluate


def run_search(setup: SearchSetup, lake: Lake, *, storage: Optional[str] = None, address: Optional[str] = None,
               num_cpus: Optional[int] = None, embedded_ray: bool = False, evaluator: Optional[Evaluator] = None,
               warm_start: bool = True, on_batch: Optional[Callable[[optuna.Study, int], bool]] = None,
               repair_journal: bool = False) -> SearchReport:
    """Run the study until it has ``setup.spec.trials`` completed trials.

    ``on_batch(study, completed)`` is called after each batch; returning True ends the
    run early (the study keeps what it has). ``repair_journal`` sets the study's journal
    aside (``JOURNAL.damaged-TIME``) and rebuilds the study from the lake's rows. Bad input
    must have been refused before (``sweeps.config.check_space``); this writes to the lake.
    ``UserError`` if another process is running the same study, or for a journal file that
    is damaged or no journal (before the lake is touched).
    """
    started = time.perf_counter()
    path = study_path(lake, setup, storage)
    problem = journal_problem(path)
    if problem and not repair_journal:
        raise UserError(f"journal {path} {problem}; {REPAIR_HINT}")
    lake.ensure_writable()
    with driver_lock(path):
        aside = set_aside(path, "damaged") if repair_journal else None
        journal = BatchedJournal(path)
        try:
            study = open_study(setup, path, seed=setup.spec.seed, journal=journal)
            settled = settle(study, setup, lake, str(path))
            before = _completed(study)
            report = SearchReport(setup.study_name, str(path), setup.spec.trials, before, 0, settled.told_from_lake,
                                  settled.reasked, "nothing to run: the study has its trials", 0.0,
                                  failures=settled.failures, restored=settled.restored,
                                  notes=journal.notes + _repair_notes(path, aside, settled.rebuilt_from,
                                                                      repair_journal))
            if settled.rebuilt_from:
                _rebuilt_warm_start(study, setup)
            if warm_start:
                _warm_start(study, setup)
            _record(study, setup)
            report.warm_start = int(study.user_attrs.get(WARM_START_ATTR, 0))
            if before < setup.spec.trials and not report.failures:
                with _evaluation(setup, report, address=address, num_cpus=num_cpus, embedded_ray=embedded_ray,
                                 evaluator=evaluator) as evaluate:
                    report.completed_now = _trials(setup, lake, study, journal, evaluate, report, on_batch) - before
        finally:
            journal.flush()
    report.elapsed_s = time.perf_counter() - started
    return report


def _repair_notes(path: Path, aside: Optional[Path], rebuilt_from: Optional[int], repair: bool) -> List[str]:
    """One line on what was done to the journal: set aside, the study rebuilt from the lake."""
    notes = [] if aside is None else [f"journal {path}: set aside as {aside}"]
    if rebuilt_from:
        why = "" if repair else " (no journal held the study)"
        notes.append(f"journal {path}: the study was rebuilt from the lake's {rebuilt_from} rows{why}")
    elif repair:
        notes.append(f"journal {path}: the lake holds no rows of the study; it starts anew")
    return notes


def _trials(setup: SearchSetup, lake: Lake, study: optuna.Study, journal: BatchedJournal, evaluate: Evaluator,
            report: SearchReport, on_batch: Optional[Callable[[optuna.Study, int], bool]]) -> int:
    """Ask, evaluate, commit and tell batch by batch until the budget is met (or ``on_batch``
    ends it, or a trial fails); returns the completed trials."""
    spec = setup.spec
    partition = trial_partition(setup)
    done = _completed(study)
    while done < spec.trials and not report.failures:
        asked = [study.ask() for _ in range(min(spec.batch, spec.trials - done))]
        layouts = [(t.number, suggest_layout(t, spec.space)) for t in asked]
        journal.flush()  # the asked trials are in the journal before any of their rows is in the lake
        by_key = {trial_key(setup.study_name, t.number, layout): t
                  for t, (_, layout) in zip(asked, layouts, strict=True)}

        def commit_and_tell(piece: pa.Table, outcome: ChunkOutcome, by_key: Dict[str, Any] = by_key) -> None:
            nonlocal done
            if outcome.results is not None and outcome.results.num_rows:
                lake.commit(SEARCH, partition, outcome.results, schema_version=SEARCH_SCHEMA_VERSION)
                for row in outcome.results.select(["key", "status", "sampler_value",
                                                   *_objective_columns(spec.objective)]).to_pylist():
                    trial = by_key.pop(row["key"])
                    for name, value in trial_attrs(row).items():
                        trial.set_user_attr(name, value)
                    study.tell(trial, trial_values(row, spec.objective))
                    done += 1
            for failure in outcome.failures:
                report.failures.append(failure)
                study.tell(by_key.pop(failure["point_key"]), state=TrialState.FAIL)

        evaluate(trial_points(setup, setup.study_name, layouts), commit_and_tell)
        if on_batch and on_batch(study, done):
            break
    return done


def _objective_columns(objective: str) -> List[str]:
    return [column for column, _ in OBJECTIVES[objective]]
