"""SQL over the lake through DuckDB: one view per result kind.

``projection`` (and every other kind present) is a view over the kind's committed
Parquet files with the hive partitions (kind, sweep, hardware) and the sweep version as
columns, so a user writes ``SELECT ... FROM projection WHERE sweep = 'table2'`` without
knowing the layout. ``projection`` holds the newest version of each sweep on each
hardware; ``projection_all_versions`` holds every version.
Every kind this commscale knows (``kinds.SCHEMAS``) has a view even before its first row
lands: an empty one with the kind's columns and the partition columns.

A lake may come from anyone, so the connection is read-only by construction: it is opened
with no file access at all (``LOCKED``), before any view exists, and the views read Arrow
datasets over the committed files, which pyarrow opens. No statement run on it (COPY,
ATTACH, INSTALL, EXPLAIN ANALYZE of any of them) can read or write a file. A name read
from the lake enters SQL only if it matches its pattern (``sweeps.lake.names``), and only
quoted; each statement built from lake content is run only if it parses as one statement.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds

from sweeps.errors import LakeError, QueryError
from sweeps.lake.kinds import SCHEMAS, SHARED_KINDS
from sweeps.lake.names import KIND, SWEEP_VERSION, name_fault, sql_identifier, sql_string
from sweeps.lake.store import LakeStore
from sweeps.lake.versions import VERSION_COLUMN

__all__ = ["connect", "query", "view_frame", "read_rows", "PARTITION_COLUMNS", "VERSION_COLUMN", "ALL_VERSIONS",
           "READ_STATEMENTS", "LOCKED"]

#: The hive partition columns every view carries.
PARTITION_COLUMNS = ("kind", "sweep", "hardware")
#: The suffix of the view of a kind that holds every version's rows.
ALL_VERSIONS = "_all_versions"

#: The settings every connection over the lake is opened with, before any view is made: no
#: file access (no path allowed either), no extension installed or loaded, no spilling to
#: a temporary folder, no Python variable read as a table, and none of this changed later.
LOCKED = {"enable_external_access": False, "temp_directory": "", "autoinstall_known_extensions": False,
          "autoload_known_extensions": False, "allow_community_extensions": False,
          "python_enable_replacements": False, "lock_configuration": True}


def connect(lake: LakeStore, *, check: bool = True) -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection (``LOCKED``: it can read and write no file) with two
    views per result kind of ``lake``: ``KIND_all_versions``, every committed row with its
    ``sweep_version``, and ``KIND``, the rows of the newest version of each sweep on each
    hardware (every row, for kinds whose rows serve every version: ``SHARED_KINDS``). Every
    data file is checked against its commit first (``LakeStore.checked_files``; ``check=False``
    only to measure what the check costs). ``LakeError`` for a kind or a sweep version that
    is not a plain name (``sweeps.lake.names``)."""
    con = duckdb.connect(database=":memory:", config=LOCKED)
    try:
        kinds = lake.kinds()
        for kind in kinds:
            _check_name(lake, "kind", kind, KIND)
            _check_schema(lake, kind)
            if check:
                lake.checked_files(kind)
            groups = lake.version_groups(kind, shared=kind in SHARED_KINDS)
            if groups:
                _kind_views(con, lake, kind, groups)
        _empty_views(con, exclude=set(kinds))
    except BaseException:
        con.close()
        raise
    return con


def _check_name(lake: LakeStore, what: str, value: str, pattern) -> None:
    fault = name_fault(what, value, pattern)
    if fault is not None:
        raise LakeError(f"lake {lake}: a commit-log entry's {fault}; run `commscale lake verify` to find it")


def _kind_views(con: duckdb.DuckDBPyConnection, lake: LakeStore, kind: str,
                groups: Dict[Tuple[str, bool], List[str]]) -> None:
    """``KIND_all_versions`` and ``KIND`` over the files of ``kind``, one Arrow dataset per
    (sweep version, current) group, the version a column of its rows."""
    selects = {}
    for index, ((version, current), files) in enumerate(sorted(groups.items())):
        _check_name(lake, "sweep version", version, SWEEP_VERSION)
        source = f"_{kind}_files_{index}"
        dataset = _dataset(lake, kind, files)
        con.register(source, dataset)
        stored = f" EXCLUDE ({sql_identifier(VERSION_COLUMN)})" if VERSION_COLUMN in dataset.schema.names else ""
        selects[(version, current)] = (f"(SELECT *{stored}, {sql_string(version)} AS {sql_identifier(VERSION_COLUMN)} "
                                       f"FROM {sql_identifier(source)})")
    current = [sql for (_version, is_current), sql in selects.items() if is_current]
    _create_view(con, kind + ALL_VERSIONS, " UNION ALL BY NAME ".join(selects.values()))
    _create_view(con, kind, " UNION ALL BY NAME ".join(current) if current
                 else f"SELECT * FROM {sql_identifier(kind + ALL_VERSIONS)} WHERE false")


def _dataset(lake: LakeStore, kind: str, files: Sequence[str]) -> ds.Dataset:
    """``files`` (absolute, of ``kind``) as one Arrow dataset with the columns DuckDB's hive
    reader gives them: every file's columns (types unified across the files), then each
    partition of their paths (kind, sweep, hardware, ...) that no file holds, in name order,
    as text."""
    root = lake.root.rstrip("/") + "/"
    keys = sorted({part.split("=", 1)[0] for path in files for part in path[len(root):].split("/")[:-1]})
    partitioning = ds.partitioning(pa.schema([(key, pa.string()) for key in keys]), flavor="hive")
    options = ds.FileSystemFactoryOptions(partition_base_dir=lake.root, partitioning=partitioning)
    try:
        factory = ds.FileSystemDatasetFactory(lake.fs, list(files), ds.ParquetFileFormat(), options)
        return factory.finish(factory.inspect(promote_options="permissive", fragments=None))
    except (OSError, pa.ArrowException) as exc:
        raise LakeError(f"lake {lake}: the {kind} files cannot be read together: {str(exc).splitlines()[0]}; "
                        "run `commscale lake verify`") from None


def _create_view(con: duckdb.DuckDBPyConnection, name: str, select: str) -> None:
    """``CREATE VIEW name AS select``, run only when it parses as exactly one CREATE
    statement: no text of the lake can make it two."""
    sql = f"CREATE VIEW {sql_identifier(name)} AS {select}"
    statements = con.extract_statements(sql)
    if len(statements) != 1 or statements[0].type.name != "CREATE":
        raise LakeError(f"the view {name!r} would not be one statement; run `commscale lake verify`")
    con.execute(statements[0])


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
        _create_view(con, kind, f"SELECT * FROM {sql_identifier(kind + '_empty')}")
        _create_view(con, kind + ALL_VERSIONS, f"SELECT * FROM {sql_identifier(kind + '_empty')}")


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


#: The statements ``query`` runs: reads only (an EXPLAIN only of a read).
READ_STATEMENTS = ("SELECT", "EXPLAIN")


def query(lake: LakeStore, statement: str, *, check: bool = True) -> pa.Table:
    """Run one read statement (``SELECT``, or ``EXPLAIN [ANALYZE]`` of one; DESCRIBE, SHOW
    and SUMMARIZE are SELECTs) over the lake; returns an Arrow table. The connection can
    read and write no file (``connect``), so no COPY, ATTACH, INSTALL or other write runs
    whatever wraps it, and no file but the lake's committed files is read.

    Raises ``QueryError`` (naming the statement) when it is not one read statement or
    DuckDB rejects it.
    """
    lake.ensure_readable()
    con = connect(lake, check=check)
    try:
        _check_read_statement(con, statement)
        result = con.sql(statement)
        if result is None:
            raise QueryError(statement, "the statement returns no rows (only queries are allowed)")
        return result.to_arrow_table()
    except duckdb.PermissionException as exc:
        raise QueryError(statement, f"{str(exc).splitlines()[0]} (a query reads the lake's views only)") from None
    except duckdb.Error as exc:
        raise QueryError(statement, str(exc).splitlines()[0]) from None
    finally:
        con.close()


def _check_read_statement(con: duckdb.DuckDBPyConnection, statement: str) -> None:
    """Refuse anything but one SELECT, or one EXPLAIN of a SELECT."""
    statements = _statements(con, statement)
    if len(statements) != 1:
        raise QueryError(statement, f"give exactly one statement, not {len(statements)}")
    kind = statements[0].type.name
    if kind == "EXPLAIN":
        wrapped = _statements(con, _explained(statements[0].query))
        kind = wrapped[0].type.name if len(wrapped) == 1 else f"{len(wrapped)} statements"
        if kind != "SELECT":
            raise QueryError(statement, f"EXPLAIN may wrap a query only (SELECT, DESCRIBE, SHOW, SUMMARIZE), "
                                        f"not {kind}")
    elif kind not in READ_STATEMENTS:
        raise QueryError(statement, f"only queries are allowed (SELECT, EXPLAIN, DESCRIBE, SHOW, SUMMARIZE), "
                                    f"not {kind}")


def _statements(con: duckdb.DuckDBPyConnection, text: str) -> list:
    try:
        return con.extract_statements(text)
    except duckdb.Error as exc:
        raise QueryError(text, str(exc).splitlines()[0]) from None


#: What may open a statement in parentheses right after EXPLAIN (else they hold options).
_STATEMENT_OPENERS = {"SELECT", "WITH", "FROM", "VALUES", "TABLE", "(", "PIVOT", "UNPIVOT", "DESCRIBE", "SHOW",
                      "SUMMARIZE"}


def _explained(text: str) -> str:
    """The statement an EXPLAIN wraps: ``text`` after EXPLAIN, its ANALYZE and its
    parenthesised options, split as DuckDB's own tokenizer splits it (comments skipped).
    Text that is no EXPLAIN gives "" (which is no statement, so it is refused)."""
    tokens = duckdb.tokenize(text)
    ends = [start for start, _kind in tokens[1:]] + [len(text)]
    words = [(start, text[start:end].strip().upper()) for (start, kind), end in zip(tokens, ends)
             if kind != duckdb.token_type.comment]
    if not words or words[0][1] != "EXPLAIN":
        return ""
    at = 1
    while at < len(words):
        word = words[at][1]
        if word in ("ANALYZE", "ANALYSE"):
            at += 1
        elif word == "(" and at + 1 < len(words) and words[at + 1][1] not in _STATEMENT_OPENERS:
            depth = 0
            while at < len(words):
                depth += {"(": 1, ")": -1}.get(words[at][1], 0)
                at += 1
                if depth == 0:
                    break
        else:
            break
    return text[words[at][0]:] if at < len(words) else ""


def view_frame(con: duckdb.DuckDBPyConnection, kind: str, columns: Optional[List[str]] = None
               ) -> Optional[pd.DataFrame]:
    """Every row of the view ``kind`` on an open ``connect`` connection (only the
    ``columns`` it has, if given); None when there is no such view."""
    if not con.execute("SELECT 1 FROM duckdb_views() WHERE view_name = ?", [kind]).fetchall():
        return None
    if columns:
        present = {c for (c, *_rest) in con.sql(f"DESCRIBE {sql_identifier(kind)}").fetchall()}
        chosen = [c for c in columns if c in present]
        wanted = ", ".join(sql_identifier(c) for c in chosen) if chosen else "*"
    else:
        wanted = "*"
    return con.sql(f"SELECT {wanted} FROM {sql_identifier(kind)}").df()


def read_rows(lake: LakeStore, kind: str, keys: pa.Table, *, status: Optional[str] = "ok") -> pd.DataFrame:
    """Rows of ``kind`` with the keys of ``keys`` (a table with a ``key`` column), read back
    through DuckDB; only those of ``status``, or every status with ``status=None``."""
    con = connect(lake)
    try:
        con.register("wanted", keys.select(["key"]))
        rows = f"SELECT r.* FROM {sql_identifier(kind)} r JOIN wanted USING (key)"
        if status is None:
            return con.sql(rows).df()
        return con.sql(rows + " WHERE r.status = ?", params=[status]).df()
    finally:
        con.close()
