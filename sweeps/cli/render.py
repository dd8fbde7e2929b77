"""What every command prints the same way: its consoles, a run's one-line account and its
failures."""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Optional

from rich.console import Console

if TYPE_CHECKING:  # the run engine imports Ray; a command that runs nothing need not
    from sweeps.run import RunReport

__all__ = ["PIPE_WIDTH", "console", "run_line", "report_failures"]

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
