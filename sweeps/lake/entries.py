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
of older versions have no ``check`` and are read as they are. The check is unkeyed, so
anyone can seal an entry: every name an entry holds (kind, partition, version, files) must
also match ``sweeps.lake.names``, or the entry is damaged, whatever its check says.

``_log/HEAD`` (``head_bytes``, ``parse_head``) records the newest version committed,
written after its entry: an entry missing from the end of the log is then found as a gap
up to the head, not taken for a log that ends early.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from sweeps.lake.names import entry_name_fault

__all__ = ["ACTIONS", "seal", "parse", "LogProblem", "sequence_problems", "head_bytes", "parse_head", "FAR_GAP"]

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
    fault = _field_fault(entry) or entry_name_fault(entry)
    if fault is not None:
        return None, fault
    return entry, None


def _field_fault(entry: dict) -> Optional[str]:
    """Why an add entry's counts or digests are not of their type, or None."""
    if entry["action"] != "add":
        return None
    for name in ("rows", "bytes"):
        value = entry[name]
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{name} {value!r} is not a count"
    for name in ("sha256", "keys_sha256"):
        value = entry.get(name, "0" * 64)
        if not (isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)):
            return f"{name} {str(value)[:40]!r} is not a sha256"
    version = entry.get("schema_version", 1)
    if not isinstance(version, int) or isinstance(version, bool):
        return f"schema_version {version!r} is not a number"
    return None


def head_bytes(version: int) -> bytes:
    """The bytes of a head recording ``version`` as the newest committed, sealed."""
    return seal({"head": version})


def parse_head(data: Optional[bytes]) -> Tuple[int, Optional[str]]:
    """``(version, None)`` for a sound head (0 when there is none: an older lake);
    ``(0, why)`` for a damaged one."""
    if data is None:
        return 0, None
    try:
        head = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError):
        return 0, "is not valid JSON"
    if not isinstance(head, dict) or head.get("check") != _digest(head) or set(head) != {"head", "check"}:
        return 0, "does not match its checksum"
    version = head["head"]
    if not isinstance(version, int) or isinstance(version, bool) or version < 0:
        return 0, f"records version {version!r}"
    return version, None


@dataclass(frozen=True)
class LogProblem:
    """A fault of the log: ``gap`` (an entry is missing), ``damaged`` (an entry cannot be
    read, and later ones exist or the head records it), ``torn`` (the newest entry cannot be
    read, and the head does not record it: its commit never finished) or ``head`` (the
    head cannot be read; ``version`` is 0)."""

    version: int
    kind: str
    detail: str

    def describe(self) -> str:
        if self.kind == "head":
            return f"the commit log's head is damaged: {self.detail}"
        what = {"gap": "is missing", "damaged": "is damaged", "torn": "(the newest) is damaged"}[self.kind]
        return f"commit-log entry {self.version} {what}" + (f": {self.detail}" if self.detail else "")


#: A gap this long before an entry says the entry is not of this log (a stray file named
#: far beyond it): repair sets such an entry aside rather than filling the gap.
FAR_GAP = 100_000


def sequence_problems(versions: Sequence[int], after: int, damaged: Dict[int, str], head: int = 0
                      ) -> List[LogProblem]:
    """The problems of the entries after version ``after``: ``versions`` are the entry files
    present, ``damaged`` maps those that could not be read to why, and ``head`` is the
    newest version the log's head records (entries up to it must be present)."""
    present = sorted(v for v in versions if v > after)
    problems: List[LogProblem] = []
    expected = after + 1
    for version in present:
        problems.extend(_gap(expected, version, f"before {version}"))
        if version in damaged:
            kind = "torn" if version == present[-1] and version > head else "damaged"
            problems.append(LogProblem(version, kind, damaged[version]))
        expected = version + 1
    if head >= expected:
        problems.extend(_gap(expected, head + 1, f"the log's head records version {head}"))
    return problems


def _gap(first: int, end: int, why: str) -> List[LogProblem]:
    """The missing versions ``first`` .. ``end - 1``: one problem each, or one for a long run."""
    if end - first > 100:
        return [LogProblem(first, "gap", f"{end - first} entries from {first} to {end - 1} ({why})")]
    return [LogProblem(missing, "gap", why) for missing in range(first, end)]
