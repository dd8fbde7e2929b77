"""A study's journal file, written in batches, held by one driver at a time, and checked
line by line when it is opened.

Optuna's ``JournalFileBackend`` appends (and fsyncs) one record per operation: every
``suggest_*`` of every trial, every tell. A 200-trial search made over 2,000 fsyncs
that way. ``BatchedJournal`` keeps the records of a run in memory and appends them in one
write (one lock, one fsync) at each ``flush``; the driver flushes before any trial's row
can reach the lake, so a trial whose row is committed is always in the journal.

Contract:

- **One driver per study.** ``driver_lock`` takes an exclusive, non-blocking ``flock`` on
  ``JOURNAL.driver``; a second driver on the same study is refused with ``UserError`` (it
  would otherwise settle the first one's running trials as dead). The lock goes with the
  process, so a killed driver never leaves it behind.
- **A torn last line is dropped.** A last line without its newline, or one that is no
  journal record, was never a whole write (a driver killed mid-write, a truncated copy):
  opening the journal copies the file beside it (``JOURNAL.torn-TIME``), cuts the line off
  and says so in ``notes``. Left there, it would join the next append into one bad line.
- **A damaged line is refused.** Any other line that is no journal record (a JSON object
  with an integer ``op_code``), or one Optuna cannot replay, is a ``JournalDamage``
  naming the file and the line (``damage``), whose remedy is ``--repair-journal``.
- **Not a journal.** ``journal_problem`` says why a file is no Optuna journal at all (its
  first line is no record that creates a study), reading only that line.
- **Reads see everything.** ``read_logs`` returns the file's records (read once, when
  opened), then the pending ones, so the storage above sees its own writes at once. Only
  the lock holder writes, so record numbers stay the same once flushed.
- **Not thread safe**; one storage per backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import time
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional

from optuna.storages.journal import BaseJournalBackend, JournalFileBackend

from sweeps.errors import UserError

__all__ = ["BatchedJournal", "JournalDamage", "driver_lock", "journal_problem", "set_aside", "REPAIR_HINT"]

#: How a message about a damaged journal says the way on.
REPAIR_HINT = "rerun with --repair-journal to rebuild the study from the lake's rows (the journal is kept beside it)"
#: The longest first line ``journal_problem`` reads (a study's creation record is ~150 bytes).
_FIRST_LINE_LIMIT = 1 << 16


class JournalDamage(UserError):
    """A line of a journal that is no record, or that Optuna cannot replay."""

    def __init__(self, path: Path, line: int, why: str) -> None:
        self.path, self.line = path, line
        super().__init__(f"journal {path}: line {line} is damaged ({why}); {REPAIR_HINT}")


def _record(line: bytes) -> Optional[Dict[str, Any]]:
    """The journal record a line holds, or None if it holds none."""
    try:
        record = json.loads(line)
    except ValueError:  # JSONDecodeError and UnicodeDecodeError alike
        return None
    if not isinstance(record, dict) or type(record.get("op_code")) is not int:
        return None
    return record


def _why(line: bytes) -> str:
    try:
        json.loads(line)
    except ValueError as exc:
        return f"not JSON: {str(exc).splitlines()[0][:80]}"
    return "no journal record: a JSON object with an integer op_code"


def journal_problem(path: Path) -> Optional[str]:
    """Why ``path`` cannot be an Optuna journal, or None: a file that does not exist yet or
    is empty is a new journal; else its first line must be the record that creates a study
    (or the start of one, torn). Reads at most the first line."""
    if not path.is_file():
        return None
    with open(path, "rb") as handle:
        first = handle.readline(_FIRST_LINE_LIMIT)
    if not first:
        return None
    record = _record(first) if first.endswith(b"\n") else None
    if record is not None and record["op_code"] == 0 and isinstance(record.get("study_name"), str):
        return None
    opening = b'{"op_code":0,'
    if not first.endswith(b"\n") and (first.startswith(opening) or opening.startswith(first)):
        return None  # a torn first write; opening the journal drops it
    return "is not an Optuna journal (its first line is no record that creates a study)"


def _beside(path: Path, tag: str) -> Path:
    """A free name beside ``path``: ``NAME.TAG-TIME`` (with ``-N`` added where taken)."""
    stamp = time.strftime("%Y%m%dT%H%M%S")
    target, n = path.with_name(f"{path.name}.{tag}-{stamp}"), 1
    while target.exists():
        target, n = path.with_name(f"{path.name}.{tag}-{stamp}-{n}"), n + 1
    return target


def set_aside(path: Path, tag: str) -> Optional[Path]:
    """Move ``path`` to a free name beside it (``NAME.TAG-TIME``); returns it, or None if
    there was nothing to move."""
    if not path.exists():
        return None
    target = _beside(path, tag)
    os.replace(path, target)
    return target


class BatchedJournal(BaseJournalBackend):
    """A journal file whose appends wait in memory until ``flush``."""

    def __init__(self, path: Path) -> None:
        self.path = path
        #: What opening the journal mended, one line each (a torn last line dropped).
        self.notes: List[str] = []
        self._records = self._read(path)
        self._file = JournalFileBackend(str(path))
        self._pending: List[Dict[str, Any]] = []
        self._last_read = -1

    def _read(self, path: Path) -> List[Dict[str, Any]]:
        """The file's records; a torn last line is dropped (``notes``), a damaged one refused."""
        data = path.read_bytes() if path.is_file() else b""
        lines = data.split(b"\n")
        tail = lines.pop()  # what follows the last newline: b"" unless the last line is torn
        records = [_record(line) for line in lines]
        torn = bool(tail) or (bool(records) and records[-1] is None)
        if not tail and torn:
            tail = lines.pop() + b"\n"
            records.pop()
        for number, record in enumerate(records, start=1):
            if record is None:
                raise JournalDamage(path, number, _why(lines[number - 1]))
        if torn:
            copy = _beside(path, "torn")
            shutil.copyfile(path, copy)
            with open(path, "r+b") as handle:
                handle.truncate(len(data) - len(tail))
                handle.flush()
                os.fsync(handle.fileno())
            self.notes.append(f"journal {path}: its last line was torn (a write that never finished); dropped it, "
                              f"the journal as it was is kept as {copy}")
        return records

    def damage(self, exc: BaseException) -> JournalDamage:
        """The damage Optuna met replaying the record last read (``exc``), by its line."""
        return JournalDamage(self.path, self._last_read + 1, f"{type(exc).__name__}: {str(exc)[:80]}")

    def read_logs(self, log_number_from: int) -> Iterator[Dict[str, Any]]:
        in_file = len(self._records)
        for number in range(log_number_from, in_file + len(self._pending)):
            self._last_read = number
            yield self._records[number] if number < in_file else self._pending[number - in_file]

    def append_logs(self, logs: List[Dict[str, Any]]) -> None:
        self._pending.extend(logs)

    @property
    def pending(self) -> int:
        """Records not yet in the file."""
        return len(self._pending)

    def flush(self) -> None:
        """Append the pending records in one write, fsynced."""
        if self._pending:
            self._file.append_logs(self._pending)
            self._records.extend(self._pending)
            self._pending = []


@contextlib.contextmanager
def driver_lock(journal: Path) -> Iterator[None]:
    """Hold ``JOURNAL.driver`` exclusively while a driver runs the study; ``UserError`` if
    another process holds it."""
    journal.parent.mkdir(parents=True, exist_ok=True)
    path = journal.with_name(journal.name + ".driver")  # ".lock" is Optuna's own
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"study {journal.stem} is being run by another process (lock {path}); "
                            "wait for it to end, or give another --storage") from None
        yield
    finally:
        os.close(fd)
