"""The lake: atomic files, hive layout that DuckDB and pandas read back."""

from __future__ import annotations

import duckdb
import pandas as pd
import pyarrow as pa
import pytest

from analysis.query import query
from sweeps.errors import LakeError, QueryError
from sweeps.lake import Lake

PARTITION = {"sweep": "s1", "hardware": "h100"}


def _table(keys, value=1.0):
    return pa.table({"key": keys, "value": [value] * len(keys)})


def test_round_trip_through_duckdb_read_parquet_with_hive_partitions(tmp_path):
    lake = Lake(str(tmp_path))
    lake.commit("toy", PARTITION, _table(["a", "b"], 2.5))
    lake.commit("toy", {"sweep": "s2", "hardware": "b200"}, _table(["c"], 7.0))
    rows = duckdb.sql(
        f"SELECT key, value, kind, sweep, hardware FROM read_parquet('{tmp_path}/**/*.parquet', "
        "hive_partitioning = true) ORDER BY key"
    ).fetchall()
    assert rows == [("a", 2.5, "toy", "s1", "h100"), ("b", 2.5, "toy", "s1", "h100"),
                    ("c", 7.0, "toy", "s2", "b200")]


def test_pandas_reads_the_lake_with_partitions(tmp_path):
    lake = Lake(str(tmp_path))
    lake.commit("toy", PARTITION, _table(["a"]))
    frame = pd.read_parquet(tmp_path / "kind=toy")
    assert list(frame["key"]) == ["a"]
    assert list(frame["sweep"].astype(str)) == ["s1"]


def test_commit_leaves_no_temporary_file_and_keys_are_listed(tmp_path):
    lake = Lake(str(tmp_path))
    path = lake.commit("toy", PARTITION, _table(["a", "b"])).path
    names = [p.name for p in (tmp_path / "kind=toy" / "sweep=s1" / "hardware=h100").iterdir()]
    assert names == [path.rsplit("/", 1)[1]]  # only the committed file, no temporary left
    assert lake.keys("toy", PARTITION) == {"a", "b"}
    assert lake.keys("toy", {"sweep": "other", "hardware": "h100"}) == set()


def test_a_half_written_hidden_file_is_invisible_to_readers(tmp_path):
    lake = Lake(str(tmp_path))
    lake.commit("toy", PARTITION, _table(["a"]))
    directory = tmp_path / "kind=toy" / "sweep=s1" / "hardware=h100"
    (directory / ".part-deadbeef.parquet.tmp").write_bytes(b"PAR1 truncated")
    assert len(lake.files("toy")) == 1
    assert query(lake, "SELECT count(*) AS n FROM toy").column("n").to_pylist() == [1]
    assert lake.keys("toy", PARTITION) == {"a"}


def test_query_views_name_each_kind(tmp_path):
    lake = Lake(str(tmp_path))
    lake.commit("toy", PARTITION, _table(["a", "b"]))
    lake.commit("roi", {"sweep": "s1", "hardware": "h100"}, _table(["x"]))
    result = query(lake, "SELECT (SELECT count(*) FROM toy) AS p, (SELECT count(*) FROM roi) AS r")
    assert result.to_pylist() == [{"p": 2, "r": 1}]


def test_failing_sql_names_the_statement(tmp_path):
    lake = Lake(str(tmp_path))
    lake.commit("toy", PARTITION, _table(["a"]))
    with pytest.raises(QueryError) as info:
        query(lake, "SELECT nope FROM toy")
    assert "SELECT nope FROM toy" in str(info.value)


def test_a_file_in_place_of_the_lake_is_refused(tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("x")
    with pytest.raises(LakeError, match="not-a-dir"):
        Lake(str(blocker)).ensure_writable()
    with pytest.raises(LakeError, match="not a directory"):
        Lake(str(blocker)).ensure_readable()
    with pytest.raises(LakeError, match="does not exist"):
        Lake(str(tmp_path / "missing")).ensure_readable()


def test_partition_values_cannot_escape_the_layout(tmp_path):
    with pytest.raises(LakeError):
        Lake(str(tmp_path)).commit("toy", {"sweep": "../x", "hardware": "h"}, _table(["a"]))


def test_a_uri_root_works_through_pyarrow_filesystems(tmp_path):
    lake = Lake(f"file://{tmp_path}")
    lake.ensure_writable()
    lake.commit("toy", PARTITION, _table(["a"]))
    assert lake.keys("toy", PARTITION) == {"a"}
    assert query(lake, "SELECT key FROM toy").column("key").to_pylist() == ["a"]
