"""``commscale limits``: how far training can scale, utilisation against training compute.

    commscale limits                                  # the default preset: dense family, H100, 3 months
    commscale limits duration_days=180 family.batch_exponent=0.4
    commscale limits --format json                    # the thresholds of every scenario, as JSON

Each point is a Ray task (``sweeps.jobs.scale_limits``); its rows land in the lake (kind
``limits``) and a second run reads them back. Bad input (an unknown preset or field, a value
out of its range, too many points) ends with exit status 2 before any work.
"""

from __future__ import annotations

import json
from typing import Optional, Sequence

import click
from rich.table import Table

from sweeps.cli.options import address_option, allow_large_option, lake_option, num_cpus_option, restart_option
from sweeps.cli.render import console, run_line
from sweeps.lake import Lake

__all__ = ["limits", "LIMITS_FORMATS"]

LIMITS_FORMATS = ("table", "json")


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@lake_option
@address_option
@num_cpus_option
@restart_option
@allow_large_option
@click.option("--format", "fmt", type=click.Choice(LIMITS_FORMATS), default="table", show_default=True)
def limits(*, overrides: Sequence[str], lake_root: str, address: Optional[str], num_cpus: Optional[int],
           restart: bool, allow_large: bool, fmt: str) -> None:
    """Utilisation against training FLOP for a family scaled with its compute (Erdil and
    Schneider-Joseph's question), e.g. `limits duration_days=180`: where it falls, and where no
    layout finishes within the duration."""
    from sweeps.config.scale_limits import load_limits
    from sweeps.jobs.scale_limits import limits_summary
    from sweeps.sweep import run_limits

    setup = load_limits(overrides, allow_large=allow_large)     # bad input ends here, before any work
    lake = Lake(lake_root)
    run = run_limits(setup, lake, console=console(stderr=True), address=address, num_cpus=num_cpus, restart=restart)
    summary = limits_summary(run.rows, setup)
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2))
        return
    out = console()
    spec = setup.spec
    run_line(out, run.report, f"[bold]limits {spec.name}[/] on {setup.hardware.name}, stack {spec.stack}, "
                              f"{spec.duration_days:g} days")
    for name, scenario in summary["scenarios"].items():
        table = Table(title=f"{name}: {scenario['description']}", title_justify="left")
        for column in ("training FLOP", "parameters", "devices", "utilization", "days", "latency floor (days)",
                       "status"):
            table.add_column(column, justify="right")
        for point in scenario["points"]:
            days, floor = ("" if point[key] is None else f"{point[key]:,.0f}"
                           for key in ("run_days", "latency_floor_days"))
            table.add_row(f"{point['flop']:.2e}", f"{point['params']:.2e}", f"{point['devices']:,}",
                          f"{point['utilization']:.1%}", days, floor, point["status"])
        out.print(table)
        out.print(f"  {name}: utilisation of the smallest run {scenario['plateau_utilization']:.1%}; under "
                  f"{spec.utilization_drop:.0%} of it from {_flop(scenario['utilization_drop_flop'])}; no layout "
                  f"finishes within {spec.duration_days:g} days beyond {_flop(scenario['latency_wall_flop'])}; "
                  f"the latency floor alone of its fastest runs outlasts that beyond "
                  f"{_flop(scenario['latency_floor_wall_flop'])}",
                  soft_wrap=True, highlight=False)
    out.print(f"\nLake: {lake} (kind=limits/sweep={spec.name}/hardware={setup.hardware.name})", soft_wrap=True)


def _flop(value: Optional[float]) -> str:
    return "beyond the grid" if value is None else f"{value:.1e} FLOP"
