"""Errors a user can act on: the CLI prints their message and exits with status 2."""

from __future__ import annotations

__all__ = ["UserError", "ConfigError", "LakeError", "QueryError", "DataFileError"]


class UserError(Exception):
    """Bad input, found before any work starts; the message says what and where."""


#: The longest field or value a message shows whole, in characters; a longer one is cut.
SHOWN_MAX = 200


def _shown(text: str) -> str:
    """``text`` on one line, cut to ``SHOWN_MAX`` characters (saying how long it was)."""
    if not text.isprintable():
        text = repr(text)[1:-1]
    return text if len(text) <= SHOWN_MAX else f"{text[:SHOWN_MAX // 2]}... ({len(text):,} characters)"


class ConfigError(UserError):
    """A config field holds a value that cannot be used. The message shows the field and
    the value on one line, a long one cut."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field, self.value, self.reason = field, value, reason
        super().__init__(f"config error: {_shown(str(field))}={_shown(repr(value))}: {reason}")


class LakeError(UserError):
    """The lake's location cannot be read or written."""


class QueryError(UserError):
    """A SQL statement over the lake failed. The message is one line: the reason, then the
    statement as a Python literal (a statement of several lines shows on one)."""

    def __init__(self, statement: str, reason: str) -> None:
        self.statement = statement
        super().__init__(f"query failed: {reason}; statement: {statement!r}")


class DataFileError(UserError):
    """A data file (a published-runs CSV of ``commscale validate``) that cannot be used: it
    cannot be read, a cell is no number, a row names no hardware profile or an impossible
    layout. The message names the file, the row and the field."""
