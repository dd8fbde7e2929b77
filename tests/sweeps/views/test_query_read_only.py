"""`query` is read-only by construction: the connection user SQL runs on reads the lake's
committed files through Arrow datasets and has no file access at all, so no statement, and
no wrapper around one (EXPLAIN ANALYZE, a CTE, ``query()``), can write or read a file.

Every write attempt below is refused in one line (``QueryError``, exit status 2 from the
CLI), and nothing is created or changed: not the lake, not the reader's folder, not a
folder outside both.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from sweeps.errors import QueryError, UserError
from sweeps.lake import Lake
from sweeps.lake.views import query

WHERE = {"sweep": "s", "hardware": "h"}

#: Each write (or outside read) attempt; ``{inside}`` is a new file in a partition of the
#: lake, ``{committed}`` a committed data file, ``{outside}`` a file and ``{outdir}`` a
#: folder outside the lake, ``{db}`` a DuckDB file outside it.
ATTEMPTS = [
    # COPY, inside the lake, outside it, over a committed file, into the reader's folder
    "COPY toy TO '{outside}'",
    "COPY toy TO '{inside}' (FORMAT parquet)",
    "COPY (SELECT 'x' AS key) TO '{committed}' (FORMAT parquet, USE_TMP_FILE false)",
    "COPY (SELECT 1 AS x) TO 'pwned.csv'",
    "COPY toy TO '{outdir}' (FORMAT parquet, PARTITION_BY (sweep))",
    "COPY toy FROM '{committed}'",
    "COPY toy FROM '/etc/passwd'",
    # EXPLAIN, which ANALYZE makes run what it wraps
    "EXPLAIN ANALYZE COPY (SELECT 'x' AS key) TO '{committed}' (FORMAT parquet, USE_TMP_FILE false)",
    "EXPLAIN ANALYZE COPY toy TO '{outside}'",
    "EXPLAIN COPY toy TO '{outside}'",
    "EXPLAIN (FORMAT json) COPY toy TO '{outside}'",
    "EXPLAIN ANALYZE (FORMAT json) COPY toy TO '{outside}'",
    "EXPLAIN /* a comment */ ANALYZE -- another\n COPY toy TO '{outside}'",
    "explain analyze copy toy to '{outside}'",
    "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1 AS x",
    "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT 1 AS x",
    "EXPLAIN ANALYZE INSERT INTO toy VALUES ('x', 1.0)",
    "EXPLAIN ANALYZE ATTACH '{db}' AS other",
    "EXPLAIN ANALYZE ATTACH ':memory:' AS other",
    "EXPLAIN ANALYZE INSTALL httpfs",
    "EXPLAIN ANALYZE LOAD httpfs",
    "EXPLAIN ANALYZE EXPORT DATABASE '{outdir}'",
    "EXPLAIN ANALYZE SET enable_external_access = true",
    "EXPLAIN ANALYZE CHECKPOINT",
    "EXPLAIN ANALYZE PRAGMA version",
    "EXPLAIN ANALYZE CALL pragma_version()",
    "EXPLAIN ANALYZE DROP VIEW toy",
    "EXPLAIN ANALYZE SELECT * FROM read_csv('/etc/passwd')",
    # the catalog, databases, extensions, settings, secrets
    "ATTACH '{db}' AS other",
    "ATTACH ':memory:' AS other",
    "DETACH memory",
    "USE memory",
    "INSTALL httpfs",
    "INSTALL httpfs FROM 'http://127.0.0.1:9'",
    "LOAD httpfs",
    "LOAD '{outside}'",
    "PRAGMA version",
    "PRAGMA enable_profiling = 'json'",
    "PRAGMA profiling_output = '{outside}'",
    "CALL pragma_version()",
    "CALL enable_logging()",
    "SET enable_external_access = true",
    "SET allowed_paths = ['{outdir}']",
    "SET temp_directory = '{outdir}'",
    "SET GLOBAL threads = 1",
    "SET VARIABLE v = 1",
    "RESET enable_external_access",
    "RESET lock_configuration",
    "CHECKPOINT",
    "FORCE CHECKPOINT",
    "VACUUM",
    "ANALYZE",
    "CREATE SECRET (TYPE s3, KEY_ID 'x', SECRET 'y')",
    "CREATE PERSISTENT SECRET keep (TYPE s3, KEY_ID 'x', SECRET 'y')",
    "CREATE TABLE t AS SELECT 1 AS x",
    "CREATE TEMP TABLE t AS SELECT 1 AS x",
    "CREATE VIEW w AS SELECT 1 AS x",
    "CREATE OR REPLACE VIEW toy AS SELECT 1 AS x",
    "CREATE MACRO m() AS 1",
    "CREATE SEQUENCE q",
    "DROP VIEW toy",
    "ALTER VIEW toy RENAME TO gone",
    "INSERT INTO toy VALUES ('x', 1.0)",
    "UPDATE toy SET value = 0",
    "DELETE FROM toy",
    "PREPARE p AS COPY toy TO '{outside}'",
    "EXECUTE p",
    "PIVOT toy ON key",
    "EXPORT DATABASE '{outdir}'",
    "IMPORT DATABASE '{outdir}'",
    # reading outside the lake's views
    "SELECT * FROM read_csv('/etc/passwd')",
    "SELECT * FROM read_text('/etc/hostname')",
    "SELECT * FROM read_blob('{committed}')",
    "SELECT * FROM read_parquet('{committed}')",
    "SELECT * FROM parquet_metadata('{committed}')",
    "SELECT * FROM glob('/*')",
    "SELECT * FROM sniff_csv('/etc/passwd')",
    "SELECT * FROM duckdb_secrets()",
    "SELECT * FROM duckdb_extensions()",
    "FROM '{committed}'",
    # several statements, or one hidden behind comments
    "SELECT 1; COPY toy TO '{outside}'",
    "COPY toy TO '{outside}'; SELECT 1",
    "SELECT 1 /* ; */; COPY toy TO '{outside}'",
    "/* SELECT 1 */ COPY toy TO '{outside}'",
    "-- SELECT 1\nCOPY toy TO '{outside}'",
    "SELECT 1 -- ; COPY toy TO '{outside}'\n; COPY toy TO '{outside}'",
    # table functions and CTEs wrapping a write
    "SELECT * FROM query('COPY toy TO ''{outside}''')",
    "SELECT * FROM query('CREATE TABLE t AS SELECT 1')",
    "SELECT * FROM query_table('toy; COPY toy TO ''{outside}''')",
    "SELECT * FROM query_table(['toy', 'COPY toy TO ''{outside}'''])",
    "WITH x AS (COPY toy TO '{outside}') SELECT 1",
    "WITH x AS (INSERT INTO toy VALUES ('x', 1.0) RETURNING *) SELECT * FROM x",
    "WITH x AS (DELETE FROM toy RETURNING *) SELECT * FROM x",
    "EXPLAIN ANALYZE WITH x AS (DELETE FROM toy RETURNING *) SELECT * FROM x",
    "SELECT * FROM (EXPLAIN ANALYZE COPY toy TO '{outside}')",
    "DESCRIBE COPY toy TO '{outside}'",
    "SUMMARIZE COPY toy TO '{outside}'",
    "SELECT * FROM json_execute_serialized_sql(json_serialize_sql('COPY toy TO ''{outside}'''))",
]

#: Reads that must still run: each wraps a read the same ways the attempts wrap a write.
READS = [
    "SELECT count(*) AS n FROM toy",
    "EXPLAIN SELECT * FROM toy",
    "EXPLAIN ANALYZE SELECT * FROM toy",
    "EXPLAIN (FORMAT json) SELECT * FROM toy",
    "EXPLAIN ANALYZE (FORMAT json) SELECT * FROM toy",
    "EXPLAIN /* c */ ANALYZE -- c\n SELECT * FROM toy",
    "EXPLAIN (SELECT * FROM toy)",
    "EXPLAIN WITH x AS (SELECT 1 AS y) SELECT * FROM x",
    "explain analyze from toy",
    "/* leading comment */ SELECT 1 AS x",
    "DESCRIBE toy",
    "SHOW TABLES",
    "SUMMARIZE toy",
    "FROM toy_all_versions",
    "VALUES (1)",
    "WITH x AS (SELECT value FROM toy) SELECT sum(value) AS s FROM x",
    "SELECT * FROM query('SELECT count(*) FROM toy')",
    "SELECT * FROM query_table('toy')",
]


@pytest.fixture(scope="module")
def lake_root(tmp_path_factory) -> Path:
    """A small lake: two commits of kind ``toy`` in two partitions."""
    root = tmp_path_factory.mktemp("lake")
    lake = Lake(str(root))
    lake.commit("toy", WHERE, pa.table({"key": ["a", "b"], "value": [1.0, 2.0]}))
    lake.commit("toy", {"sweep": "t", "hardware": "h"}, pa.table({"key": ["c"], "value": [3.0]}))
    return root


def _digests(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _places(lake_root: Path, tmp_path: Path) -> dict:
    committed = sorted(lake_root.rglob("part-*.parquet"))[0]
    return {"inside": str(committed.parent / "new.parquet"), "committed": str(committed),
            "outside": str(tmp_path / "outside" / "out.csv"), "outdir": str(tmp_path / "outside" / "export"),
            "db": str(tmp_path / "outside" / "other.duckdb")}


def _watched(lake_root: Path, tmp_path: Path) -> dict:
    """Every file that a write could create or change: the lake's, the reader's folder's,
    the outside folder's, and DuckDB's own folder in the home directory."""
    home = Path.home() / ".duckdb"
    return {"lake": _digests(lake_root), "tmp": _digests(tmp_path),
            "home": sorted(str(p) for p in home.rglob("*")) if home.exists() else None}


@pytest.mark.parametrize("attempt", ATTEMPTS)
def test_every_write_attempt_is_refused_in_one_line_and_writes_nothing(lake_root, tmp_path, monkeypatch, attempt):
    (tmp_path / "outside").mkdir()
    reader = tmp_path / "reader"
    reader.mkdir()
    monkeypatch.chdir(reader)
    statement = attempt.format(**_places(lake_root, tmp_path))
    before = _watched(lake_root, tmp_path)
    with pytest.raises(QueryError) as info:
        query(Lake(str(lake_root)), statement)
    assert isinstance(info.value, UserError) and "\n" not in str(info.value), str(info.value)
    assert _watched(lake_root, tmp_path) == before


@pytest.mark.parametrize("statement", READS)
def test_reads_run_whatever_wraps_them(lake_root, statement):
    assert query(Lake(str(lake_root)), statement).num_rows >= 1


def test_the_views_keep_their_columns(lake_root):
    """The file's columns, then the partitions (kind, sweep, hardware) in name order, then
    the sweep version: the columns DuckDB's own hive reader gave."""
    described = query(Lake(str(lake_root)), "DESCRIBE toy").to_pylist()
    assert [(r["column_name"], r["column_type"]) for r in described] == [
        ("key", "VARCHAR"), ("value", "DOUBLE"), ("hardware", "VARCHAR"), ("kind", "VARCHAR"), ("sweep", "VARCHAR"),
        ("sweep_version", "VARCHAR")]
    rows = query(Lake(str(lake_root)), "SELECT key, kind, sweep, hardware FROM toy ORDER BY key").to_pylist()
    assert [tuple(r.values()) for r in rows] == [("a", "toy", "s", "h"), ("b", "toy", "s", "h"), ("c", "toy", "t", "h")]


def test_query_from_the_cli_refuses_explain_analyze_over_a_committed_file(lake_root, tmp_path):
    places = _places(lake_root, tmp_path)
    statement = (f"EXPLAIN ANALYZE COPY (SELECT 'x' AS key) TO '{places['committed']}' "
                 "(FORMAT parquet, USE_TMP_FILE false)")
    before = _digests(lake_root)
    env = {k: v for k, v in os.environ.items() if k not in ("COMMSCALE_LAKE", "RAY_ADDRESS")}
    done = subprocess.run([sys.executable, "-m", "sweeps.cli", "query", statement, "--lake", str(lake_root)],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert done.stderr.startswith("error: query failed") and len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert _digests(lake_root) == before and _digests(tmp_path) == {}
