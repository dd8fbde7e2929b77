"""Progress of every sweep a lake knows, from its manifests and rows (``commscale status``)."""

from __future__ import annotations

from typing import List, Optional

import pandas as pd

from sweeps.lake import Lake
from sweeps.lake.kinds import FAILURE
from sweeps.lake.views import connect

__all__ = ["sweep_status"]


def sweep_status(lake: Lake, sweep: Optional[str] = None) -> pd.DataFrame:
    """One row per (sweep, hardware): planned, done (ok, infeasible, oom), failed, pending.

    ``failed`` counts points whose latest attempt failed and that have no result yet;
    ``pending`` is what a resumed run would still run (failed points included).
    """
    lake.ensure_readable()
    manifests = lake.sweeps()
    con = connect(lake)
    kinds = set(lake.kinds())
    rows: List[dict] = []
    try:
        for (name, hardware), manifest in sorted(manifests.items()):
            if sweep is not None and name != sweep:
                continue
            kind = manifest["kind"]
            counts = {}
            if kind in kinds:
                counts = dict(con.execute(
                    f'SELECT status, count(*) FROM "{kind}" WHERE sweep = ? AND hardware = ? GROUP BY status',
                    [name, hardware]).fetchall())
            failed = 0
            if FAILURE in kinds:
                unresolved, params = "", [name, hardware]
                if kind in kinds:  # a point that failed once and then succeeded is done
                    unresolved = f'AND point_key NOT IN (SELECT key FROM "{kind}" WHERE sweep = ? AND hardware = ?)'
                    params += [name, hardware]
                (failed,) = con.execute(
                    f'SELECT count(DISTINCT point_key) FROM "{FAILURE}" WHERE sweep = ? AND hardware = ? {unresolved}',
                    params).fetchall()[0]
            done = sum(counts.values())
            rows.append({"sweep": name, "hardware": hardware, "kind": kind, "planned": manifest["planned"],
                         "done": done, "ok": counts.get("ok", 0), "infeasible": counts.get("infeasible", 0),
                         "oom": counts.get("oom", 0), "failed": failed,
                         "pending": max(0, manifest["planned"] - done)})
    finally:
        con.close()
    return pd.DataFrame(rows, columns=["sweep", "hardware", "kind", "planned", "done", "ok", "infeasible", "oom",
                                       "failed", "pending"])
