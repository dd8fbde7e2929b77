"""The ``commscale`` CLI end to end, as a subprocess: bad input fails cleanly.

Every bad input (config, lake path, SQL) ends with exit status 2 and one message on
stderr naming the field and value or the statement, no traceback, and the lake (and
everything else under the test's tmp_path) byte-for-byte unchanged. Bad input fails
before any work, so none of these runs starts Ray.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

from sweeps.lake import Lake

FIXTURES = Path(__file__).resolve().parent / "fixtures"
# A bad input fails before any work; a run this slow would mean Ray was started.
FAST_S = 60


def commscale(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COMMSCALE_LAKE", "RAY_ADDRESS")}
    return subprocess.run(
        [sys.executable, "-m", "sweeps.cli", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=FAST_S,
    )


def snapshot(root: Path) -> list[tuple]:
    """Sorted (relative path, size, sha256) of every entry under root; dirs have no size."""
    entries = []
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_dir():
            entries.append((rel, None, None))
        else:
            data = path.read_bytes()
            entries.append((rel, len(data), hashlib.sha256(data).hexdigest()))
    return entries


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A lake holding one committed file of a toy kind."""
    root = tmp_path / "lake"
    Lake(str(root)).commit("toy", {"sweep": "s", "hardware": "h"}, pa.table({"key": ["a"]}))
    return root


def assert_clean_failure(result: subprocess.CompletedProcess, fragments: list[str]) -> None:
    assert result.returncode == 2, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    assert result.stderr.startswith("error: "), result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)


BAD_CONFIG = [
    pytest.param(["sweep.tpp=[4]"], ["sweep.tpp", "[4]"], id="unknown-key"),
    pytest.param(["hw=h100"], ["hw='h100'", "known groups"], id="unknown-group"),
    pytest.param(["sweep.dp=abc"], ["sweep.dp='abc'"], id="wrong-type"),
    pytest.param(["sweep.sl=[-1024]"], ["sweep.sl=-1024", "must be positive"], id="non-positive"),
    pytest.param(["model=gpt3", "sweep.tp=[128]"], ["sweep.tp=128", "model.heads=96"], id="tp-vs-heads"),
    pytest.param(["hardware=nope"], ["hardware='nope'", "unknown preset"], id="unknown-preset"),
    pytest.param(["sweep.links=sideways"], ["sweep.links='sideways'"], id="enum"),
    pytest.param([f"hardware={FIXTURES / 'hardware_wrong_type.yaml'}"], ["hardware.peak_tflops='fast'"],
                 id="fixture-wrong-type"),
]


@pytest.mark.parametrize("overrides, fragments", BAD_CONFIG)
def test_run_rejects_bad_config(tmp_path, lake, overrides, fragments):
    before = snapshot(tmp_path)
    result = commscale("run", *overrides, "--lake", str(lake), cwd=tmp_path)
    assert_clean_failure(result, fragments)
    assert result.stdout == ""
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("command", [
    pytest.param(["run", "sweep=smoke"], id="run"),
    pytest.param(["query", "SELECT count(*) FROM toy"], id="query"),
])
def test_lake_path_is_a_regular_file(tmp_path, lake, command):
    not_a_dir = tmp_path / "lake-file"
    not_a_dir.write_bytes(b"not a lake\n")
    before = snapshot(tmp_path)
    result = commscale(*command, "--lake", str(not_a_dir), cwd=tmp_path)
    assert_clean_failure(result, [str(not_a_dir.name), "lake path"])
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(os.geteuid() == 0, reason="runs as root: directory permissions are not enforced for root, "
                                              "so a 0o500 parent does not make the lake unwritable")
def test_lake_under_read_only_directory(tmp_path, lake):
    parent = tmp_path / "read-only"
    parent.mkdir()
    parent.chmod(0o500)
    try:
        before = snapshot(tmp_path)
        result = commscale("run", "sweep=smoke", "--lake", str(parent / "lake"), cwd=tmp_path)
        assert_clean_failure(result, ["lake path", "not writable"])
        assert snapshot(tmp_path) == before
    finally:
        parent.chmod(0o700)


@pytest.mark.parametrize("statement, fragments", [
    pytest.param("SELEC nonsense", ["SELEC nonsense", "query failed"], id="syntax"),
    pytest.param("SELECT * FROM no_such_table", ["SELECT * FROM no_such_table", "no_such_table", "query failed"],
                 id="missing-table"),
])
def test_query_rejects_bad_sql(tmp_path, lake, statement, fragments):
    before = snapshot(tmp_path)
    result = commscale("query", statement, "--lake", str(lake), cwd=tmp_path)
    assert_clean_failure(result, fragments)
    assert result.stdout == ""
    assert snapshot(tmp_path) == before


def test_query_csv_and_json(tmp_path, lake):
    before = snapshot(tmp_path)
    statement = "SELECT count(*) AS n FROM toy"

    as_csv = commscale("query", statement, "--lake", str(lake), "--format", "csv", cwd=tmp_path)
    assert as_csv.returncode == 0, as_csv.stderr
    assert list(csv.DictReader(io.StringIO(as_csv.stdout))) == [{"n": "1"}]

    as_json = commscale("query", statement, "--lake", str(lake), "--format", "json", cwd=tmp_path)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout) == [{"n": 1}]

    # Reading the lake leaves it as it was.
    assert snapshot(tmp_path) == before
