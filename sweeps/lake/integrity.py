"""Whether a committed data file still holds the bytes its commit recorded.

``file_fault`` compares a file with its log entry: present, the committed size, the
committed sha256. A file's digest is computed once per process and cached by (path, size,
modification time), so a process that reads a lake many times hashes each file once; a
file rewritten in place (another size or time) is hashed again. ``parquet_fault`` also
reads the file whole, as ``lake verify`` does.
"""

from __future__ import annotations

import hashlib
from typing import Dict, Optional, Tuple

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

__all__ = ["file_fault", "parquet_fault", "forget"]

_CHUNK = 1 << 22
#: (path, size, mtime in ns) -> sha256 of the file's bytes, for this process.
_DIGESTS: Dict[Tuple[str, int, int], str] = {}


def _digest(fs: pafs.FileSystem, path: str) -> str:
    digest = hashlib.sha256()
    with fs.open_input_stream(path) as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def file_fault(fs: pafs.FileSystem, path: str, entry: dict) -> Optional[str]:
    """Why the file at ``path`` is not what ``entry`` (its add entry) committed, or None:
    "missing", a size that differs (truncated or overwritten), or a sha256 that differs."""
    try:
        info = fs.get_file_info(path)
    except (OSError, pa.ArrowException) as exc:
        return f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    if info.type != pafs.FileType.File:
        return "is missing" if info.type == pafs.FileType.NotFound else "is not a file"
    if info.size != entry["bytes"]:
        return f"has {info.size} bytes where its commit recorded {entry['bytes']} (truncated or overwritten)"
    key = (path, int(info.size), int(info.mtime_ns or 0))
    if key not in _DIGESTS:
        try:
            _DIGESTS[key] = _digest(fs, path)
        except (OSError, pa.ArrowException) as exc:
            return f"cannot be read ({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})"
    if _DIGESTS[key] != entry["sha256"]:
        return "holds bytes whose sha256 differs from what its commit recorded (corrupt)"
    return None


def parquet_fault(fs: pafs.FileSystem, path: str, entry: dict) -> Optional[str]:
    """``file_fault``, then whether the file reads whole as Parquet with the committed rows."""
    fault = file_fault(fs, path, entry)
    if fault is not None:
        return fault
    try:
        with fs.open_input_stream(path) as handle:
            rows = pq.read_table(pa.BufferReader(handle.read())).num_rows
    except (pa.ArrowException, OSError) as exc:
        return f"is unreadable as Parquet: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    return None if rows == entry["rows"] else f"has {rows} rows where its commit recorded {entry['rows']}"


def forget(path: str) -> None:
    """Drop the cached digests of ``path`` (after it was moved or rewritten)."""
    for key in [k for k in _DIGESTS if k[0] == path]:
        del _DIGESTS[key]
