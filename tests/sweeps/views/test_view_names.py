"""Names read from the lake are data in the views: a kind or a sweep version that is not a
plain name never becomes SQL, whoever wrote the log entry that holds it.

The commit log's check is an unkeyed sha256, so anyone can seal an entry. The log's reader
refuses an entry naming such a kind; the views must be safe on their own as well, so they
are also tested through a reader that applies every entry as written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sweeps.errors import LakeError
from sweeps.lake import Lake
from sweeps.lake.entries import seal
from sweeps.lake.views import connect

#: A kind that closes the view's quoted name and runs a COPY into the reader's folder.
HOSTILE_KIND = 'v" AS SELECT 1; COPY (SELECT 1 AS x) TO \'pwned.csv\'; CREATE VIEW "w'
#: A sweep version that closes its string literal and runs a COPY.
HOSTILE_VERSION = "x' AS sweep_version; COPY (SELECT 1 AS x) TO 'pwned.csv'; SELECT '"
WHERE = {"sweep": "s", "hardware": "h"}


def craft_entry(root: Path, kind: str, sweep_version: str = "") -> None:
    """Add a data file of ``kind`` and an add entry naming it to the lake at ``root``, as
    anyone can: the entry sealed with the log's unkeyed checksum, the log's head naming it."""
    folder = f"kind={kind}/" + "/".join(f"{k}={v}" for k, v in WHERE.items())
    name = f"part-{uuid.uuid4().hex}.parquet"
    (root / folder).mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({"key": ["crafted"], "value": [1.0]}), root / folder / name)
    data = (root / folder / name).read_bytes()
    version = max(int(p.stem) for p in (root / "_log").glob("*.json")) + 1
    entry = {"version": version, "time": time.time(), "writer": "elsewhere:1", "action": "add", "kind": kind,
             "partition": dict(WHERE), "file": f"{folder}/{name}", "rows": 1, "bytes": len(data),
             "sha256": hashlib.sha256(data).hexdigest(), "schema_version": 1,
             **({"sweep_version": sweep_version} if sweep_version else {})}
    (root / "_log" / f"{version:020d}.json").write_bytes(seal(entry))
    (root / "_log" / "HEAD").write_bytes(seal({"head": version}))


class TrustingLake(Lake):
    """A reader that applies every entry of the log as written, checking no name: what the
    views get from it is whatever the log says (the views' own defence is what is tested)."""

    def refresh(self) -> None:
        for path in sorted((Path(self.root) / "_log").glob("*.json")):
            version = int(path.stem)
            if version > self._state.version:
                self._apply(json.loads(path.read_bytes()))
                self._state.version = version


def _toy_lake(root: Path) -> Lake:
    lake = Lake(str(root))
    lake.commit("toy", WHERE, pa.table({"key": ["a", "b"], "value": [1.0, 2.0]}))
    return lake


def _files(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("kind, version, fragment", [
    pytest.param(HOSTILE_KIND, "", "kind", id="kind"),
    pytest.param("toy", HOSTILE_VERSION, "sweep version", id="sweep-version"),
])
def test_connect_refuses_a_name_that_is_not_plain_and_runs_no_sql(tmp_path, monkeypatch, kind, version, fragment):
    _toy_lake(tmp_path / "lake")
    craft_entry(tmp_path / "lake", kind, version)
    reader = tmp_path / "reader"
    reader.mkdir()
    monkeypatch.chdir(reader)
    lake = TrustingLake(str(tmp_path / "lake"))
    assert kind in lake.kinds()  # the crafted entry reaches the views
    with pytest.raises(LakeError) as info:
        connect(lake).close()
    assert fragment in str(info.value) and "is not a plain name" in str(info.value)
    assert "\n" not in str(info.value)
    assert not list(tmp_path.rglob("pwned.csv")) and _files(reader) == {}


def test_connect_serves_a_lake_of_plain_names_through_the_trusting_reader_too(tmp_path):
    """The trusting reader is a real reader: over a lake of plain names it serves the rows."""
    _toy_lake(tmp_path / "lake")
    craft_entry(tmp_path / "lake", "other")
    con = connect(TrustingLake(str(tmp_path / "lake")))
    try:
        assert con.sql("SELECT count(*) FROM toy").fetchall() == [(2,)]
        assert con.sql("SELECT key, kind, sweep, hardware FROM other").fetchall() == [("crafted", "other", "s", "h")]
    finally:
        con.close()


# -- every command over a lake holding the crafted entry ------------------------------------
def _commscale(*args: str, cwd: Path, report: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("COMMSCALE_LAKE", "RAY_ADDRESS")}
    env["COMMSCALE_REPORT"] = str(report)
    return subprocess.run([sys.executable, "-m", "sweeps.cli", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


@pytest.fixture(scope="module")
def smoke_lake(tmp_path_factory) -> Path:
    """A lake holding the whole smoke sweep, made by `commscale run` (so a second run of it
    has nothing to compute)."""
    work = tmp_path_factory.mktemp("smoke")
    done = _commscale("run", "sweep=smoke", "--num-cpus", "1", "--lake", str(work / "lake"), cwd=work,
                      report=work / "report")
    assert done.returncode == 0, done.stderr
    return work / "lake"


@pytest.mark.slow
@pytest.mark.parametrize("command", [
    pytest.param(["query", "SELECT count(*) FROM projection"], id="query"),
    pytest.param(["status"], id="status"),
    pytest.param(["report", "--out", "{tmp}/report-out"], id="report"),
    pytest.param(["run", "sweep=smoke", "--num-cpus", "1"], id="run"),
])
def test_no_command_runs_sql_from_a_crafted_kind(tmp_path, smoke_lake, command):
    lake = tmp_path / "lake"
    shutil.copytree(smoke_lake, lake)
    craft_entry(lake, HOSTILE_KIND)
    reader = tmp_path / "reader"
    reader.mkdir()
    args = [part.replace("{tmp}", str(tmp_path)) for part in command]
    done = _commscale(*args, "--lake", str(lake), cwd=reader, report=tmp_path / "report-env")
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.startswith("error: ")
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert not list(tmp_path.rglob("pwned.csv"))
    assert {path for path in _files(tmp_path) if not path.startswith("lake/")} == set()  # no file outside the lake
