"""``commscale status``, ``lake verify|vacuum|upgrade`` and ``query``: the lake's contents
and its upkeep."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional

import click
from rich.console import Console
from rich.table import Table

from sweeps.cli.options import check_output_file, finite_number, lake_option
from sweeps.cli.render import QUERY_FORMATS, console
from sweeps.errors import UserError
from sweeps.lake import Lake

__all__ = ["status", "lake", "query", "FORMATS"]

FORMATS = QUERY_FORMATS


@click.command()
@click.argument("sweep", required=False)
@lake_option
def status(*, sweep: Optional[str], lake_root: str) -> None:
    """Progress of each sweep in the lake (done, failed, pending) and each layout-search
    study (trials, best value), or of one."""
    from analysis.status import search_tables, sweep_status

    store = Lake(lake_root)  # one instance: its log is read once, not once per frame
    studies, records = search_tables(store, sweep)  # one read of the search rows for both tables
    frames = {"Sweeps": sweep_status(store, sweep), "Search studies": studies,
              "What decided each search study": records}
    if all(frame.empty for frame in frames.values()):
        raise UserError(f"no sweep {sweep!r} in lake {lake_root}" if sweep else f"lake {lake_root} holds no sweep yet")
    for title, frame in frames.items():
        if frame.empty:
            continue
        table = Table(title=f"{title} in {store}", title_justify="left")
        for i, column in enumerate(frame.columns):
            # The first column names the sweep or study a user types again: never cut short.
            whole = dict(no_wrap=True, min_width=max(len(str(v)) for v in frame[column])) if i == 0 else {}
            table.add_column(column, justify="right" if frame[column].dtype.kind in "iuf" else "left", **whole)
        for row in frame.itertuples(index=False):
            table.add_row(*(f"{v:.6g}" if isinstance(v, float) else str(v) for v in row))
        Console(width=max(console().width, 120)).print(table)


@click.group()
def lake() -> None:
    """Maintain the lake: verify files, remove orphans, upgrade an older lake."""


@lake.command()
@lake_option
@click.option("--keys-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              callback=check_output_file, help="Write the keys to measure again, one per line.")
@click.option("--repair", is_flag=True,
              help="Also mend what can be mended: roll back a damaged newest log entry, record missing ones as "
                   "lost, restore _lake.json, rebuild key sidecars, adopt orphan data files. Deletes nothing.")
def verify(*, lake_root: str, keys_out: Optional[Path], repair: bool) -> None:
    """Check the commit log, every committed file (size, sha256, readable) and its key
    sidecar; set bad data files aside. Exit status 1 when something is wrong."""
    report = Lake(lake_root).verify(repair=repair)
    for line in report.log:
        click.echo(f"log: {line}")
    if report.meta_missing:
        click.echo("_lake.json is missing (the commit log is there)")
    if report.meta_damaged:
        click.echo(f"_lake.json {report.meta_damaged} (damaged)")
    for link in report.links:
        click.echo(f"symbolic link {link}: not followed; the lake holds plain files and folders only (remove it, or "
                   "copy what it points to into the lake)")
    for path, count in report.duplicates:
        click.echo(f"{path}: {count} keys committed twice")
    for path, reason, keys in report.bad:
        click.echo(f"set aside {path}: {reason} ({keys} keys)")
    for path, reason in report.sidecars:
        click.echo(f"key sidecar {path}: {reason}")
    for line in report.repaired:
        click.echo(f"repaired: {line}")
    redo = sum(len(keys) for keys in report.keys_to_redo.values())
    orphans = f", {len(report.orphans)} orphan data files" if report.orphans and not repair else ""
    click.echo(f"{report.checked} files checked, {len(report.bad)} set aside in _quarantine/, "
               f"{redo} keys to measure again" + (" (the next run of their sweeps does it)" if redo else "") + orphans)
    if keys_out:
        keys_out.write_text("".join(f"{kind}\t{key}\n" for kind, keys in sorted(report.keys_to_redo.items())
                                    for key in sorted(keys)))
    if not report.clean and not repair:
        click.echo(f"run `commscale lake verify --repair --lake {lake_root}` to mend the rest; "
                   "no committed row is lost")
    if report.bad or report.links or (not report.clean and not repair):
        sys.exit(1)


@lake.command()
@lake_option
@click.option("--grace-s", type=click.FloatRange(min=0), default=3600.0, show_default=True, callback=finite_number,
              help="Keep files younger than this: they may belong to a commit in progress.")
def vacuum(*, lake_root: str, grace_s: float) -> None:
    """Delete files no commit holds: leftovers of crashed writers, dropped sweeps."""
    store = Lake(lake_root)
    store.ensure_readable()
    report = store.vacuum(grace_s=grace_s)
    for path in report.removed:
        click.echo(f"removed {path}")
    for link in report.links:
        click.echo(f"left symbolic link {link}: not followed")
    click.echo(f"{len(report.removed)} files removed, {report.bytes_freed:,} bytes freed")


@lake.command()
@lake_option
def upgrade(*, lake_root: str) -> None:
    """Bring a lake written without a commit log, or one that lost _lake.json, under the
    commit log of this version, and rewrite data files of the older layout so that any
    Parquet reader takes them. Deletes nothing (`lake vacuum` removes the old files)."""
    store = Lake(lake_root)
    store.ensure_exists()
    report = store.upgrade()
    for line in report.adopted:
        click.echo(line)
    if report.rewritten:
        click.echo(f"{report.rewritten} data files rewritten so that any Parquet reader takes them: each holds its "
                   "sweep version and no column named like its partition (rows and keys unchanged)")
    if report.restored:
        click.echo(f"restored _lake.json of {store}: its commit log holds {report.committed_rows:,} rows")
    elif report.adopted:
        click.echo(f"{len(report.adopted)} data files adopted into the commit log of {store}: "
                   f"{report.committed_rows:,} rows")
    elif not report.rewritten:
        click.echo(f"{store} is a lake of this format already: nothing to upgrade")


@click.command()
@click.argument("statement")
@lake_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              callback=check_output_file, help="Write to this file instead of stdout (required for parquet).")
def query(*, statement: str, lake_root: str, fmt: str, output: Optional[Path]) -> None:
    """Run one read-only SQL statement over the lake: one view per result kind
    (projection, search, ...). SELECT, EXPLAIN, DESCRIBE, SHOW and SUMMARIZE run; COPY,
    ATTACH, INSTALL, DROP and every other write are refused, and no file outside the lake's
    committed files is read."""
    from sweeps.cli.render import parquet_bytes, query_text
    from sweeps.lake.views import query as run_query

    if fmt == "parquet" and output is None:
        raise click.UsageError("--format parquet needs --output FILE")
    result = run_query(Lake(lake_root), statement)
    if fmt == "parquet":
        output.write_bytes(parquet_bytes(result))
        return
    text = query_text(result, fmt)
    if output:
        output.write_text(text)
    else:
        sys.stdout.write(text)
