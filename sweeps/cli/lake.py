"""``commscale status``, ``lake verify|vacuum|upgrade`` and ``query``: the lake's contents
and its upkeep."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Optional

import click
from rich.console import Console
from rich.table import Table

from sweeps.cli.options import lake_option
from sweeps.errors import UserError
from sweeps.lake import Lake

__all__ = ["status", "lake", "query", "FORMATS"]

FORMATS = ("table", "csv", "json", "parquet")


@click.command()
@click.argument("sweep", required=False)
@lake_option
def status(*, sweep: Optional[str], lake_root: str) -> None:
    """Progress of each sweep in the lake (done, failed, pending), or of one."""
    from analysis.status import sweep_status

    frame = sweep_status(Lake(lake_root), sweep)
    if frame.empty:
        raise UserError(f"no sweep {sweep!r} in lake {lake_root}" if sweep else f"lake {lake_root} holds no sweep yet")
    table = Table(title=f"Sweeps in {Lake(lake_root)}", title_justify="left")
    for column in frame.columns:
        table.add_column(column, justify="right" if frame[column].dtype.kind in "iu" else "left")
    for row in frame.itertuples(index=False):
        table.add_row(*(str(v) for v in row))
    Console().print(table)


@click.group()
def lake() -> None:
    """Maintain the lake: verify files, remove orphans, upgrade an older lake."""


@lake.command()
@lake_option
@click.option("--keys-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the keys to measure again, one per line.")
def verify(*, lake_root: str, keys_out: Optional[Path]) -> None:
    """Check every committed file (size, sha256, readable); set bad ones aside."""
    store = Lake(lake_root)
    store.ensure_readable()
    report = store.verify()
    for path, reason, keys in report.bad:
        click.echo(f"set aside {path}: {reason} ({keys} keys)")
    redo = sum(len(keys) for keys in report.keys_to_redo.values())
    click.echo(f"{report.checked} files checked, {len(report.bad)} set aside in _quarantine/, "
               f"{redo} keys to measure again" + (" (the next run of their sweeps does it)" if redo else ""))
    if keys_out:
        keys_out.write_text("".join(f"{kind}\t{key}\n" for kind, keys in sorted(report.keys_to_redo.items())
                                    for key in sorted(keys)))
    if report.bad:
        sys.exit(1)


@lake.command()
@lake_option
@click.option("--grace-s", type=click.FloatRange(min=0), default=3600.0, show_default=True,
              help="Keep files younger than this: they may belong to a commit in progress.")
def vacuum(*, lake_root: str, grace_s: float) -> None:
    """Delete files no commit holds: leftovers of crashed writers, dropped sweeps."""
    store = Lake(lake_root)
    store.ensure_readable()
    report = store.vacuum(grace_s=grace_s)
    for path in report.removed:
        click.echo(f"removed {path}")
    click.echo(f"{len(report.removed)} files removed, {report.bytes_freed:,} bytes freed")


@lake.command()
@lake_option
def upgrade(*, lake_root: str) -> None:
    """Adopt the files of a lake written without a commit log."""
    rows = Lake(lake_root).upgrade()
    click.echo(f"{rows} rows adopted into the commit log of {Lake(lake_root)}")


@click.command()
@click.argument("statement")
@lake_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file instead of stdout (required for parquet).")
def query(*, statement: str, lake_root: str, fmt: str, output: Optional[Path]) -> None:
    """Run SQL over the lake: one view per result kind (projection, ...)."""
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    from sweeps.lake.views import query as run_query

    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet needs --output FILE")
    result = run_query(Lake(lake_root), statement)
    if fmt == "parquet":
        pq.write_table(result, output)
        return
    if fmt == "csv":
        buffer = io.BytesIO()
        pacsv.write_csv(result, buffer)
        text = buffer.getvalue().decode()
    elif fmt == "json":
        text = json.dumps(result.to_pylist(), default=str, indent=1) + "\n"
    else:
        table = Table(show_lines=False)
        for name in result.column_names:
            table.add_column(name, overflow="fold")
        for row in result.to_pylist():
            table.add_row(*(_cell(v) for v in row.values()))
        buffer = io.StringIO()
        Console(file=buffer, width=max(120, 14 * len(result.column_names))).print(table)
        text = buffer.getvalue() + f"({result.num_rows} rows)\n"
    if output:
        output.write_text(text)
    else:
        sys.stdout.write(text)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    return "" if value is None else str(value)
