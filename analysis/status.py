"""Progress of every sweep a lake knows, from its manifests and rows, and every layout-search
study it holds, from its trial rows (``commscale status``)."""

from __future__ import annotations

from typing import List, Optional, Tuple

import pandas as pd

from sweeps.lake import Lake
from sweeps.lake.kinds import FAILURE, SEARCH
from sweeps.lake.views import ALL_VERSIONS, VERSION_COLUMN, connect
from tasks.measure.stability import STATUS_UNSTABLE
from tasks.model.search.rows import OBJECTIVES
from tasks.outcomes import STATUS_INFEASIBLE, STATUS_OK, STATUS_OOM

__all__ = ["sweep_status", "search_status", "search_records", "search_tables", "record_frame", "fingerprints",
           "SWEEP_STATUS_COLUMNS", "SEARCH_STATUS_COLUMNS", "SEARCH_RECORD_COLUMNS"]

#: The columns of ``search_status``: each study's progress and best value, with the model,
#: device count and stack it costs.
SEARCH_STATUS_COLUMNS = ["study", "hardware", "model", "devices", "stack", "trials", "feasible", "objective", "best"]
#: The columns of ``search_records``: what decided each study beyond its model, devices and
#: stack: the overrides given and the fingerprints of the model, hardware and stack costed.
SEARCH_RECORD_COLUMNS = ["study", "stack", "overrides", "fingerprints"]


#: The columns of ``sweep_status``.
SWEEP_STATUS_COLUMNS = ["sweep", "hardware", "version", "newest", "kind", "planned", "done", "ok", "infeasible",
                        "oom", "unstable", "shared", "failed", "pending"]


def sweep_status(lake: Lake, sweep: Optional[str] = None) -> pd.DataFrame:
    """One row per (sweep, hardware, version): planned, done, failed, pending; ``newest``
    marks the version the plain views serve (the one run last).

    ``done`` is what a resumed run of the version would not run again, the sum of its
    parts: its own rows by status (ok, infeasible, oom, and unstable: a measurement still
    unstable after its re-measurements, which only ``--restart`` measures again), and
    ``shared``, its points stored by other versions or sweeps when it last ran (a sweep
    whose measurements serve every sweep: ROI, a search's ``--measure``; the manifest's
    ``stored_elsewhere``). ``failed`` counts points whose latest attempt failed and that
    have no result yet; ``pending`` is what a resumed run would still run (failed points
    included).
    """
    lake.ensure_readable()
    con = connect(lake)
    kinds = set(lake.kinds())
    rows: List[dict] = []
    try:
        for (name, hardware), versions in sorted(lake.sweep_versions().items()):
            if sweep is not None and name != sweep:
                continue
            for manifest in versions:
                where = (name, hardware, manifest["sweep_version"])
                counts = _status_counts(con, manifest["kind"], kinds, where)
                shared = int(manifest.get("stored_elsewhere", 0))
                done = sum(counts.values()) + shared
                rows.append({"sweep": name, "hardware": hardware, "version": manifest["sweep_version"],
                             "newest": "yes" if manifest is versions[-1] else "", "kind": manifest["kind"],
                             "planned": manifest["planned"], "done": done,
                             **{status: counts.get(status, 0) for status in _STATUSES}, "shared": shared,
                             "failed": _unresolved_failures(con, manifest["kind"], kinds, where),
                             "pending": max(0, manifest["planned"] - done)})
    finally:
        con.close()
    return pd.DataFrame(rows, columns=SWEEP_STATUS_COLUMNS)


#: The statuses a result row may have, in ``SWEEP_STATUS_COLUMNS`` order.
_STATUSES = (STATUS_OK, STATUS_INFEASIBLE, STATUS_OOM, STATUS_UNSTABLE)


_ONE_VERSION = f"sweep = ? AND hardware = ? AND {VERSION_COLUMN} = ?"


def _status_counts(con, kind: str, kinds: set, where: tuple) -> dict:
    """Rows of one version of one sweep on one hardware, by status."""
    if kind not in kinds:
        return {}
    return dict(con.execute(f'SELECT status, count(*) FROM "{kind}{ALL_VERSIONS}" WHERE {_ONE_VERSION} '
                            "GROUP BY status", list(where)).fetchall())


def _unresolved_failures(con, kind: str, kinds: set, where: tuple) -> int:
    """Points of one version whose attempts failed and that have no result yet."""
    if FAILURE not in kinds:
        return 0
    unresolved, params = "", list(where)
    if kind in kinds:  # a point that failed once and then succeeded is done
        unresolved = f'AND point_key NOT IN (SELECT key FROM "{kind}{ALL_VERSIONS}" WHERE {_ONE_VERSION})'
        params += list(where)
    return con.execute(f'SELECT count(DISTINCT point_key) FROM "{FAILURE}{ALL_VERSIONS}" WHERE {_ONE_VERSION} '
                       f"{unresolved}", params).fetchall()[0][0]


def fingerprints(record) -> str:
    """A study's fingerprints of its model, hardware and stack, each cut to 8 hex digits
    (enough to tell studies apart; the rows hold all 16): ``model/hardware/stack``."""
    return "/".join(str(record[name])[:8] for name in ("model_fp", "hardware_fp", "stack_fp"))


def _search_frame(lake: Lake, study: Optional[str]) -> Optional[pd.DataFrame]:
    """One row per study (or ``study`` only) of the lake's ``search`` rows: its hardware, its
    record (``tasks.model.search.rows.RECORD_FIELDS``, model and devices), its trials and
    feasible trials, and the least and most of each objective's column over feasible
    trials; None when the lake holds no search."""
    lake.ensure_readable()
    if SEARCH not in lake.kinds():
        return None
    columns = list(dict.fromkeys(objectives[0][0] for objectives in OBJECTIVES.values()))
    extremes = ", ".join(f"min({c}) FILTER (WHERE status = 'ok') AS min_{c}, max({c}) FILTER (WHERE status = 'ok') "
                         f"AS max_{c}" for c in columns)
    record = ", ".join(f"first({name}) AS {name}" for name in ("model", "devices", "stack", "overrides", "model_fp",
                                                                 "hardware_fp", "stack_fp", "objective_name"))
    con = connect(lake)
    try:
        return con.execute(f"SELECT study, hardware, {record}, count(*) AS trials, "
                           f"count(*) FILTER (WHERE status = 'ok') AS feasible, {extremes} FROM \"{SEARCH}\" "
                           f"WHERE ? IS NULL OR study = ? GROUP BY study, hardware ORDER BY study, hardware",
                           [study, study]).df()
    finally:
        con.close()


def search_status(lake: Lake, study: Optional[str] = None) -> pd.DataFrame:
    """One row per layout-search study in the lake (or ``study`` only): its model, devices
    and stack, its trials (rows), feasible trials, and its best value by its objective (the
    metric column of ``OBJECTIVES[objective_name]``, the first of a Pareto study's);
    ``best`` is None while no trial is feasible."""
    return search_tables(lake, study)[0]


def search_records(lake: Lake, study: Optional[str] = None) -> pd.DataFrame:
    """What decided each layout-search study (or ``study`` only) beyond ``search_status``
    (``record_frame``)."""
    return search_tables(lake, study)[1]


def search_tables(lake: Lake, study: Optional[str] = None) -> Tuple[pd.DataFrame, pd.DataFrame]:
    """``search_status`` and ``search_records`` of one read of the lake's ``search`` rows."""
    frame = _search_frame(lake, study)
    if frame is None:
        return pd.DataFrame(columns=SEARCH_STATUS_COLUMNS), pd.DataFrame(columns=SEARCH_RECORD_COLUMNS)
    rows = []
    for _, row in frame.iterrows():
        column, direction = OBJECTIVES.get(row["objective_name"], ((None, None),))[0]
        best = None if column is None else row[f"{'min' if direction == 'minimize' else 'max'}_{column}"]
        rows.append({**{name: row[name] for name in SEARCH_STATUS_COLUMNS[:7]}, "objective": column,
                     "best": None if pd.isna(best) else best})
    return pd.DataFrame(rows, columns=SEARCH_STATUS_COLUMNS), record_frame(frame)


def record_frame(studies: pd.DataFrame) -> pd.DataFrame:
    """``SEARCH_RECORD_COLUMNS`` of one row per study (a frame with its study, stack,
    overrides and fingerprint columns): the overrides "none" where none was given, the
    ``fingerprints`` cut short."""
    return pd.DataFrame({"study": studies["study"].to_numpy(), "stack": studies["stack"].to_numpy(),
                         "overrides": studies["overrides"].fillna("").replace("", "none").to_numpy(),
                         "fingerprints": [fingerprints(row) for _, row in studies.iterrows()]},
                        columns=SEARCH_RECORD_COLUMNS)
