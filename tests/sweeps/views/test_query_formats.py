"""`commscale query --format table|csv|json|parquet` renders every type DuckDB returns
(lists, maps, structs, unions, intervals, bytes, nested and huge values), or, for Parquet,
refuses a column it cannot hold in one line naming it."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.cli.render import cell_text
from sweeps.lake import Lake
from sweeps.lake.views import query

EVERY_TYPE = ("SELECT [1, 2] AS l, MAP {'a': 1, 'b': NULL} AS m, INTERVAL '1 day 2 hours' AS i, "
              "{'a': 1, 'b': [true]} AS s, from_hex('61ff5c') AS b, "
              "union_value(k := 1)::UNION(k INTEGER, t VARCHAR) AS u, [[1], [2, 3]] AS n, MAP {[1]: 'x'} AS mk, "
              "[1, 2]::INTEGER[2] AS a, NULL::INTEGER[] AS z, [1.5, 'nan'::DOUBLE] AS f, 'x' AS plain, 2.5 AS d")
#: Each column of EVERY_TYPE as text (csv, table).
AS_TEXT = {"l": "[1, 2]", "m": '{"a": 1, "b": null}', "i": "1 day 02:00:00", "s": '{"a": 1, "b": [true]}',
           "b": "a\\xFF\\x5C", "u": "1", "n": "[[1], [2, 3]]", "mk": '{"[1]": "x"}', "a": "[1, 2]", "z": "",
           "f": "[1.5, null]", "plain": "x", "d": "2.5"}
#: Each column of EVERY_TYPE as JSON.
AS_JSON = {"l": [1, 2], "m": {"a": 1, "b": None}, "i": "1 day 02:00:00", "s": {"a": 1, "b": [True]},
           "b": "a\\xFF\\x5C", "u": 1, "n": [[1], [2, 3]], "mk": {"[1]": "x"}, "a": [1, 2], "z": None,
           "f": [1.5, None], "plain": "x", "d": "2.5"}
#: Values too big to show whole in a terminal: a 200,000-element list, a 300,000-character string.
HUGE = "SELECT range(200000) AS big, repeat('x', 300000) AS long"


@pytest.fixture(scope="module")
def lake_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lake")
    Lake(str(root)).commit("toy", {"sweep": "s", "hardware": "h"}, pa.table({"key": ["a"], "value": [1.0]}))
    return root


def _query(lake_root: Path, statement: str, *options: str):
    return CliRunner().invoke(main, ["query", statement, "--lake", str(lake_root), *options])


def test_csv_writes_every_type_as_text(lake_root):
    result = _query(lake_root, EVERY_TYPE, "--format", "csv")
    assert result.exit_code == 0, (result.output, result.exception)
    assert list(csv.DictReader(io.StringIO(result.stdout))) == [AS_TEXT]


def test_json_writes_every_type_as_strict_json(lake_root):
    result = _query(lake_root, EVERY_TYPE + ", 'inf'::DOUBLE AS inf", "--format", "json")
    assert result.exit_code == 0, (result.output, result.exception)
    assert "NaN" not in result.stdout and "Infinity" not in result.stdout
    assert json.loads(result.stdout) == [{**AS_JSON, "inf": None}]


def test_table_writes_every_type_as_text(lake_root):
    result = _query(lake_root, "SELECT l, m, i, b, mk, f, '[/x] [red]' AS markup FROM (" + EVERY_TYPE + ")")
    assert result.exit_code == 0, (result.output, result.exception)
    for column in ("l", "m", "i", "b", "mk", "f"):
        assert AS_TEXT[column] in result.stdout, column
    assert "[/x] [red]" in result.stdout and result.stdout.endswith("(1 rows)\n")


def test_parquet_holds_nested_values_and_refuses_an_interval_in_one_line(lake_root, tmp_path):
    out = tmp_path / "out.parquet"
    nested = "SELECT l, m, s, b, n, mk, a, z FROM (" + EVERY_TYPE + ")"
    result = _query(lake_root, nested, "--format", "parquet", "-o", str(out))
    assert result.exit_code == 0, (result.output, result.exception)
    assert pq.read_table(out).to_pylist() == query(Lake(str(lake_root)), nested).to_pylist()
    out.unlink()
    for column in ("i", "u"):
        statement = f"SELECT plain, {column} FROM ({EVERY_TYPE})"
        refused = _query(lake_root, statement, "--format", "parquet", "-o", str(out))
        assert refused.exit_code == 2, (refused.output, refused.exception)
        assert f"column '{column}'" in refused.stderr and len(refused.stderr.strip().splitlines()) == 1
        assert not out.exists()


@pytest.mark.parametrize("fmt", ["table", "csv", "json", "parquet"])
def test_huge_values_are_written_whole_or_cut_in_a_table(lake_root, tmp_path, fmt):
    out = tmp_path / f"out.{fmt}"
    result = _query(lake_root, HUGE, "--format", fmt, "-o", str(out))
    assert result.exit_code == 0, (result.output, result.exception)
    if fmt == "parquet":
        row = pq.read_table(out).to_pylist()[0]
        assert len(row["big"]) == 200_000 and len(row["long"]) == 300_000
    elif fmt == "json":
        row = json.loads(out.read_text())[0]
        assert row["big"][-1] == 199_999 and len(row["long"]) == 300_000
    elif fmt == "csv":
        limit = csv.field_size_limit(10_000_000)
        try:
            row = next(csv.DictReader(io.StringIO(out.read_text())))
        finally:
            csv.field_size_limit(limit)
        assert json.loads(row["big"])[-1] == 199_999 and len(row["long"]) == 300_000
    else:
        def cells(column: str) -> str:  # the table's cell text, its folded lines joined
            shown = _query(lake_root, f"SELECT {column} FROM ({HUGE})")
            assert shown.exit_code == 0 and shown.stdout.endswith("(1 rows)\n"), (shown.output, shown.exception)
            return "".join(shown.stdout.replace("│", " ").split())
        big, long = cells("big"), cells("long")
        assert big.startswith("┏") and "[0,1,2,3," in big and len(big) < 5_000
        assert "(1,488,890characters;--formatcsvorjsonwritesitwhole)" in big
        assert "(300,000characters;--formatcsvorjsonwritesitwhole)" in long


INTERVALS = ["1 day 2 hours", "-1 month 3.5 seconds", "14 months", "0 seconds", "-3 years -2 days -1 second",
             "1 microsecond", "100 hours", "-0.5 seconds", "2 days -3 hours", "1 year", "-14 months",
             "1 month 1 day 1 second 120 milliseconds"]


@pytest.mark.parametrize("interval", INTERVALS)
def test_an_interval_is_written_as_duckdb_writes_it(lake_root, interval):
    statement = f"SELECT INTERVAL '{interval}' AS i, CAST(INTERVAL '{interval}' AS VARCHAR) AS t"
    table = query(Lake(str(lake_root)), statement)
    assert cell_text(table.column("i")[0].as_py(), table.schema.field("i").type) == table.column("t")[0].as_py()


@pytest.mark.parametrize("hex_bytes", ["61ff5c", "27207e7f1f", "22000a", ""])
def test_bytes_are_written_as_duckdb_writes_them(lake_root, hex_bytes):
    statement = f"SELECT from_hex('{hex_bytes}') AS b, CAST(from_hex('{hex_bytes}') AS VARCHAR) AS t"
    table = query(Lake(str(lake_root)), statement)
    assert cell_text(table.column("b")[0].as_py(), table.schema.field("b").type) == table.column("t")[0].as_py()


@pytest.mark.parametrize("fmt", ["json", "parquet"])
def test_a_column_name_given_twice_is_refused_where_it_would_lose_a_column(lake_root, tmp_path, fmt):
    """A JSON object, and a Parquet file that readers can read, hold each name once."""
    out = tmp_path / f"out.{fmt}"
    result = _query(lake_root, "SELECT 1 AS a, 2 AS a, 3 AS b", "--format", fmt, "-o", str(out))
    assert result.exit_code == 2, (result.output, result.exception)
    assert "column 'a' is named twice" in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert not out.exists()


@pytest.mark.parametrize("fmt", ["table", "csv"])
def test_a_column_name_given_twice_is_shown_twice(lake_root, fmt):
    result = _query(lake_root, "SELECT 1 AS a, 2 AS a", "--format", fmt)
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout.count("a") >= 2 and "2" in result.stdout
