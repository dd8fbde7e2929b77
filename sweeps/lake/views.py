"""SQL over the lake through DuckDB: one view per result kind.

``projection`` (and every other kind present) is a view over the kind's committed
Parquet files with the hive partitions (kind, sweep, hardware) as columns, so a user
writes ``SELECT ... FROM projection WHERE sweep = 'table2'`` without knowing the layout.
Every kind this commscale knows (``kinds.SCHEMAS``) has a view even before its first row
lands: an empty one with the kind's columns and the partition columns.
"""

from __future__ import annotations

from typing import List, Optional

import duckdb
import pandas as pd
import pyarrow as pa

from sweeps.errors import LakeError, QueryError
from sweeps.lake.kinds import SCHEMAS
from sweeps.lake.store import LakeStore

__all__ = ["connect", "query", "view_frame", "read_rows", "PARTITION_COLUMNS"]

#: The hive partition columns every view carries.
PARTITION_COLUMNS = ("kind", "sweep", "hardware")


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(lake: LakeStore) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with a view per result kind of ``lake``."""
    con = duckdb.connect(database=":memory:")
    for kind in lake.kinds():
        _check_schema(lake, kind)
        files = lake.files(kind)
        if not files:
            continue
        if lake.local_root is not None:
            file_list = ", ".join(_sql_string(f) for f in files)
            con.execute(
                f'CREATE VIEW "{kind}" AS SELECT * FROM read_parquet([{file_list}], '
                "hive_partitioning = true, union_by_name = true)"
            )
        else:
            con.register(f"{kind}_dataset", lake.dataset(kind))
            con.execute(f'CREATE VIEW "{kind}" AS SELECT * FROM "{kind}_dataset"')
    _empty_views(con, exclude=set(lake.kinds()))
    return con


def _empty_views(con: duckdb.DuckDBPyConnection, exclude: set) -> None:
    """An empty view for every known kind without committed files, so a query over a kind
    that has no rows yet returns no rows rather than failing."""
    for kind, (schema, _version) in SCHEMAS.items():
        if kind in exclude:
            continue
        for column in PARTITION_COLUMNS:
            if column not in schema.names:
                schema = schema.append(pa.field(column, pa.string()))
        con.register(f"{kind}_empty", schema.empty_table())
        con.execute(f'CREATE VIEW "{kind}" AS SELECT * FROM "{kind}_empty"')


def _check_schema(lake: LakeStore, kind: str) -> None:
    """Refuse rows of a schema version this commscale does not read, saying what to do."""
    if kind not in SCHEMAS:
        return
    expected = SCHEMAS[kind][1]
    found = lake.schema_versions(kind) - {expected}
    if found:
        raise LakeError(
            f"lake {lake} holds {kind} rows of schema version {sorted(found)}, this commscale reads version "
            f"{expected}: run their sweeps again with --restart (or read them with the commscale that wrote them)"
        )


def query(lake: LakeStore, statement: str) -> pa.Table:
    """Run one SQL statement over the lake; returns an Arrow table.

    Raises ``QueryError`` (naming the statement) when DuckDB rejects it.
    """
    lake.ensure_readable()
    con = connect(lake)
    try:
        result = con.sql(statement)
        if result is None:
            raise QueryError(statement, "the statement returns no rows (only queries are allowed)")
        return result.to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(statement, str(exc).splitlines()[0]) from None
    finally:
        con.close()


def view_frame(con: duckdb.DuckDBPyConnection, kind: str, columns: Optional[List[str]] = None
               ) -> Optional[pd.DataFrame]:
    """Every row of the view ``kind`` on an open ``connect`` connection (only the
    ``columns`` it has, if given); None when there is no such view."""
    if not con.execute("SELECT 1 FROM duckdb_views() WHERE view_name = ?", [kind]).fetchall():
        return None
    if columns:
        present = {c for (c, *_rest) in con.sql(f'DESCRIBE "{kind}"').fetchall()}
        chosen = [c for c in columns if c in present]
        wanted = ", ".join(f'"{c}"' for c in chosen) if chosen else "*"
    else:
        wanted = "*"
    return con.sql(f'SELECT {wanted} FROM "{kind}"').df()


def read_rows(lake: LakeStore, kind: str, keys: pa.Table, *, status: Optional[str] = "ok") -> pd.DataFrame:
    """Rows of ``kind`` with the keys of ``keys`` (a table with a ``key`` column), read back
    through DuckDB; only those of ``status``, or every status with ``status=None``."""
    con = connect(lake)
    try:
        con.register("wanted", keys.select(["key"]))
        if status is None:
            return con.sql(f'SELECT r.* FROM "{kind}" r JOIN wanted USING (key)').df()
        return con.sql(f'SELECT r.* FROM "{kind}" r JOIN wanted USING (key) WHERE r.status = ?', params=[status]).df()
    finally:
        con.close()
