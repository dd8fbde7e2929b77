"""The Parquet lake: hive-partitioned result files behind a commit log.

Layout under ROOT (a local path, or a pyarrow filesystem URI)::

    _lake.json                                   format version of the lake
    _log/00000000000000000001.json ...           commit log: one JSON entry per commit
    _keys/part-UUID.keys                         the keys of each data file (Parquet)
    kind=KIND/sweep=SWEEP/hardware=HW/part-UUID.parquet
    _quarantine/                                 files set aside by ``verify``

This module holds the protocol and the reads (``LakeStore``); ``maintenance`` adds
``verify``, ``vacuum`` and ``upgrade``; ``files`` writes files whole; ``kinds`` names the
result kinds; ``views`` serves them to DuckDB.

Contract (after Delta Lake's commit protocol, simplified to one lock):

- A data file is written under a hidden temporary name (``.`` prefix), fsynced, then
  renamed into place; it becomes part of the lake only when a log entry names it. Readers
  (``files``, ``dataset``, ``views``) read the log, so they see committed files
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
import hashlib
import uuid
from dataclasses import dataclass
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sweeps.errors import LakeError
from sweeps.lake.files import first_of_each_key
from sweeps.lake.integrity import file_fault
from sweeps.lake.kinds import SHARED_KINDS
from sweeps.lake.log import LakeLog, first_line
from sweeps.lake.versions import NO_VERSION, VERSION_COLUMN

#: What a message about a damaged data file tells the user to run.
VERIFY_HINT = "run `commscale lake verify` to set it aside (the next run of its sweep measures its keys again)"

__all__ = ["LakeStore", "CommitResult", "as_stored"]


@dataclass
class CommitResult:
    """What one commit did: the file it added (None if every row was already there)."""

    path: Optional[str]
    rows_written: int
    rows_skipped: int
    version: Optional[int]


def as_stored(table: pa.Table, partition: Dict[str, str], sweep_version: Optional[str]) -> pa.Table:
    """``table`` as a data file holds it, so that any Parquet reader takes the lake's
    folders as they are (``pd.read_parquet``, ``pyarrow.dataset``, a DuckDB glob with hive
    partitions): no column named like a partition key (its value is in the folder's name; a
    row whose value differs from its partition's is ``LakeError``), and the sweep version as
    a column (``VERSION_COLUMN``; ``NO_VERSION`` for none)."""
    for key, value in partition.items():
        if key not in table.column_names:
            continue
        column = table.column(key)
        if column.null_count < len(column) and not pc.all(pc.equal(column, value)).as_py():
            raise LakeError(f"rows of partition {key}={value} hold other values in their {key} column")
        table = table.drop_columns([key])
    version = pa.array([sweep_version or NO_VERSION] * table.num_rows, pa.string())
    if VERSION_COLUMN in table.column_names:
        return table.set_column(table.column_names.index(VERSION_COLUMN), VERSION_COLUMN, version)
    return table.append_column(VERSION_COLUMN, version)


@dataclass
class _Staged:
    """A data file written but not yet committed: its final name (relative), its hidden
    temporary path (absolute), its sidecar (relative), and what was written."""

    relative: str
    temporary: str
    keys_file: str
    size: int = 0
    sha256: str = ""
    keys_sha256: str = ""


class LakeStore(LakeLog):
    """A lake's commit protocol and its reads. ``sweeps.lake.Lake`` adds maintenance
    (verify, vacuum, upgrade). Constructing it touches nothing."""

    # -- writing ----------------------------------------------------------------------
    def commit(self, kind: str, partition: Dict[str, str], table: pa.Table, *, schema_version: int = 1,
               sweep_version: Optional[str] = None) -> CommitResult:
        """Add ``table``'s rows whose ``key`` is not yet in ``kind``, as one new file.

        Atomic and idempotent: the rows appear together or not at all; rows whose key is
        committed already (or repeated within ``table``) are skipped, not duplicated. With
        ``sweep_version``, the file belongs to that version of the partition's sweep, and
        only that version's keys count as committed (each version holds its own rows).
        """
        directory = self.partition_dir(kind, partition)
        self.check_format(create=True)
        table = as_stored(first_of_each_key(table), partition, sweep_version)
        staged = self._stage(directory, table)
        with self._locked(), self._writing(directory, staged.temporary, self._path(staged.keys_file)):
            scope = None if sweep_version is None or kind in SHARED_KINDS else (f"{directory}/", sweep_version)
            committed = self._committed_keys(kind, scope)
            fresh = pa.array([key not in committed for key in table.column("key").to_pylist()], pa.bool_())
            skipped = table.num_rows - int(pc.sum(fresh).as_py() or 0)
            if skipped:
                table = table.filter(fresh)
                if table.num_rows == 0:
                    for path in (staged.temporary, self._path(staged.keys_file)):
                        with contextlib.suppress(FileNotFoundError):
                            self.fs.delete_file(path)
                    return CommitResult(None, 0, skipped, None)
            version = self._publish_staged(staged, table, kind, partition, schema_version=schema_version,
                                           sweep_version=sweep_version, restage=bool(skipped))
        return CommitResult(self._path(staged.relative), table.num_rows, skipped, version)

    def _stage(self, directory: str, table: pa.Table) -> _Staged:
        """Write ``table`` under a hidden temporary name in ``directory``, and its sidecar."""
        name = f"part-{uuid.uuid4().hex}.parquet"
        staged = _Staged(f"{directory}/{name}", self._path(f"{directory}/.{name}.tmp"),
                         f"_keys/{name[:-len('.parquet')]}.keys")  # not *.parquet: raw globs skip it
        with self._writing(directory, staged.temporary, self._path(staged.keys_file)):
            self.fs.create_dir(self._path(directory), recursive=True)
            self.fs.create_dir(self._path("_keys"), recursive=True)
            self._write_staged(staged, table)
        return staged

    def _write_staged(self, staged: _Staged, table: pa.Table) -> None:
        staged.size, staged.sha256 = self._write_parquet(staged.temporary, table)
        staged.keys_sha256 = self._write_parquet(self._path(staged.keys_file), table.select(["key"]))[1]

    def _publish_staged(self, staged: _Staged, table: pa.Table, kind: str, partition: Dict[str, str], *,
                        schema_version: int, sweep_version: Optional[str], restage: bool) -> int:
        """Rename a staged file into place and commit it (call under the lock); written again
        first if ``restage`` (``table`` is not what was staged) or if it is gone (e.g. taken
        by ``vacuum --grace-s 0`` before the lock). Returns the entry's version."""
        if restage or not self._both_present(staged.temporary, staged.keys_file):
            self._write_staged(staged, table)
        self._publish(staged.temporary, self._path(staged.relative))
        return self._append({
            "action": "add", "kind": kind, "partition": dict(partition), "file": staged.relative,
            "rows": table.num_rows, "bytes": staged.size, "sha256": staged.sha256, "schema_version": schema_version,
            "keys_file": staged.keys_file, "keys_sha256": staged.keys_sha256,
            **({} if sweep_version is None else {"sweep_version": sweep_version}),
        })

    def _both_present(self, temporary: str, keys_file: str) -> bool:
        """Whether a commit's written data file and sidecar are still there."""
        infos = self.fs.get_file_info([temporary, self._path(keys_file)])
        return all(info.type == pafs.FileType.File for info in infos)

    @contextlib.contextmanager
    def _writing(self, what: str, *temporaries: str) -> Iterator[None]:
        """Turn a failed write (disk full, a path that is a file, no permission) into one
        ``LakeError`` line; the temporary files are removed and the log is untouched."""
        try:
            yield
        except (OSError, pa.ArrowException) as exc:
            for path in temporaries:
                with contextlib.suppress(OSError, pa.ArrowException):
                    self.fs.delete_file(path)
            raise LakeError(f"lake {self}: cannot write {what}: {first_line(exc)} (nothing was committed)") from None

    def record_sweep(self, manifest: dict) -> None:
        """Commit a sweep's manifest (name, hardware, fingerprints, planned count)."""
        with self._locked():
            self._append({"action": "sweep", **manifest})

    def sweeps(self) -> Dict[Tuple[str, str], dict]:
        """The latest manifest of every (sweep, hardware) the lake holds (of its newest
        version)."""
        self.refresh()
        return {name: next(reversed(versions.values())) for name, versions in self._state.versions.items()}

    def sweep_versions(self) -> Dict[Tuple[str, str], List[dict]]:
        """Every version of every (sweep, hardware): its manifest (with ``sweep_version``),
        oldest first; the last is the newest (the one run last)."""
        self.refresh()
        return {name: list(versions.values()) for name, versions in self._state.versions.items()}

    def _partition_files(self, kind: str, partition: Dict[str, str], sweep_version: Optional[str]) -> List[str]:
        """Live files (relative) of one partition of ``kind``, of one version if given."""
        prefix = self.partition_dir(kind, partition) + "/"
        return sorted(f for f in self._state.files if f.startswith(prefix)
                      and (sweep_version is None or self._state.file_versions.get(f) == sweep_version))

    def partition_rows(self, kind: str, partition: Dict[str, str], sweep_version: Optional[str] = None) -> int:
        """Committed rows of one partition (``sweep`` and ``hardware``) of ``kind`` (of one
        version of its sweep, if given)."""
        self.refresh()
        return sum(self._state.files[f]["rows"] for f in self._partition_files(kind, partition, sweep_version))

    def remove_partition(self, kind: str, partition: Dict[str, str], reason: str,
                         sweep_version: Optional[str] = None) -> int:
        """Take the files of exactly one partition (``sweep`` and ``hardware``) of ``kind``,
        of one version if given, out of the lake; returns the rows removed. The data stays
        on disk until ``vacuum``."""
        with self._locked():
            doomed = self._partition_files(kind, partition, sweep_version)
            rows = sum(self._state.files[f]["rows"] for f in doomed)
            if doomed:
                self._append({"action": "remove", "files": doomed, "reason": reason})
        return rows

    def version_groups(self, kind: str, *, shared: bool = False) -> Dict[Tuple[str, bool], List[str]]:
        """The committed files (absolute) of ``kind`` by (sweep version, current): a file is
        current when it belongs to the newest version of its sweep on its hardware, when its
        partition has no versions, or when the kind is ``shared`` (every version's rows serve)."""
        self.refresh()
        prefix = self.partition_dir(kind, {}) + "/"
        groups: Dict[Tuple[str, bool], List[str]] = {}
        for relative, entry in sorted(self._state.files.items()):
            if not relative.startswith(prefix):
                continue
            version = self._state.file_versions.get(relative, NO_VERSION)
            latest = self._newest_version(entry["partition"])
            current = shared or latest == NO_VERSION or version == latest
            groups.setdefault((version, current), []).append(self._path(relative))
        return groups

    def sweep_names(self) -> Set[str]:
        """The names of every sweep, search study and calibration the lake holds: the
        ``sweep`` partition of its live files and of its sweep manifests."""
        self.refresh()
        names = {entry["partition"].get("sweep") for entry in self._state.files.values()}
        return {name for name in names | {sweep for sweep, _hardware in self._state.versions} if name}

    def kinds(self) -> List[str]:
        """Result kinds with committed files."""
        self.refresh()
        return sorted({entry["kind"] for entry in self._state.files.values()})

    def files(self, kind: str, partition: Optional[Dict[str, str]] = None) -> List[str]:
        """Committed data files of a kind (or of one partition of it), sorted, absolute."""
        self.refresh()
        prefix = self.partition_dir(kind, partition or {}) + "/"
        return sorted(self._path(f) for f in self._state.files if f.startswith(prefix))

    def checked_files(self, kind: str) -> List[str]:
        """``files``, each checked against its commit (present, size, sha256; digests
        cached per process): a reader never gets rows from a file whose bytes differ from
        what its commit recorded. ``LakeError`` naming the file otherwise."""
        self.refresh()
        prefix = self.partition_dir(kind, {}) + "/"
        for relative, entry in sorted(self._state.files.items()):
            if relative.startswith(prefix):
                self._check_file(relative, entry)
        return self.files(kind)

    def _check_file(self, relative: str, entry: dict) -> None:
        fault = self._link_fault(relative) or file_fault(self.fs, self._path(relative), entry)
        if fault is not None:
            raise LakeError(f"lake {self}: data file {self._path(relative)} {fault}; {VERIFY_HINT}")

    def schema_versions(self, kind: str) -> Set[int]:
        self.refresh()
        return {e.get("schema_version", 1) for e in self._state.files.values() if e["kind"] == kind}

    def dataset(self, kind: str, files: Optional[List[str]] = None) -> ds.Dataset:
        """A pyarrow dataset over the committed files of a kind (or the given ones of them,
        absolute, already checked), partitions as columns."""
        return ds.dataset(
            self.checked_files(kind) if files is None else files, filesystem=self.fs, format="parquet",
            partitioning=ds.HivePartitioning.discover(), partition_base_dir=self._path(f"kind={kind}"),
        )

    def keys(self, kind: str, partition: Optional[Dict[str, str]] = None) -> Set[str]:
        """Keys committed in a kind, or in one partition of it."""
        if partition is None:
            self.refresh()
            return set(self._committed_keys(kind))
        return set(self.key_array(kind, partition).to_pylist())

    def key_array(self, kind: str, partition: Dict[str, str], sweep_version: Optional[str] = None) -> pa.ChunkedArray:
        """The keys of one partition of ``kind`` (of one version of its sweep, if given) as an
        Arrow array (from the sidecars, or from the data files where a sidecar is missing or
        wrong): no Python object per key."""
        self.refresh()
        chunks = [self._file_key_array(relative, self._state.files[relative])
                  for relative in self._partition_files(kind, partition, sweep_version)]
        return pa.chunked_array(chunks, pa.string())

    def _file_key_array(self, relative: str, entry: dict) -> pa.Array:
        """A committed file's keys: from its sidecar when the sidecar's bytes are those its
        commit recorded (``keys_sha256``), else from the data file itself, checked."""
        if "keys" in entry:  # an entry that carries its keys inline (older lakes)
            return pa.array(entry["keys"], pa.string())
        keys = self._sealed_sidecar(entry)
        if keys is not None:
            return keys
        self._check_file(relative, entry)
        with self.fs.open_input_file(self._path(relative)) as handle:
            return pq.read_table(handle, columns=["key"]).column("key").combine_chunks().cast(pa.string())

    def _sealed_sidecar(self, entry: dict) -> Optional[pa.Array]:
        """The keys of an entry's sidecar if its sha256 is the one committed; None for an
        entry without one (older lakes), a sidecar that differs, or one that is unreadable."""
        if not isinstance(entry.get("keys_sha256"), str) or self._through_link(entry["keys_file"]):
            return None
        try:
            with self.fs.open_input_stream(self._path(entry["keys_file"])) as handle:
                data = handle.read()
            if hashlib.sha256(data).hexdigest() != entry["keys_sha256"]:
                return None
            keys = pq.read_table(pa.BufferReader(data)).column("key").combine_chunks().cast(pa.string())
        except (OSError, pa.ArrowException, KeyError):
            return None
        return keys if len(keys) == entry["rows"] else None

    def sidecar_keys(self, entry: dict) -> Optional[Set[str]]:
        """The keys in a file's sidecar, or None if it is missing or unreadable."""
        if "keys_file" not in entry or self._through_link(entry["keys_file"]):
            return None
        try:
            with self.fs.open_input_file(self._path(entry["keys_file"])) as handle:
                return set(pq.read_table(handle).column("key").to_pylist())
        except (OSError, pa.ArrowException, KeyError):
            return None

    def data_keys(self, relative: str) -> Set[str]:
        """The keys of a committed data file, read from the file after checking it."""
        return set(self.data_key_list(relative))

    def data_key_list(self, relative: str) -> List[str]:
        """The keys of a committed data file in its row order, read after checking it."""
        self._check_file(relative, self._state.files[relative])
        with self.fs.open_input_file(self._path(relative)) as handle:
            return pq.read_table(handle, columns=["key"]).column("key").to_pylist()

    def _committed_keys(self, kind: str, scope: Optional[Tuple[str, str]] = None) -> Set[str]:
        """Keys of every live file of ``kind``, or (``scope`` = (partition directory prefix,
        sweep version)) of those of one version of one partition; sidecars are loaded once."""
        cache = (kind, scope)
        keys = self._kind_keys.setdefault(cache, set())
        for relative, entry in list(self._state.files.items()):
            if entry["kind"] != kind or (cache, relative) in self._loaded_keys:
                continue
            if scope is None or (relative.startswith(scope[0]) and self._state.file_versions.get(relative) == scope[1]):
                keys.update(self._file_key_array(relative, entry).to_pylist())
                self._loaded_keys.add((cache, relative))
        return keys
