"""SQL over the lake through DuckDB: one view per result kind.

``projection`` (and every other kind present) is a view over the kind's committed
Parquet files with the hive partitions (kind, sweep, hardware) and the sweep version as
columns, so a user writes ``SELECT ... FROM projection WHERE sweep = 'table2'`` without
knowing the layout. ``projection`` holds the newest version of each sweep on each
hardware; ``projection_all_versions`` holds every version.
Every kind this commscale knows (``kinds.SCHEMAS``) has a view even before its first row
lands: an empty one with the kind's columns and the partition columns.
"""

from __future__ import annotations

from typing import List, Optional

import duckdb
import pandas as pd
import pyarrow as pa

from sweeps.errors import LakeError, QueryError
from sweeps.lake.kinds import SCHEMAS, SHARED_KINDS
from sweeps.lake.store import LakeStore

__all__ = ["connect", "query", "view_frame", "read_rows", "PARTITION_COLUMNS", "VERSION_COLUMN", "ALL_VERSIONS",
           "READ_STATEMENTS"]

#: The hive partition columns every view carries.
PARTITION_COLUMNS = ("kind", "sweep", "hardware")
#: The column naming the sweep version of each row (``sweeps.lake.versions``).
VERSION_COLUMN = "sweep_version"
#: The suffix of the view of a kind that holds every version's rows.
ALL_VERSIONS = "_all_versions"


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(lake: LakeStore, *, check: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection with two views per result kind of ``lake``:
    ``KIND_all_versions``, every committed row with its ``sweep_version``, and ``KIND``, the
    rows of the newest version of each sweep on each hardware (every row, for kinds whose
    rows serve every version: ``SHARED_KINDS``). Every data file is checked against its
    commit first (``LakeStore.checked_files``; ``check=False`` only to measure what the
    check costs)."""
    con = duckdb.connect(database=":memory:")
    for kind in lake.kinds():
        _check_schema(lake, kind)
        if check:
            lake.checked_files(kind)
        groups = lake.version_groups(kind, shared=kind in SHARED_KINDS)
        if not groups:
            continue
        selects = {group: _version_select(con, lake, kind, i, group[0], files)
                   for i, (group, files) in enumerate(sorted(groups.items()))}
        every = " UNION ALL BY NAME ".join(selects.values())
        current = [sql for (_version, is_current), sql in selects.items() if is_current]
        con.execute(f'CREATE VIEW "{kind}{ALL_VERSIONS}" AS {every}')
        con.execute(f'CREATE VIEW "{kind}" AS ' + (" UNION ALL BY NAME ".join(current) if current
                                                   else f'SELECT * FROM "{kind}{ALL_VERSIONS}" WHERE false'))
    _empty_views(con, exclude=set(lake.kinds()))
    return con


def _version_select(con: duckdb.DuckDBPyConnection, lake: LakeStore, kind: str, index: int, version: str,
                    files: List[str]) -> str:
    """``SELECT`` of the rows of ``files`` (one version of ``kind``) with their version."""
    if lake.local_root is not None:
        source = (f"read_parquet([{', '.join(_sql_string(f) for f in files)}], hive_partitioning = true, "
                  "union_by_name = true)")
    else:
        con.register(f"{kind}_dataset_{index}", lake.dataset(kind, files))
        source = f'"{kind}_dataset_{index}"'
    return f"(SELECT *, {_sql_string(version)} AS {VERSION_COLUMN} FROM {source})"


def _empty_views(con: duckdb.DuckDBPyConnection, exclude: set) -> None:
    """Empty views (``KIND`` and ``KIND_all_versions``) for every known kind without
    committed files, so a query over a kind that has no rows yet returns no rows rather
    than failing."""
    for kind, (schema, _version) in SCHEMAS.items():
        if kind in exclude:
            continue
        for column in (*PARTITION_COLUMNS, VERSION_COLUMN):
            if column not in schema.names:
                schema = schema.append(pa.field(column, pa.string()))
        con.register(f"{kind}_empty", schema.empty_table())
        con.execute(f'CREATE VIEW "{kind}" AS SELECT * FROM "{kind}_empty"')
        con.execute(f'CREATE VIEW "{kind}{ALL_VERSIONS}" AS SELECT * FROM "{kind}_empty"')


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


#: The statements ``query`` runs: reads only.
READ_STATEMENTS = ("SELECT", "EXPLAIN")


def _read_only(con: duckdb.DuckDBPyConnection, files: List[str]) -> None:
    """From here on the connection reads the lake's committed files and nothing else: no
    other file, no extension, no setting changed back."""
    if files:
        con.execute("SET allowed_paths = [" + ", ".join(_sql_string(f) for f in files) + "]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")


def query(lake: LakeStore, statement: str, *, check: bool = True) -> pa.Table:
    """Run one read statement (``SELECT`` or ``EXPLAIN``, including DESCRIBE, SHOW and
    SUMMARIZE) over the lake; returns an Arrow table. The connection may read the lake's
    committed files only: no COPY, ATTACH, INSTALL, DROP or other write, and no other file.

    Raises ``QueryError`` (naming the statement) when it is not one read statement or
    DuckDB rejects it.
    """
    lake.ensure_readable()
    con = connect(lake, check=check)
    try:
        _check_read_statement(con, statement)
        _read_only(con, [f for kind in lake.kinds() for f in lake.files(kind)] if lake.local_root else [])
        result = con.sql(statement)
        if result is None:
            raise QueryError(statement, "the statement returns no rows (only queries are allowed)")
        return result.to_arrow_table()
    except duckdb.Error as exc:
        raise QueryError(statement, str(exc).splitlines()[0]) from None
    finally:
        con.close()


def _check_read_statement(con: duckdb.DuckDBPyConnection, statement: str) -> None:
    try:
        statements = con.extract_statements(statement)
    except duckdb.Error as exc:
        raise QueryError(statement, str(exc).splitlines()[0]) from None
    if len(statements) != 1:
        raise QueryError(statement, f"give exactly one statement, not {len(statements)}")
    kind = statements[0].type.name
    if kind not in READ_STATEMENTS:
        raise QueryError(statement, f"only queries are allowed (SELECT, EXPLAIN, DESCRIBE, SHOW, SUMMARIZE), "
                                    f"not {kind}")


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
