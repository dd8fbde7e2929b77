"""The lake's commit protocol: idempotent keys, concurrent writers, crashes, verify."""

from __future__ import annotations

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from analysis.query import query
from sweeps.errors import LakeError
from sweeps.lake import LAKE_FORMAT, Lake

PARTITION = {"sweep": "s", "hardware": "h"}


def _table(keys, value=1.0):
    return pa.table({"key": [str(k) for k in keys], "value": [float(value)] * len(keys)})


def _committed_keys(lake: Lake) -> list:
    return query(lake, "SELECT key FROM toy").column("key").to_pylist()


def test_the_same_key_committed_twice_is_one_result(tmp_path):
    lake = Lake(str(tmp_path))
    first = lake.commit("toy", PARTITION, _table(["a", "b"], 1.0))
    second = lake.commit("toy", PARTITION, _table(["b", "c"], 2.0))
    again = lake.commit("toy", PARTITION, _table(["a", "c"], 3.0))
    assert (first.rows_written, second.rows_written, second.rows_skipped) == (2, 1, 1)
    assert again.path is None and again.rows_skipped == 2
    rows = query(lake, "SELECT key, value FROM toy ORDER BY key").to_pylist()
    assert rows == [{"key": "a", "value": 1.0}, {"key": "b", "value": 1.0}, {"key": "c", "value": 2.0}]


def test_a_key_repeated_within_one_table_is_written_once(tmp_path):
    lake = Lake(str(tmp_path))
    lake.commit("toy", PARTITION, pa.table({"key": ["a", "b", "a"], "value": [1.0, 2.0, 3.0]}))
    assert sorted(_committed_keys(lake)) == ["a", "b"]


def test_another_process_sees_commits_made_after_it_opened_the_lake(tmp_path):
    reader, writer = Lake(str(tmp_path)), Lake(str(tmp_path))
    writer.commit("toy", PARTITION, _table(["a"]))
    assert reader.keys("toy") == {"a"}
    writer.commit("toy", PARTITION, _table(["b"]))
    assert reader.keys("toy", PARTITION) == {"a", "b"}


class _LakeOpenedBeforeItsMarker(Lake):
    """A lake whose first read of ``_lake.json`` finds none, as a writer's does when another
    writer creates the lake between that read and its look at the log and data files."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self._marker_reads = 0

    def _read_json(self, path):
        if path.endswith("/_lake.json"):
            self._marker_reads += 1
            if self._marker_reads == 1:
                return None
        return super()._read_json(path)


def _commit_by_another_writer(root: Path, *, logged: bool) -> None:
    """Another writer creates the lake and commits (or has published a file, not yet logged)."""
    other = Lake(str(root))
    if logged:
        other.commit("toy", PARTITION, _table(["a"]))
        return
    other.check_format(create=True)
    directory = root / other.partition_dir("toy", PARTITION)
    directory.mkdir(parents=True)
    pq.write_table(_table(["a"]), directory / "part-published-not-yet-logged.parquet")


@pytest.mark.parametrize("logged", [True, False], ids=["committed", "published-not-yet-logged"])
def test_a_writer_that_read_no_marker_while_another_created_the_lake_commits(tmp_path, logged):
    late = _LakeOpenedBeforeItsMarker(str(tmp_path))
    _commit_by_another_writer(tmp_path, logged=logged)
    result = late.commit("toy", PARTITION, _table(["b"]))
    assert result.rows_written == 1
    assert json.loads((tmp_path / "_lake.json").read_text()) == {"format": LAKE_FORMAT}


def test_a_reader_that_read_no_marker_while_a_writer_created_the_lake_reads_it(tmp_path):
    late = _LakeOpenedBeforeItsMarker(str(tmp_path))
    _commit_by_another_writer(tmp_path, logged=True)
    late.ensure_readable()
    assert late.keys("toy") == {"a"}


def _concurrent_writer(root: str, index: int, start_at: float) -> None:
    lake = Lake(root)
    while time.time() < start_at:
        time.sleep(0.001)
    for batch in range(5):
        lo = index * 40 + batch * 20  # each writer overlaps its neighbours by half
        lake.commit("toy", PARTITION, _table(range(lo, lo + 60), index))


def test_ten_concurrent_writers_with_overlapping_keys(tmp_path):
    context = multiprocessing.get_context("spawn")
    start_at = time.time() + 3.0
    writers = [context.Process(target=_concurrent_writer, args=(str(tmp_path), i, start_at)) for i in range(10)]
    for w in writers:
        w.start()
    for w in writers:
        w.join(120)
        assert w.exitcode == 0
    expected = {str(k) for i in range(10) for b in range(5) for k in range(i * 40 + b * 20, i * 40 + b * 20 + 60)}
    keys = _committed_keys(Lake(str(tmp_path)))
    assert len(keys) == len(set(keys))
    assert set(keys) == expected
    entries = sorted((tmp_path / "_log").glob("*.json"))
    assert [int(p.stem) for p in entries] == list(range(1, len(entries) + 1))  # no gap, no overwrite


WRITER = """
import sys, pyarrow as pa
from sweeps.lake import Lake
n = 3_000_000
Lake(sys.argv[1]).commit("toy", {"sweep": "s", "hardware": "h"},
                         pa.table({"key": [f"k{i}" for i in range(n)], "value": [1.5] * n}))
"""


@pytest.mark.chaos
def test_a_writer_killed_mid_file_leaves_nothing_a_reader_sees(tmp_path):
    lake = Lake(str(tmp_path))
    lake.commit("toy", PARTITION, _table(["before"]))
    partition_dir = tmp_path / "kind=toy" / "sweep=s" / "hardware=h"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(tmp_path)])
    try:
        deadline = time.time() + 120
        while not list(partition_dir.glob(".*.tmp")):
            assert proc.poll() is None, "the writer finished before it could be killed"
            assert time.time() < deadline
            time.sleep(0.005)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert list(partition_dir.glob(".*.tmp")), "the killed writer should leave its temporary file"
    assert _committed_keys(Lake(str(tmp_path))) == ["before"]
    visible = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path}/**/*.parquet')").fetchall()
    assert visible == [(1,)]  # even a raw glob sees whole files only
    report = Lake(str(tmp_path)).vacuum(grace_s=0)
    assert report.removed and not list(partition_dir.glob(".*.tmp"))
    assert _committed_keys(Lake(str(tmp_path))) == ["before"]


def test_a_published_file_without_a_log_entry_is_an_orphan(tmp_path):
    lake = Lake(str(tmp_path))
    committed = Path(lake.commit("toy", PARTITION, _table(["a"])).path)
    orphan = committed.with_name("part-orphan.parquet")  # as left by a crash between rename and log entry
    pq.write_table(_table(["ghost"]), orphan)
    assert _committed_keys(Lake(str(tmp_path))) == ["a"]
    young = Lake(str(tmp_path)).vacuum(grace_s=3600)
    assert orphan.exists() and not young.removed  # a young file may belong to a commit in progress
    old = Lake(str(tmp_path)).vacuum(grace_s=0)
    assert old.removed == [str(orphan)] and not orphan.exists() and committed.exists()


def test_verify_sets_aside_truncated_and_bit_flipped_files(tmp_path):
    lake = Lake(str(tmp_path))
    good = lake.commit("toy", PARTITION, _table(["g1", "g2"])).path
    truncated = Path(lake.commit("toy", PARTITION, _table(["t1", "t2", "t3"])).path)
    flipped = Path(lake.commit("toy", PARTITION, _table(["f1"])).path)
    truncated.write_bytes(truncated.read_bytes()[:-40])
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0x01
    flipped.write_bytes(bytes(data))

    report = Lake(str(tmp_path)).verify()
    assert report.checked == 3
    assert sorted(path for path, _, _ in report.bad) == sorted([str(truncated), str(flipped)])
    assert report.keys_to_redo == {"toy": {"t1", "t2", "t3", "f1"}}
    assert not truncated.exists() and not flipped.exists() and Path(good).exists()
    assert len(list((tmp_path / "_quarantine").rglob("*.parquet"))) == 2
    assert sorted(_committed_keys(Lake(str(tmp_path)))) == ["g1", "g2"]
    redo = Lake(str(tmp_path)).commit("toy", PARTITION, _table(["t1", "f1"]))
    assert redo.rows_written == 2  # set-aside keys can be measured again
    assert Lake(str(tmp_path)).verify().bad == []


def test_a_lake_without_a_log_is_refused_with_what_to_do_then_upgraded(tmp_path):
    directory = tmp_path / "kind=toy" / "sweep=s" / "hardware=h"
    directory.mkdir(parents=True)
    pq.write_table(_table(["a", "b"]), directory / "part-old.parquet")
    with pytest.raises(LakeError, match="lake upgrade"):
        query(Lake(str(tmp_path)), "SELECT * FROM toy")
    report = Lake(str(tmp_path)).upgrade()
    assert report.committed_rows == 2 and len(report.adopted) == 1 and "in place" in report.adopted[0]
    assert report.rewritten == 1  # then rewritten with its sweep version, the original kept aside
    assert (tmp_path / "_quarantine" / "replaced" / "kind=toy__sweep=s__hardware=h__part-old.parquet").exists()
    assert sorted(_committed_keys(Lake(str(tmp_path)))) == ["a", "b"]
    assert query(Lake(str(tmp_path)), "SELECT DISTINCT sweep FROM toy").to_pylist() == [{"sweep": "s"}]


def test_a_lake_of_a_newer_format_says_to_upgrade_commscale(tmp_path):
    (tmp_path / "_lake.json").write_text(json.dumps({"format": LAKE_FORMAT + 1}))
    with pytest.raises(LakeError, match="upgrade commscale"):
        Lake(str(tmp_path)).ensure_readable()


def test_removing_a_sweep_hides_its_files_until_vacuum_deletes_them(tmp_path):
    lake = Lake(str(tmp_path))
    path = Path(lake.commit("toy", PARTITION, _table(["a"])).path)
    lake.commit("toy", {"sweep": "keep", "hardware": "h"}, _table(["k"]))
    assert lake.remove_partition("toy", PARTITION, reason="restart") == 1
    assert _committed_keys(Lake(str(tmp_path))) == ["k"]
    assert path.exists()
    Lake(str(tmp_path)).vacuum(grace_s=0)
    assert not path.exists()
    assert os.listdir(tmp_path / "_log")
