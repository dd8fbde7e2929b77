"""The Parquet lake: hive-partitioned result files that DuckDB and pandas read.

Layout: ``ROOT/kind=KIND/sweep=SWEEP/hardware=HW/part-UUID.parquet``. ROOT is a local
path or any URI pyarrow's filesystems understand. Partition columns live in the path
only. A file is written under a hidden temporary name (``.`` prefix, which DuckDB's
``*.parquet`` glob and pyarrow datasets both skip), flushed to disk, then renamed into
place, so a reader sees a whole file or none.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Dict, List, Optional, Set

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from sweeps.errors import LakeError

__all__ = ["Lake"]


class Lake:
    """A lake rooted at ``root`` (path or URI). Cheap to construct; touches nothing."""

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

    @property
    def local_root(self) -> Optional[Path]:
        """The root as a local path, or None for a remote filesystem."""
        return Path(self.root) if isinstance(self.fs, pafs.LocalFileSystem) else None

    def __str__(self) -> str:
        return str(self.local_root) if self.local_root else self.root_spec

    # -- checks, run before any work -------------------------------------------------
    def ensure_writable(self) -> None:
        """Create the root if needed and prove a file can be written there."""
        probe = f"{self.root}/.probe-{uuid.uuid4().hex}"
        try:
            self.fs.create_dir(self.root, recursive=True)
            with self.fs.open_output_stream(probe) as out:
                out.write(b"ok")
            self.fs.delete_file(probe)
        except (OSError, pa.ArrowException) as exc:
            raise LakeError(f"lake path {self.root_spec!r} is not writable: {exc}") from None

    def ensure_readable(self) -> None:
        """The root must exist and be a directory."""
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
        parts = [f"kind={kind}"] + [f"{k}={v}" for k, v in partition.items()]
        for part in parts:
            if "/" in part or part.count("=") != 1:
                raise LakeError(f"partition value {part!r} must not contain '/' or '='")
        return "/".join([self.root, *parts])

    def kinds(self) -> List[str]:
        """Result kinds present in the lake (folders ``kind=...``)."""
        selector = pafs.FileSelector(self.root, allow_not_found=True)
        return sorted(
            info.base_name.split("=", 1)[1]
            for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.Directory and info.base_name.startswith("kind=")
        )

    def files(self, kind: str, partition: Optional[Dict[str, str]] = None) -> List[str]:
        """Committed data files of a kind (or of one partition of it), sorted."""
        base = self.partition_dir(kind, partition or {})
        selector = pafs.FileSelector(base, recursive=True, allow_not_found=True)
        return sorted(
            info.path for info in self.fs.get_file_info(selector)
            if info.type == pafs.FileType.File and info.base_name.endswith(".parquet")
            and not info.base_name.startswith((".", "_"))
        )

    # -- writing ----------------------------------------------------------------------
    def commit(self, kind: str, partition: Dict[str, str], table: pa.Table) -> str:
        """Write ``table`` as one new file of the partition; returns its path.

        Atomic: the file appears under its final name only once complete and flushed.
        """
        directory = self.partition_dir(kind, partition)
        name = f"part-{uuid.uuid4().hex}.parquet"
        final, temporary = f"{directory}/{name}", f"{directory}/.{name}.tmp"
        self.fs.create_dir(directory, recursive=True)
        if self.local_root is not None:
            with open(temporary, "wb") as handle:
                pq.write_table(table, handle, compression="zstd")
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(temporary, final)
            directory_fd = os.open(directory, os.O_RDONLY)
            try:
                os.fsync(directory_fd)
            finally:
                os.close(directory_fd)
        else:
            with self.fs.open_output_stream(temporary) as out:
                pq.write_table(table, out, compression="zstd")
            self.fs.move(temporary, final)
        return final

    # -- reading ----------------------------------------------------------------------
    def dataset(self, kind: str) -> ds.Dataset:
        """A pyarrow dataset over the committed files of a kind, partitions as columns."""
        base = self.partition_dir(kind, {})
        return ds.dataset(
            self.files(kind), filesystem=self.fs, format="parquet",
            partitioning=ds.HivePartitioning.discover(), partition_base_dir=base,
        )

    def keys(self, kind: str, partition: Dict[str, str]) -> Set[str]:
        """Result keys already committed in a partition."""
        files = self.files(kind, partition)
        if not files:
            return set()
        table = ds.dataset(files, filesystem=self.fs, format="parquet").to_table(columns=["key"])
        return set(table.column("key").to_pylist())
