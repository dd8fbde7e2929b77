"""``commscale report``: the figures, tables and provenance of the lake as one HTML page
and a Markdown twin (``analysis.report``). ``commscale run`` ends by writing it too."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console

from sweeps.cli.options import DEFAULT_REPORT, default_report, lake_option
from sweeps.lake import Lake

__all__ = ["report", "write_and_announce"]


def write_and_announce(console: Console, lake: Lake, out_dir: str, *, verbose: bool = False) -> Path:
    """Write the report of ``lake`` into ``out_dir``, print its path (and, if ``verbose``,
    each figure written or skipped with the command that produces its rows)."""
    from analysis.report import write_report

    result = write_report(lake, Path(out_dir))
    if verbose:
        for entry in result.figures:
            console.print(f"  skipped {entry.title}: {entry.skipped}" if entry.skipped
                          else f"  wrote {entry.files[0]} (+ .svg)", soft_wrap=True, highlight=False)
    console.print(f"Report: {result.html.resolve()} ({len(result.written)} figures, {len(result.skipped)} skipped "
                  f"for want of rows; Markdown twin {result.markdown.name}; {result.elapsed_s:.1f} s)",
                  soft_wrap=True, highlight=False)
    return result.html


@click.command()
@lake_option
@click.option("--out", "out_dir", default=default_report, show_default=DEFAULT_REPORT,
              help="Directory of report.html, report.md and figures/ (env COMMSCALE_REPORT).")
def report(*, lake_root: str, out_dir: str) -> None:
    """Write the study's figures, summary tables and provenance from the lake: one
    self-contained HTML page and a Markdown twin. A figure whose rows are missing is
    skipped with the command that produces them."""
    write_and_announce(Console(), Lake(lake_root), out_dir, verbose=True)
