"""Progress of every sweep a lake knows, from its manifests and rows, and every layout-search
study it holds, from its trial rows (``commscale status``)."""

from __future__ import annotations

from typing import List, Optional

import pandas as pd

from sweeps.lake import Lake
from sweeps.lake.kinds import FAILURE, SEARCH
from sweeps.lake.views import ALL_VERSIONS, VERSION_COLUMN, connect
from tasks.model.search_rows import OBJECTIVES

__all__ = ["sweep_status", "search_status", "SEARCH_STATUS_COLUMNS"]

#: The columns of ``search_status``.
SEARCH_STATUS_COLUMNS = ["study", "hardware", "model", "trials", "feasible", "objective", "best"]


def sweep_status(lake: Lake, sweep: Optional[str] = None) -> pd.DataFrame:
    """One row per (sweep, hardware, version): planned, done (ok, infeasible, oom), failed,
    pending; ``newest`` marks the version the plain views serve (the one run last).

    ``failed`` counts points whose latest attempt failed and that have no result yet;
    ``pending`` is what a resumed run of that version would still run (failed points
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
                done = sum(counts.values())
                rows.append({"sweep": name, "hardware": hardware, "version": manifest["sweep_version"],
                             "newest": "yes" if manifest is versions[-1] else "", "kind": manifest["kind"],
                             "planned": manifest["planned"], "done": done, "ok": counts.get("ok", 0),
                             "infeasible": counts.get("infeasible", 0), "oom": counts.get("oom", 0),
                             "failed": _unresolved_failures(con, manifest["kind"], kinds, where),
                             "pending": max(0, manifest["planned"] - done)})
    finally:
        con.close()
    return pd.DataFrame(rows, columns=["sweep", "hardware", "version", "newest", "kind", "planned", "done", "ok",
                                       "infeasible", "oom", "failed", "pending"])


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


def search_status(lake: Lake, study: Optional[str] = None) -> pd.DataFrame:
    """One row per layout-search study in the lake (or ``study`` only): its model, trials
    (rows), feasible trials, and its best value by its objective. The objective is the
    metric column its rows' ``objective`` equals (the first objective of a Pareto study);
    ``best`` is None while no trial is feasible."""
    lake.ensure_readable()
    if SEARCH not in lake.kinds():
        return pd.DataFrame(columns=SEARCH_STATUS_COLUMNS)
    firsts = list(dict.fromkeys(objectives[0] for objectives in OBJECTIVES.values()))
    checks = ", ".join(f"bool_and(objective = {c}) FILTER (WHERE status = 'ok') AS is_{c}, "
                       f"min({c}) FILTER (WHERE status = 'ok') AS min_{c}, max({c}) FILTER (WHERE status = 'ok') "
                       f"AS max_{c}" for c, _ in firsts)
    con = connect(lake)
    try:
        frame = con.execute(f'SELECT study, hardware, first(model) AS model, count(*) AS trials, '
                            f"count(*) FILTER (WHERE status = 'ok') AS feasible, {checks} FROM \"{SEARCH}\" "
                            f"WHERE ? IS NULL OR study = ? GROUP BY study, hardware ORDER BY study, hardware",
                            [study, study]).df()
    finally:
        con.close()
    rows = []
    for _, row in frame.iterrows():
        column, direction = next(((c, d) for c, d in firsts if row[f"is_{c}"] is True), (None, None))
        best = None if column is None else row[f"{'min' if direction == 'minimize' else 'max'}_{column}"]
        rows.append({**{name: row[name] for name in SEARCH_STATUS_COLUMNS[:5]}, "objective": column, "best": best})
    return pd.DataFrame(rows, columns=SEARCH_STATUS_COLUMNS)
