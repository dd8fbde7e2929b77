"""Typed reads of the cells of one row of a runs file, each failure a ``RowError`` naming the
file, the row (1-based, after the header), the field and the value."""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional

from tasks.validation.records import RowError

__all__ = ["MAX_NUMBER", "SPELLINGS", "row_error", "RowCells"]

#: The largest number a cell holds (a GPU count, a batch, tokens per second): far beyond any run.
MAX_NUMBER = 1e15

#: Other spellings of a choice, read as the choice they name.
SPELLINGS = {"bfloat16": "bf16", "float16": "fp16", "fp8-hybrid": "fp8", "fp8_hybrid": "fp8", "fp8-e4m3": "fp8",
             "false": "none", "no": "none", "true": "full", "yes": "full", "sel": "selective", "block": "full"}


def row_error(path: str, row: int, field: str, value: object, why: str) -> RowError:
    """The error of one cell: "FILE row N: FIELD='VALUE' WHY"."""
    return RowError(f"{path} row {row}: {field}={value!r} {why}")


class RowCells:
    """Typed reads of one CSV row, each failure naming the row and the field."""

    def __init__(self, path: str, row: int, cells: Dict[str, Optional[str]]):
        self.path, self.row, self.cells = path, row, cells

    def fail(self, field: str, value: object, why: str) -> RowError:
        return row_error(self.path, self.row, field, value, why)

    def text(self, field: str, default: Optional[str] = None) -> str:
        value = (self.cells.get(field) or "").strip()
        if value:
            return value
        if default is None:
            raise self.fail(field, "", "is blank; the column is required")
        return default

    def number(self, field: str, cast: Callable, default=None, *, minimum: float = 1):
        raw = (self.cells.get(field) or "").strip()
        if not raw:
            if default is None:
                raise self.fail(field, "", "is blank; the column is required")
            return default
        try:
            number = float(raw) if raw.isascii() else math.nan
        except ValueError:
            number = math.nan
        if math.isnan(number) and raw.lower().lstrip("+-") != "nan":
            raise self.fail(field, raw, "is not a number")
        if not math.isfinite(number) or not number >= minimum:
            raise self.fail(field, raw, f"must be a finite number of at least {minimum:g}")
        if number > MAX_NUMBER:
            raise self.fail(field, raw, f"is beyond {MAX_NUMBER:g}, larger than any run")
        if cast is int and number != int(number):
            raise self.fail(field, raw, "must be a whole number")
        return cast(number)

    def probability(self, field: str, default: float) -> float:
        value = self.number(field, float, default, minimum=0)
        if value >= 1:
            raise self.fail(field, self.text(field), "must be a probability below 1")
        return value

    def flag(self, field: str, default: Optional[bool]) -> Optional[bool]:
        raw = (self.cells.get(field) or "").strip().lower()
        if not raw:
            return default
        if raw in ("true", "1", "yes", "on", "y", "flash", "fused", "cudnn"):
            return True
        if raw in ("false", "0", "no", "off", "n", "standard", "materialised", "materialized"):
            return False
        raise self.fail(field, raw, "must be true or false")

    def choice(self, field: str, choices, default: str) -> str:
        value = self.text(field, default).lower()
        value = SPELLINGS.get(value, value) if SPELLINGS.get(value) in choices else value
        if value not in choices:
            raise self.fail(field, value, f"is not one of {', '.join(choices)}")
        return value
