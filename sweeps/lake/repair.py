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
import uuid
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from sweeps.lake.entries import FAR_GAP, LogProblem
from sweeps.lake.integrity import forget, parquet_fault
from sweeps.lake.files import first_of_each_key
from sweeps.lake.kinds import SCHEMAS, SHARED_KINDS
from sweeps.lake.meta import MARKER
from sweeps.lake.names import KIND, PARTITION_KEY, PARTITION_VALUE, name_fault
from sweeps.lake.store import LakeStore, as_stored

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
    meta_damaged: Optional[str] = None                    # why _lake.json cannot be read
    links: List[str] = field(default_factory=list)        # symbolic links under the root, never followed
    duplicates: List[Tuple[str, int]] = field(default_factory=list)  # (file, keys committed earlier too)
    repaired: List[str] = field(default_factory=list)     # what --repair did, one line each

    @property
    def clean(self) -> bool:
        """Nothing found that needs a repair or a re-run (orphans alone are left by crashed
        writers, and ``vacuum`` removes them)."""
        return not (self.bad or self.log or self.sidecars or self.meta_missing or self.meta_damaged or self.links
                    or self.duplicates)


class LakeRepair(LakeStore):
    """The store plus ``verify`` and its repairs."""

    def verify(self, *, repair: bool = False) -> VerifyReport:
        """Check the log, the data files, their sidecars; with ``repair``, mend them."""
        report = VerifyReport()
        self.ensure_exists()
        meta, report.meta_damaged = self.read_marker()
        if meta is not None:
            self.check_format(create=False)  # a lake of another format is refused, not repaired
        report.meta_missing = meta is None and report.meta_damaged is None and bool(self._log_versions())
        report.log = [p.describe() for p in self.scan_log(0).problems]
        report.links = self.links()
        if report.log and not repair:
            return report  # the state cannot be trusted until the log is whole
        if repair:
            if report.meta_damaged:
                report.repaired.append(self._restore_marker())
            self._repair_log(report)
            if report.meta_missing:
                self._write_meta()
                report.repaired.append("restored _lake.json")
        self.refresh()
        self._verify_files(report)
        self._verify_sidecars(report, repair)
        self._verify_duplicates(report, repair)
        report.orphans = self._orphans()
        if repair and report.orphans:
            for relative in report.orphans:
                report.repaired.append(self.adopt(relative))
        return report

    def _repair_log(self, report: VerifyReport) -> None:
        """Mend the log under the lock: entries beyond a far gap and damaged ones are set
        aside, a torn newest one rolled back, every missing version up to the newest (or
        the head) recorded as lost, in one pass over gaps of any length; then the head is
        written anew."""
        with self._locked(refresh=False):
            scan = self.scan_log(0)
            for version in self._beyond_far_gap():
                self._set_aside(self._path(_entry_name(version)), f"_log/_damaged/{version:020d}.json")
                report.repaired.append(f"set aside commit-log entry {version}: numbered far beyond the log")
            scan = self.scan_log(0)
            for problem in scan.problems:
                if problem.kind in ("torn", "damaged"):
                    self._set_aside(self._path(_entry_name(problem.version)),
                                    f"_log/_damaged/{problem.version:020d}.json")
                if problem.kind == "torn":
                    report.repaired.append(f"rolled back {problem.describe()}")
                elif problem.kind == "head":
                    report.repaired.append(f"rewrote the head: {problem.describe()}")
                else:
                    report.repaired.append(f"recorded as lost: {problem.describe()}")
            top = self._record_missing_as_lost(scan)
            if scan.problems or scan.head != top:
                self._write_head(top)
            self._reset_state()  # read the mended log from its start

    def _beyond_far_gap(self) -> List[int]:
        """Entries after a gap of ``FAR_GAP`` versions or more: not of this log."""
        versions, previous = self._log_versions(), 0
        for index, version in enumerate(versions):
            if version - previous > FAR_GAP:
                return versions[index:]
            previous = version
        return []

    def _record_missing_as_lost(self, scan) -> int:
        """Write a ``lost`` entry for every version missing up to the newest present, or up
        to the head if it records more (within ``FAR_GAP``); returns that newest version."""
        present = set(self._log_versions())
        newest = max(present, default=0)
        top = scan.head if newest < scan.head <= newest + FAR_GAP else newest
        reasons = {p.version: p.describe() for p in scan.problems if p.kind in ("gap", "damaged")}
        for version in range(1, top + 1):
            if version not in present:
                reason = reasons.get(version) or _covering(scan.problems, version)
                self._write_entry(version, {"action": "lost", "reason": reason})
        return top

    def _restore_marker(self) -> str:
        """Set a damaged ``_lake.json`` aside (in ``_quarantine/``) and write it anew."""
        aside = f"_quarantine/{MARKER}.{uuid.uuid4().hex[:8]}"
        self._set_aside(self._path(MARKER), aside)
        self._write_meta()
        self._format_ok = False
        return f"restored {MARKER} (the damaged one is now {self._path(aside)})"

    def _set_aside(self, path: str, relative: str) -> bool:
        """Move ``path`` (absolute, under the root) to ``relative``; neither is moved
        through a symbolic link (returns False then, and the file stays where it is)."""
        if self._through_link(path[len(self.root) + 1:]) or self._through_link(relative):
            return False
        target = self._path(relative)
        self.fs.create_dir(target.rsplit("/", 1)[0], recursive=True)
        self.fs.move(path, target)
        forget(path)
        return True

    def _verify_files(self, report: VerifyReport) -> None:
        """Set aside every committed file whose bytes differ from its commit."""
        for relative, entry in sorted(self._state.files.items()):
            report.checked += 1
            reason = self._link_fault(relative) or parquet_fault(self.fs, self._path(relative), entry)
            if reason is None:
                continue
            keys = self.sidecar_keys(entry) or set()
            with self._locked():
                if relative not in self._state.files:
                    continue
                quarantine = f"_quarantine/v{self._state.version + 1}/{relative.replace('/', '__')}"
                moved = False
                with contextlib.suppress(FileNotFoundError, OSError):
                    moved = self._set_aside(self._path(relative), quarantine)
                self._append({"action": "remove", "files": [relative], "reason": f"verify: {reason}",
                              **({"quarantine": quarantine} if moved else {})})
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
            why = ("missing or unreadable" if keys is None else f"{len(keys)} keys where its file has {len(wanted)}"
                   if len(keys) != len(wanted) else "holds other keys than its file")
            report.sidecars.append((self._path(entry["keys_file"]), why))
            if repair and self._through_link(entry["keys_file"]):
                report.repaired.append(f"left {self._path(entry['keys_file'])}: a symbolic link (not followed)")
            elif repair:
                table = pa.table({"key": pa.array(sorted(wanted), pa.string())})
                temporary = self._path(f"{entry['keys_file']}.rebuilt.tmp")
                self._write_parquet(temporary, table)
                self._publish(temporary, self._path(entry["keys_file"]))
                report.repaired.append(f"rebuilt {self._path(entry['keys_file'])} from {self._path(relative)}")

    def _verify_duplicates(self, report: VerifyReport, repair: bool) -> None:
        """No key is committed twice where a commit would have refused it: within a file,
        or in a later file of the same scope (the kind, or for a file of a sweep version, that
        version of its partition). With ``repair`` each such file is replaced by one without
        the repeated rows; the first committed row of each key stays."""
        seen: Dict[Tuple[str, ...], Set[str]] = {}
        for relative, entry in list(self._state.files.items()):  # log order
            keys = self.data_key_list(relative)
            scope = _key_scope(relative, entry)
            prior = seen.setdefault(scope, set())
            within: Set[str] = set()
            repeated = {k for k in keys if k in prior or (k in within or within.add(k))}
            for wider in {scope, (entry["kind"],)}:
                seen.setdefault(wider, set()).update(keys)
            if not repeated:
                continue
            report.duplicates.append((self._path(relative), len(repeated)))
            if repair:
                report.repaired.append(self._drop_repeated(relative, entry, prior))

    def _drop_repeated(self, relative: str, entry: dict, prior: Set[str]) -> str:
        """Replace a committed file by one without the rows whose key ``prior`` holds or
        that repeat within it."""
        table = first_of_each_key(self._stored_table(relative))
        table = table.filter(pa.array([k not in prior for k in table.column("key").to_pylist()], pa.bool_()))
        self._replace_file(relative, entry, table, "verify: repeats committed keys")
        return f"replaced {self._path(relative)} by its {table.num_rows} rows whose keys were not committed before"

    def _stored_table(self, relative: str) -> pa.Table:
        """The rows of a committed data file, without the partition columns older files hold."""
        with self.fs.open_input_stream(self._path(relative)) as handle:
            table = pq.read_table(pa.BufferReader(handle.read()))
        return table.drop_columns([c for c in _PARTITION_COLUMNS if c in table.column_names])

    def _replace_file(self, relative: str, entry: dict, table: pa.Table, reason: str) -> None:
        """Commit ``table`` as the new file of ``relative``'s partition and version, then
        remove ``relative`` from the lake and move it to ``_quarantine/replaced/`` (a raw
        reader of the folder no longer sees it; nothing is deleted): a crash between the
        two leaves both, never neither."""
        table = as_stored(table, entry["partition"], entry.get("sweep_version"))
        with self._locked():
            if relative not in self._state.files:
                return
            if table.num_rows:
                staged = self._stage(relative.rsplit("/", 1)[0], table)
                self._publish_staged(staged, table, entry["kind"], entry["partition"],
                                     schema_version=entry.get("schema_version", 1),
                                     sweep_version=entry.get("sweep_version"), restage=False)
            self._append({"action": "remove", "files": [relative], "reason": reason})
            with contextlib.suppress(FileNotFoundError, OSError):
                self._set_aside(self._path(relative), f"_quarantine/replaced/{relative.replace('/', '__')}")

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
            fault = _folder_fault(kind, parts)
            if fault is not None:
                self._set_aside(self._path(relative), f"_quarantine/unnamed/{relative.replace('/', '__')}")
                return f"set aside {self._path(relative)}: its folder's {fault}"
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
        keys_digest = self._write_parquet(self._path(keys_file), table.select(["key"]))[1]
        self._append({"action": "add", "kind": kind, "partition": partition, "file": relative, "rows": table.num_rows,
                      "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(),
                      "schema_version": _schema_version(kind, table), "keys_file": keys_file,
                      "keys_sha256": keys_digest, "adopted": True})


def _folder_fault(kind: str, partition: Dict[str, str]) -> Optional[str]:
    """Why the folder an orphan lies in names no plain kind or partition, or None."""
    fault = name_fault("kind", kind, KIND)
    for key, value in partition.items():
        fault = fault or name_fault("partition key", key, PARTITION_KEY) or name_fault(key, value, PARTITION_VALUE)
    return fault


def _key_scope(relative: str, entry: dict) -> Tuple[str, ...]:
    """Where a file's keys must be new, as ``commit`` decides it: its kind, or for a file of
    a sweep version (of a kind not shared), that version of its partition."""
    version = entry.get("sweep_version")
    if version is None or entry["kind"] in SHARED_KINDS:
        return (entry["kind"],)
    return (entry["kind"], relative.rsplit("/", 1)[0], version)


def _entry_name(version: int) -> str:
    return f"_log/{version:020d}.json"


def _covering(problems: List[LogProblem], version: int) -> str:
    """The description of the gap problem whose run of missing versions holds ``version``."""
    gaps = [p for p in problems if p.kind == "gap" and p.version <= version]
    return gaps[-1].describe() if gaps else f"commit-log entry {version} is missing"


def _schema_version(kind: str, table: pa.Table) -> int:
    """The kind's current schema version if ``table`` has its columns, else 1 (the version
    of the rows a lake of commscale 0.1 held)."""
    schema, version = SCHEMAS.get(kind, (None, 1))
    return version if schema is not None and set(schema.names) <= set(table.column_names) else 1
