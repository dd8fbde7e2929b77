"""The lake's root and its commit log: where files live, which entries the log holds, the
lock that serialises commits, and the format check (after Delta Lake's commit protocol,
simplified to one lock). ``LakeLog`` is the base of ``LakeStore`` and ``Lake``.
"""

from __future__ import annotations

import contextlib
import fcntl
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
import pyarrow.fs as pafs

from sweeps.errors import LakeError
from sweeps.lake.entries import LogProblem, head_bytes, parse, parse_head, seal, sequence_problems
from sweeps.lake.files import fsync_dir, publish, write_bytes, write_parquet
from sweeps.lake.meta import LAKE_FORMAT, LakeMarker
from sweeps.lake.names import KIND, PARTITION_KEY, PARTITION_VALUE, name_fault
from sweeps.lake.versions import NO_VERSION, manifest_version
from sweeps.lake.walk import list_under, through_link

__all__ = ["LakeLog", "LAKE_FORMAT", "LogScan", "REPAIR_HINT", "first_line"]

_ENTRY = re.compile(r"^(\d{20})\.json$")
#: The log's head: the newest version committed (``entries.head_bytes``).
HEAD = "_log/HEAD"
#: What every message about a damaged lake tells the user to run.
REPAIR_HINT = "run `commscale lake verify --repair` to repair it (no committed row is lost)"


@dataclass
class LogScan:
    """The log's entries after some version: the sound ones in order, and its problems."""

    entries: List[Tuple[int, dict]] = field(default_factory=list)
    problems: List[LogProblem] = field(default_factory=list)
    newest: int = 0  # the highest version present
    head: int = 0  # the newest version the head records (0: no head, an older lake)


@dataclass
class _State:
    version: int = 0
    files: Dict[str, dict] = field(default_factory=dict)  # relative path -> add entry
    #: (sweep, hardware) -> {version: its latest manifest}, oldest first: the last is the newest
    versions: Dict[Tuple[str, str], Dict[str, dict]] = field(default_factory=dict)
    file_versions: Dict[str, str] = field(default_factory=dict)  # relative path -> sweep version



class LakeLog(LakeMarker):
    """A lake's root (a path or URI) and its commit log. Constructing it touches nothing."""

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
        #: (kind, scope) -> keys of its loaded live files; scope None is the whole kind, else
        #: (partition directory prefix, sweep version)
        self._kind_keys: Dict[Tuple[str, Optional[Tuple[str, str]]], Set[str]] = {}
        self._loaded_keys: Set[Tuple[tuple, str]] = set()  # (cache key, live file) loaded into _kind_keys

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
        write_test = self._path(f".write-test-{uuid.uuid4().hex}")
        try:
            self.fs.create_dir(self.root, recursive=True)
            with self.fs.open_output_stream(write_test) as out:
                out.write(b"ok")
            self.fs.delete_file(write_test)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake path {self.root_spec!r} is not writable: {exc}") from None
        self.check_format(create=True)

    def ensure_creatable(self) -> None:
        """A root that does not exist yet could be created: its nearest existing ancestor is
        a folder that takes a new folder (local roots; a remote one is proved on creation).
        Nothing is left: a run checks this before its cluster starts and writes nothing."""
        root = self.local_root
        if root is None:
            return
        ancestor = root.absolute()
        while not os.path.lexists(ancestor) and ancestor != ancestor.parent:
            ancestor = ancestor.parent
        if not ancestor.is_dir():
            raise LakeError(f"lake path {self.root_spec!r} is not writable: {str(ancestor)!r} is not a directory")
        probe = ancestor / f".commscale-create-test-{uuid.uuid4().hex}"
        try:  # permissions alone do not say it: root may write anywhere, and /proc takes no folder
            probe.mkdir()
            probe.rmdir()
        except OSError as exc:
            raise LakeError(f"lake path {self.root_spec!r} is not writable: {str(ancestor)!r} takes no new folder "
                            f"({exc.strerror})") from None

    def ensure_readable(self) -> None:
        """The root must exist, be a directory, and hold a lake this version reads."""
        self.ensure_exists()
        self.check_format(create=False)

    def exists(self) -> bool:
        """Whether anything is at the root (a lake, or something ``ensure_readable`` refuses)."""
        try:
            return self.fs.get_file_info(self.root).type != pafs.FileType.NotFound
        except (OSError, pa.ArrowException):
            return True  # unreadable: ``ensure_readable`` says why

    def ensure_exists(self) -> None:
        """The root must exist and be a directory (``LakeError`` otherwise)."""
        try:
            info = self.fs.get_file_info(self.root)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake path {self.root_spec!r} cannot be read: {exc}") from None
        if info.type == pafs.FileType.NotFound:
            raise LakeError(f"lake path {self.root_spec!r} does not exist; `commscale run` creates it")
        if info.type != pafs.FileType.Directory:
            raise LakeError(f"lake path {self.root_spec!r} is not a directory")

    # -- layout -----------------------------------------------------------------------
    def partition_dir(self, kind: str, partition: Dict[str, str]) -> str:
        """Relative directory of a partition, e.g. ``kind=projection/sweep=s/hardware=h``;
        each name must be a plain one (``sweeps.lake.names``), or ``LakeError``."""
        fault = name_fault("kind", kind, KIND)
        for key, value in partition.items():
            fault = fault or name_fault("partition key", key, PARTITION_KEY)
            fault = fault or name_fault(f"partition value of {key}", value, PARTITION_VALUE)
        if fault is not None:
            raise LakeError(f"{fault} (use letters, digits, '.', '_', '+' and '-'; no '/', '=' or '..')")
        return "/".join([f"kind={kind}"] + [f"{k}={v}" for k, v in partition.items()])

    # -- the log ----------------------------------------------------------------------
    def refresh(self) -> None:
        """Apply log entries committed since the last refresh to the cached state; a log
        with a missing or damaged entry is refused (``LakeError`` naming the entry)."""
        scan = self.scan_log(self._state.version)
        if scan.problems:
            raise LakeError(f"lake {self}: {scan.problems[0].describe()}; {REPAIR_HINT}")
        for version, entry in scan.entries:
            self._apply(entry)
            self._state.version = version

    def release_keys(self) -> None:
        """Forget the committed keys loaded to deduplicate commits (reloaded when needed)."""
        self._loaded_keys.clear()
        self._kind_keys.clear()

    def _reset_state(self) -> None:
        """Forget what was read of the log (the next refresh reads it from its start)."""
        self._state = _State()
        self._loaded_keys.clear()
        self._kind_keys.clear()

    def _log_versions(self) -> List[int]:
        """Versions of the entry files in ``_log`` (``LakeError`` if it cannot be listed)."""
        log_dir = self._path("_log")
        try:
            infos = self.fs.get_file_info(pafs.FileSelector(log_dir, allow_not_found=True))
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake {self}: cannot list its commit log {log_dir}: {first_line(exc)}") from None
        return sorted(int(m.group(1)) for info in infos if (m := _ENTRY.match(info.base_name)))

    def scan_log(self, after: int = 0) -> LogScan:
        """Read the entries after version ``after``: the sound ones, in order, and the log's
        problems (a gap, a damaged entry, a damaged newest entry, entries missing up to the
        head). The head is read before the entries are listed: a writer writes its entry
        before the head, so every version the head names is listed by then."""
        try:
            head_data = self._read_bytes(self._path(HEAD))
        except LakeError:
            self._log_versions()  # a log that cannot be listed (e.g. ``_log`` is a file) says so first
            raise
        head, head_fault = parse_head(head_data)
        versions = self._log_versions()
        scan, damaged = LogScan(newest=max(versions, default=0), head=head), {}
        for version in versions:
            if version <= after:
                continue
            data = self._read_bytes(self._path(f"_log/{version:020d}.json"))
            entry, why = parse(version, data) if data is not None else (None, "vanished while being read")
            if entry is None:
                damaged[version] = why
            else:
                scan.entries.append((version, entry))
        scan.problems = sequence_problems(versions, after, damaged, head)
        if head_fault is not None:
            scan.problems.append(LogProblem(0, "head", f"{HEAD} {head_fault}"))
        return scan

    def _apply(self, entry: dict) -> None:
        state = self._state
        action = entry["action"]
        if action == "add":
            state.files[entry["file"]] = entry
            state.file_versions[entry["file"]] = entry.get("sweep_version") or self._newest_version(entry["partition"])
        elif action == "remove":
            for relative in entry["files"]:
                gone = state.files.pop(relative, None)
                state.file_versions.pop(relative, None)
                if gone is not None:  # rare: the kind's keys are loaded again when next needed
                    for cached in [c for c in self._kind_keys if c[0] == gone["kind"]]:
                        del self._kind_keys[cached]
                    self._loaded_keys = {loaded for loaded in self._loaded_keys if loaded[0][0] != gone["kind"]}
        elif action == "sweep":
            versions = state.versions.setdefault((entry["sweep"], entry["hardware"]), {})
            version = manifest_version(entry)
            versions.pop(version, None)  # recorded again: it is the newest now
            versions[version] = {**entry, "sweep_version": version}
        # "lost": a place held for an entry that repair could not read; nothing to apply

    def _newest_version(self, partition: Dict[str, str]) -> str:
        """The version recorded last for a partition (``NO_VERSION`` without a manifest)."""
        versions = self._state.versions.get((partition.get("sweep", ""), partition.get("hardware", "")))
        return next(reversed(versions)) if versions else NO_VERSION

    @contextlib.contextmanager
    def _locked(self, *, refresh: bool = True) -> Iterator[None]:
        """Exclusive commit lock across processes (local filesystems), state refreshed
        (unless ``refresh`` is False: repair takes the lock over a damaged log)."""
        if self.local_root is None:
            if refresh:
                self.refresh()
            yield
            return
        log_dir = Path(self.root) / "_log"
        try:
            log_dir.mkdir(parents=True, exist_ok=True)
            handle = open(log_dir / ".lock", "a+")
        except OSError as exc:
            raise LakeError(f"lake {self}: cannot lock its commit log {log_dir}: {first_line(exc)}") from None
        with handle:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
            try:
                if refresh:
                    self.refresh()
                yield
            finally:
                fcntl.flock(handle.fileno(), fcntl.LOCK_UN)

    def _append(self, entry: dict) -> int:
        """Write the next log entry, then the head naming it (call under the lock); returns
        its version."""
        version = self._state.version + 1
        entry = self._write_entry(version, entry)
        self._write_head(version)
        self._apply(entry)
        self._state.version = version
        return version

    def _write_head(self, version: int) -> None:
        """Record ``version`` as the newest committed (whole or not at all)."""
        final = self._path(HEAD)
        if self.local_root is None:
            self._write_bytes(final, head_bytes(version))
            return
        temporary = f"{final}.{uuid.uuid4().hex}.tmp"
        self._write_bytes(temporary, head_bytes(version))
        self._publish(temporary, final)

    def _write_entry(self, version: int, entry: dict) -> dict:
        """Write entry ``version`` (sealed, whole or not at all, never over an existing one)."""
        entry = {"version": version, "time": time.time(), "writer": f"{socket.gethostname()}:{os.getpid()}", **entry}
        final = self._path(f"_log/{version:020d}.json")
        data = seal(entry)
        if self.local_root is not None:
            temporary = f"{final}.{uuid.uuid4().hex}.tmp"
            self._write_bytes(temporary, data)
            try:
                os.link(temporary, final)  # fails if the version exists: never overwrite
            finally:
                os.unlink(temporary)
            fsync_dir(os.path.dirname(final))
        else:
            self._write_bytes(final, data)
        return entry

    # -- helpers ----------------------------------------------------------------------
    def _raw_files(self, include_keys: bool = False) -> List[pafs.FileInfo]:
        """The plain files under ``kind=...`` (and ``_keys/``), never through a link."""
        tops = ("kind=", "_keys/") if include_keys else ("kind=",)
        return list_under(self.fs, self.root, self.local_root is not None, tops).files

    def links(self) -> List[str]:
        """The symbolic links under the root (relative), which the lake never follows."""
        return list_under(self.fs, self.root, self.local_root is not None, ("",)).links

    def _through_link(self, relative: str) -> bool:
        """Whether ``relative`` is a link or lies under one (never on a remote filesystem)."""
        return self.local_root is not None and through_link(self.root, relative)

    def _link_fault(self, relative: str) -> Optional[str]:
        """Why a committed file may not be read where it is: a link leads to it."""
        return "is reached through a symbolic link (not followed)" if self._through_link(relative) else None

    def _raw_data_files(self) -> bool:
        return any(i.base_name.endswith(".parquet") and not i.base_name.startswith(".") for i in self._raw_files())

    def _read_bytes(self, path: str) -> Optional[bytes]:
        """The bytes of a file, or None if it does not exist."""
        try:
            with self.fs.open_input_stream(path) as handle:
                return handle.read()
        except FileNotFoundError:
            return None
        except (OSError, pa.ArrowException) as exc:
            if "not found" in str(exc).lower() or "no such file" in str(exc).lower():
                return None
            raise LakeError(f"lake {self}: cannot read {path}: {first_line(exc)}") from None

    def _read_json(self, path: str) -> Optional[dict]:
        """The JSON of a file, or None if it does not exist."""
        data = self._read_bytes(path)
        if data is None:
            return None
        try:
            return json.loads(data)
        except json.JSONDecodeError as exc:
            raise LakeError(f"{path} is not valid JSON ({exc}); the lake's log is damaged") from None

    def _write_bytes(self, path: str, data: bytes) -> None:
        write_bytes(self.fs, self.local_root is not None, path, data)

    def _write_parquet(self, path: str, table: pa.Table) -> Tuple[int, str]:
        return write_parquet(self.fs, self.local_root is not None, path, table)

    def _publish(self, temporary: str, final: str) -> None:
        publish(self.fs, self.local_root is not None, temporary, final)


def first_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type name if it has none)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
