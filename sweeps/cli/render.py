"""What every command prints the same way: its consoles, a run's one-line account and its
failures, and a query's result in each of its formats (``query_text``, ``parquet_bytes``).

A result's values render the same way in every text format: a list, struct or map as JSON
text (a map as an object, a key that is no string as its JSON text), an interval as DuckDB
writes it (``1 day 02:00:00``), bytes as DuckDB writes them (printable ASCII, else
``\\xHH``), a float that is not finite as JSON's null inside JSON, and any other value as
its text."""

from __future__ import annotations

import io
import json
import math
import os
import sys
from typing import TYPE_CHECKING, List, Optional

import pyarrow as pa
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sweeps.errors import UserError

if TYPE_CHECKING:  # the run engine imports Ray; a command that runs nothing need not
    from sweeps.run import RunReport

__all__ = ["PIPE_WIDTH", "console", "run_line", "report_failures", "QUERY_FORMATS", "query_text", "parquet_bytes",
           "cell_text"]

#: Columns of a console whose stream is not a terminal (a pipe, a file) and ``COLUMNS`` is
#: unset: wide enough that tables reach a file or another program whole, not cut at 80.
PIPE_WIDTH = 200


def console(*, stderr: bool = False) -> Console:
    """The console every command prints with: on a terminal, as wide as the terminal; else
    ``COLUMNS`` wide when set, or ``PIPE_WIDTH``."""
    stream = sys.stderr if stderr else sys.stdout
    if os.environ.get("COLUMNS") or (hasattr(stream, "isatty") and stream.isatty()):
        return Console(stderr=stderr)
    return Console(stderr=stderr, width=PIPE_WIDTH)


def run_line(out: Console, report: "RunReport", what: str, *, unit: str = "points", new: str = "new",
             timing: Optional[str] = None) -> None:
    """``WHAT: N points, K new, C already in the lake[, D committed meanwhile by another run]
    [, statuses][, F failed]; where; time`` (``unit``, ``new`` and the ``timing`` part as a
    command words them)."""
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.by_status.items()) if status != "ok")
    meanwhile = f", {report.concurrent} committed meanwhile by another run of this sweep" if report.concurrent else ""
    failed = f", {len(report.failures)} failed" if report.failures else ""
    timing = timing or f"{report.elapsed_s:.1f} s"
    out.print(f"{what}: {report.planned} {unit}, {report.committed} {new}, {report.cached} already in the lake"
              f"{meanwhile}{', ' + counts if counts else ''}{failed}; {report.where}; {timing}"
              + ("; restarted" if report.restarted else ""), soft_wrap=True)


def report_failures(report: "RunReport", lake_root: str) -> None:
    """Name the failures and where their tracebacks are; exit 1 (a bug fails loudly)."""
    if not report.failures:
        return
    by_type: dict = {}
    for failure in report.failures:
        by_type.setdefault((failure["status"], failure["error_type"], failure["message"]), []).append(failure)
    err = console(stderr=True)
    err.print(f"[bold red]{len(report.failures)} points failed[/] (run {report.run_id}):", soft_wrap=True)
    for (status, error_type, message), group in sorted(by_type.items(), key=lambda kv: -len(kv[1])):
        err.print(f"  {len(group)} x {status}: {error_type}: {message}", soft_wrap=True)
    first = report.failures[0]["traceback"].strip().splitlines()
    err.print("  first traceback (all are in the lake):\n    " + "\n    ".join(first[-8:]), soft_wrap=True)
    err.print(f"  commscale query \"SELECT point_key, status, error_type, message, traceback FROM failure "
              f"WHERE run_id = '{report.run_id}'\" --lake {lake_root}", soft_wrap=True)
    err.print("  Running the same command again retries them.", soft_wrap=True)
    sys.exit(1)


# -- a query's result ----------------------------------------------------------------------
#: The formats of ``commscale query``.
QUERY_FORMATS = ("table", "csv", "json", "parquet")
#: The most characters of one value a table shows; a longer value is cut, saying so (csv
#: and json write every value whole).
TABLE_CELL_MAX = 1000


def query_text(result: pa.Table, fmt: str) -> str:
    """``result`` as text of ``fmt`` ("table", "csv" or "json"): a table ends in its row
    count, a CSV has a header line, a JSON document is a list of one object per row (strict
    JSON: a float that is not finite is null; ``UserError`` for a column name given twice)."""
    columns = [(name, column.type, column.to_pylist()) for name, column in zip(result.column_names, result.columns)]
    if fmt == "json":
        _names_once(result, fmt)
        rows = zip(*[[_plain(value, dtype) for value in values] for _name, dtype, values in columns])
        return json.dumps([dict(zip(result.column_names, row)) for row in rows], indent=1, allow_nan=False) + "\n"
    if fmt == "csv":
        return _csv(result)
    table = Table(show_lines=False)
    for name in result.column_names:
        table.add_column(Text(name), overflow="fold")
    for row in zip(*[[Text(_table_cell(value, dtype)) for value in values] for _name, dtype, values in columns]):
        table.add_row(*row)
    buffer = io.StringIO()
    Console(file=buffer, width=max(120, 14 * len(result.column_names))).print(table)
    return buffer.getvalue() + f"({result.num_rows} rows)\n"


def parquet_bytes(result: pa.Table) -> bytes:
    """``result`` as a Parquet file's bytes; ``UserError`` naming the first column Parquet
    cannot hold (an interval, a union; a name given twice) and what to do."""
    import pyarrow.parquet as pq

    _names_once(result, "parquet")
    for name, column in zip(result.column_names, result.columns):
        try:
            pq.write_table(pa.table({name: column.slice(0, 0)}), pa.BufferOutputStream())
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, pa.ArrowTypeError):
            raise UserError(f"--format parquet: column {name!r} of type {column.type} cannot be written to Parquet; "
                            f"cast it in the statement (e.g. CAST({name} AS VARCHAR)) or use --format csv or json"
                            ) from None
    sink = pa.BufferOutputStream()
    pq.write_table(result, sink)
    return sink.getvalue().to_pybytes()


def _names_once(result: pa.Table, fmt: str) -> None:
    """A JSON object holds a name once, and readers refuse a Parquet file that holds one
    twice: ``UserError`` naming the first column named twice, before anything is written."""
    seen: set = set()
    for name in result.column_names:
        if name in seen:
            raise UserError(f"--format {fmt}: column {name!r} is named twice; name the columns apart "
                            f"(e.g. ... AS {name}_2) or use --format csv or table")
        seen.add(name)


def cell_text(value: object, dtype: pa.DataType) -> Optional[str]:
    """One value of a column of ``dtype`` (as pyarrow gives it) as text: None stays None,
    text stays itself, a nested value is JSON text, bytes and intervals are written as
    DuckDB writes them."""
    plain = _plain(value, dtype)
    if plain is None or isinstance(plain, str):
        return plain
    return json.dumps(plain, ensure_ascii=False, allow_nan=False)


def _csv(result: pa.Table) -> str:
    """CSV through Arrow's writer: a column of a type it writes as it is, any other (lists,
    maps, structs, unions, intervals, bytes) as ``cell_text``."""
    import pyarrow.csv as pacsv

    columns: List[pa.ChunkedArray] = []
    for column in result.columns:
        if not _csv_plain(column.type):
            column = pa.chunked_array([pa.array([cell_text(v, column.type) for v in column.to_pylist()], pa.string())])
        columns.append(column)
    sink = pa.BufferOutputStream()  # Arrow's own buffer, not a Python file object
    pacsv.write_csv(pa.Table.from_arrays(columns, names=result.column_names), sink)
    return sink.getvalue().to_pybytes().decode()


def _csv_plain(dtype: pa.DataType) -> bool:
    """Whether Arrow's CSV writer writes values of ``dtype`` as their text."""
    if pa.types.is_dictionary(dtype):
        return pa.types.is_string(dtype.value_type) or pa.types.is_large_string(dtype.value_type)
    return any(test(dtype) for test in (pa.types.is_null, pa.types.is_boolean, pa.types.is_integer,
                                         pa.types.is_floating, pa.types.is_decimal, pa.types.is_string,
                                         pa.types.is_large_string, pa.types.is_date, pa.types.is_time,
                                         pa.types.is_timestamp))


def _table_cell(value: object, dtype: pa.DataType) -> str:
    """A value as a table shows it: a float to 6 significant digits, a long value cut."""
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.6g}"
    text = cell_text(value, dtype) or ""
    if len(text) > TABLE_CELL_MAX:
        return f"{text[:TABLE_CELL_MAX]}... ({len(text):,} characters; --format csv or json writes it whole)"
    return text


def _plain(value: object, dtype: pa.DataType) -> object:
    """``value`` as JSON-ready Python (dicts, lists, str, int, float, bool, None), led by
    ``dtype``: a map is an object whatever its keys."""
    if value is None:
        return None
    if pa.types.is_map(dtype):
        return {_key(k, dtype.key_type): _plain(v, dtype.item_type) for k, v in value}
    if _is_list(dtype):
        return [_plain(v, dtype.value_type) for v in value]
    if pa.types.is_struct(dtype):
        return {field.name: _plain(value.get(field.name), field.type) for field in dtype}
    return _scalar(value)


def _key(key: object, dtype: pa.DataType) -> str:
    plain = _plain(key, dtype)
    return plain if isinstance(plain, str) else json.dumps(plain, ensure_ascii=False, allow_nan=False)


def _is_list(dtype: pa.DataType) -> bool:
    return (pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_fixed_size_list(dtype)
            or pa.types.is_list_view(dtype) or pa.types.is_large_list_view(dtype))


def _scalar(value: object) -> object:
    """A value of no nested type (or inside a union or an extension type) as JSON-ready
    Python."""
    if isinstance(value, pa.MonthDayNano):
        return _interval(value)
    if isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bytes, bytearray)):
        return "".join(chr(b) if 32 <= b <= 126 and chr(b) not in "\\'\"" else f"\\x{b:02X}" for b in value)
    if isinstance(value, dict):
        return {str(k): _scalar(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_scalar(v) for v in value]
    return str(value)


def _interval(value: "pa.MonthDayNano") -> str:
    """An interval as DuckDB writes it: ``[N years] [N months] [N days] [-]HH:MM:SS[.f]``,
    ``00:00:00`` when it is zero."""
    years, months = divmod(abs(value.months), 12)
    sign = -1 if value.months < 0 else 1
    parts = [f"{sign * n} {unit}{'' if n == 1 else 's'}" for n, unit in
             ((years, "year"), (months, "month")) if n]
    if value.days:
        parts.append(f"{value.days} day{'' if abs(value.days) == 1 else 's'}")
    if value.nanoseconds or not parts:
        seconds, fraction = divmod(abs(value.nanoseconds), 10 ** 9)
        clock = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
        clock += f".{fraction:09d}".rstrip("0") if fraction else ""
        parts.append(("-" if value.nanoseconds < 0 else "") + clock)
    return " ".join(parts)
