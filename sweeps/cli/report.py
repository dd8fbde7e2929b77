"""``commscale report``: the findings, figures, tables and provenance of the lake as one
HTML page and a Markdown twin (``analysis.report``). ``commscale run`` and ``calibrate``
end by writing it too (``write_and_announce``), unless ``--no-report``; ``search`` leaves
it to ``commscale report``."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import click
from rich.console import Console

from sweeps.cli.options import DEFAULT_REPORT, default_report, lake_option
from sweeps.cli.render import console
from sweeps.lake import Lake

__all__ = ["report", "write_and_announce"]


def write_and_announce(console: Console, lake: Lake, out_dir: str, *, first_sweep: Optional[str] = None,
                       verbose: bool = False, skip: bool = False, max_m: Optional[int] = None) -> Optional[Path]:
    """Write the report of ``lake`` into ``out_dir`` with ``first_sweep``'s topics first (the
    sweep, search study or calibration just run) and print its path, how many figures were
    drawn and how many kept unchanged (and, if ``verbose``, each figure with its status).
    ``skip`` (``--no-report``) writes nothing and says how to write it later; ``max_m``:
    multipliers drawn per sweep (None: the default, 0: every one). Returns the page's path."""
    if skip:
        console.print("Report: not written (--no-report); `commscale report` writes it", soft_wrap=True,
                      highlight=False)
        return None
    from analysis.report import DEFAULT_MAX_M, write_report

    result = write_report(lake, Path(out_dir), first_sweep=first_sweep, max_m=DEFAULT_MAX_M if max_m is None else max_m)
    if verbose:
        for entry in result.figures:
            console.print(f"  skipped {entry.title}: {entry.skipped}" if entry.skipped
                          else f"  {'wrote' if entry.drawn else 'kept'} {entry.files[0]} (+ .svg)",
                          soft_wrap=True, highlight=False)
    console.print(f"Report: {result.html.resolve()} ({len(result.written)} figures: {len(result.drawn)} drawn, "
                  f"{len(result.written) - len(result.drawn)} unchanged; {len(result.skipped)} skipped for want of "
                  f"rows; Markdown twin {result.markdown.name}; {result.elapsed_s:.1f} s)",
                  soft_wrap=True, highlight=False)
    return result.html


@click.command()
@lake_option
@click.option("--out", "out_dir", default=default_report, show_default=DEFAULT_REPORT,
              help="Directory of report.html, report.md and figures/ (env COMMSCALE_REPORT).")
@click.option("--first", "first_sweep", default=None, metavar="NAME",
              help="Put this sweep's (or search study's, or calibration's) findings and sections first.")
@click.option("--max-m", type=click.IntRange(min=0), default=None, metavar="N",
              help="Draw at most N flop-vs-bw multipliers m per sweep (default 4; 0 draws every one).")
def report(*, lake_root: str, out_dir: str, first_sweep: Optional[str], max_m: Optional[int]) -> None:
    """Write the lake's findings, figures, summary tables and provenance: one
    self-contained HTML page and a Markdown twin. Only figures whose rows changed since
    the former report in the same folder are drawn again; a figure whose rows are missing
    is skipped with the command that produces them."""
    write_and_announce(console(), Lake(lake_root), out_dir, first_sweep=first_sweep, verbose=True, max_m=max_m)
