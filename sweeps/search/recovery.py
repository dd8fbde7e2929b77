"""A study's journal and its rows in the lake, made one record of one sequence of trials
before a run asks for anything (``settle``).

Contract:

- **One sequence of trials.** Every row the lake holds of a study is the row of a trial of
  its journal (key: study, trial number and layout, ``sweeps.jobs.search.trial_key``). A
  lake holding rows its journal does not know (a journal older than the lake, or another
  journal of the study) is refused (``UserError``; ``--repair-journal`` rebuilds it), so a
  run never numbers new trials like rows already there.
- **A lost journal is rebuilt.** A study with no trials (its journal missing, empty, set
  aside by ``--repair-journal``, or another file) whose lake holds rows is told those rows
  again first: each row becomes a completed trial of its own number, with its layout's
  parameters and the values it was told; a number without a row (a trial that failed)
  becomes a failed trial, so the numbers, and the keys, stay what they were.
- **Rows are restored.** A completed trial whose row the lake lost (``lake verify`` set it
  aside) has its row recomputed from its parameters by the step model (deterministic: the
  same values) and committed under its own key and trial number, in this process.
- **Trials a dead driver left running** are settled: one whose row reached the lake is
  told its stored values; the others are marked FAIL, and their layouts enqueued again
  (asked first) where the journal holds them whole.
- A trial whose layout the journal does not hold whole, or holds outside the space, is a
  ``UserError`` naming the journal and the trial (``sweeps.search.params.trial_layout``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Set, Tuple

import optuna
import pyarrow.compute as pc
from optuna.trial import TrialState, create_trial

from sweeps.config import SearchSetup
from sweeps.errors import UserError
from sweeps.jobs.search import trial_key, trial_partition, trial_points, trial_workload
from sweeps.lake import Lake
from sweeps.lake.kinds import SEARCH
from sweeps.search.journal import REPAIR_HINT
from sweeps.search.params import layout_params, trial_attrs, trial_distributions, trial_layout, trial_values
from tasks.model.search.rows import SEARCH_SCHEMA_VERSION
from tasks.outcomes import run_chunk

__all__ = ["Settlement", "settle"]


@dataclass
class Settlement:
    """What ``settle`` did: trials left running told from the lake, and asked again; rows
    recomputed; the rows a study with no trials was rebuilt from (None: not rebuilt); and
    the failures of recomputing rows (bugs)."""

    told_from_lake: int = 0
    reasked: int = 0
    restored: int = 0
    rebuilt_from: Optional[int] = None
    failures: List[Dict[str, Any]] = field(default_factory=list)


def settle(study: optuna.Study, setup: SearchSetup, lake: Lake, journal: str) -> Settlement:
    """Make the study (in journal file ``journal``) and its lake rows one record: rebuild a
    study with no trials from the lake's rows, refuse rows the journal does not know, settle
    trials left running, and recompute rows the lake lost."""
    settlement = Settlement()
    if not study.trials:
        rows = _study_rows(lake, setup)
        if rows:
            settlement.rebuilt_from = _rebuild(study, setup, rows)
    space, name = setup.spec.space, setup.study_name
    trials = study.get_trials(deepcopy=False)
    layouts = {t.number: layout for t in trials if (layout := trial_layout(t, space, journal)) is not None}
    keys = {number: trial_key(name, number, layout) for number, layout in layouts.items()}
    stored = _lake_keys(lake, setup)
    unknown = stored - set(keys.values())
    if unknown:
        raise UserError(f"journal {journal} does not know {len(unknown)} rows the lake holds of study {name} "
                        f"(a journal older than the lake, or another journal of the study); {REPAIR_HINT}")
    _settle_running(study, setup, lake, [t for t in trials if t.state == TrialState.RUNNING], keys, settlement)
    lost = [(t.number, layouts[t.number]) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if keys[t.number] not in stored]
    settlement.restored = _restore(setup, lake, lost, settlement.failures)
    return settlement


def _lake_keys(lake: Lake, setup: SearchSetup) -> Set[str]:
    """The keys of the study's rows in the lake."""
    if SEARCH not in lake.kinds():
        return set()
    return lake.keys(SEARCH, trial_partition(setup))


def _study_rows(lake: Lake, setup: SearchSetup) -> List[Dict[str, Any]]:
    """The study's rows in the lake, in trial order."""
    if SEARCH not in lake.kinds() or not lake.files(SEARCH, trial_partition(setup)):
        return []
    table = lake.dataset(SEARCH).to_table(filter=pc.field("study") == setup.study_name)
    return sorted(table.to_pylist(), key=lambda row: row["trial"])


def _rebuild(study: optuna.Study, setup: SearchSetup, rows: List[Dict[str, Any]]) -> int:
    """Tell ``rows`` (one per trial number, in order) to the study with no trials; returns
    how many. A number without a row becomes a failed trial."""
    space, name = setup.spec.space, setup.study_name
    by_number: Dict[int, Dict[str, Any]] = {}
    for row in rows:
        if row["trial"] in by_number:
            raise UserError(f"the lake holds two rows of trial {row['trial']} of study {name} (two sequences of trials "
                            "were mixed in it): they cannot be told again as one study")
        by_number[row["trial"]] = row
    distributions = trial_distributions(space)
    trials = []
    for number in range(max(by_number) + 1):
        row = by_number.get(number)
        if row is None:
            trials.append(create_trial(state=TrialState.FAIL))
            continue
        params = layout_params(row, space)
        trial = create_trial(params=params, distributions=distributions,
                             values=trial_values(row, setup.spec.objective), user_attrs=trial_attrs(row))
        if trial_key(name, number, trial_layout(trial, space, "(rebuilt)")) != row["key"]:
            raise UserError(f"the lake's row of trial {number} of study {name} is not keyed by its trial and layout "
                            f"(key {row['key']}): it cannot be told again")
        trials.append(trial)
    study.add_trials(trials)
    return len(rows)


def _settle_running(study: optuna.Study, setup: SearchSetup, lake: Lake, running: List[optuna.trial.FrozenTrial],
                    keys: Dict[int, str], settlement: Settlement) -> None:
    """Tell each trial a dead driver left RUNNING its stored row's values, or mark it FAIL
    and ask its layout again (where the journal holds it whole)."""
    wanted = [keys[t.number] for t in running if t.number in keys]
    stored = {}
    if wanted and SEARCH in lake.kinds():
        table = lake.dataset(SEARCH).to_table(filter=pc.field("key").isin(wanted))
        stored = {row["key"]: row for row in table.to_pylist()}
    for trial in running:
        row = stored.get(keys.get(trial.number, ""))
        if row is not None:
            running_trial = optuna.trial.Trial(study, trial._trial_id)
            for name, value in trial_attrs(row).items():
                running_trial.set_user_attr(name, value)
            study.tell(trial.number, trial_values(row, setup.spec.objective))
            settlement.told_from_lake += 1
            continue
        study.tell(trial.number, state=TrialState.FAIL)
        if trial.number in keys:
            study.enqueue_trial(trial.params, skip_if_exists=False)
            settlement.reasked += 1


def _restore(setup: SearchSetup, lake: Lake, lost: List[Tuple[int, Dict[str, Any]]],
             failures: List[Dict[str, Any]]) -> int:
    """Recompute the rows of ``lost`` (trial number, layout) in this process and commit
    them; returns the rows committed, and adds what failed to ``failures``."""
    if not lost:
        return 0
    work = trial_workload(setup)
    outcome = run_chunk(work.body, trial_points(setup, setup.study_name, lost), work.context, work.schema)
    failures.extend(outcome.failures)
    if outcome.results is None or not outcome.results.num_rows:
        return 0
    return lake.commit(SEARCH, trial_partition(setup), outcome.results,
                       schema_version=SEARCH_SCHEMA_VERSION).rows_written
