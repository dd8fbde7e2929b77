"""Names read from a lake are data, never code: the patterns every kind, partition and
sweep version must match before it is used, and the one way a name enters SQL.

A lake may come from anyone (a shared folder, a snapshot, a bucket), and its commit log
is sealed with an unkeyed checksum that anyone can compute. So a name read from the log
or from a folder is checked against a strict pattern first; one that fails is reported
by ``lake verify`` and refused by every reader (``LakeError`` naming the entry and the
value), and a name that passes still enters SQL only quoted, through ``sql_identifier``
or ``sql_string``.
"""

from __future__ import annotations

import re
from typing import Dict, Optional

__all__ = ["KIND", "PARTITION_KEY", "PARTITION_VALUE", "SWEEP_VERSION", "NAME_MAX", "name_fault", "entry_name_fault",
           "sql_identifier", "sql_string"]

#: A result kind: lower-case letters, digits and '_', starting with a letter.
KIND = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
#: A partition's column name (``sweep``, ``hardware``).
PARTITION_KEY = re.compile(r"^[a-z][a-z0-9_]{0,63}\Z")
#: The longest partition value: a config name (64 characters, ``sweeps.config.checks``)
#: with a study's hash suffix, and room to spare below a file system's 255 bytes.
NAME_MAX = 128
#: A partition's value (a sweep, study or hardware name): letters, digits, '.', '_', '+'
#: and '-', starting with a letter or a digit, with no '..' (a path's parent).
PARTITION_VALUE = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.+-]{0,127}\Z")
#: A sweep version (``sweeps.lake.versions``): hex digits, or empty for none.
SWEEP_VERSION = re.compile(r"^[0-9a-f]{0,64}\Z")


def name_fault(what: str, value: object, pattern: "re.Pattern[str]") -> Optional[str]:
    """Why ``value`` (a ``what``: "kind", "partition value", ...) is not a name of
    ``pattern``, or None when it is one. The value is shown cut to 40 characters."""
    if isinstance(value, str) and pattern.match(value):
        return None
    shown = repr(value)
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    return f"{what} {shown} is not a plain name"


def entry_name_fault(entry: Dict[str, object]) -> Optional[str]:
    """Why a commit-log entry names something that is not a plain name, or None: the
    kind and partition of an ``add``, the sweep, hardware and version of a ``sweep``
    manifest, the version an ``add`` belongs to, and the files it names (which must lie
    in the folder its kind and partition name)."""
    action = entry.get("action")
    if action == "add":
        fault = name_fault("kind", entry.get("kind"), KIND)
        partition = entry.get("partition", {})
        if fault is None and not isinstance(partition, dict):
            return f"partition {partition!r} is not a mapping"
        for key, value in (partition or {}).items():
            fault = fault or name_fault("partition key", key, PARTITION_KEY)
            fault = fault or name_fault(f"partition value of {key}", value, PARTITION_VALUE)
        fault = fault or name_fault("sweep version", entry.get("sweep_version", ""), SWEEP_VERSION)
        return fault or _file_fault(entry)
    if action == "sweep":
        return ((name_fault("kind", entry["kind"], KIND) if "kind" in entry else None)
                or name_fault("sweep", entry.get("sweep"), PARTITION_VALUE)
                or name_fault("hardware", entry.get("hardware"), PARTITION_VALUE)
                or name_fault("sweep version", entry.get("sweep_version", ""), SWEEP_VERSION))
    if action == "remove" and not (isinstance(entry.get("files"), list)
                                   and all(isinstance(f, str) for f in entry["files"])):
        return "its files are not a list of names"
    return None


_DATA_FILE = re.compile(r"^part-[0-9a-f]{32}\.parquet\Z")
_KEYS_FILE = re.compile(r"^_keys/(?!\.)(?!.*\.\.)[A-Za-z0-9_.+-]{1,200}\.keys\Z")
#: A data file of a lake of commscale 0.1, adopted under its own name.
_ADOPTED_FILE = re.compile(r"^(?!\.)(?!.*\.\.)[A-Za-z0-9_.+-]{1,200}\.parquet\Z")


def _file_fault(entry: Dict[str, object]) -> Optional[str]:
    """An add entry's file lies in its kind's and partition's folder, with a plain name;
    its key sidecar, if named, lies in ``_keys/``."""
    partition = entry.get("partition") or {}
    folder = "/".join([f"kind={entry['kind']}"] + [f"{k}={v}" for k, v in partition.items()])
    relative = entry.get("file")
    if not isinstance(relative, str) or "/" not in relative:
        return f"file {relative!r} is not a data file of the lake"
    where, name = relative.rsplit("/", 1)
    if where != folder or not (_DATA_FILE.match(name) or (entry.get("adopted") and _ADOPTED_FILE.match(name))):
        return name_fault("file", relative, _DATA_FILE)
    keys_file = entry.get("keys_file")
    if keys_file is not None and not (isinstance(keys_file, str) and _KEYS_FILE.match(keys_file)):
        return name_fault("key sidecar", keys_file, _KEYS_FILE)
    return None


def sql_identifier(name: str) -> str:
    """``name`` quoted as a SQL identifier (DuckDB: double quotes, each doubled)."""
    return '"' + name.replace('"', '""') + '"'


def sql_string(text: str) -> str:
    """``text`` quoted as a SQL string literal (single quotes, each doubled)."""
    return "'" + text.replace("'", "''") + "'"
