"""The trials of a layout search as work: one ``search`` row per trial, evaluated by the
whole-step model on any worker (``tasks.model.search.rows.evaluate_trials``)."""

from __future__ import annotations

from typing import Any, Dict, Sequence, Tuple

import pyarrow as pa

from sweeps.config import SearchSetup
from sweeps.jobs.work import Resources, Workload, key_of
from sweeps.lake.kinds import SEARCH
from tasks.model.search.rows import SEARCH_SCHEMA, SEARCH_SCHEMA_VERSION, TRIAL_FIELDS, SearchContext, evaluate_trials

__all__ = ["trial_key", "trial_partition", "trial_points", "trial_workload"]


def trial_key(study: str, number: int, layout: Dict[str, Any]) -> str:
    """The lake key of a trial's row: the study, the trial's number and the layout it costs.
    Which layout a number means lives in the study's journal; two journals of one study
    (``--storage``) number other layouts alike, and a row keyed by the number alone would
    serve one journal's layout as the other's trial."""
    return key_of([SEARCH, study, number, dict(layout)])  # the key's canonical JSON sorts the names


def trial_partition(setup: SearchSetup) -> Dict[str, str]:
    """The lake partition of a study's rows: the study's name and its hardware."""
    return {"sweep": setup.study_name, "hardware": setup.hardware.name}


def trial_points(setup: SearchSetup, study: str, trials: Sequence[Tuple[int, Dict[str, Any]]]) -> pa.Table:
    """The points of ``trials`` ((trial number, layout) pairs; DP is derived by the model)."""
    spec = setup.spec
    rows = [{"key": trial_key(study, number, layout), "study": study, "model": setup.model.name,
             "hardware": setup.hardware.name, "devices": spec.devices, "global_batch": spec.global_batch,
             "trial": number, "dp": 0, **layout} for number, layout in trials]
    return pa.Table.from_pylist(rows, schema=TRIAL_FIELDS)


def trial_workload(setup: SearchSetup) -> Workload:
    """The work of a study's trials: one CPU each, a minute at most per trial."""
    context = SearchContext(setup.step_context, setup.spec.objective, tuple(setup.record().items()))
    return Workload(kind=SEARCH, body=evaluate_trials, context=context,
                    schema=SEARCH_SCHEMA, schema_version=SEARCH_SCHEMA_VERSION, resources=Resources(),
                    point_timeout_s=60.0)
