"""Verify a lake, and repair it without losing a committed row (``commscale lake verify
[--repair]``).

``verify`` finds every fault: entries of the commit log that are missing or damaged,
a lost ``_lake.json``, data files whose bytes differ from their commit (these it sets aside
in ``_quarantine/`` and removes from the lake, as before: their keys are measured again),
key sidecars that are missing or wrong, and orphan data files that no commit ever named.

``verify(repair=True)`` also mends what can be mended, as a write-ahead log recovers:

- a damaged newest log entry is rolled back (moved to ``_log/_damaged/``): an entry that
  cannot be read was never a whole commit;
- a missing or damaged earlier entry is replaced by a ``lost`` entry, so the log is a whole
  sequence again (the damaged one is kept in ``_log/_damaged/``);
- ``_lake.json`` is restored; sidecars are rebuilt from their data files;
- orphan data files are adopted (a file whose commit entry was lost comes back): in place
  when none of their keys is committed, else their new rows as a new file, the original
  moved to ``_quarantine/``. Nothing is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from sweeps.lake.integrity import forget, parquet_fault
from sweeps.lake.kinds import SCHEMAS
from sweeps.lake.store import LakeStore

__all__ = ["LakeRepair", "VerifyReport"]

_PARTITION_COLUMNS = ("kind", "sweep", "hardware")


@dataclass
class VerifyReport:
    """What ``verify`` found and did. ``bad``: data files set aside (path, reason, keys);
    ``keys_to_redo``: kind -> their keys, which the next run of their sweeps measures again."""

    checked: int = 0
    bad: List[Tuple[str, str, int]] = field(default_factory=list)
    keys_to_redo: Dict[str, Set[str]] = field(default_factory=dict)
    log: List[str] = field(default_factory=list)          # problems of the commit log
    sidecars: List[Tuple[str, str]] = field(default_factory=list)  # (sidecar, what is wrong)
    orphans: List[str] = field(default_factory=list)      # data files no commit ever named
    meta_missing: bool = False
    repaired: List[str] = field(default_factory=list)     # what --repair did, one line each

    @property
    def clean(self) -> bool:
        """Nothing found that needs a repair or a re-run (orphans alone are left by crashed
        writers, and ``vacuum`` removes them)."""
        return not (self.bad or self.log or self.sidecars or self.meta_missing)


class LakeRepair(LakeStore):
    """The store plus ``verify`` and its repairs."""

    def verify(self, *, repair: bool = False) -> VerifyReport:
        """Check the log, the data files, their sidecars; with ``repair``, mend them."""
        report = VerifyReport()
        self.ensure_exists()
        if self._read_json(self._path("_lake.json")) is not None:
            self.check_format(create=False)  # a lake of another format is refused, not repaired
        report.meta_missing = self._read_json(self._path("_lake.json")) is None and bool(self._log_versions())
        report.log = [p.describe() for p in self.scan_log(0).problems]
        if report.log and not repair:
            return report  # the state cannot be trusted until the log is whole
        if repair:
            self._repair_log(report)
            if report.meta_missing:
                self._write_meta()
                report.repaired.append("restored _lake.json")
        self.refresh()
        self._verify_files(report)
        self._verify_sidecars(report, repair)
        report.orphans = self._orphans()
        if repair and report.orphans:
            for relative in report.orphans:
                report.repaired.append(self.adopt(relative))
        return report

    def _repair_log(self, report: VerifyReport) -> None:
        with self._locked(refresh=False):
            scan = self.scan_log(0)
            for problem in scan.problems:
                path = self._path(f"_log/{problem.version:020d}.json")
                if problem.kind in ("torn", "damaged"):
                    self._set_aside(path, f"_log/_damaged/{problem.version:020d}.json")
                if problem.kind == "torn":
                    report.repaired.append(f"rolled back {problem.describe()}")
                    continue
                gap_end = problem.version + 1 if problem.kind == "damaged" else self._next_present(problem.version)
                for version in range(problem.version, gap_end):
                    self._write_entry(version, {"action": "lost", "reason": problem.describe()})
                report.repaired.append(f"recorded as lost: {problem.describe()}")
            self._reset_state()  # read the mended log from its start

    def _next_present(self, version: int) -> int:
        return min(v for v in self._log_versions() if v > version)

    def _set_aside(self, path: str, relative: str) -> None:
        target = self._path(relative)
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        self.fs.move(path, target)
        forget(path)

    def _verify_files(self, report: VerifyReport) -> None:
        """Set aside every committed file whose bytes differ from its commit."""
        for relative, entry in sorted(self._state.files.items()):
            report.checked += 1
            reason = parquet_fault(self.fs, self._path(relative), entry)
            if reason is None:
                continue
            keys = self.sidecar_keys(entry) or set()
            with self._locked():
                if relative not in self._state.files:
                    continue
                quarantine = f"_quarantine/v{self._state.version + 1}/{relative.replace('/', '__')}"
                with contextlib.suppress(FileNotFoundError, OSError):
                    self._set_aside(self._path(relative), quarantine)
                self._append({"action": "remove", "files": [relative], "reason": f"verify: {reason}",
                              "quarantine": quarantine})
            report.bad.append((self._path(relative), reason, len(keys)))
            report.keys_to_redo.setdefault(entry["kind"], set()).update(keys)

    def _verify_sidecars(self, report: VerifyReport, repair: bool) -> None:
        """Each live file's key sidecar holds exactly its keys; with ``repair``, rebuild it."""
        for relative, entry in sorted(self._state.files.items()):
            if "keys_file" not in entry:
                continue
            keys = self.sidecar_keys(entry)
            wanted = self.data_keys(relative)
            if keys == wanted:
                continue
            why = "missing or unreadable" if keys is None else f"{len(keys)} keys where its file has {len(wanted)}"
            report.sidecars.append((self._path(entry["keys_file"]), why))
            if repair:
                table = pa.table({"key": pa.array(sorted(wanted), pa.string())})
                temporary = self._path(f"{entry['keys_file']}.rebuilt.tmp")
                self._write_parquet(temporary, table)
                self._publish(temporary, self._path(entry["keys_file"]))
                report.repaired.append(f"rebuilt {self._path(entry['keys_file'])} from {self._path(relative)}")

    def _orphans(self) -> List[str]:
        """Data files under ``kind=...`` that no add entry of the log ever named."""
        named = self._named()
        return sorted(relative for info in self._raw_files()
                      if (relative := info.path[len(self.root) + 1:]) not in named
                      and info.base_name.endswith(".parquet") and not info.base_name.startswith("."))

    def adopt(self, relative: str) -> str:
        """Bring a data file no commit names into the lake without deleting it; says how.
        Decided under the commit lock, so a file a writer commits meanwhile is left alone."""
        parts = dict(p.split("=", 1) for p in relative.split("/")[:-1] if "=" in p)
        kind = parts.pop("kind", None)
        table = self._readable(relative)
        with self._locked():
            if relative in self._named():
                return f"left {self._path(relative)}: a commit names it now"
            if kind is None or table is None or "key" not in table.column_names:
                self._set_aside(self._path(relative), f"_quarantine/unreadable/{relative.replace('/', '__')}")
                return f"set aside {self._path(relative)}: not a readable data file with keys"
            committed = self._committed_keys(kind)
            keys = table.column("key").to_pylist()
            if not any(k in committed for k in keys) and len(set(keys)) == len(keys) \
                    and not set(_PARTITION_COLUMNS) & set(table.column_names):
                self._adopt_in_place(relative, kind, parts, table)
                return f"adopted {self._path(relative)} in place ({table.num_rows} rows)"
        table = table.drop_columns([c for c in _PARTITION_COLUMNS if c in table.column_names])
        written = self.commit(kind, parts, table, schema_version=_schema_version(kind, table)).rows_written
        with self._locked():
            if relative not in self._named():
                self._set_aside(self._path(relative), f"_quarantine/adopted/{relative.replace('/', '__')}")
        return (f"adopted {written} new rows of {self._path(relative)} as a new file (the original is in "
                "_quarantine/adopted/)")

    def _named(self) -> Set[str]:
        """Every data file an add entry of the log ever named (removed ones too)."""
        return {entry["file"] for _, entry in self.scan_log(0).entries if entry["action"] == "add"}

    def _readable(self, relative: str) -> Optional[pa.Table]:
        try:
            with self.fs.open_input_stream(self._path(relative)) as handle:
                return pq.read_table(pa.BufferReader(handle.read()))
        except (OSError, pa.ArrowException):
            return None

    def _adopt_in_place(self, relative: str, kind: str, partition: Dict[str, str], table: pa.Table) -> None:
        """An add entry naming the existing file (call under the lock)."""
        with self.fs.open_input_stream(self._path(relative)) as handle:
            data = handle.read()
        name = relative.rsplit("/", 1)[-1]
        keys_file = f"_keys/{name[:-len('.parquet')]}.keys"
        self.fs.create_dir(self._path("_keys"), recursive=True)
        self._write_parquet(self._path(keys_file), table.select(["key"]))
        self._append({"action": "add", "kind": kind, "partition": partition, "file": relative, "rows": table.num_rows,
                      "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "schema_version": _schema_version(kind, table), "keys_file": keys_file, "adopted": True})


def _schema_version(kind: str, table: pa.Table) -> int:
    """The kind's current schema version if ``table`` has its columns, else 1 (the version
    of the rows a lake of commscale 0.1 held)."""
    schema, version = SCHEMAS.get(kind, (None, 1))
    return version if schema is not None and set(schema.names) <= set(table.column_names) else 1
