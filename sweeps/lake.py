"""The Parquet lake: hive-partitioned result files behind a commit log.

Layout under ROOT (a local path, or a pyarrow filesystem URI)::

    _lake.json                                   format version of the lake
    _log/00000000000000000001.json ...           commit log: one JSON entry per commit
    _keys/part-UUID.keys                         the keys of each data file (Parquet)
    kind=KIND/sweep=SWEEP/hardware=HW/part-UUID.parquet
    _quarantine/                                 files set aside by ``verify``

Contract (after Delta Lake's commit protocol, simplified to one lock):

- A data file is written under a hidden temporary name (``.`` prefix), fsynced, then
  renamed into place; it becomes part of the lake only when a log entry names it. Readers
  (``files``, ``dataset``, ``analysis.query``) read the log, so they see committed files
  only; a file left by a crash before its entry is an orphan that ``vacuum`` removes.
- Commits from any number of processes are serialised by an exclusive lock on
  ``_log/.lock`` (``fcntl.flock``; local filesystems). Under the lock the writer reads the
  log's new entries and drops rows whose key is already committed, so a key committed
  twice, by a retry or by two writers, is one result.
- Each add entry records the file's row count, size and sha256, and names a sidecar
  holding its keys (read only by writers, ``keys`` and ``verify``, so readers that only
  list files stay fast): ``verify`` finds
  truncated or corrupt files, moves them to ``_quarantine``, removes them from the lake
  with a log entry, and reports the keys to measure again.
- On a non-local filesystem there is no lock: one writer at a time.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import io
import json
import os
import re
import socket
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sweeps.errors import LakeError

__all__ = ["Lake", "LAKE_FORMAT", "CommitResult", "VerifyReport", "VacuumReport"]

#: Version of the lake's layout and log. 1 was the log-less lake of commscale 0.1.
LAKE_FORMAT = 2
_ENTRY = re.compile(r"^(\d{20})\.json$")


@dataclass
class CommitResult:
    """What one commit did: the file it added (None if every row was already there)."""

    path: Optional[str]
    rows_written: int
    rows_skipped: int
    version: Optional[int]


@dataclass
class VerifyReport:
    """Files checked, files set aside with their reason, and the keys they held."""

    checked: int = 0
    bad: List[Tuple[str, str, int]] = field(default_factory=list)  # (path, reason, keys)
    keys_to_redo: Dict[str, Set[str]] = field(default_factory=dict)  # kind -> keys


@dataclass
class VacuumReport:
    removed: List[str] = field(default_factory=list)
    bytes_freed: int = 0


@dataclass
class _State:
    version: int = 0
    files: Dict[str, dict] = field(default_factory=dict)  # relative path -> add entry
    sweeps: Dict[Tuple[str, str], dict] = field(default_factory=dict)  # (sweep, hardware) -> entry


class Lake:
    """A lake rooted at ``root`` (path or URI). Constructing it touches nothing."""

    def __init__(self, root: str) -> None:
        self.root_spec = str(root)
        try:
            if "://" in self.root_spec:
                self.fs, self.root = pafs.FileSystem.from_uri(self.root_spec)
            else:
                self.fs, self.root = pafs.LocalFileSystem(), str(Path(self.root_spec).expanduser().resolve())
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, OSError) as exc:
            raise LakeError(f"lake path {self.root_spec!r} cannot be opened: {exc}") from None
        self.root = self.root.rstrip("/") or "/"
        self._state = _State()
        self._format_ok = False
        self._file_keys: Dict[str, Set[str]] = {}  # relative path -> keys, loaded on demand
        self._kind_keys: Dict[str, Set[str]] = {}  # kind -> keys of its loaded live files

    @property
    def local_root(self) -> Optional[Path]:
        """The root as a local path, or None for a remote filesystem."""
        return Path(self.root) if isinstance(self.fs, pafs.LocalFileSystem) else None

    def __str__(self) -> str:
        return str(self.local_root) if self.local_root else self.root_spec

    def _path(self, relative: str) -> str:
        return f"{self.root}/{relative}"

    # -- checks, run before any work -------------------------------------------------
    def ensure_writable(self) -> None:
        """Create the root if needed, prove a file can be written, check the format."""
        probe = self._path(f".probe-{uuid.uuid4().hex}")
        try:
            self.fs.create_dir(self.root, recursive=True)
            with self.fs.open_output_stream(probe) as out:
                out.write(b"ok")
            self.fs.delete_file(probe)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake path {self.root_spec!r} is not writable: {exc}") from None
        self.check_format(create=True)

    def ensure_readable(self) -> None:
        """The root must exist, be a directory, and hold a lake this version reads."""
        try:
            info = self.fs.get_file_info(self.root)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake path {self.root_spec!r} cannot be read: {exc}") from None
        if info.type == pafs.FileType.NotFound:
            raise LakeError(f"lake path {self.root_spec!r} does not exist; `commscale run` creates it")
        if info.type != pafs.FileType.Directory:
            raise LakeError(f"lake path {self.root_spec!r} is not a directory")
        self.check_format(create=False)

    def check_format(self, *, create: bool) -> None:
        """Refuse a lake of another format with what to do; create ``_lake.json`` if asked."""
        if self._format_ok:
            return
        meta = self._read_json(self._path("_lake.json"))
        if meta is None:
            if self._raw_data_files():
                raise LakeError(
                    f"lake {self} was written by commscale 0.1 (format 1, no commit log); "
                    f"run `commscale lake upgrade --lake {self.root_spec}` to adopt its files"
                )
            if create:
                self.fs.create_dir(self.root, recursive=True)
                self._write_meta()
                self._format_ok = True
            return
        found = meta.get("format")
        if found != LAKE_FORMAT:
            hint = ("upgrade commscale to read it" if isinstance(found, int) and found > LAKE_FORMAT
                    else f"run `commscale lake upgrade --lake {self.root_spec}`")
            raise LakeError(f"lake {self} has format {found}, this commscale reads format {LAKE_FORMAT}: {hint}")
        self._format_ok = True

    # -- layout -----------------------------------------------------------------------
    def partition_dir(self, kind: str, partition: Dict[str, str]) -> str:
        """Relative directory of a partition, e.g. ``kind=projection/sweep=s/hardware=h``."""
        parts = [f"kind={kind}"] + [f"{k}={v}" for k, v in partition.items()]
        for part in parts:
            if "/" in part or part.count("=") != 1 or part.endswith("=") or ".." in part:
                raise LakeError(f"partition value {part!r} must be a plain name (no '/', '=' or '..')")
        return "/".join(parts)

    # -- the log ----------------------------------------------------------------------
    def refresh(self) -> None:
        """Apply log entries committed since the last refresh to the cached state."""
        log_dir = self._path("_log")
        selector = pafs.FileSelector(log_dir, allow_not_found=True)
        versions = sorted(
            int(m.group(1)) for info in self.fs.get_file_info(selector)
            if (m := _ENTRY.match(info.base_name))
        )
        for version in versions:
            if version <= self._state.version:
                continue
            entry = self._read_json(f"{log_dir}/{version:020d}.json")
            if entry is None:
                raise LakeError(f"commit log entry {version} of lake {self} vanished while being read")
            self._apply(entry)
            self._state.version = version

    def _apply(self, entry: dict) -> None:
        state = self._state
        action = entry["action"]
        if action == "add":
            state.files[entry["file"]] = entry
        elif action == "remove":
            for relative in entry["files"]:
                gone = state.files.pop(relative, None)
                if gone is not None and relative in self._file_keys:
                    self._kind_keys.get(gone["kind"], set()).difference_update(self._file_keys.pop(relative))
        elif action == "sweep":
            state.sweeps[(entry["sweep"], entry["hardware"])] = entry

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Exclusive commit lock across processes (local filesystems), state refreshed."""
        if self.local_root is None:
            self.refresh()
            yield
            return
        log_dir = Path(self.root) / "_log"
        log_dir.mkdir(parents=True, exist_ok=True)
        with open(log_dir / ".lock", "a+") as handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                self.refresh()
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _append(self, entry: dict) -> int:
        """Write the next log entry (call under the lock); returns its version."""
        version = self._state.version + 1
        entry = {"version": version, "time": time.time(), "writer": f"{socket.gethostname()}:{os.getpid()}", **entry}
        final = self._path(f"_log/{version:020d}.json")
        data = json.dumps(entry, separators=(",", ":")).encode()
        if self.local_root is not None:
            temporary = f"{final}.{uuid.uuid4().hex}.tmp"
            self._write_bytes(temporary, data)
            try:
                os.link(temporary, final)  # fails if the version exists: never overwrite
            finally:
                os.unlink(temporary)
            _fsync_dir(os.path.dirname(final))
        else:
            self._write_bytes(final, data)
        self._apply(entry)
        self._state.version = version
        return version

    # -- writing ----------------------------------------------------------------------
    def commit(self, kind: str, partition: Dict[str, str], table: pa.Table, *, schema_version: int = 1) -> CommitResult:
        """Add ``table``'s rows whose ``key`` is not yet in ``kind``, as one new file.

        Atomic and idempotent: the rows appear together or not at all; rows whose key is
        committed already (or repeated within ``table``) are skipped, not duplicated.
        """
        directory = self.partition_dir(kind, partition)
        self.check_format(create=True)
        table = _first_of_each_key(table)
        name = f"part-{uuid.uuid4().hex}.parquet"
        relative = f"{directory}/{name}"
        temporary = self._path(f"{directory}/.{name}.tmp")
        self.fs.create_dir(self._path(directory), recursive=True)
        keys_file = f"_keys/{name[:-len('.parquet')]}.keys"  # not *.parquet: raw globs skip it
        self.fs.create_dir(self._path("_keys"), recursive=True)
        size, digest = self._write_parquet(temporary, table)
        self._write_parquet(self._path(keys_file), table.select(["key"]))
        with self._locked():
            committed = self._committed_keys(kind)
            fresh = [key not in committed for key in table.column("key").to_pylist()]
            skipped = fresh.count(False)
            if skipped:
                table = table.filter(pa.array(fresh))
                if table.num_rows == 0:
                    self.fs.delete_file(temporary)
                    self.fs.delete_file(self._path(keys_file))
                    return CommitResult(None, 0, skipped, None)
                size, digest = self._write_parquet(temporary, table)
                self._write_parquet(self._path(keys_file), table.select(["key"]))
            self._publish(temporary, self._path(relative))
            version = self._append({
                "action": "add", "kind": kind, "partition": dict(partition), "file": relative,
                "rows": table.num_rows, "bytes": size, "sha256": digest,
                "schema_version": schema_version, "keys_file": keys_file,
            })
        return CommitResult(self._path(relative), table.num_rows, skipped, version)

    def record_sweep(self, manifest: dict) -> None:
        """Commit a sweep's manifest (name, hardware, fingerprints, planned count)."""
        with self._locked():
            self._append({"action": "sweep", **manifest})

    def sweeps(self) -> Dict[Tuple[str, str], dict]:
        """The latest manifest of every (sweep, hardware) the lake holds."""
        self.refresh()
        return dict(self._state.sweeps)

    def remove_partition(self, kind: str, sweep: str, reason: str) -> int:
        """Take every file of a sweep (any hardware) out of ``kind``; returns file count.
        The data stays on disk until ``vacuum``."""
        prefix = f"kind={kind}/sweep={sweep}/"
        with self._locked():
            doomed = [f for f in self._state.files if f.startswith(prefix)]
            if doomed:
                self._append({"action": "remove", "files": doomed, "reason": reason})
        return len(doomed)

    # -- reading ----------------------------------------------------------------------
    def kinds(self) -> List[str]:
        """Result kinds with committed files."""
        self.refresh()
        return sorted({entry["kind"] for entry in self._state.files.values()})

    def files(self, kind: str, partition: Optional[Dict[str, str]] = None) -> List[str]:
        """Committed data files of a kind (or of one partition of it), sorted, absolute."""
        self.refresh()
        prefix = self.partition_dir(kind, partition or {}) + "/"
        return sorted(self._path(f) for f in self._state.files if f.startswith(prefix))

    def schema_versions(self, kind: str) -> Set[int]:
        self.refresh()
        return {e.get("schema_version", 1) for e in self._state.files.values() if e["kind"] == kind}

    def dataset(self, kind: str) -> ds.Dataset:
        """A pyarrow dataset over the committed files of a kind, partitions as columns."""
        return ds.dataset(
            self.files(kind), filesystem=self.fs, format="parquet",
            partitioning=ds.HivePartitioning.discover(), partition_base_dir=self._path(f"kind={kind}"),
        )

    def keys(self, kind: str, partition: Optional[Dict[str, str]] = None) -> Set[str]:
        """Keys committed in a kind, or in one partition of it."""
        self.refresh()
        if partition is None:
            return set(self._committed_keys(kind))
        prefix = self.partition_dir(kind, partition) + "/"
        found: Set[str] = set()
        for relative in list(self._state.files):
            if relative.startswith(prefix):
                found.update(self._keys_of(relative))
        return found

    def _keys_of(self, relative: str) -> Set[str]:
        """The keys of one committed file, from its sidecar (cached)."""
        if relative not in self._file_keys:
            entry = self._state.files[relative]
            if "keys" in entry:  # an entry that carries its keys inline
                keys = set(entry["keys"])
            else:
                with self.fs.open_input_file(self._path(entry["keys_file"])) as handle:
                    keys = set(pq.read_table(handle).column("key").to_pylist())
            self._file_keys[relative] = keys
            self._kind_keys.setdefault(entry["kind"], set()).update(keys)
        return self._file_keys[relative]

    def _committed_keys(self, kind: str) -> Set[str]:
        """Keys of every live file of ``kind`` (loads the sidecars not yet loaded)."""
        for relative, entry in list(self._state.files.items()):
            if entry["kind"] == kind:
                self._keys_of(relative)
        return self._kind_keys.setdefault(kind, set())

    # -- maintenance ------------------------------------------------------------------
    def verify(self) -> VerifyReport:
        """Check every committed file against its log entry (size, sha256, readable).

        A bad file is moved to ``_quarantine/`` and removed from the lake by a log entry;
        its keys are reported, and the next run of its sweep projects them again.
        """
        report = VerifyReport()
        self.refresh()
        for relative, entry in sorted(self._state.files.items()):
            report.checked += 1
            reason = self._check_file(relative, entry)
            if reason is None:
                continue
            keys = set(self._keys_of(relative))
            with self._locked():
                if relative not in self._state.files:
                    continue
                quarantine = f"_quarantine/v{self._state.version + 1}/{relative.replace('/', '__')}"
                with contextlib.suppress(FileNotFoundError, OSError):
                    self.fs.create_dir(self._path(quarantine).rsplit("/", 1)[0], recursive=True)
                    self.fs.move(self._path(relative), self._path(quarantine))
                self._append({"action": "remove", "files": [relative], "reason": f"verify: {reason}",
                              "quarantine": quarantine})
            report.bad.append((self._path(relative), reason, len(keys)))
            report.keys_to_redo.setdefault(entry["kind"], set()).update(keys)
        return report

    def _check_file(self, relative: str, entry: dict) -> Optional[str]:
        try:
            with self.fs.open_input_stream(self._path(relative)) as handle:
                data = handle.read()
        except (FileNotFoundError, OSError, pa.ArrowException):
            return "missing"
        if len(data) != entry["bytes"]:
            return f"size {len(data)} bytes, committed {entry['bytes']} (truncated or overwritten)"
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            return "sha256 differs from the committed one (corrupt)"
        try:
            rows = pq.read_table(io.BytesIO(data)).num_rows
        except (pa.ArrowException, OSError) as exc:
            return f"unreadable: {exc}"
        return None if rows == entry["rows"] else f"{rows} rows, committed {entry['rows']}"

    def vacuum(self, *, grace_s: float = 3600.0) -> VacuumReport:
        """Delete what no log entry holds: temporary files and orphans older than
        ``grace_s`` seconds (younger ones may belong to a commit in progress)."""
        report = VacuumReport()
        self.refresh()
        live = {self._path(f) for f in self._state.files}
        live |= {self._path(e["keys_file"]) for e in self._state.files.values() if "keys_file" in e}
        now = time.time()
        for info in self._raw_files(include_keys=True):
            name = info.base_name
            if info.path in live or not name.endswith((".tmp", ".parquet", ".keys")):
                continue
            if info.mtime is not None and now - info.mtime.timestamp() < grace_s:
                continue
            self.fs.delete_file(info.path)
            report.removed.append(info.path)
            report.bytes_freed += info.size or 0
        return report

    def upgrade(self) -> int:
        """Adopt the files of a format-1 lake (no log) into the commit log; returns rows."""
        if self._read_json(self._path("_lake.json")) is not None:
            self.check_format(create=False)
            return 0
        self._write_meta()
        self._format_ok = True
        adopted = 0
        for info in self._raw_files():
            if not info.base_name.endswith(".parquet") or info.base_name.startswith("."):
                continue
            relative = info.path[len(self.root) + 1:]
            parts = dict(p.split("=", 1) for p in relative.split("/")[:-1] if "=" in p)
            kind = parts.pop("kind", None)
            if kind is None:
                continue
            table = pq.read_table(self.fs.open_input_file(info.path))
            table = table.drop_columns([c for c in ("kind", *parts) if c in table.column_names])
            adopted += self.commit(kind, parts, table).rows_written
            self.fs.delete_file(info.path)
        return adopted

    # -- helpers ----------------------------------------------------------------------
    def _raw_files(self, include_keys: bool = False) -> List[pafs.FileInfo]:
        selector = pafs.FileSelector(self.root, recursive=True, allow_not_found=True)
        tops = ("kind=", "_keys/") if include_keys else ("kind=",)
        return [
            info for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and info.path[len(self.root) + 1:].startswith(tops)
        ]

    def _raw_data_files(self) -> bool:
        return any(i.base_name.endswith(".parquet") and not i.base_name.startswith(".") for i in self._raw_files())

    def _read_json(self, path: str) -> Optional[dict]:
        try:
            with self.fs.open_input_stream(path) as handle:
                return json.loads(handle.read())
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return None
            raise LakeError(f"cannot read {path}: {exc}") from None
        except json.JSONDecodeError as exc:
            raise LakeError(f"{path} is not valid JSON ({exc}); the lake's log is damaged") from None

    def _write_meta(self) -> None:
        """Create ``_lake.json`` whole, never half-written: writers may race to create it."""
        final = self._path("_lake.json")
        temporary = f"{final}.{uuid.uuid4().hex}.tmp"
        self._write_bytes(temporary, json.dumps({"format": LAKE_FORMAT}).encode())
        if self.local_root is not None:
            os.replace(temporary, final)
        else:
            self.fs.move(temporary, final)

    def _write_bytes(self, path: str, data: bytes) -> None:
        if self.local_root is not None:
            with open(path, "wb") as handle:
                handle.write(data)
                handle.flush()
                os.fsync(handle.fileno())
        else:
            with self.fs.open_output_stream(path) as out:
                out.write(data)

    def _write_parquet(self, path: str, table: pa.Table) -> Tuple[int, str]:
        """Stream ``table`` as Parquet into ``path``, flushed to disk; returns (bytes, sha256)."""
        if self.local_root is not None:
            with open(path, "wb") as raw:
                sink = _HashingWriter(raw)
                pq.write_table(table, sink, compression="zstd")
                raw.flush()
                os.fsync(raw.fileno())
        else:
            with self.fs.open_output_stream(path) as raw:
                sink = _HashingWriter(raw)
                pq.write_table(table, sink, compression="zstd")
        return sink.size, sink.digest.hexdigest()

    def _publish(self, temporary: str, final: str) -> None:
        if self.local_root is not None:
            os.replace(temporary, final)
            _fsync_dir(os.path.dirname(final))
        else:
            self.fs.move(temporary, final)


def _fsync_dir(directory: str) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class _HashingWriter(io.RawIOBase):
    """A write-only file object that hashes and counts what passes through it."""

    def __init__(self, raw) -> None:
        super().__init__()
        self._raw, self.size, self.digest = raw, 0, hashlib.sha256()

    def writable(self) -> bool:
        return True

    def write(self, data) -> int:
        view = memoryview(data).cast("B")
        self._raw.write(view)
        self.digest.update(view)
        self.size += len(view)
        return len(view)


def _first_of_each_key(table: pa.Table) -> pa.Table:
    """Drop rows whose key repeats an earlier row's key within the same table."""
    keys = table.column("key").to_pylist()
    if len(set(keys)) == len(keys):
        return table
    seen: Set[str] = set()
    first = [i for i, k in enumerate(keys) if not (k in seen or seen.add(k))]
    return table.take(pa.array(first))
