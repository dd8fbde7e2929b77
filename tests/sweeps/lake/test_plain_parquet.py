"""Any Parquet reader takes the lake's folders as they are: every kind reads with plain
``pd.read_parquet``, ``pyarrow.dataset`` and a DuckDB glob with hive partitions, no
column clashes with a partition key, and each row says its sweep version."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.errors import LakeError
from sweeps.lake import Lake
from sweeps.lake.entries import seal
from sweeps.lake.kinds import SCHEMAS, VALIDATION
from sweeps.lake.views import query

VERSIONS = ("0a1b2c3d", "4e5f6a7b")


def _rows(kind: str, keys: list, hardware: str) -> pa.Table:
    """Rows of ``kind``'s own schema: the keys given, every other value null but the
    hardware, as the kind's own rows carry it."""
    schema = SCHEMAS[kind][0]
    columns = {f.name: pa.nulls(len(keys), f.type) for f in schema}
    columns["key"] = pa.array(keys, pa.string())
    if "hardware" in columns:
        columns["hardware"] = pa.array([hardware] * len(keys), schema.field("hardware").type)
    return pa.table(columns, schema=schema)


def _partition(kind: str, hardware: str) -> dict:
    return {"sweep": "validate"} if kind == VALIDATION else {"sweep": "study-1", "hardware": hardware}


@pytest.fixture(scope="module")
def lake(tmp_path_factory) -> Path:
    """Two hardware partitions of every kind, each written under a sweep version."""
    root = tmp_path_factory.mktemp("plain") / "lake"
    store = Lake(str(root))
    for kind in SCHEMAS:
        for version, hardware in zip(VERSIONS, ("h100", "a100-80gb")):
            keys = [f"{hardware}-{i}" for i in range(3)]
            store.commit(kind, _partition(kind, hardware), _rows(kind, keys, hardware), sweep_version=version,
                         schema_version=SCHEMAS[kind][1])
    return root


@pytest.mark.parametrize("kind", sorted(SCHEMAS))
def test_every_kind_reads_with_pandas_pyarrow_and_a_duckdb_glob(lake, kind):
    folder = lake / f"kind={kind}"
    frames = {
        "pandas": pd.read_parquet(folder),
        "pyarrow": ds.dataset(folder, format="parquet", partitioning="hive").to_table().to_pandas(),
        "duckdb": duckdb.sql(f"SELECT * FROM read_parquet('{folder}/**/*.parquet', hive_partitioning = true, "
                             "union_by_name = true)").df(),
    }
    for reader, frame in frames.items():
        assert len(frame) == 6, reader
        assert set(frame["sweep_version"]) <= set(VERSIONS), reader
        if kind != VALIDATION:
            assert sorted(set(frame["hardware"].astype(str))) == ["a100-80gb", "h100"], reader
            assert all(k.startswith(str(h)) for k, h in zip(frame["key"], frame["hardware"])), reader


def test_the_views_serve_the_same_rows_with_their_partitions_and_versions(lake):
    rows = query(Lake(str(lake)), "SELECT hardware, sweep_version, key FROM search_all_versions ORDER BY key")
    assert rows.to_pylist() == [{"hardware": h, "sweep_version": v, "key": f"{h}-{i}"}
                                for h, v in (("a100-80gb", VERSIONS[1]), ("h100", VERSIONS[0])) for i in range(3)]


def test_a_row_whose_partition_column_disagrees_with_its_folder_is_refused(tmp_path):
    rows = _rows("search", ["a"], "h100")
    with pytest.raises(LakeError, match="hardware=a100-80gb hold other values in their hardware column"):
        Lake(str(tmp_path)).commit("search", {"sweep": "s", "hardware": "a100-80gb"}, rows)


def test_upgrade_rewrites_files_of_the_older_layout_keeping_every_row(tmp_path):
    """A file as commscale wrote it before: the partition's hardware as a column, no
    sweep version. pandas refuses the folder until `lake upgrade` rewrites it."""
    store = Lake(str(tmp_path))
    for hardware in ("h100", "a100-80gb"):
        store.commit("search", _partition("search", hardware), _rows("search", [f"{hardware}-0"], hardware),
                     sweep_version=VERSIONS[0], schema_version=SCHEMAS["search"][1])
    for number in (1, 2):
        path = tmp_path / "_log" / f"{number:020d}.json"
        entry = json.loads(path.read_bytes())
        data_file = tmp_path / entry["file"]
        table = pq.ParquetFile(data_file).read().drop_columns(["sweep_version"])
        pq.write_table(table.append_column("hardware", pa.array([entry["partition"]["hardware"]])), data_file)
        data = data_file.read_bytes()
        entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
        path.write_bytes(seal({k: v for k, v in entry.items() if k != "check"}))
    with pytest.raises(pa.ArrowTypeError):
        pd.read_parquet(tmp_path / "kind=search")
    result = CliRunner().invoke(main, ["lake", "upgrade", "--lake", str(tmp_path)])
    assert result.exit_code == 0 and "2 data files rewritten" in result.output, result.output
    frame = pd.read_parquet(tmp_path / "kind=search")
    assert sorted(frame["key"]) == ["a100-80gb-0", "h100-0"] and set(frame["sweep_version"]) == {VERSIONS[0]}
    assert (sorted(query(Lake(str(tmp_path)), "SELECT key FROM search").column("key").to_pylist())
            == sorted(frame["key"]))
    assert CliRunner().invoke(main, ["lake", "verify", "--lake", str(tmp_path)]).exit_code == 0
