"""SQL over the lake through DuckDB: one view per result kind.

``projection`` (and every other kind present) is a view over the kind's committed
Parquet files with the hive partitions (kind, sweep, hardware) as columns, so a user
writes ``SELECT ... FROM projection WHERE sweep = 'table2'`` without knowing the layout.
"""

from __future__ import annotations

import duckdb
import pyarrow as pa

from sweeps.errors import LakeError, QueryError
from sweeps.kinds import SCHEMAS
from sweeps.lake import Lake

__all__ = ["connect", "query"]


def _sql_string(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def connect(lake: Lake) -> duckdb.DuckDBPyConnection:
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
    return con


def _check_schema(lake: Lake, kind: str) -> None:
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


def query(lake: Lake, statement: str) -> pa.Table:
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
