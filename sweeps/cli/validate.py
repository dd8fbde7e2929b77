"""``commscale validate``: every published measurement beside commscale's prediction of it.

    commscale validate                              # the shipped data, every dataset
    commscale validate --dataset runs --format csv  # the training runs only, as CSV
    commscale validate --runs my_runs.csv --no-lake # your own runs (the columns of published_runs.csv)

Parsing and rendering only: ``sweeps.jobs.validation`` loads the profiles, predicts and
commits. Bad input (a runs file that cannot be read, a cell that is no number, an unknown
hardware, an impossible layout) ends with exit status 2 and one line naming the file, the
row and the field, before anything is written to the lake.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from dataclasses import asdict, fields
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import click
from rich.console import Console
from rich.table import Table

from sweeps.cli.options import allow_large_option, check_output_file, default_report, lake_option, no_report_option
from sweeps.cli.render import PIPE_WIDTH, console
from sweeps.cli.report import write_and_announce
from sweeps.errors import DataFileError, UserError
from sweeps.lake import Lake
from sweeps.lake.kinds import VALIDATION
from tasks.validation.headline import headline_lines, headline_of
from tasks.validation.records import (DATASETS, DATA_FILES, HELD_OUT, MODEL_VERSION, ValidationRecord, error_summary,
                                      lean)

__all__ = ["validate", "VALIDATE_FORMATS", "render_records"]

#: The output formats of ``commscale validate``.
VALIDATE_FORMATS = ("table", "csv", "json")
#: The columns of a CSV or JSON record, in order (``ValidationRecord``'s fields).
RECORD_COLUMNS = tuple(f.name for f in fields(ValidationRecord))


def _pct(fraction: float, *, signed: bool = True) -> str:
    return f"{100 * fraction:+.1f}%" if signed else f"{100 * fraction:.1f}%"


def _value(value: float, unit: str) -> str:
    return f"{value:,.4g} {unit}"


def _by_source(records: Sequence[ValidationRecord]) -> Dict[Tuple[str, str], List[ValidationRecord]]:
    """Records grouped by (dataset, source), datasets in ``DATASETS`` order, sources as first met."""
    groups: Dict[Tuple[str, str], List[ValidationRecord]] = {}
    for record in sorted(records, key=lambda r: DATASETS.index(r.dataset) if r.dataset in DATASETS else 99):
        groups.setdefault((record.dataset, record.source), []).append(record)
    return groups


def _errors_text(records: Sequence[ValidationRecord]) -> Tuple[str, str, str]:
    """Mean and max |error| and the lean (``records.lean``) of the records no figure was fitted
    to ("-" where every one was)."""
    free = [r for r in records if not r.fitted_to]
    if not free:
        return "-", "-", "-"
    mean, worst = error_summary(free)
    return _pct(mean, signed=False), _pct(worst, signed=False), _pct(lean([r.error for r in free],
                                                                        [r.unit for r in free]))


def _caption(source: str, records: Sequence[ValidationRecord]) -> str:
    """A source's mean and max |error| over its rows no figure was fitted to, and, where some
    were, how many and the figures with them."""
    fitted = sum(bool(r.fitted_to) for r in records)
    every = tuple(_pct(x, signed=False) for x in error_summary(records))
    if fitted == len(records):
        return f"{source}: every row fitted to (in sample: mean |error| {every[0]}, max |error| {every[1]})"
    mean, worst, leaning = _errors_text(records)
    text = f"{source}: mean |error| {mean}, max |error| {worst}, lean {leaning}"
    if fitted:
        text += f" ({fitted} fitted row{'s' * (fitted > 1)} left out; with them {every[0]}, {every[1]})"
    return text


def _source_table(dataset: str, source: str, records: Sequence[ValidationRecord]) -> Table:
    table = Table(title=f"{dataset} · {source}", title_justify="left", caption_justify="left")
    for name in ("row", "model", "hardware", "metric", "published", "predicted", "error", "fitted", "detail"):
        table.add_column(name, justify="right" if name in ("row", "published", "predicted", "error") else "left")
    for r in records:
        table.add_row(str(r.row), r.model, r.hardware, r.metric, _value(r.published, r.unit),
                      _value(r.predicted, r.unit), _pct(r.error), "fitted" if r.fitted_to else "", r.detail)
    table.caption = _caption(source, records)
    return table


def _summary_table(groups: Dict[Tuple[str, str], List[ValidationRecord]]) -> Table:
    table = Table(title="Every source: error = predicted / published - 1; lean = signed mean of how much faster "
                        "than measured the work is predicted to run (fitted rows left out of both)",
                  title_justify="left")
    for name in ("dataset", "source", "n", "fitted", "mean |error|", "max |error|", "lean"):
        table.add_column(name, justify="left" if name in ("dataset", "source") else "right")
    for (dataset, source), records in groups.items():
        table.add_row(dataset, source, str(len(records)), str(sum(bool(r.fitted_to) for r in records)),
                      *_errors_text(records))
    return table


def render_records(out: Console, records: Sequence[ValidationRecord], skipped: Sequence[str]) -> None:
    """The ``table`` format: a table per source with its mean and max |error| (rows a figure
    was fitted to marked and left out of them), the held-out runs' tables after the shipped
    ones under a heading of their own, a summary of every source, the headline
    (``tasks.validation.headline``), the skipped rows (one line each) and the cost-model version."""
    groups = _by_source(records)
    first_held_out = next((key for key in groups if key[0] == HELD_OUT), None)
    for key, group in groups.items():
        if key == first_held_out:
            out.print(f"Held-out runs ({DATA_FILES[HELD_OUT]}): other frameworks, precisions and generations, "
                      "never fitted to", highlight=False)
        out.print(_source_table(*key, group))
    if groups:
        out.print(_summary_table(groups))
        for line in headline_lines(headline_of(records)):
            out.print(line, highlight=False, soft_wrap=True)
    else:
        out.print("No published row was predicted (the datasets asked for hold no rows with a profile).")
    if skipped:
        out.print(f"Skipped {len(skipped)} rows:", highlight=False)
        for line in skipped:
            out.print(f"  {line}", soft_wrap=True, highlight=False)
    out.print(f"Cost model {MODEL_VERSION}", highlight=False)


def _text(records: Sequence[ValidationRecord], skipped: Sequence[str], fmt: str) -> str:
    """The records as CSV, JSON (a list of objects) or the rendered tables."""
    rows = [asdict(r) for r in records]
    if fmt == "json":
        return json.dumps(rows, indent=1) + "\n"
    buffer = io.StringIO()
    if fmt == "csv":
        writer = csv.DictWriter(buffer, fieldnames=RECORD_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: row[k] for k in RECORD_COLUMNS} for row in rows)
    else:
        render_records(Console(file=buffer, width=PIPE_WIDTH), records, skipped)
    return buffer.getvalue()


def _check_runs_size(runs_file: Path) -> None:
    """A runs file larger than any dataset is refused before it is read (``DataFileError``)."""
    from sweeps.config.bounds import ALLOW_LARGE
    from tasks.validation.records import RowError
    from tasks.validation.runs import runs_size_problem

    try:
        problem = runs_size_problem(runs_file)
    except RowError as exc:
        raise DataFileError(str(exc)) from None
    if problem:
        raise DataFileError(f"--runs {problem}; {ALLOW_LARGE}")


@click.command()
@click.option("--runs", "runs_file", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              help="A CSV with the columns of conf/data/published_runs.csv: replaces the shipped runs (blank cells "
                   "take the documented defaults).")
@click.option("--dataset", "datasets", type=click.Choice(DATASETS), multiple=True,
              help="A dataset to validate (repeatable; default: every one).")
@click.option("--format", "fmt", type=click.Choice(VALIDATE_FORMATS), default="table", show_default=True)
@lake_option
@click.option("--no-lake", is_flag=True, help="Do not commit the records to the lake.")
@no_report_option
@click.option("--out", "out_file", type=click.Path(dir_okay=False, path_type=Path), default=None, metavar="FILE",
              callback=check_output_file, help="Write the records (in --format) to this file instead of stdout.")
@allow_large_option
def validate(*, runs_file: Optional[Path], datasets: Sequence[str], fmt: str, lake_root: str, no_lake: bool,
             no_report: bool, out_file: Optional[Path], allow_large: bool) -> None:
    """Predict every published measurement (training runs, layer times, collective and GEMM
    microbenchmarks) with the cost model the search uses, print each beside its published
    value with the signed error (predicted / published - 1), and commit the records to the
    lake (kind validation) unless --no-lake."""
    from sweeps.sweep import validate as run_validate

    if runs_file is not None and datasets and "runs" not in datasets:
        raise UserError(f"--runs {runs_file}: replaces the runs dataset, which --dataset {' '.join(datasets)} leaves "
                        "out; add --dataset runs")
    if runs_file is not None and not allow_large:
        _check_runs_size(runs_file)
    lake = Lake(lake_root)
    run = run_validate(lake, datasets=tuple(dict.fromkeys(datasets)) or DATASETS, runs_file=runs_file,
                       commit=not no_lake)
    records, skipped = run.result.validation.records, run.result.validation.skipped
    if out_file is not None:
        out_file.write_text(_text(records, skipped, fmt), encoding="utf-8")
    elif fmt == "table":
        render_records(console(), records, skipped)
    else:
        sys.stdout.write(_text(records, skipped, fmt))
    # Machine-readable records on stdout keep it to themselves: the account goes to stderr.
    out = console(stderr=out_file is None and fmt != "table")
    if out_file is not None:
        out.print(f"Wrote {len(records)} records ({fmt}) to {out_file}", soft_wrap=True, highlight=False)
    if no_lake:
        out.print("Lake: not written (--no-lake); the report is not written either", highlight=False)
        return
    committed = run.committed
    if committed is None:
        out.print(f"Lake: {lake} unchanged (no records to commit)", soft_wrap=True, highlight=False)
    else:
        out.print(f"Lake: {lake} ({len(records)} records: {committed.rows_written} new, {committed.rows_skipped} "
                  f"already there; kind={VALIDATION}, cost model {MODEL_VERSION})", soft_wrap=True, highlight=False)
    if lake.exists():
        write_and_announce(out, lake, default_report(), first_sweep="validation", skip=no_report)
