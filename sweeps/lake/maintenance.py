"""Lake upkeep beside verify and repair: ``vacuum`` deletes what no commit holds, and
``upgrade`` brings an older lake (or one that lost ``_lake.json``) under the commit log
without deleting a file it did not write. ``Lake`` is the whole lake: the commit protocol
and reads (``store``), verify and repair (``repair``), and these.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import List

import pyarrow as pa
import pyarrow.parquet as pq

from sweeps.lake.integrity import file_fault
from sweeps.lake.repair import LakeRepair, VerifyReport
from sweeps.lake.versions import VERSION_COLUMN

__all__ = ["Lake", "VerifyReport", "VacuumReport", "UpgradeReport"]


@dataclass
class VacuumReport:
    """What ``vacuum`` deleted, and the symbolic links it found and left alone."""

    removed: List[str] = field(default_factory=list)
    bytes_freed: int = 0
    links: List[str] = field(default_factory=list)


@dataclass
class UpgradeReport:
    """What ``upgrade`` did: ``restored`` the lost ``_lake.json`` of a lake with a log
    (whose ``committed_rows`` are the lake's again), or adopted a log-less lake's files
    (``adopted``: one line each)."""

    restored: bool = False
    committed_rows: int = 0
    adopted: List[str] = field(default_factory=list)
    rewritten: int = 0  # data files rewritten in the plain layout (``Lake._plain_layout``)


class Lake(LakeRepair):
    """A lake rooted at ``root`` (path or URI). Constructing it touches nothing."""

    def vacuum(self, *, grace_s: float = 3600.0) -> VacuumReport:
        """Delete what no log entry holds: temporary files and orphans older than
        ``grace_s`` seconds (younger ones may belong to a commit in progress). A lake whose
        log is damaged is refused: its orphans may be rows a repair can bring back.

        Runs under the commit lock, on the log as it stands then, so a file committed
        meanwhile is never taken for an orphan; never follows or deletes through a
        symbolic link (those are listed in ``links``, and ``lake verify`` reports them)."""
        report = VacuumReport()
        with self._locked():
            live = {self._path(f) for f in self._state.files}
            live |= {self._path(e["keys_file"]) for e in self._state.files.values() if "keys_file" in e}
            now = time.time()
            for info in self._raw_files(include_keys=True):
                name = info.base_name
                if info.path in live or not name.endswith((".tmp", ".parquet", ".keys")):
                    continue
                if info.mtime is not None and now - info.mtime.timestamp() < grace_s:
                    continue
                if self._through_link(info.path[len(self.root) + 1:]):
                    continue
                self.fs.delete_file(info.path)
                report.removed.append(info.path)
                report.bytes_freed += info.size or 0
        report.links = self.links()
        return report

    def upgrade(self) -> UpgradeReport:
        """Bring the lake under the commit log of this format, deleting nothing.

        A lake with a log but no ``_lake.json`` gets it back (its committed files are the
        lake's again); a lake of commscale 0.1 (no log) has each data file adopted, in place
        when its keys are new (``LakeRepair.adopt``). A lake of this format is left as it is.
        """
        report = UpgradeReport()
        if self._marker() is not None:
            self.check_format(create=False)
            report.rewritten = self._plain_layout()
            return report
        if self._log_versions():
            self._write_meta()
            report.restored = True
        else:
            self.fs.create_dir(self.root, recursive=True)
            self._write_meta()
            self._format_ok = True
            report.adopted = [self.adopt(relative) for relative in self._orphans()]
        self._format_ok = True
        report.rewritten = self._plain_layout()
        self.refresh()
        report.committed_rows = sum(e["rows"] for e in self._state.files.values())
        return report

    def _plain_layout(self) -> int:
        """Rewrite each live data file written before files held their sweep version and no
        partition column (``store.as_stored``), so any Parquet reader takes the lake; its
        rows and keys stay, each old file leaves the lake once its new one is committed.
        Returns the files rewritten."""
        self.refresh()
        rewritten = 0
        for relative, entry in list(self._state.files.items()):
            if self._link_fault(relative) or self._plain(relative, entry):
                continue
            if file_fault(self.fs, self._path(relative), entry):
                continue  # `lake verify` sets it aside
            self._replace_file(relative, entry, self._stored_table(relative), "upgrade: the plain layout")
            rewritten += 1
        return rewritten

    def _plain(self, relative: str, entry: dict) -> bool:
        """Whether a data file's footer names its sweep version and no partition column (a
        footer read, not the file: only the files to rewrite are hashed); False when the
        footer cannot be read."""
        try:
            with self.fs.open_input_file(self._path(relative)) as handle:
                names = set(pq.read_schema(handle).names)
        except (OSError, pa.ArrowException):
            return False
        return VERSION_COLUMN in names and not names & set(entry["partition"])
