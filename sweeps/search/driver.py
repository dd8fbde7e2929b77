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
- **Reconciliation.** Trials a dead driver left RUNNING are settled before asking: one
  whose row reached the lake is told its stored values; the others are marked FAIL and
  their layouts enqueued again (asked first).
- **Infeasible layouts** are rows with their reason, and are told the worst value (+inf
  when minimising, -inf when maximising), so samplers learn to avoid them.
- **Where trials run.** ``tasks.model.search_rows.evaluate_trials`` (the whole-step model,
  NumPy, about 3 ms a batch) runs in this process unless a Ray cluster is asked for: an
  ``address`` (or ``RAY_ADDRESS``), or ``embedded_ray`` / ``num_cpus`` for an embedded one.
  Then each batch runs as Ray tasks through ``sweeps.cluster`` (the only package that
  knows Ray, imported only then). An ``evaluator`` given by the caller replaces both.
- **Warm start.** A fresh single-objective study over a space of at most
  ``WARM_START_LIMIT`` layouts first asks for the ``batch`` best layouts of the whole space
  by the step model (enumerated and costed in milliseconds), then samples; the count is
  kept in the study (user attribute ``warm_start``), so the sampler's own trials can be
  judged apart. ``warm_start=False`` leaves the sampler alone from the first trial.
- **Reproducible.** In this process the trials are evaluated and told in order, so a seed
  gives the same trials, layouts and values on every fresh study.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional

import optuna
import pyarrow as pa
import pyarrow.compute as pc
from optuna.storages import JournalStorage
from optuna.storages.journal import JournalFileBackend
from optuna.trial import TrialState

from sweeps.config import SearchSetup
from sweeps.errors import LakeError
from sweeps.jobs.search import trial_key, trial_points, trial_workload
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.search.journal import BatchedJournal, driver_lock
from tasks.model.layout import decode
from tasks.model.search_rows import OBJECTIVES, SEARCH_SCHEMA_VERSION
from tasks.model.space import LayoutSpace
from tasks.outcomes import ChunkOutcome, run_chunk

__all__ = ["SearchReport", "run_search", "open_study", "study_path", "suggest_layout", "layout_params",
           "local_evaluator", "WARM_START_LIMIT", "IN_PROCESS"]

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


def open_study(setup: SearchSetup, path: Path, seed: Optional[int] = None,
               journal: Optional[BatchedJournal] = None) -> optuna.Study:
    """Create or load the study in its journal file (written at once), or through
    ``journal`` (written at its flushes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    storage = JournalStorage(journal if journal is not None else JournalFileBackend(str(path)))
    directions = [direction for _, direction in OBJECTIVES[setup.spec.objective]]
    return optuna.create_study(storage=storage, study_name=setup.study_name, sampler=_sampler(setup, seed),
                               directions=directions, load_if_exists=True)


def _tensor_choices(space: LayoutSpace) -> Dict[str, tuple]:
    """The ``tensor`` parameter's values: TP, and SP where it is a layout of its own
    (``LayoutSpace.sequence_parallel_choices``), e.g. ``tp4`` and ``tp4 sp``."""
    return {f"tp{tp}" + (" sp" if sp else ""): (tp, sp) for tp in space.tp
            for sp in space.sequence_parallel_choices(tp)}


def _pipeline_choices(space: LayoutSpace) -> Dict[str, tuple]:
    """The ``pipeline`` parameter's values: ``1f1b``, or ``interleaved:V`` per virtual-stage count."""
    return {name if v == 1 else f"{name}:{v}": (name, v)
            for name, v in ((decode("schedule", [c])[0], v) for c, v in space.schedule_choices())}


def suggest_layout(trial: optuna.trial.BaseTrial, space: LayoutSpace) -> Dict[str, Any]:
    """A layout from the trial's parameters. TP with SP (``tensor``) and the schedule with
    its virtual stages (``pipeline``) are one parameter each, so no parameter depends on
    another's value: the multivariate TPE models them all together, and SP at TP = 1 is
    one choice, not two."""
    tensor, pipeline = _tensor_choices(space), _pipeline_choices(space)
    tp, sp = tensor[trial.suggest_categorical("tensor", list(tensor))]
    pp = trial.suggest_categorical("pp", space.pp)
    micro_batch = trial.suggest_categorical("micro_batch", space.micro_batch)
    schedule, stages = pipeline[trial.suggest_categorical("pipeline", list(pipeline))]
    return {"tp": tp, "pp": pp, "micro_batch": micro_batch, "schedule": schedule, "virtual_stages": stages,
            "zero": trial.suggest_categorical("zero", space.zero), "sequence_parallel": sp,
            "recompute": trial.suggest_categorical("recompute", space.recompute)}


def layout_params(layout: Dict[str, Any], space: LayoutSpace) -> Dict[str, Any]:
    """The trial parameters ``suggest_layout`` turns into ``layout`` (a mapping of names)."""
    sp = bool(layout["sequence_parallel"]) and int(layout["tp"]) > 1
    stages = int(layout["virtual_stages"]) if layout["schedule"] == "interleaved" else 1
    tensor = next(k for k, v in _tensor_choices(space).items() if v == (int(layout["tp"]), sp))
    pipeline = next(k for k, v in _pipeline_choices(space).items() if v == (layout["schedule"], stages))
    return {"tensor": tensor, "pp": int(layout["pp"]), "micro_batch": int(layout["micro_batch"]),
            "pipeline": pipeline, "zero": layout["zero"], "recompute": layout["recompute"]}


def _warm_start(study: optuna.Study, setup: SearchSetup) -> int:
    """Ask first for the ``batch`` best layouts of the space by the step model, in a fresh
    single-objective study over a space of at most ``WARM_START_LIMIT`` layouts; returns how many."""
    from sweeps.search.results import exhaustive_frame

    spec = setup.spec
    if study.trials or len(OBJECTIVES[spec.objective]) > 1 or spec.space.size > WARM_START_LIMIT:
        return 0
    best = exhaustive_frame(setup).head(min(spec.batch, spec.trials))
    for _, row in best.iterrows():
        study.enqueue_trial(layout_params(row, spec.space))
    study.set_user_attr(WARM_START_ATTR, len(best))
    return len(best)


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
    keys = {t.number: trial_key(study.study_name, t.number, suggest_layout(t, setup.spec.space)) for t in running}
    stored = _stored_rows(lake, list(keys.values()))
    told = reasked = 0
    for trial in running:
        row = stored.get(keys[trial.number])
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
               warm_start: bool = True, on_batch: Optional[Callable[[optuna.Study, int], bool]] = None
               ) -> SearchReport:
    """Run the study until it has ``setup.spec.trials`` completed trials.

    ``on_batch(study, completed)`` is called after each batch; returning True ends the
    run early (the study keeps what it has). Bad input must have been refused before
    (``sweeps.config.check_space``); this writes to the lake. ``UserError`` if another
    process is running the same study.
    """
    started = time.perf_counter()
    lake.ensure_writable()
    path = study_path(lake, setup, storage)
    with driver_lock(path):
        journal = BatchedJournal(path)
        try:
            study = open_study(setup, path, seed=setup.spec.seed, journal=journal)
            told, reasked = _reconcile(study, lake, setup)
            before = _completed(study)
            report = SearchReport(setup.study_name, str(path), setup.spec.trials, before, 0, told, reasked,
                                  "nothing to run: the study has its trials", 0.0)
            if warm_start:
                _warm_start(study, setup)
            report.warm_start = int(study.user_attrs.get(WARM_START_ATTR, 0))
            if before < setup.spec.trials:
                with _evaluation(setup, report, address=address, num_cpus=num_cpus, embedded_ray=embedded_ray,
                                 evaluator=evaluator) as evaluate:
                    report.completed_now = _trials(setup, lake, study, journal, evaluate, report, on_batch) - before
        finally:
            journal.flush()
    report.elapsed_s = time.perf_counter() - started
    return report


def _trials(setup: SearchSetup, lake: Lake, study: optuna.Study, journal: BatchedJournal, evaluate: Evaluator,
            report: SearchReport, on_batch: Optional[Callable[[optuna.Study, int], bool]]) -> int:
    """Ask, evaluate, commit and tell batch by batch until the budget is met (or ``on_batch``
    ends it, or a trial fails); returns the completed trials."""
    spec = setup.spec
    partition = {"sweep": setup.study_name, "hardware": setup.hardware.name}
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
                for row in outcome.results.select(["key", "status", *_objective_columns(spec.objective)]).to_pylist():
                    study.tell(by_key.pop(row["key"]), _values(row, spec.objective))
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
