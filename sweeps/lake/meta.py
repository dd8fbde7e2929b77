"""The lake's marker, ``_lake.json``: the format of the layout and log, checked before any
read or write, created with the lake, restored when lost or damaged.

``LakeMarker`` is a base of ``sweeps.lake.log.LakeLog`` and uses its root, lock and reads.
A marker that cannot be read (not JSON, not an object, no integer ``format``) is damaged,
not another format: every command refuses the lake naming ``lake verify --repair``, which
sets the damaged marker aside and writes it anew, deleting nothing. A sound marker of
another format is refused with what to do (``lake upgrade``, or a newer commscale).
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Optional, Tuple

from sweeps.errors import LakeError

__all__ = ["LAKE_FORMAT", "LakeMarker", "MARKER"]

#: Version of the lake's layout and log. 1 was the log-less lake of commscale 0.1.
LAKE_FORMAT = 2
#: The marker's path under the root.
MARKER = "_lake.json"


class LakeMarker:
    """The format check of a lake (a mixin of ``LakeLog``)."""

    def read_marker(self) -> Tuple[Optional[dict], Optional[str]]:
        """``(marker, None)``; ``(None, None)`` when there is none; ``(None, why)`` when it
        is damaged."""
        data = self._read_bytes(self._path(MARKER))
        if data is None:
            return None, None
        try:
            meta = json.loads(data)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return None, "is not valid JSON"
        if not isinstance(meta, dict) or not isinstance(meta.get("format"), int) or isinstance(meta["format"], bool):
            return None, "holds no format number"
        return meta, None

    def _marker(self) -> Optional[dict]:
        """The marker, or None; ``LakeError`` with the remedy when it is damaged."""
        meta, fault = self.read_marker()
        if fault is not None:
            raise LakeError(f"lake {self}: its {MARKER} {fault} (damaged); run `commscale lake verify --repair "
                            f"--lake {self.root_spec}` to restore it (no data file is touched)")
        return meta

    def check_format(self, *, create: bool) -> None:
        """Refuse a lake of another format with what to do; create ``_lake.json`` if asked."""
        if self._format_ok:
            return
        meta = self._marker()
        if meta is None:
            meta = self._meta_of_unmarked(create=create)
            if meta is None:
                return
        found = meta.get("format")
        if found != LAKE_FORMAT:
            hint = ("upgrade commscale to read it" if isinstance(found, int) and found > LAKE_FORMAT
                    else f"run `commscale lake upgrade --lake {self.root_spec}`")
            raise LakeError(f"lake {self} has format {found}, this commscale reads format {LAKE_FORMAT}: {hint}")
        self._format_ok = True

    def _meta_of_unmarked(self, *, create: bool) -> Optional[dict]:
        """The ``_lake.json`` of a root just read without one: another writer's, if it created
        the lake meanwhile; a new one if ``create``; None for an empty root only read.

        Writers race to create a lake: one may read no ``_lake.json`` while another creates
        it and commits. So a root that seems to hold an unmarked log or data is read again
        before it is refused, and ``_lake.json`` is created under the commit lock, after a
        last look, so that no writer refuses or re-marks a lake another has just created.
        """
        try:
            self._refuse_unmarked()
        except LakeError:
            meta = self._marker()
            if meta is None:
                raise
            return meta
        if not create:
            return None
        with self._locked(refresh=False):
            meta = self._marker()
            if meta is None:
                self._refuse_unmarked()
                self._write_meta()
                meta = {"format": LAKE_FORMAT}
        return meta

    def _refuse_unmarked(self) -> None:
        """A root without ``_lake.json`` must hold neither a log nor data files (``LakeError``
        saying how to adopt them otherwise)."""
        if self._log_versions():
            raise LakeError(
                f"lake {self} has a commit log but lost its _lake.json; run `commscale lake upgrade --lake "
                f"{self.root_spec}` to restore it (no data file is touched)"
            )
        if self._raw_data_files():
            raise LakeError(
                f"lake {self} was written by commscale 0.1 (format 1, no commit log); "
                f"run `commscale lake upgrade --lake {self.root_spec}` to adopt its files"
            )

    def _write_meta(self) -> None:
        """Create ``_lake.json`` whole, never half-written: writers may race to create it."""
        final = self._path(MARKER)
        temporary = f"{final}.{uuid.uuid4().hex}.tmp"
        self._write_bytes(temporary, json.dumps({"format": LAKE_FORMAT}).encode())
        if self.local_root is not None:
            os.replace(temporary, final)
        else:
            self.fs.move(temporary, final)
