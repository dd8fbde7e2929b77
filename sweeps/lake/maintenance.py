"""Lake maintenance: verify committed files against the log, vacuum what no commit holds,
upgrade a lake written without a log. ``Lake`` is the whole lake: ``LakeStore``'s commit
protocol and reads, plus these.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import time
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set, Tuple

import pyarrow as pa
import pyarrow.parquet as pq

from sweeps.lake.store import LakeStore

__all__ = ["Lake", "VerifyReport", "VacuumReport"]


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


class Lake(LakeStore):
    """A lake rooted at ``root`` (path or URI). Constructing it touches nothing."""

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
