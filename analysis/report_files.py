"""The files of a report folder, each written whole or not at all.

Every file of a report (the page, its Markdown twin, each figure's PNG and SVG, the
manifest) is written under a hidden temporary name of its own beside it
(``.NAME.<pid>-<random>.tmp``), flushed to disk, then renamed over its final name
(``os.replace``, atomic): a reader sees the former file or the new one, whole; two writers
never share a temporary name, and of two renames the last wins the whole file.

Writers of one folder also hold an advisory lock on it for the whole report
(``folder_lock``), so a second writer reads what the first wrote and the folder holds one
report, not a mix; while it holds the lock a writer removes the temporaries a writer killed
mid-write left behind.

A folder that cannot hold the report raises ``ReportFolderError``, naming the path: before
any work (a file where a folder should be, a folder where a file should be, a read-only
folder), or when a write fails (``disk_full`` where the disk, or a file-size limit, ran out of
room). No temporary file outlives a failed write.

    with folder_lock(out):                      # makes the folder, refuses one that cannot hold files
        check_files(out, ["report.html"])       # refuses a folder where the page goes
        write_text(out / "report.html", page)   # whole or not at all
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Sequence

__all__ = ["ReportFolderError", "refused", "write_whole", "write_text", "make_folder", "check_files",
           "folder_lock"]

#: errno values of a write that ran out of room: the disk, a quota, a file-size limit.
_FULL = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT})
_TEMPORARY = re.compile(r"\..+\.\d+-[0-9a-f]{8}\.tmp")


class ReportFolderError(Exception):
    """A report folder that cannot hold the report: ``path`` (the file or folder at fault),
    ``reason`` (what is wrong with it) and ``disk_full`` (the write ran out of room, as
    opposed to a folder that cannot hold this file at all)."""

    def __init__(self, path: Path, reason: str, *, disk_full: bool = False) -> None:
        self.path, self.reason, self.disk_full = Path(path), reason, disk_full
        super().__init__(f"{path}: {reason}")


def refused(path: Path, exc: OSError) -> ReportFolderError:
    """The ``ReportFolderError`` of ``exc``, raised while writing ``path``."""
    if exc.errno == errno.EISDIR:
        return ReportFolderError(path, "is a folder where the report writes a file")
    reason = os.strerror(exc.errno) if exc.errno else str(exc)
    return ReportFolderError(path, reason[:1].lower() + reason[1:], disk_full=exc.errno in _FULL)


def _temporary_of(path: Path) -> Path:
    return path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")


def write_whole(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Write ``path`` through ``write(handle)`` (a binary file) under a temporary name of its
    own beside it, fsync it and rename it over ``path``. On failure the temporary is removed
    and ``path`` is as it was; an ``OSError`` becomes ``ReportFolderError`` naming ``path``."""
    temporary = _temporary_of(path)
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as exc:
        raise refused(path.parent, exc) from None
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, path)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(temporary)
        if isinstance(exc, OSError):
            raise refused(path, exc) from None
        raise


def write_text(path: Path, text: str) -> None:
    """``write_whole`` of ``text`` in UTF-8."""
    write_whole(path, lambda handle: handle.write(text.encode("utf-8")))


def make_folder(folder: Path) -> None:
    """Make ``folder`` (and its parents) unless it is there; refuse one that is a file, or
    that this process cannot write (``ReportFolderError``)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        if exc.errno not in (errno.ENOTDIR, errno.EEXIST):
            raise refused(folder, exc) from None
    culprit = next((p for p in [folder, *folder.parents] if (p.exists() or p.is_symlink()) and not p.is_dir()), None)
    if culprit is not None:
        raise ReportFolderError(culprit, "is a file where the report needs a folder" if culprit.is_file()
                                else "is not a folder, and the report needs a folder there")
    if not os.access(folder, os.W_OK | os.X_OK):
        read_only = os.statvfs(folder).f_flag & os.ST_RDONLY
        raise ReportFolderError(folder, "is on a read-only file system" if read_only else "is not writable "
                                "(permission denied)")


def check_files(folder: Path, names: Iterable[str]) -> None:
    """Refuse (``ReportFolderError``) an entry of ``folder`` named as one of ``names`` that is
    there and is not a plain file: a write would fail on it after the work was done."""
    for name in names:
        path = folder / name
        if (path.exists() or path.is_symlink()) and not path.is_file():
            raise ReportFolderError(path, "is a folder where the report writes a file" if path.is_dir()
                                    else "is not a plain file, and the report writes a file there")


def _remove_temporaries(folder: Path) -> None:
    """Remove ``write_whole``'s temporaries from ``folder`` (only while no other writer's are there)."""
    for path in folder.iterdir():
        if _TEMPORARY.fullmatch(path.name):
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                path.unlink()


@contextlib.contextmanager
def folder_lock(folder: Path, tidy: Sequence[str] = ()) -> Iterator[bool]:
    """Make ``folder`` (``make_folder``) and hold an exclusive advisory lock on it until the
    block ends, waiting for another writer's; while holding it, remove the temporaries of
    writers killed mid-write from ``folder`` and from its subfolders named in ``tidy``. Yields
    whether the lock is held (False on a file system without locks: writers then still never
    collide, but two may mix their files). The kernel drops the lock of a process that dies."""
    make_folder(folder)
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as exc:
        raise refused(folder, exc) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            locked = True
        except OSError:
            locked = False
        for path in [folder, *(folder / name for name in tidy)] if locked else []:
            if path.is_dir():
                _remove_temporaries(path)
        yield locked
    finally:
        os.close(fd)
