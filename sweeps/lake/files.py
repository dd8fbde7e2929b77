"""Writing files so that no reader ever sees half of one: a hidden temporary name beside
the target, fsynced, then renamed (local filesystems); hashing what is written on the way.

Parquet goes through Arrow's own buffers, never a Python file object: Arrow calls a Python
file object from its IO threads, and a process that exits while such a call waits for the
interpreter aborts (``terminate called without an active exception``).
"""

from __future__ import annotations

import hashlib
import os
from typing import Set, Tuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

__all__ = ["write_bytes", "write_parquet", "publish", "fsync_dir", "first_of_each_key"]


def write_bytes(fs: pafs.FileSystem, local: bool, path: str, data) -> None:
    """Write ``data`` (bytes or a buffer) to ``path``, flushed to disk when local."""
    if local:
        with open(path, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
    else:
        with fs.open_output_stream(path) as out:
            out.write(data)


def write_parquet(fs: pafs.FileSystem, local: bool, path: str, table: pa.Table) -> Tuple[int, str]:
    """Write ``table`` as Parquet into ``path``, flushed to disk; returns (bytes, sha256)."""
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd")
    data = sink.getvalue()
    write_bytes(fs, local, path, memoryview(data))
    return data.size, hashlib.sha256(memoryview(data)).hexdigest()


def publish(fs: pafs.FileSystem, local: bool, temporary: str, final: str) -> None:
    """Rename a written temporary file to its final name (atomic on a local filesystem)."""
    if local:
        os.replace(temporary, final)
        fsync_dir(os.path.dirname(final))
    else:
        fs.move(temporary, final)


def fsync_dir(directory: str) -> None:
    """Make a rename in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def first_of_each_key(table: pa.Table) -> pa.Table:
    """Drop rows whose key repeats an earlier row's key within the same table."""
    keys = table.column("key").to_pylist()
    if len(set(keys)) == len(keys):
        return table
    seen: Set[str] = set()
    first = [i for i, k in enumerate(keys) if not (k in seen or seen.add(k))]
    return table.take(pa.array(first))
