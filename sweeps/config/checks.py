"""Checks of config values that OmegaConf's types cannot express, in one style: each names
the field and the value and raises ``ConfigError``."""

from __future__ import annotations

import re
from typing import Iterable, Sequence

from sweeps.errors import ConfigError

__all__ = ["NAME", "NAME_MAX", "check_name", "check_positive", "check_non_negative", "check_fraction", "check_choices",
           "check_at_least"]

#: Names that become file and partition names (sweep, hardware, search): letters, digits,
#: '.', '_' and '-', starting with a letter or a digit, with no '..' (a path's parent).
NAME = re.compile(r"^(?!.*\.\.)[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: The longest name, in characters: a partition folder name stays far below a file
#: system's 255 bytes, and a lake path stays readable.
NAME_MAX = 64


def _values(values) -> list:
    return values if isinstance(values, list) else [values]


def check_name(field: str, value: str) -> None:
    """``value`` is a ``NAME`` of at most ``NAME_MAX`` characters (a long one is shown cut)."""
    if len(value) > NAME_MAX:
        raise ConfigError(field, f"{value[:24]}...", f"is {len(value)} characters long; a name has at most {NAME_MAX}")
    if not NAME.match(value):
        raise ConfigError(field, value, "use letters, digits, '.', '_' and '-' only, starting with a letter or a "
                                        "digit, with no '..'")


def _check_unique(field: str, values) -> None:
    """A list names each value once: a repeated one would plan the same point twice, under
    one key, so a sweep could never be done."""
    if isinstance(values, (list, tuple)):
        seen = set()
        for value in values:
            if value in seen:
                raise ConfigError(field, values, f"lists {value} twice; name each value once")
            seen.add(value)


def check_positive(field: str, values) -> None:
    """Every value (one, or each of a list) is a positive number; a list is not empty and
    names each value once."""
    if isinstance(values, list) and not values:
        raise ConfigError(field, values, "must list at least one value")
    for value in _values(values):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(field, value, "must be a number")
    _check_unique(field, values)
    for value in _values(values):
        if value <= 0:
            raise ConfigError(field, value, "must be positive")


def check_non_negative(field: str, value) -> None:
    if value < 0:
        raise ConfigError(field, value, "must not be negative")


def check_at_least(field: str, value, low: float, why: str) -> None:
    if value < low:
        raise ConfigError(field, value, why)


def check_fraction(field: str, value, what: str = "an efficiency") -> None:
    """``value`` lies in (0, 1]."""
    if not 0 < value <= 1:
        raise ConfigError(field, value, f"{what} lies in (0, 1]")


def check_choices(field: str, values: Iterable[str], allowed: Sequence[str], *, verb: str = "choose from") -> None:
    """Each value is one of ``allowed``, and a list names each once."""
    _check_unique(field, values)
    for value in values:
        if value not in allowed:
            raise ConfigError(field, value, f"{verb} {', '.join(allowed)}")
