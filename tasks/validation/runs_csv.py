"""Reading a runs file as rows of CSV cells, within bounds: a regular file of at most
``MAX_RUNS_BYTES`` and ``MAX_RUNS_ROWS`` rows, no NUL byte, no row with more cells than the
header. Each fault is a ``RowError`` naming the file and the row."""

from __future__ import annotations

import csv
import stat
from pathlib import Path
from typing import Optional

from tasks.validation.records import RowError

__all__ = ["MAX_RUNS_BYTES", "MAX_RUNS_ROWS", "runs_size_problem", "regular_size", "csv_rows", "csv_header"]

#: The largest runs file, in bytes, and in rows: the shipped one holds 19 rows in 5 KiB, and
#: reading 10^6 rows takes over ten minutes.
MAX_RUNS_BYTES = 16 * 2**20
MAX_RUNS_ROWS = 100_000

def regular_size(path: Path) -> int:
    """The size in bytes of ``path``, a regular file (a device or a pipe could be read
    forever); ``RowError`` otherwise."""
    try:
        info = Path(path).stat()
    except (OSError, ValueError) as exc:
        raise RowError(f"{path}: cannot be read ({getattr(exc, 'strerror', None) or exc})") from None
    if not stat.S_ISREG(info.st_mode):
        raise RowError(f"{path}: cannot be read (not a regular file)")
    return info.st_size


def runs_size_problem(path: Path) -> Optional[str]:
    """Why the runs file ``path`` is too large to read (beyond ``MAX_RUNS_BYTES``, checked
    before it is read, or ``MAX_RUNS_ROWS`` lines), or None."""
    size = regular_size(path)
    if size > MAX_RUNS_BYTES:
        return f"{path}: {size:,} bytes exceed the bound of {MAX_RUNS_BYTES:,} bytes of a runs file"
    with open(path, "rb") as f:
        lines = sum(block.count(b"\n") for block in iter(lambda: f.read(2**20), b""))
    if lines > MAX_RUNS_ROWS + 1:
        return f"{path}: {lines - 1:,} rows exceed the bound of {MAX_RUNS_ROWS:,} rows of a runs file"
    return None


def csv_rows(path: Path, reader: csv.DictReader):
    """The rows of ``reader`` (cells by column), each checked first: no cell beyond Python's
    CSV field limit, no more cells than the header."""
    row = 0
    while True:
        row += 1
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as exc:
            raise RowError(f"{path} row {row}: is no CSV row ({exc})") from None
        if None in cells:
            raise RowError(f"{path} row {row}: holds {len(reader.fieldnames) + len(cells[None])} cells, more than the "
                           f"header's {len(reader.fieldnames)}")
        yield cells


def csv_header(path: Path, text: str) -> csv.DictReader:
    """A reader of the CSV ``text``, its header read; ``RowError`` on a NUL byte or a header
    that is no CSV row."""
    if "\x00" in text:
        line = text[:text.index("\x00")].count("\n") + 1
        raise RowError(f"{path}: holds a NUL byte (line {line}); a runs file is CSV text")
    reader = csv.DictReader(text.splitlines())
    try:
        reader.fieldnames
    except csv.Error as exc:
        raise RowError(f"{path}: its header is no CSV row ({exc})") from None
    return reader
