"""Errors a user can act on: the CLI prints their message and exits with status 2."""

from __future__ import annotations

__all__ = ["UserError", "ConfigError", "LakeError", "QueryError", "DataFileError"]


class UserError(Exception):
    """Bad input, found before any work starts; the message says what and where."""


class ConfigError(UserError):
    """A config field holds a value that cannot be used."""

    def __init__(self, field: str, value: object, reason: str) -> None:
        self.field, self.value, self.reason = field, value, reason
        super().__init__(f"config error: {field}={value!r}: {reason}")


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
