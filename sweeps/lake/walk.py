"""Listing what lies under a lake's root without ever leaving it: symbolic links are
reported, never followed.

A lake handed over by someone else may hold a link in place of a partition folder, a
data file or ``_quarantine``; maintenance that followed it would delete or move files
outside the lake. So on a local filesystem the walk looks at each entry itself
(``lstat``), descends into real folders only, and returns the links it met; and
``through_link`` tells whether a path under the root passes through a link, so that no
file is read as committed, moved or deleted through one. Other filesystems (object
stores) have no links: their listing is pyarrow's.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field
from typing import List, Tuple

import pyarrow.fs as pafs

__all__ = ["Listing", "list_under", "through_link"]


@dataclass
class Listing:
    """The plain files found (pyarrow ``FileInfo``, absolute paths) and the links met
    (relative to the root), neither followed nor listed as files."""

    files: List[pafs.FileInfo] = field(default_factory=list)
    links: List[str] = field(default_factory=list)


def list_under(fs: pafs.FileSystem, root: str, local: bool, tops: Tuple[str, ...]) -> Listing:
    """Every plain file under ``root`` whose path relative to it starts with one of
    ``tops`` (e.g. ``("kind=", "_keys/")``; ``("",)`` for all), and the links met on the way."""
    if not local:
        selector = pafs.FileSelector(root, recursive=True, allow_not_found=True)
        return Listing([info for info in fs.get_file_info(selector) if info.type == pafs.FileType.File
                        and info.path[len(root) + 1:].startswith(tops)])
    listing = Listing()
    _walk(root, "", tops, listing)
    listing.links.sort()
    return listing


def _walk(root: str, relative: str, tops: Tuple[str, ...], listing: Listing) -> None:
    try:
        entries = list(os.scandir(os.path.join(root, relative) if relative else root))
    except FileNotFoundError:
        return
    for entry in entries:
        child = f"{relative}/{entry.name}" if relative else entry.name
        if not any(child.startswith(top) or top.startswith(child + "/") for top in tops):
            continue
        info = entry.stat(follow_symlinks=False)
        if stat.S_ISLNK(info.st_mode):
            listing.links.append(child)
        elif stat.S_ISDIR(info.st_mode):
            _walk(root, child, tops, listing)
        elif stat.S_ISREG(info.st_mode) and child.startswith(tops):
            listing.files.append(pafs.FileInfo(f"{root}/{child}", pafs.FileType.File, mtime_ns=info.st_mtime_ns,
                                               size=info.st_size))


def through_link(root: str, relative: str) -> bool:
    """Whether ``relative`` (under the local ``root``) is a link or lies under one. A path
    that does not exist (all or in part) passes through no link."""
    path = root
    for part in relative.split("/"):
        path = os.path.join(path, part)
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return True
        except FileNotFoundError:
            return False
    return False
