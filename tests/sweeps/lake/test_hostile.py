"""A lake handed over by someone else (a shared copy, a snapshot, a bucket) can hold
crafted log entries, symbolic links, wrong sidecars and missing entries. None of them makes
a command run SQL from the lake, touch a file outside it, lose or double a row, or crash:
each is found, reported by ``lake verify`` and mended by ``lake verify --repair``."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import threading
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from sweeps.cli import main
from sweeps.errors import LakeError
from sweeps.lake import Lake
from sweeps.lake.entries import head_bytes, seal
from sweeps.lake.views import query

WHERE = {"sweep": "s", "hardware": "h"}


class Toy:
    """A small lake of kind ``toy`` under ``root``: ``commits`` files of four rows each."""

    def __init__(self, root: Path, commits: int = 5) -> None:
        self.root = root
        lake = Lake(str(root))
        for c in range(commits):
            lake.commit("toy", WHERE, pa.table({"key": [f"c{c}r{i}" for i in range(4)],
                                                "value": [c + i / 10 for i in range(4)]}))

    def rows(self) -> list:
        return sorted(query(Lake(str(self.root)), "SELECT key, value FROM toy").to_pylist(), key=str)

    def entry(self, version: int) -> Path:
        return self.root / "_log" / f"{version:020d}.json"

    def cli(self, *args: str):
        return CliRunner().invoke(main, [*args, "--lake", str(self.root)])

    def write_entry(self, version: int, entry: dict) -> None:
        """Write a log entry as anyone can: sealed with the unkeyed checksum."""
        self.entry(version).write_bytes(seal({"version": version, **entry}))
        (self.root / "_log" / "HEAD").write_bytes(head_bytes(version))


def _tree_digest(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# -- names are data --------------------------------------------------------------------
CRAFTED = [
    {"kind": 'v" AS SELECT 1; COPY (SELECT 1 AS x) TO \'pwned.csv\'; CREATE VIEW "w'},
    {"kind": "toy", "partition": {"sweep": "s'; COPY (SELECT 1) TO 'pwned.csv'; --", "hardware": "h"}},
    {"kind": "toy", "partition": {"sweep": "s", "hardware": "h"}, "sweep_version": "x'; DROP VIEW toy; --"},
    {"kind": "toy", "file": "kind=toy/sweep=s/hardware=h/../../../outside.parquet"},
    {"kind": "toy", "rows": "4; COPY"},
]


@pytest.mark.parametrize("crafted", CRAFTED, ids=["kind", "partition", "version", "file", "rows"])
def test_a_crafted_log_entry_is_refused_by_every_reader_and_runs_no_sql(tmp_path, monkeypatch, crafted):
    toy = Toy(tmp_path / "lake", commits=2)
    before = toy.rows()
    entry = {"action": "add", "partition": WHERE, "file": f"kind=toy/sweep=s/hardware=h/part-{'0' * 32}.parquet",
             "rows": 4, "bytes": 10, "sha256": "0" * 64, "keys_file": f"_keys/part-{'0' * 32}.keys", **crafted}
    toy.write_entry(3, entry)
    monkeypatch.chdir(tmp_path)
    for command in (["query", "SELECT count(*) FROM toy"], ["status"], ["report", "--out", str(tmp_path / "r")]):
        result = toy.cli(*command)
        assert result.exit_code == 2, (command, result.output)
        assert "entry 3 is damaged" in result.output and "not" in result.output and "Traceback" not in result.output
    assert not list(tmp_path.rglob("pwned.csv"))
    verified = toy.cli("lake", "verify")
    assert verified.exit_code == 1 and "entry 3 is damaged" in verified.output
    repaired = toy.cli("lake", "verify", "--repair")
    assert repaired.exit_code == 0 and "recorded as lost: commit-log entry 3" in repaired.output, repaired.output
    assert toy.rows() == before and not list(tmp_path.rglob("pwned.csv"))


def test_a_sweep_manifest_naming_a_crafted_kind_is_a_damaged_entry(tmp_path):
    toy = Toy(tmp_path / "lake", commits=1)
    toy.write_entry(2, {"action": "sweep", "sweep": "s", "hardware": "h", "kind": "toy' OR 1=1 --"})
    result = toy.cli("status")
    assert result.exit_code == 2 and "entry 2 is damaged: kind" in result.output, result.output


# -- symbolic links lead nowhere ---------------------------------------------------------
def _outside_with_parquet(tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    outside.mkdir()
    for i in range(3):
        pq.write_table(pa.table({"key": [f"o{i}"], "value": [1.0]}), outside / f"part-{i:032x}.parquet")
    (outside / ".part-x.parquet.tmp").write_bytes(b"someone else's")
    return outside


def test_vacuum_and_repair_never_act_through_a_symlinked_partition(tmp_path):
    toy = Toy(tmp_path / "lake", commits=2)
    outside = _outside_with_parquet(tmp_path)
    before = _tree_digest(outside)
    (toy.root / "kind=toy" / "sweep=s").rename(tmp_path / "moved")
    (toy.root / "kind=toy" / "sweep=s").symlink_to(outside, target_is_directory=True)
    vacuumed = toy.cli("lake", "vacuum", "--grace-s", "0")
    assert vacuumed.exit_code == 0 and "left symbolic link kind=toy/sweep=s" in vacuumed.output
    verified = toy.cli("lake", "verify", "--repair")
    assert verified.exit_code == 1 and "symbolic link kind=toy/sweep=s: not followed" in verified.output
    assert _tree_digest(outside) == before  # nothing deleted, moved or written out there


def test_a_symlinked_quarantine_receives_nothing(tmp_path):
    toy = Toy(tmp_path / "lake", commits=2)
    outside = tmp_path / "outside"
    outside.mkdir()
    (toy.root / "_quarantine").symlink_to(outside, target_is_directory=True)
    victim = sorted((toy.root / "kind=toy").rglob("part-*.parquet"))[0]
    victim.write_bytes(victim.read_bytes()[:50])
    result = toy.cli("lake", "verify", "--repair")
    assert result.exit_code == 1 and "symbolic link _quarantine" in result.output
    assert list(outside.iterdir()) == []
    assert len(toy.rows()) == 4  # the damaged file left the lake; the other's rows stay


def test_a_committed_file_reached_through_a_link_is_not_read(tmp_path):
    toy = Toy(tmp_path / "lake", commits=1)
    real = sorted((toy.root / "kind=toy").rglob("part-*.parquet"))[0]
    elsewhere = tmp_path / "elsewhere.parquet"
    shutil.move(real, elsewhere)
    real.symlink_to(elsewhere)
    with pytest.raises(LakeError, match="symbolic link"):
        toy.rows()


# -- no row lost to a missing newest entry -------------------------------------------------
def test_a_missing_newest_entry_is_found_and_vacuum_keeps_its_file(tmp_path):
    toy = Toy(tmp_path / "lake")
    before = toy.rows()
    toy.entry(5).unlink()
    result = toy.cli("query", "SELECT count(*) AS n FROM toy")
    assert result.exit_code == 2 and "entry 5 is missing" in result.output, result.output
    assert toy.cli("lake", "verify").exit_code == 1
    assert toy.cli("lake", "vacuum", "--grace-s", "0").exit_code == 2
    assert len(list((toy.root / "kind=toy").rglob("part-*.parquet"))) == 5
    repaired = toy.cli("lake", "verify", "--repair")
    assert repaired.exit_code == 0 and "adopted" in repaired.output, repaired.output
    assert toy.rows() == before


@pytest.mark.parametrize("missing", [(2, 3), (2, 3, 4, 5), tuple(range(2, 152))])
def test_repair_mends_gaps_of_any_length_in_one_run(tmp_path, missing):
    toy = Toy(tmp_path / "lake", commits=max(missing) + 1 if len(missing) < 10 else 152)
    before = toy.rows()
    for version in missing:
        toy.entry(version).unlink()
    repaired = toy.cli("lake", "verify", "--repair")
    assert repaired.exit_code == 0, repaired.output
    assert toy.rows() == before and toy.cli("lake", "verify").exit_code == 0


def test_an_entry_numbered_far_beyond_the_log_is_set_aside_not_filled(tmp_path):
    toy = Toy(tmp_path / "lake", commits=2)
    stray = toy.root / "_log" / f"{10**15:020d}.json"
    stray.write_bytes(seal({"version": 10**15, "action": "lost"}))
    assert toy.cli("lake", "verify").exit_code == 1
    repaired = toy.cli("lake", "verify", "--repair")
    assert repaired.exit_code == 0 and "numbered far beyond the log" in repaired.output
    assert len(list((toy.root / "_log").glob("*.json"))) == 2 and len(toy.rows()) == 8


def test_a_damaged_head_is_reported_and_rewritten(tmp_path):
    toy = Toy(tmp_path / "lake", commits=2)
    (toy.root / "_log" / "HEAD").write_bytes(b"{garbage")
    assert "head is damaged" in toy.cli("status").output
    assert toy.cli("lake", "verify", "--repair").exit_code == 0
    assert len(toy.rows()) == 8 and toy.cli("lake", "verify").exit_code == 0


# -- no key committed twice ----------------------------------------------------------------
def test_a_wrong_sidecar_of_the_right_length_commits_no_duplicate(tmp_path):
    toy = Toy(tmp_path / "lake", commits=2)
    entries = [json.loads(toy.entry(v).read_bytes()) for v in (1, 2)]
    first, second = (toy.root / e["keys_file"] for e in entries)
    first.write_bytes(second.read_bytes())  # four keys, but the second file's
    Lake(str(toy.root)).commit("toy", WHERE, pa.table({"key": ["c0r0", "c0r1", "new"], "value": [9.0, 9.0, 9.0]}))
    keys = [r["key"] for r in toy.rows()]
    assert len(keys) == len(set(keys)) == 9
    verified = toy.cli("lake", "verify")
    assert verified.exit_code == 1 and "holds other keys than its file" in verified.output


def test_verify_finds_keys_committed_twice_across_files_and_repair_keeps_the_first(tmp_path):
    toy = Toy(tmp_path / "lake", commits=2)
    entry = json.loads(toy.entry(1).read_bytes())
    twin = entry["file"].replace(entry["file"].rsplit("/", 1)[1], f"part-{'a' * 32}.parquet")
    table = pq.ParquetFile(toy.root / entry["file"]).read()
    pq.write_table(table.set_column(1, "value", pa.array([99.0] * 4)), toy.root / twin)
    data = (toy.root / twin).read_bytes()
    toy.write_entry(3, {**{k: v for k, v in entry.items() if k not in ("version", "check", "time", "writer")},
                        "file": twin, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                        "keys_file": entry["keys_file"], "keys_sha256": entry["keys_sha256"]})
    assert len(toy.rows()) == 12  # served twice: what verify must find
    verified = toy.cli("lake", "verify")
    assert verified.exit_code == 1 and "4 keys committed twice" in verified.output, verified.output
    assert toy.cli("lake", "verify", "--repair").exit_code == 0
    rows = toy.rows()
    assert len(rows) == 8 and all(r["value"] != 99.0 for r in rows)
    assert toy.cli("lake", "verify").exit_code == 0


# -- vacuum takes the commit lock ------------------------------------------------------------
def test_vacuum_waits_for_a_commit_in_progress_and_keeps_its_file(tmp_path):
    toy = Toy(tmp_path / "lake", commits=1)
    writer = Lake(str(toy.root))
    relative = f"kind=toy/sweep=s/hardware=h/part-{'b' * 32}.parquet"
    with writer._locked():  # a writer between publishing its file and logging it
        pq.write_table(pa.table({"key": ["late"], "value": [1.0]}), toy.root / relative)
        os.utime(toy.root / relative, (0, 0))
        vacuum = threading.Thread(target=lambda: Lake(str(toy.root)).vacuum(grace_s=0))
        vacuum.start()
        vacuum.join(3)  # without the lock it has deleted the file by now
        data = (toy.root / relative).read_bytes() if (toy.root / relative).exists() else b""
        writer._append({"action": "add", "kind": "toy", "partition": WHERE, "file": relative, "rows": 1,
                        "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "schema_version": 1})
    vacuum.join(60)
    assert (toy.root / relative).exists()
    assert len(toy.rows()) == 5


# -- a damaged marker has a way out --------------------------------------------------------
@pytest.mark.parametrize("garbage", [b"\x00\xffjunk", b"[1, 2]", b'{"format": "two"}', b""])
def test_a_garbage_lake_json_is_refused_with_its_remedy_and_repaired(tmp_path, garbage):
    toy = Toy(tmp_path / "lake", commits=2)
    (toy.root / "_lake.json").write_bytes(garbage)
    result = toy.cli("query", "SELECT count(*) FROM toy")
    assert result.exit_code == 2 and "lake verify --repair" in result.output, result.output
    repaired = toy.cli("lake", "verify", "--repair")
    assert repaired.exit_code == 0 and "restored _lake.json" in repaired.output, repaired.output
    assert len(toy.rows()) == 8
