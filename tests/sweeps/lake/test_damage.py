"""A damaged lake never loses a row and never serves a wrong one: each fault is found by
the reader that meets it (one line naming what and what to run), reported by ``lake
verify``, and mended by ``lake verify --repair`` with every committed row kept."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.errors import LakeError, QueryError
from sweeps.lake import Lake
from sweeps.lake.entries import head_bytes
from sweeps.lake.views import query

PARTITION = {"sweep": "s", "hardware": "h"}


def _lake(tmp_path: Path, commits: int = 3, rows: int = 4) -> Lake:
    lake = Lake(str(tmp_path))
    for c in range(commits):
        keys = [f"k{c}-{i}" for i in range(rows)]
        lake.commit("toy", PARTITION, pa.table({"key": keys, "value": [float(c * 10 + i) for i in range(rows)]}))
    return lake


def _values(tmp_path: Path) -> list:
    return sorted(r["value"] for r in query(Lake(str(tmp_path)), "SELECT value FROM toy").to_pylist())


def _entries(tmp_path: Path) -> list:
    return sorted((tmp_path / "_log").glob("*.json"))


def _data_files(tmp_path: Path) -> list:
    return sorted((tmp_path / "kind=toy").rglob("part-*.parquet"))


def _verify(tmp_path: Path, *flags: str):
    return CliRunner().invoke(main, ["lake", "verify", "--lake", str(tmp_path), *flags])


def test_upgrade_of_a_lake_that_lost_its_lake_json_restores_it_and_deletes_nothing(tmp_path):
    _lake(tmp_path)
    before = _data_files(tmp_path)
    (tmp_path / "_lake.json").unlink()
    with pytest.raises(LakeError, match="lost its _lake.json.*lake upgrade"):
        query(Lake(str(tmp_path)), "SELECT * FROM toy")
    result = CliRunner().invoke(main, ["lake", "upgrade", "--lake", str(tmp_path)])
    assert result.exit_code == 0, result.output
    assert "restored _lake.json" in result.output and "12 rows" in result.output
    assert _data_files(tmp_path) == before and len(_values(tmp_path)) == 12


def test_a_flipped_byte_in_a_data_file_is_refused_naming_the_file_and_verify(tmp_path):
    _lake(tmp_path)
    victim = _data_files(tmp_path)[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(LakeError) as info:
        _values(tmp_path)
    assert str(victim) in str(info.value) and "commscale lake verify" in str(info.value)
    result = CliRunner().invoke(main, ["query", "SELECT value FROM toy", "--lake", str(tmp_path)])
    assert result.exit_code == 2 and str(victim) in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("damage", ["truncate", "delete"])
def test_a_truncated_or_missing_data_file_is_one_line_not_a_traceback(tmp_path, damage):
    _lake(tmp_path)
    victim = _data_files(tmp_path)[0]
    if damage == "truncate":
        victim.write_bytes(victim.read_bytes()[:100])
    else:
        victim.unlink()
    result = CliRunner().invoke(main, ["query", "SELECT count(*) FROM toy", "--lake", str(tmp_path)])
    assert result.exit_code == 2 and str(victim) in result.output and "lake verify" in result.output
    verified = _verify(tmp_path)
    assert verified.exit_code == 1 and f"set aside {victim}" in verified.output
    assert len(_values(tmp_path)) == 8  # the other files' rows, and nothing wrong


def test_a_missing_middle_log_entry_is_found_and_repair_brings_its_rows_back(tmp_path):
    _lake(tmp_path)
    second = _entries(tmp_path)[1]
    second.unlink()
    with pytest.raises(LakeError, match="entry 2 is missing.*verify --repair"):
        _values(tmp_path)
    assert _verify(tmp_path).exit_code == 1
    repaired = _verify(tmp_path, "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert "recorded as lost" in repaired.output and "adopted" in repaired.output
    assert len(_values(tmp_path)) == 12  # the lost entry's file came back: no row lost
    assert _verify(tmp_path).exit_code == 0


@pytest.mark.parametrize("damage", [b"", b'{"version": 3, "acti', b"\x00\xff garbage \xfe"])
def test_a_torn_newest_entry_the_head_never_recorded_is_rolled_back_and_its_rows_kept(tmp_path, damage):
    _lake(tmp_path)
    newest = _entries(tmp_path)[-1]
    newest.write_bytes(damage)
    (tmp_path / "_log" / "HEAD").write_bytes(head_bytes(2))  # its commit stopped before the head
    with pytest.raises(LakeError, match="entry 3 \\(the newest\\) is damaged.*verify --repair"):
        _values(tmp_path)
    with pytest.raises(LakeError, match="verify --repair"):
        Lake(str(tmp_path)).commit("toy", PARTITION, pa.table({"key": ["new"], "value": [99.0]}))
    repaired = _verify(tmp_path, "--repair")
    assert repaired.exit_code == 0 and "rolled back" in repaired.output, repaired.output
    assert len(_values(tmp_path)) == 12
    Lake(str(tmp_path)).commit("toy", PARTITION, pa.table({"key": ["new"], "value": [99.0]}))
    assert len(_values(tmp_path)) == 13


@pytest.mark.parametrize("damage", [b"", b"\x00\xff garbage \xfe"])
def test_a_damaged_newest_entry_the_head_recorded_is_recorded_as_lost_and_its_rows_kept(tmp_path, damage):
    _lake(tmp_path)
    _entries(tmp_path)[-1].write_bytes(damage)
    with pytest.raises(LakeError, match="entry 3 is damaged.*verify --repair"):
        _values(tmp_path)
    repaired = _verify(tmp_path, "--repair")
    assert repaired.exit_code == 0 and "recorded as lost: commit-log entry 3" in repaired.output, repaired.output
    assert len(_values(tmp_path)) == 12 and _verify(tmp_path).exit_code == 0


def test_garbage_in_a_middle_entry_is_refused_then_repaired(tmp_path):
    _lake(tmp_path)
    middle = _entries(tmp_path)[1]
    entry = json.loads(middle.read_bytes())
    entry["rows"] = 999  # valid JSON, but not what was sealed
    middle.write_text(json.dumps(entry))
    result = CliRunner().invoke(main, ["status", "--lake", str(tmp_path)])
    assert result.exit_code == 2 and "entry 2 is damaged" in result.output and "Traceback" not in result.output
    assert _verify(tmp_path, "--repair").exit_code == 0
    assert len(_values(tmp_path)) == 12


@pytest.mark.parametrize("damage", ["delete", "garble"])
def test_a_lost_key_sidecar_neither_crashes_a_writer_nor_passes_verify(tmp_path, damage):
    _lake(tmp_path)
    sidecar = sorted((tmp_path / "_keys").glob("*.keys"))[0]
    data_file = next(tmp_path.rglob(sidecar.name.replace(".keys", ".parquet")))
    keys = set(pq.read_table(data_file).column("key").to_pylist())
    if damage == "delete":
        sidecar.unlink()
    else:
        sidecar.write_bytes(b"not parquet at all")
    known = sorted(keys)[0]
    written = Lake(str(tmp_path)).commit("toy", PARTITION, pa.table({"key": [known, "fresh"], "value": [0.0, 1.0]}))
    assert (written.rows_written, written.rows_skipped) == (1, 1)  # its keys still known: no duplicate
    checked = _verify(tmp_path)
    assert checked.exit_code == 1 and f"key sidecar {sidecar}" in checked.output
    assert _verify(tmp_path, "--repair").exit_code == 0
    assert set(pq.read_table(sidecar).column("key").to_pylist()) == keys
    assert _verify(tmp_path).exit_code == 0


@pytest.mark.parametrize("path", ["_log", "_keys", "kind=toy/sweep=s/hardware=h"])
def test_a_lake_path_that_is_a_file_is_one_line(tmp_path, path):
    lake_dir = tmp_path / "lake"
    if path != "_log":
        _lake(lake_dir, commits=1)
    else:
        lake_dir.mkdir()
        (lake_dir / "_lake.json").write_text(json.dumps({"format": 2}))
    target = lake_dir / path
    if target.is_dir():
        for child in target.rglob("*"):
            if child.is_file():
                child.unlink()
        for child in sorted(target.rglob("*"), reverse=True):
            child.rmdir()
        target.rmdir()
    target.write_text("in the way")
    with pytest.raises(LakeError) as info:
        Lake(str(lake_dir)).commit("toy", PARTITION, pa.table({"key": ["x"], "value": [1.0]}))
    assert "\n" not in str(info.value)


def test_a_full_disk_mid_commit_is_one_line_and_leaves_the_lake_whole(tmp_path):
    """A file size limit (RLIMIT_FSIZE) stands in for a full disk, in a child process."""
    import subprocess
    import sys

    _lake(tmp_path)
    script = f"""
import resource, signal, sys
import pyarrow as pa
from sweeps.lake import Lake
from sweeps.errors import LakeError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (2048, 2048))
table = pa.table({{"key": [str(i) for i in range(20000)], "value": [float(i) for i in range(20000)]}})
try:
    Lake({str(tmp_path)!r}).commit("toy", {PARTITION!r}, table)
except LakeError as exc:
    print("LAKE ERROR:", exc)
    sys.exit(2)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "LAKE ERROR" in done.stdout and "nothing was committed" in done.stdout, done
    assert "Traceback" not in done.stderr
    assert len(_values(tmp_path)) == 12 and _verify(tmp_path).exit_code == 0
    assert not [p for p in tmp_path.rglob(".*.tmp")]


@pytest.mark.parametrize("statement", [
    "COPY toy TO 'out.csv'", "COPY (SELECT 1) TO 'kind=toy/x.parquet'", "ATTACH ':memory:' AS other",
    "INSTALL httpfs", "DROP VIEW toy", "CREATE TABLE t AS SELECT 1", "SET enable_external_access = true",
    "SELECT * FROM read_csv('/etc/passwd')", "SELECT 1; SELECT 2",
])
def test_query_runs_read_statements_over_the_lake_only(tmp_path, statement):
    _lake(tmp_path)
    with pytest.raises(QueryError):
        query(Lake(str(tmp_path)), statement)
    assert not list(tmp_path.rglob("out.csv")) and not list(tmp_path.rglob("x.parquet"))
    assert len(_values(tmp_path)) == 12 and query(Lake(str(tmp_path)), "DESCRIBE toy").num_rows >= 2


@pytest.mark.slow
def test_verify_exits_0_on_a_clean_lake_every_time(tmp_path):
    """`commscale lake verify` aborted (exit 134, "terminate called without an active
    exception") in about one run of four on the default sweep's lake: Arrow read the files
    through a Python file object, from IO threads that the exiting interpreter killed."""
    import subprocess
    import sys

    from sweeps.config import load_run_config
    from sweeps.jobs.projection import projection_job
    from tasks.model.projection.grid import SCHEMA_VERSION, project_table

    lake = Lake(str(tmp_path))
    config = load_run_config([])
    job, plan = projection_job(config)
    for piece in range(0, plan.points.num_rows, 150):  # files the size a run commits
        rows = project_table(plan.points.slice(piece, 150), config.hardware)
        lake.commit("projection", job.partition, rows, schema_version=SCHEMA_VERSION)
    commscale = str(Path(sys.executable).with_name("commscale"))
    codes = [subprocess.run([commscale, "lake", "verify", "--lake", str(tmp_path)], capture_output=True,
                            timeout=120).returncode for _ in range(20)]
    assert codes == [0] * 20
