"""The report's tables, as HTML and as Markdown, each column in one number format.

- **One format per column** (``column_formats``): a column of whole numbers is written
  with thousands separators (``4,096``); any other column of numbers in fixed point, with
  the decimals that give its smallest non-zero magnitude three significant digits, or
  fewer where every value of the column needs fewer to be written exactly (at most six:
  ``0.0412``, ``0.3500``; ``1,412``, ``11,721``; ``0.4``, ``29.2``), or, where the column
  reaches 10^12 or holds a magnitude under 10^-4, all in scientific notation (``1.234e-05``).
  A column of text, or of text and numbers, is written as it is; a missing value is blank.
- **Short on the page** (``html_table``): a table of more than ``TABLE_ROWS`` + 5 rows
  shows its first ``TABLE_ROWS`` and folds the next ``FOLDED_ROWS`` under them
  (``<details>``); ``markdown_table`` writes every row (the Markdown twin is the whole
  record).
"""

from __future__ import annotations

import html
import math
import numbers
from typing import Callable, List

import pandas as pd

__all__ = ["column_formats", "html_table", "markdown_table", "TABLE_ROWS", "FOLDED_ROWS"]

#: Rows of a long table shown open on the page, and the most folded under them.
TABLE_ROWS, FOLDED_ROWS = 10, 200
#: A table this many rows past ``TABLE_ROWS`` or fewer is shown whole.
_SLACK = 5
#: Significant digits of a column's smallest magnitude, and the most decimals written.
_DIGITS, _MOST_DECIMALS = 3, 6
#: Magnitudes past which a column is written in scientific notation.
_LARGE, _SMALL = 1e12, 1e-4

Format = Callable[[object], str]


def _missing(value: object) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA or value is pd.NaT


def _number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and type(value).__name__ != "bool_"


def _as_text(value: object) -> str:
    return "" if _missing(value) else str(value)


def _format_of(values: pd.Series) -> Format:
    """The one format of a column (see the module's docstring)."""
    present = [v for v in values if not _missing(v)]
    if not present or not all(_number(v) for v in present):
        return _as_text
    magnitudes = [abs(float(v)) for v in present if math.isfinite(float(v)) and v != 0]
    if all(float(v).is_integer() for v in present if math.isfinite(float(v))) and max(magnitudes, default=0) < _LARGE:
        return lambda v: "" if _missing(v) else f"{float(v):,.0f}"
    if magnitudes and (max(magnitudes) >= _LARGE or min(magnitudes) < _SMALL):
        return lambda v: "" if _missing(v) else f"{float(v):.3e}"
    smallest = min(magnitudes, default=1.0)
    significant = max(0, _DIGITS - 1 - math.floor(math.log10(smallest)))
    decimals = min(_MOST_DECIMALS, significant, max(_exact_decimals(float(v)) for v in present))
    return lambda v: "" if _missing(v) else f"{float(v):,.{decimals}f}"


def _exact_decimals(value: float) -> int:
    """The fewest decimals (at most ``_MOST_DECIMALS``) that write ``value`` as it is."""
    if not math.isfinite(value):
        return 0
    return next((d for d in range(_MOST_DECIMALS) if abs(round(value, d) - value) <= 1e-9 * max(1.0, abs(value))),
                _MOST_DECIMALS)


def column_formats(frame: pd.DataFrame) -> List[Format]:
    """One format per column of ``frame``, in its order: value -> text."""
    return [_format_of(frame.iloc[:, i]) for i in range(frame.shape[1])]


def _cells(frame: pd.DataFrame) -> List[List[str]]:
    formats = column_formats(frame)
    return [[f(v) for f, v in zip(formats, row, strict=True)] for row in frame.itertuples(index=False)]


def _table(head: str, rows: List[List[str]], caption: str = "") -> str:
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>" for row in rows)
    caption = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{caption}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def html_table(title: str, frame: pd.DataFrame) -> str:
    """``frame`` as an HTML table captioned ``title``; past ``TABLE_ROWS`` + 5 rows, its first
    ``TABLE_ROWS`` rows, then the next ``FOLDED_ROWS`` folded under them."""
    head = "".join(f"<th>{html.escape(str(c))}</th>" for c in frame.columns)
    rows = _cells(frame)
    if len(rows) <= TABLE_ROWS + _SLACK:
        return _table(head, rows, title)
    folded = rows[TABLE_ROWS:TABLE_ROWS + FOLDED_ROWS]
    rest = len(rows) - TABLE_ROWS - len(folded)
    more = f"the other {len(rows) - TABLE_ROWS} rows" + (f" ({rest} of them only in report.md)" if rest else "")
    return (_table(head, rows[:TABLE_ROWS], f"{title} (first {TABLE_ROWS} of {len(rows)} rows)")
            + f'<details class="more"><summary>{html.escape(more)}</summary>{_table(head, folded)}</details>')


def markdown_table(title: str, frame: pd.DataFrame) -> str:
    """``frame`` as a Markdown table under ``title`` in bold, every row."""
    def row(cells) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"

    lines = [f"**{title}**", "", row(frame.columns), row(["---"] * len(frame.columns))]
    return "\n".join(lines + [row(cells) for cells in _cells(frame)])
