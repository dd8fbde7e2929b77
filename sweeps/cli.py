"""The ``commscale`` command line.

    commscale run [GROUP=NAME | GROUP.FIELD=VALUE ...] [--lake PATH] [--address ADDR] [--restart]
    commscale probe --points 1000 --sleep-ms 50 [--fail die_once:3] [--resource standin_gpu=1]
    commscale status [SWEEP]              # done, failed, pending per sweep, from the lake
    commscale lake verify|vacuum|upgrade  # maintenance
    commscale query "SELECT ... FROM projection" [--format table|csv|json|parquet]
    commscale report [--lake PATH] [--out DIR]   # figures, tables, provenance: HTML + Markdown
    commscale search [PRESET] [FIELD=VALUE ...]  # the layout with least exposed communication (Optuna)
    commscale config [OVERRIDES ...]      # the composed config, as YAML
    commscale presets                     # the presets of each config group

Bad input ends with exit status 2 and one message naming the field, the value or the
statement; nothing in the lake changes.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path
from typing import Optional, Sequence

import click
from rich.console import Console
from rich.table import Table

from sweeps.config import GROUPS, list_presets, load_run_config
from sweeps.errors import UserError
from sweeps.lake import Lake
from sweeps.lake.kinds import PROJECTION, ROI
from sweeps.report_cli import DEFAULT_REPORT, write_and_announce
from sweeps.report_cli import report as report_command

DEFAULT_LAKE = os.environ.get("COMMSCALE_LAKE", "lake")
FORMATS = ("table", "csv", "json", "parquet")


class _Group(click.Group):
    """Turns ``UserError`` into one line on stderr and exit status 2, no traceback."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except UserError as exc:
            click.echo(f"error: {exc}", err=True)
            ctx.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """commscale: how much of a Transformer's training step is communication."""


lake_option = click.option("--lake", "lake_root", default=DEFAULT_LAKE, show_default=True,
                           help="Lake root: a path or a pyarrow filesystem URI (env COMMSCALE_LAKE).")


address_option = click.option("--address", default=None,
                              help="Ray cluster address (default: RAY_ADDRESS, else an embedded local Ray).")
restart_option = click.option("--restart", is_flag=True,
                              help="Start the sweep anew if its config changed (its rows leave the lake).")


def _report_header(out: Console, report, what: str) -> None:
    counts = ", ".join(f"{n} {status}" for status, n in sorted(report.by_status.items()) if status != "ok")
    out.print(f"{what}: {report.planned} points, {report.committed} new, {report.cached} already in the lake"
              f"{', ' + counts if counts else ''}{', ' + str(len(report.failures)) + ' failed' if report.failures else ''}"
              f"; {report.where}; {report.elapsed_s:.1f} s" + ("; restarted" if report.restarted else ""), soft_wrap=True)


def _report_failures(out: Console, report, lake_root: str) -> None:
    """Name the failures and where their tracebacks are; exit 1 (a bug fails loudly)."""
    if not report.failures:
        return
    by_type: dict = {}
    for failure in report.failures:
        by_type.setdefault((failure["status"], failure["error_type"], failure["message"]), []).append(failure)
    err = Console(stderr=True)
    err.print(f"[bold red]{len(report.failures)} points failed[/] (run {report.run_id}):", soft_wrap=True)
    for (status, error_type, message), group in sorted(by_type.items(), key=lambda kv: -len(kv[1])):
        err.print(f"  {len(group)} x {status}: {error_type}: {message}", soft_wrap=True)
    first = report.failures[0]["traceback"].strip().splitlines()
    err.print("  first traceback (all are in the lake):\n    " + "\n    ".join(first[-8:]), soft_wrap=True)
    err.print(f"  commscale query \"SELECT point_key, status, error_type, message, traceback FROM failure "
              f"WHERE run_id = '{report.run_id}'\" --lake {lake_root}", soft_wrap=True)
    err.print("  Running the same command again retries them.", soft_wrap=True)
    sys.exit(1)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@lake_option
@address_option
@click.option("--num-cpus", type=click.IntRange(min=1), default=None, help="CPUs of the embedded Ray (default: all).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None, help="Points per Ray task.")
@restart_option
def run(overrides: Sequence[str], lake_root: str, address: Optional[str], num_cpus: Optional[int],
        chunk_size: Optional[int], restart: bool) -> None:
    """Run a sweep on Ray and land it in the lake: a projection (e.g. `run hardware=h100 sweep.tp=[8,16]`)
    or, for `sweep=roi`, measurements on the workers.

    Run it again to resume: finished points stay, the rest run."""
    from analysis.summary import render_summary
    from sweeps.jobs import projection_job
    from sweeps.lake.views import read_rows
    from sweeps.run import run_job

    config = load_run_config(overrides)
    lake = Lake(lake_root)
    if config.sweep.mode.value == "roi":
        _run_roi(config, lake, lake_root, address=address, num_cpus=num_cpus, chunk_size=chunk_size, restart=restart)
        return
    calibration = None
    if config.calibration is not None:
        from sweeps.calibrate import load_calibration

        calibration = load_calibration(lake, config.calibration.name)
    job, plan = projection_job(config, calibration=calibration)
    report = run_job(job, lake, address=address, num_cpus=num_cpus, chunk_size=chunk_size, restart=restart,
                     console=Console(stderr=True))
    out = Console()
    sweep, hw = config.sweep, config.hardware
    model = f", model {config.model.name}" if config.model else ""
    costs = f", compute from {calibration.name}" if calibration else ""
    _report_header(out, report, f"[bold]sweep {sweep.name}[/] on [bold]{hw.name}[/] ({hw.accelerator}{model}{costs})")
    for x in plan.highlights:
        out.print(f"  highlight {x.model}: TP {x.tp} (Eq. 10 gives {x.tp_eq10:.1f} on {hw.hbm_gb:g} GB devices)",
                  soft_wrap=True)
    rows = read_rows(lake, PROJECTION, plan.points)
    if len(rows):
        render_summary(out, rows, title=f"{hw.name}, sweep {sweep.name}", overlap_tp=sweep.overlap_tp)
    where = "/".join(f"{k}={v}" for k, v in job.partition.items())
    lake_flag = "" if lake_root == DEFAULT_LAKE else f" --lake {lake_root}"
    out.print(f"\nLake: {lake} ({len(rows)} rows of this sweep under kind=projection/{where})", soft_wrap=True)
    out.print("Query it:  commscale query \"SELECT h, sl, tp, flop_vs_bw, serialized_fraction FROM projection "
              f"WHERE sweep = '{sweep.name}' ORDER BY serialized_fraction DESC LIMIT 10\"{lake_flag}", soft_wrap=True)
    write_and_announce(out, lake, DEFAULT_REPORT)
    _report_failures(out, report, lake_root)


def _run_roi(config, lake: Lake, lake_root: str, **options) -> None:
    """`commscale run` of a ``mode: roi`` sweep: measure, fit, and show the overlap."""
    from analysis.roi import measured_overlap, render_roi
    from sweeps.jobs import record_fits, roi_configs, roi_job
    from sweeps.lake.views import read_rows
    from sweeps.run import run_job
    from tasks.fit.alpha_beta import collective_fits

    job = roi_job(config)
    report = run_job(job, lake, console=Console(stderr=True), **options)
    out = Console()
    roi = config.sweep.roi
    _report_header(out, report, f"[bold]ROI sweep {config.sweep.name}[/] ({roi.device}, {roi.dtype})")
    rows = read_rows(lake, ROI, job.points, status=None)
    fits = collective_fits(rows)
    record_fits(lake, job, rows, fits, roi.placement)
    overlap = measured_overlap(rows, roi_configs(config), passes=roi.passes, world=roi.world,
                               dtype_bytes=config.sweep.dtype_bytes, hardware=config.hardware)
    render_roi(out, rows, fits, overlap)
    devices = "; ".join(sorted(set(rows["device_model"].dropna()))) or "nothing"
    out.print(f"\nLake: {lake} (kind=roi, kind=collective_fit); measured on: {devices}", soft_wrap=True)
    write_and_announce(out, lake, DEFAULT_REPORT)
    _report_failures(out, report, lake_root)


def _parse_pairs(values: Sequence[str], option: str, separator: str, cast) -> dict:
    """``NAME<separator>NUMBER`` items into a dict (a bare NAME counts 1)."""
    pairs = {}
    for value in values:
        name, sep, amount = value.partition(separator)
        try:
            pairs[name] = cast(amount) if sep else cast(1)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not NAME{separator}NUMBER", param_hint=option) from None
    return pairs


@main.command()
@click.option("--name", default="probe", show_default=True, help="Sweep name in the lake.")
@click.option("--points", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--sleep-ms", type=click.FloatRange(min=0), default=50.0, show_default=True,
              help="Each point sleeps this long, standing in for a device measurement.")
@click.option("--fail", multiple=True, metavar="MODE:COUNT",
              help="Make COUNT points fail: die_once, transient_once, infeasible, oom, bug (repeatable).")
@click.option("--resource", multiple=True, metavar="NAME=AMOUNT",
              help="Custom Ray resource each point needs, e.g. standin_gpu=1 (repeatable).")
@click.option("--cpus-per-point", type=click.FloatRange(min=0), default=1.0, show_default=True)
@click.option("--timeout-s", type=click.FloatRange(min=0.01), default=60.0, show_default=True,
              help="Time cap of one point.")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None, help="Points per Ray task.")
@lake_option
@address_option
@click.option("--num-cpus", type=click.IntRange(min=1), default=None, help="CPUs of the embedded Ray.")
@restart_option
def probe(name: str, points: int, sleep_ms: float, fail: Sequence[str], resource: Sequence[str], cpus_per_point: float,
          timeout_s: float, chunk_size: Optional[int], lake_root: str, address: Optional[str], num_cpus: Optional[int],
          restart: bool) -> None:
    """Check a cluster end to end with synthetic points: dispatch, retries, faults, lake."""
    from sweeps.jobs import probe_job
    from sweeps.run import run_job

    job = probe_job(name=name, points=points, sleep_s=sleep_ms / 1000.0, fail=_parse_pairs(fail, "--fail", ":", int),
                    resources=_parse_pairs(resource, "--resource", "=", float), cpus_per_point=cpus_per_point,
                    point_timeout_s=timeout_s)
    report = run_job(job, Lake(lake_root), address=address, num_cpus=num_cpus, chunk_size=chunk_size,
                     restart=restart, console=Console(stderr=True))
    out = Console()
    _report_header(out, report, f"[bold]probe {name}[/]")
    _report_failures(out, report, lake_root)


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@click.option("--address", envvar="RAY_API_SERVER_ADDRESS", default="http://127.0.0.1:8265", show_default=True,
              help="The cluster's Jobs API (dashboard) address.")
@lake_option
@click.option("--python", "python_bin", default="python", show_default=True,
              help="Python that runs the job on the head node.")
@click.option("--follow/--no-follow", default=True, show_default=True, help="Stream the job's logs until it ends.")
def submit(overrides: Sequence[str], address: str, lake_root: str, python_bin: str, follow: bool) -> None:
    """Submit `commscale run OVERRIDES` to a Ray cluster as a job, and follow it.

    The config is checked here first; the repository travels as the job's working
    directory; the lake path must be one the cluster can write (shared storage, or this
    machine for a cluster on loopback)."""
    from sweeps.submit import submit_run

    load_run_config(overrides)  # bad input fails here, before anything is submitted
    lake_path = lake_root if "://" in lake_root else str(Path(lake_root).expanduser().resolve())
    ok = submit_run(address, [*overrides, "--lake", lake_path], python_bin=python_bin, follow=follow,
                    echo=lambda text: click.echo(text, nl=False))
    if not ok:
        sys.exit(1)


@main.command()
@click.argument("sweep", required=False)
@lake_option
def status(sweep: Optional[str], lake_root: str) -> None:
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


@main.group()
def lake() -> None:
    """Maintain the lake: verify files, remove orphans, upgrade an older lake."""


@lake.command()
@lake_option
@click.option("--keys-out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write the keys to measure again, one per line.")
def verify(lake_root: str, keys_out: Optional[Path]) -> None:
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
def vacuum(lake_root: str, grace_s: float) -> None:
    """Delete files no commit holds: leftovers of crashed writers, dropped sweeps."""
    store = Lake(lake_root)
    store.ensure_readable()
    report = store.vacuum(grace_s=grace_s)
    for path in report.removed:
        click.echo(f"removed {path}")
    click.echo(f"{len(report.removed)} files removed, {report.bytes_freed:,} bytes freed")


@lake.command()
@lake_option
def upgrade(lake_root: str) -> None:
    """Adopt the files of a lake written without a commit log."""
    rows = Lake(lake_root).upgrade()
    click.echo(f"{rows} rows adopted into the commit log of {Lake(lake_root)}")


@main.command()
@click.argument("statement")
@lake_option
@click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True)
@click.option("--output", "-o", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write to this file instead of stdout (required for parquet).")
def query(statement: str, lake_root: str, fmt: str, output: Optional[Path]) -> None:
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


@main.command()
@click.argument("overrides", nargs=-1)
def config(overrides: Sequence[str]) -> None:
    """Print the composed config (presets plus overrides) as YAML."""
    from omegaconf import OmegaConf

    click.echo(OmegaConf.to_yaml(OmegaConf.structured(load_run_config(overrides))), nl=False)


@main.command()
def presets() -> None:
    """List the presets of each config group."""
    for group in GROUPS:
        click.echo(f"{group}: {', '.join(list_presets(group))}")


main.add_command(report_command)

from sweeps.calibrate_cli import calibrate as calibrate_command  # noqa: E402 - its body lives in its own module
from sweeps.search_cli import search as search_command  # noqa: E402 - its body lives in its own module

main.add_command(search_command)
main.add_command(calibrate_command)


if __name__ == "__main__":
    main()
