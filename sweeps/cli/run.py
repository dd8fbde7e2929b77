"""``commscale run``, ``probe``, ``submit``, ``config`` and ``presets``: parse, call the
driver, render."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

import click

from sweeps.cli.options import address_option, allow_large_option, check_address, default_lake, default_report, \
    finite_number, lake_option, no_report_option, num_cpus_option, restart_option
from sweeps.cli.render import console, report_failures, run_line
from sweeps.cli.report import write_and_announce
from sweeps.config import GROUPS, RunConfig, SweepMode, list_presets, load_run_config
from sweeps.errors import ConfigError, UserError
from sweeps.lake import Lake
from sweeps.lake.kinds import COLLECTIVE_FIT, PROJECTION, ROI

__all__ = ["run", "probe", "submit", "config", "presets"]

chunk_option = click.option("--chunk-size", type=click.IntRange(min=1), default=None, help="Points per Ray task.")


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@lake_option
@address_option
@num_cpus_option
@chunk_option
@restart_option
@no_report_option
@allow_large_option
def run(*, overrides: Sequence[str], lake_root: str, address: Optional[str], num_cpus: Optional[int],
        chunk_size: Optional[int], restart: bool, no_report: bool, allow_large: bool) -> None:
    """Run a sweep on Ray and land it in the lake: a projection (e.g. `run hardware=h100 sweep.tp=[8,16]`)
    or, for `sweep=roi`, measurements on the workers.

    Run it again to resume: finished points stay, the rest run. A sweep of more than 10^8
    points, or of more than this machine's memory can plan, is refused unless --allow-large."""
    from sweeps.jobs.bounds import check_sweep_size

    for item in overrides:
        key, _, value = item.partition("=")
        if key.startswith("calibration."):
            raise ConfigError(key, value, "configures `commscale calibrate`; `run calibration=NAME` projects with the "
                                          "lake's newest fit of NAME as it was measured")
    config = load_run_config(overrides, allow_large=allow_large)
    check_sweep_size(config, allow_large=allow_large)
    lake = Lake(lake_root)
    options = dict(address=address, num_cpus=num_cpus, chunk_size=chunk_size, restart=restart,
                   console=console(stderr=True))
    if config.sweep.mode == SweepMode.roi:
        _run_roi(config, lake, lake_root, options, no_report)
    else:
        _run_projection(config, lake, lake_root, options, no_report)


def _run_projection(config: RunConfig, lake: Lake, lake_root: str, options: dict, no_report: bool) -> None:
    from analysis.summary import partition_count, render_summary
    from sweeps.lake.views import connect
    from sweeps.sweep import project

    done = project(config, lake, **options)
    out = console()
    sweep, hw = config.sweep, config.hardware
    model = f", model {config.model.name}" if config.model else ""
    costs = f", compute from {done.calibration.name}" if done.calibration else ""
    run_line(out, done.report, f"[bold]sweep {sweep.name}[/] on [bold]{hw.name}[/] ({hw.accelerator}{model}{costs})")
    for x in done.highlights:
        out.print(f"  highlight {x.model}: TP {x.tp} (Eq. 10 gives {x.tp_eq10:.1f} on {hw.hbm_gb:g} GB devices)",
                  soft_wrap=True)
    con = connect(lake)
    try:
        rows = partition_count(con, done.partition["sweep"], done.partition["hardware"])
        if rows:
            render_summary(out, con, **done.partition, title=f"{hw.name}, sweep {sweep.name}",
                           overlap_tp=sweep.overlap_tp)
    finally:
        con.close()
    where = "/".join(f"{k}={v}" for k, v in done.partition.items())
    lake_flag = "" if lake_root == default_lake() else f" --lake {lake_root}"
    out.print(f"\nLake: {lake} ({rows} rows of this sweep, version {done.version}, under kind={PROJECTION}/{where})",
              soft_wrap=True)
    out.print(f"Query it:  commscale query \"SELECT h, sl, tp, flop_vs_bw, serialized_fraction FROM {PROJECTION} "
              f"WHERE sweep = '{sweep.name}' ORDER BY serialized_fraction DESC LIMIT 10\"{lake_flag}", soft_wrap=True)
    write_and_announce(out, lake, default_report(), first_sweep=config.sweep.name, skip=no_report)
    report_failures(done.report, lake_root)


def _run_roi(config: RunConfig, lake: Lake, lake_root: str, options: dict, no_report: bool) -> None:
    """`commscale run` of a ``mode: roi`` sweep: measure, fit, and show the overlap."""
    from sweeps.cli.roi import render_roi
    from sweeps.sweep import measure_roi

    done = measure_roi(config, lake, **options)
    out = console()
    roi = config.sweep.roi
    run_line(out, done.report, f"[bold]ROI sweep {config.sweep.name}[/] ({roi.device}, {roi.dtype})")
    render_roi(out, done.rows, done.fits, done.overlap)
    devices = "; ".join(sorted(set(done.rows["device_model"].dropna()))) or "nothing"
    out.print(f"\nLake: {lake} (kind={ROI}, kind={COLLECTIVE_FIT}); measured on: {devices}", soft_wrap=True)
    write_and_announce(out, lake, default_report(), first_sweep=config.sweep.name, skip=no_report)
    report_failures(done.report, lake_root)


def _parse_pairs(values: Sequence[str], option: str, separator: str, cast) -> dict:
    """``NAME<separator>NUMBER`` items into a dict (a bare NAME counts 1). A name given twice,
    an empty name or a negative number is refused (``ConfigError``): the last would win, or
    Ray would refuse it after the lake was created."""
    pairs = {}
    for value in values:
        name, sep, amount = value.partition(separator)
        try:
            number = cast(amount) if sep else cast(1)
        except ValueError:
            raise click.BadParameter(f"{value!r} is not NAME{separator}NUMBER", param_hint=option) from None
        if not name or name in pairs or not number >= 0:
            why = "names nothing" if not name else f"repeats {name}" if name in pairs else "must not be negative"
            raise ConfigError(option.lstrip("-"), value, why)
        pairs[name] = number
    return pairs


@click.command()
@click.option("--name", default="probe", show_default=True, help="Sweep name in the lake.")
@click.option("--points", type=click.IntRange(min=1), default=100, show_default=True)
@click.option("--sleep-ms", type=click.FloatRange(min=0), default=50.0, show_default=True, callback=finite_number,
              help="Each point sleeps this long, standing in for a device measurement.")
@click.option("--fail", multiple=True, metavar="MODE:COUNT",
              help="Make COUNT points fail: die_once, transient_once, infeasible, oom, bug (repeatable).")
@click.option("--resource", multiple=True, metavar="NAME=AMOUNT",
              help="Custom Ray resource each point needs, e.g. standin_gpu=1 (repeatable).")
@click.option("--cpus-per-point", type=click.FloatRange(min=0), default=1.0, show_default=True, callback=finite_number)
@click.option("--timeout-s", type=click.FloatRange(min=0.01), default=60.0, show_default=True, callback=finite_number,
              help="Time cap of one point.")
@chunk_option
@lake_option
@address_option
@num_cpus_option
@restart_option
@allow_large_option
def probe(*, name: str, points: int, sleep_ms: float, fail: Sequence[str], resource: Sequence[str],
          cpus_per_point: float, timeout_s: float, chunk_size: Optional[int], lake_root: str, address: Optional[str],
          num_cpus: Optional[int], restart: bool, allow_large: bool) -> None:
    """Check a cluster end to end with synthetic points: dispatch, retries, faults, lake."""
    from sweeps.jobs.bounds import check_probe_size
    from sweeps.jobs.probe import probe_job
    from sweeps.sweep import run_probe

    check_probe_size(points, allow_large=allow_large)
    job = probe_job(name=name, points=points, sleep_s=sleep_ms / 1000.0, fail=_parse_pairs(fail, "--fail", ":", int),
                    resources=_parse_pairs(resource, "--resource", "=", float), cpus_per_point=cpus_per_point,
                    point_timeout_s=timeout_s)
    report = run_probe(job, Lake(lake_root), address=address, num_cpus=num_cpus, chunk_size=chunk_size,
                       restart=restart, console=console(stderr=True))
    run_line(console(), report, f"[bold]probe {name}[/]")
    report_failures(report, lake_root)


def _check_dashboard(ctx: click.Context, param: click.Parameter, value):
    """``--dashboard`` is a web URL (the Jobs API's); a cluster's HOST:PORT is ``--address``."""
    if value is not None and value.split("://")[0].lower() not in ("http", "https"):
        raise ConfigError("--dashboard", value, "is not a web URL (http://HEAD:8265); a Ray cluster's HOST:PORT "
                                                "is --address")
    return value


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@click.option("--address", default=None, callback=check_address, metavar="HOST:PORT",
              help="The Ray cluster to submit to: HOST:PORT of its head's GCS (default: RAY_ADDRESS); its Jobs API "
                   "is found through it.")
@click.option("--dashboard", envvar="RAY_API_SERVER_ADDRESS", default=None, metavar="URL", callback=_check_dashboard,
              help="The cluster's Jobs API (dashboard) URL, where only it can be reached, e.g. http://HEAD:8265 "
                   "(env RAY_API_SERVER_ADDRESS). Without it or --address: http://127.0.0.1:8265.")
@lake_option
@click.option("--python", "python_bin", default=sys.executable, show_default="this command's own Python",
              help="Python that runs the job on the head node (with commscale installed).")
@click.option("--follow/--no-follow", default=True, show_default=True, help="Stream the job's logs until it ends.")
@click.option("--verbose", is_flag=True, help="Show Ray's own log lines (packaging, upload, job set-up) too.")
@allow_large_option
def submit(*, overrides: Sequence[str], address: Optional[str], dashboard: Optional[str], lake_root: str,
           python_bin: str, follow: bool, verbose: bool, allow_large: bool) -> None:
    """Submit `commscale run OVERRIDES` to a Ray cluster as a job, and follow it.

    The config is checked here first; the repository travels as the job's working
    directory; the lake and the report are written where this command would write them
    (absolute paths), so they must be paths the cluster can write: shared storage, or this
    machine for a cluster on loopback."""
    from click.core import ParameterSource

    from sweeps.cluster.submit import submit_run
    from sweeps.jobs.bounds import check_sweep_size

    # Bad input fails here, before anything is submitted. The point bound is checked here;
    # the driver's memory where the job runs it (its own `commscale run` checks it there).
    if address and click.get_current_context().get_parameter_source("dashboard") == ParameterSource.COMMANDLINE:
        raise UserError("--address and --dashboard: name the cluster once (--address HOST:PORT, or the Jobs API's "
                        "URL as --dashboard)")
    composed = load_run_config(overrides, allow_large=allow_large)
    check_sweep_size(composed, allow_large=allow_large, available=sys.maxsize)
    lake_path = lake_root if "://" in lake_root else str(Path(lake_root).expanduser().resolve())
    report_dir = str(Path(default_report()).expanduser().resolve())
    run_args = [*overrides, "--lake", lake_path, *(["--allow-large"] if allow_large else [])]
    status = submit_run(run_args, address=address, dashboard=dashboard, python_bin=python_bin, follow=follow,
                        echo=lambda text: click.echo(text, nl=False), env_vars={"COMMSCALE_REPORT": report_dir},
                        verbose=verbose)
    if status:
        sys.exit(status)


@click.command()
@click.argument("overrides", nargs=-1)
@allow_large_option
def config(overrides: Sequence[str], allow_large: bool) -> None:
    """Print the composed config (presets plus overrides) as YAML: a run's, or with `search`
    or `stack` first, a layout search's (`config search default devices=512`) or a stack's
    (`config stack megatron-core-2024 tp_overlap=false`)."""
    from omegaconf import OmegaConf

    from sweeps.config.search import CONFIG_GROUPS, composed_config

    if overrides and overrides[0] in CONFIG_GROUPS:
        composed = OmegaConf.create(composed_config(overrides[0], overrides[1:], allow_large=allow_large))
    else:
        composed = OmegaConf.structured(load_run_config(overrides, allow_large=allow_large))
    click.echo(OmegaConf.to_yaml(composed), nl=False)


@click.command()
def presets() -> None:
    """List the presets of each config group, the layout-search presets (`commscale search PRESET`) and the
    software stacks (`stack=NAME`)."""
    for group in (*GROUPS, "search", "stack", "limits", "codesign"):
        click.echo(f"{group}: {', '.join(list_presets(group))}")
