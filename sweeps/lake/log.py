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
from sweeps.lake.files import fsync_dir, publish, write_bytes, write_parquet

__all__ = ["LakeLog", "LAKE_FORMAT"]

#: Version of the lake's layout and log. 1 was the log-less lake of commscale 0.1.
LAKE_FORMAT = 2
_ENTRY = re.compile(r"^(\d{20})\.json$")


@dataclass
class _State:
    version: int = 0
    files: Dict[str, dict] = field(default_factory=dict)  # relative path -> add entry
    sweeps: Dict[Tuple[str, str], dict] = field(default_factory=dict)  # (sweep, hardware) -> entry



class LakeLog:
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
        write_test = self._path(f".write-test-{uuid.uuid4().hex}")
        try:
            self.fs.create_dir(self.root, recursive=True)
            with self.fs.open_output_stream(write_test) as out:
                out.write(b"ok")
            self.fs.delete_file(write_test)
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
            fsync_dir(os.path.dirname(final))
        else:
            self._write_bytes(final, data)
        self._apply(entry)
        self._state.version = version
        return version

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
        write_bytes(self.fs, self.local_root is not None, path, data)

    def _write_parquet(self, path: str, table: pa.Table) -> Tuple[int, str]:
        return write_parquet(self.fs, self.local_root is not None, path, table)

    def _publish(self, temporary: str, final: str) -> None:
        publish(self.fs, self.local_root is not None, temporary, final)
