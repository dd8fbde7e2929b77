"""``commscale report``: the findings, figures, tables and provenance of the lake as one
HTML page and a Markdown twin (``analysis.report``). ``commscale run`` and ``calibrate``
end by writing it too (``write_and_announce``), unless ``--no-report``; ``search`` leaves
it to ``commscale report``.

A report folder that cannot hold the report ends the command with one line naming the path,
never a traceback (a report never writes the lake): for ``commscale report`` a folder that
cannot hold it (a file where it should be, a folder where one of its files should be,
read-only) is bad input, exit status 2, and a full disk exit status 1. After ``run`` or
``calibrate``, whose rows are committed by then, either is exit status 1, saying so and how
to write the report later.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional

import click
from rich.console import Console

from sweeps.cli.options import DEFAULT_REPORT, default_report, lake_option
from sweeps.cli.render import console
from sweeps.errors import UserError
from sweeps.lake import Lake

if TYPE_CHECKING:
    from analysis.report import ReportFolderError

__all__ = ["report", "write_and_announce"]


def write_and_announce(console: Console, lake: Lake, out_dir: str, *, first_sweep: Optional[str] = None,
                       verbose: bool = False, skip: bool = False, max_m: Optional[int] = None,
                       standalone: bool = False) -> Optional[Path]:
    """Write the report of ``lake`` into ``out_dir`` with ``first_sweep``'s topics first (the
    sweep, search study or calibration just run) and print its path, how many figures were
    drawn and how many kept unchanged (and, if ``verbose``, each figure with its status).
    ``skip`` (``--no-report``) writes nothing and says how to write it later; ``max_m``:
    multipliers drawn per sweep (None: the default, 0: every one). Returns the page's path.
    A folder that cannot hold the report ends the command (``standalone``: it is
    ``commscale report``, else the end of a run whose rows are committed; see the module)."""
    if skip:
        console.print("Report: not written (--no-report); `commscale report` writes it", soft_wrap=True,
                      highlight=False)
        return None
    from analysis.report import DEFAULT_MAX_M, HTML_NAME, ReportFolderError, write_report

    try:
        result = write_report(lake, Path(out_dir), first_sweep=first_sweep,
                              max_m=DEFAULT_MAX_M if max_m is None else max_m, timeline=_default_timeline(lake))
    except ReportFolderError as exc:
        _not_written(exc, out_dir, Path(out_dir) / HTML_NAME, standalone)
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


def _default_timeline(lake: Lake):
    """The default search's step timeline for the report (``analysis.report_timeline``): its
    stored best layout in ``lake``, or the exhaustive optimum. Keyed, without building it, by
    the search's study (its model, hardware, stack and space), the study's committed files,
    the cost model's versions and the code that lays a step out; built only when drawn."""
    from analysis.report_cache import digest_of
    from analysis.report_timeline import TimelinePicture
    from sweeps.config import load_search
    from sweeps.jobs.search import trial_partition
    from sweeps.lake.kinds import SEARCH
    from tasks.model.projection.grid import COST_MODEL_VERSION
    from tasks.model.step import timeline
    from tasks.model.step.plan import STEP_MODEL_VERSION

    setup = load_search([], exhaustive=True)
    stored = lake.files(SEARCH, trial_partition(setup)) if SEARCH in lake.kinds() else []
    key = digest_of(setup.study_name, COST_MODEL_VERSION, STEP_MODEL_VERSION, *stored,
                    digest_of(Path(timeline.__file__).read_text(encoding="utf-8")))

    def build():
        from sweeps.search.timeline import build_timeline

        drawn = build_timeline([], lake)
        setup = drawn.setup
        title = (f"One projected step: {setup.model.name} on {setup.spec.devices} x {setup.hardware.name}, "
                 f"{drawn.layout.describe()}")
        about = (f"Layout {drawn.layout.describe()}: {drawn.source} (search preset {setup.preset}, stack "
                 f"{setup.spec.stack}). Step {drawn.step_time_s:.4g} s, of which "
                 f"{drawn.figures['exposed_comm_s']:.4g} s exposed communication; stages drawn: "
                 f"{', '.join(drawn.stage_names.values())}. `commscale timeline` writes it as a trace for Perfetto.")
        return drawn.events, drawn.stage_names, title, about

    return TimelinePicture(key, build)


def _not_written(exc: "ReportFolderError", out_dir: str, page: Path, standalone: bool) -> NoReturn:
    """End the command on ``exc``: one line, exit status 2 (bad input) or 1; ``page``: the
    report's page in ``out_dir``, as it was before."""
    full = exc.disk_full
    line = f"report not written{', the disk is full' if full else ''}: {exc}"
    if standalone and not full:
        raise UserError(f"{line}; the lake is untouched")
    if standalone:
        line += f"; the lake is untouched and {page} is as it was" if page.is_file() else "; the lake is untouched"
    else:
        line += (f"; the rows of this run are committed to the lake; `commscale report --out {out_dir}` writes "
                 "the report once the folder can hold it")
    click.echo(f"error: {line}", err=True)
    sys.exit(1)


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
    is skipped with the command that produces them.

    Exit status 2 when the folder cannot hold the report (a file where it should be, a
    folder where one of its files should be, read-only), 1 when the disk is full; the lake
    is never written."""
    store = Lake(lake_root)
    if first_sweep is not None:
        store.ensure_readable()
        names = store.sweep_names()
        if first_sweep not in names:
            held = ", ".join(sorted(names)[:12]) + (", ..." if len(names) > 12 else "")
            raise UserError(f"--first {first_sweep[:60]!r}: lake {store} holds no sweep, search study or calibration "
                            f"of that name" + (f"; it holds {held}" if names else ""))
    write_and_announce(console(), store, out_dir, first_sweep=first_sweep, verbose=True, max_m=max_m,
                       standalone=True)
