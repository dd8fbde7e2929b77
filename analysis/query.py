"""Reading the lake as pandas frames: SQL through DuckDB's views (``sweeps.lake.views``),
one view per result kind with the hive partitions (kind, sweep, hardware) as columns.

From Python::

    from analysis.query import frame, kind_frame
    from sweeps.lake import Lake

    lake = Lake("lake")
    top = frame(lake, "SELECT h, sl, tp, serialized_fraction FROM projection WHERE flop_vs_bw = 1")
    rows = kind_frame(lake, "projection")   # every row of a kind; None if the lake has no such view
"""

from __future__ import annotations

from typing import List, Optional

import pandas as pd

from sweeps.lake import Lake
from sweeps.lake.views import connect, query, view_frame

__all__ = ["query", "frame", "kind_frame"]


def frame(lake: Lake, statement: str) -> pd.DataFrame:
    """``query`` as a pandas DataFrame (columns as the statement names them)."""
    return query(lake, statement).to_pandas()


def kind_frame(lake: Lake, kind: str, columns: Optional[List[str]] = None) -> Optional[pd.DataFrame]:
    """Every row of ``kind`` (or only those of ``columns`` the kind has) as a DataFrame;
    None when the lake has no view of that kind (a kind neither known nor written)."""
    lake.ensure_readable()
    con = connect(lake)
    try:
        return view_frame(con, kind, columns)
    finally:
        con.close()
