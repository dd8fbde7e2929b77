"""The ``commscale`` command line.

    commscale run [GROUP=NAME | GROUP.FIELD=VALUE ...] [--lake PATH] [--address ADDR]
    commscale query "SELECT ... FROM projection" [--format table|csv|json|parquet]
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


@main.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@lake_option
@click.option("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else an embedded local Ray).")
@click.option("--num-cpus", type=click.IntRange(min=1), default=None, help="CPUs of the embedded Ray (default: all).")
@click.option("--chunk-size", type=click.IntRange(min=1), default=None, help="Points per Ray task.")
def run(overrides: Sequence[str], lake_root: str, address: Optional[str], num_cpus: Optional[int],
        chunk_size: Optional[int]) -> None:
    """Project a sweep on Ray and land it in the lake (e.g. `run hardware=h100 sweep.tp=[8,16]`)."""
    from analysis.summary import render_summary
    from sweeps.run import run_sweep

    config = load_run_config(overrides)
    lake = Lake(lake_root)
    console = Console(stderr=True)
    report = run_sweep(config, lake, address=address, num_cpus=num_cpus, chunk_size=chunk_size, console=console)
    out = Console()
    sweep, hw = config.sweep, config.hardware
    model = f", model {config.model.name}" if config.model else ""
    out.print(f"[bold]sweep {sweep.name}[/] on [bold]{hw.name}[/] ({hw.accelerator}{model}): "
              f"{report.planned} points, {report.projected} projected, {report.cached} already in the lake; "
              f"{report.where}; {report.elapsed_s:.1f} s", soft_wrap=True)
    for x in report.highlights:
        out.print(f"  highlight {x.model}: TP {x.tp} (Eq. 10 gives {x.tp_eq10:.1f} on {hw.hbm_gb:g} GB devices)", soft_wrap=True)
    render_summary(out, report.rows, title=f"{hw.name}, sweep {sweep.name}", overlap_tp=sweep.overlap_tp)
    where = "/".join(f"{k}={v}" for k, v in report.partition.items())
    lake_flag = "" if lake_root == DEFAULT_LAKE else f" --lake {lake_root}"
    out.print(f"\nLake: {lake} ({len(report.rows)} rows of this run under kind=projection/{where})", soft_wrap=True)
    out.print("Query it:  commscale query \"SELECT h, sl, tp, flop_vs_bw, serialized_fraction FROM projection "
              f"WHERE sweep = '{sweep.name}' ORDER BY serialized_fraction DESC LIMIT 10\"{lake_flag}", soft_wrap=True)


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

    from analysis.query import query as run_query

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


if __name__ == "__main__":
    main()
