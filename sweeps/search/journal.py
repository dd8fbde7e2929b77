"""A study's journal file, written in batches, and held by one driver at a time.

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
- **Reads see everything.** ``read_logs`` returns the file's records, then the pending
  ones, so the storage above sees its own writes at once. Only the lock holder writes,
  so record numbers stay the same once flushed.
- **Not thread safe**; one storage per backend.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path
from typing import Any, Dict, Iterator, List

from optuna.storages.journal import BaseJournalBackend, JournalFileBackend

from sweeps.errors import UserError

__all__ = ["BatchedJournal", "driver_lock"]


class BatchedJournal(BaseJournalBackend):
    """A journal file whose appends wait in memory until ``flush``."""

    def __init__(self, path: Path) -> None:
        self._file = JournalFileBackend(str(path))
        self._pending: List[Dict[str, Any]] = []
        self._in_file = sum(1 for _ in self._file.read_logs(0))

    def read_logs(self, log_number_from: int) -> Iterator[Dict[str, Any]]:
        if log_number_from < self._in_file:
            yield from self._file.read_logs(log_number_from)
        yield from self._pending[max(0, log_number_from - self._in_file):]

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
            self._in_file += len(self._pending)
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
