"""The commit log's entries as data: sealed with a checksum when written, checked when read,
and checked as a sequence.

An entry is one JSON object per file ``_log/<version>.json``; versions run 1, 2, 3, ...
without a gap. Actions:

- ``add``: a data file joins the lake (kind, partition, file, rows, bytes, sha256, keys_file);
- ``remove``: files leave it (they stay on disk until ``vacuum``);
- ``sweep``: a sweep's manifest;
- ``lost``: written by ``lake verify --repair`` in place of an entry that was missing or
  damaged, so the sequence is whole again and the loss is on record.

Each entry written by this version carries ``check``, the sha256 of its canonical JSON
without ``check``: bytes flipped inside an entry are found, not taken as a commit. Entries
of older versions have no ``check`` and are read as they are.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

__all__ = ["ACTIONS", "seal", "parse", "LogProblem", "sequence_problems"]

ACTIONS = ("add", "remove", "sweep", "lost")
_REQUIRED = {"add": ("kind", "file", "rows", "bytes", "sha256"), "remove": ("files",), "sweep": ("sweep", "hardware"),
             "lost": ()}


def _digest(entry: dict) -> str:
    content = {k: v for k, v in entry.items() if k != "check"}
    return hashlib.sha256(json.dumps(content, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def seal(entry: dict) -> bytes:
    """The bytes of ``entry`` with its checksum."""
    return json.dumps({**entry, "check": _digest(entry)}, separators=(",", ":")).encode()


def parse(version: int, data: bytes) -> Tuple[Optional[dict], Optional[str]]:
    """``(entry, None)`` for a sound entry of ``version``; ``(None, why)`` otherwise."""
    if not data:
        return None, "empty"
    try:
        entry = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        return None, f"not valid JSON ({exc.__class__.__name__}: {str(exc)[:80]})"
    if not isinstance(entry, dict):
        return None, "not a JSON object"
    if "check" in entry and entry["check"] != _digest(entry):
        return None, "checksum differs from its content"
    if entry.get("version") != version:
        return None, f"names version {entry.get('version')!r}"
    action = entry.get("action")
    if action not in ACTIONS:
        return None, f"unknown action {action!r}"
    missing = [f for f in _REQUIRED[action] if f not in entry]
    if missing:
        return None, f"{action} entry lacks {', '.join(missing)}"
    return entry, None


@dataclass(frozen=True)
class LogProblem:
    """A fault of the log: ``gap`` (an entry is missing), ``damaged`` (an entry cannot be
    read, and later ones exist) or ``torn`` (the newest entry cannot be read)."""

    version: int
    kind: str
    detail: str

    def describe(self) -> str:
        what = {"gap": "is missing", "damaged": "is damaged", "torn": "(the newest) is damaged"}[self.kind]
        return f"commit-log entry {self.version} {what}" + (f": {self.detail}" if self.detail else "")


def sequence_problems(versions: Sequence[int], after: int, damaged: Dict[int, str]) -> List[LogProblem]:
    """The problems of the entries after version ``after``: ``versions`` are the entry files
    present, ``damaged`` maps those that could not be read to why."""
    present = sorted(v for v in versions if v > after)
    problems: List[LogProblem] = []
    expected = after + 1
    for version in present:
        if version - expected > 100:
            problems.append(LogProblem(expected, "gap", f"{version - expected} entries between {expected - 1} and {version}"))
        else:
            for missing in range(expected, version):
                problems.append(LogProblem(missing, "gap", f"between {missing - 1} and {version}"))
        if version in damaged:
            kind = "torn" if version == present[-1] else "damaged"
            problems.append(LogProblem(version, kind, damaged[version]))
        expected = version + 1
    return problems
