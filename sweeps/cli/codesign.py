"""``commscale codesign``: the layout and the hardware it runs on, searched together against
the cluster's cost.

    commscale codesign                                 # the default preset: Llama 3 70B, 15T tokens
    commscale codesign trials=6000                     # resume the study and extend it
    commscale codesign knobs.domain=[8,72] cost.die=30000 --format json

An NSGA-II study (its journal under LAKE/_studies) whose trials are costed in this process;
each batch's rows land in the lake (kind ``codesign``). Prints the Pareto front of step time
against cluster cost. Bad input ends with exit status 2 before any work.
"""

from __future__ import annotations

import json
from typing import Sequence

import click
from rich.table import Table

from sweeps.cli.options import allow_large_option, lake_option
from sweeps.cli.render import console
from sweeps.lake import Lake

__all__ = ["codesign", "CODESIGN_FORMATS"]

CODESIGN_FORMATS = ("table", "json")
_FRONT_COLUMNS = ("trial", "step_time_s", "train_days", "cost_usd", "devices", "domain", "scale_up", "scale_out",
                  "hbm_gb", "flops", "tp", "pp", "dp", "cp", "micro_batch", "zero", "recompute")


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@lake_option
@allow_large_option
@click.option("--format", "fmt", type=click.Choice(CODESIGN_FORMATS), default="table", show_default=True)
def codesign(*, overrides: Sequence[str], lake_root: str, allow_large: bool, fmt: str) -> None:
    """Search hardware knobs and layouts together (NSGA-II): step time against the cluster's
    cost, e.g. `codesign trials=6000`."""
    import optuna

    from sweeps.config.codesign import load_codesign
    from sweeps.search.codesign import codesign_front, run_codesign

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    setup = load_codesign(overrides, allow_large=allow_large)     # bad input ends here, before any work
    lake = Lake(lake_root)
    run = run_codesign(setup, lake)
    front = codesign_front(run.rows)
    if fmt == "json":
        click.echo(json.dumps({"study": run.study, "journal": run.journal, "full_space_points": setup.full_size,
                               "trials": int(len(run.rows)), "feasible": int(run.rows["feasible"].sum()),
                               "front": [{k: _plain(row[k]) for k in _FRONT_COLUMNS} for _, row in front.iterrows()]},
                              indent=2))
        return
    out = console()
    spec = setup.spec
    out.print(f"[bold]codesign {run.study}[/]: {setup.problem.model.name}, {spec.tokens:.3g} tokens at "
              f"{spec.global_batch:,} sequences a step, hardware knobs on {setup.problem.base.name}, stack "
              f"{spec.stack}; {setup.full_size:,} points; {run.before} trials before, {run.completed_now} now "
              f"({run.elapsed_s:.1f} s, in this process); journal {run.journal}", soft_wrap=True)
    table = Table(title=f"Pareto front: step time vs cluster cost ({len(front)} of {int(run.rows['feasible'].sum())} "
                        "feasible trials)", title_justify="left")
    for name in ("step s", "days", "cost $M", "devices", "domain", "up x", "out x", "HBM GB", "FLOP x", "layout"):
        table.add_column(name, justify="left" if name == "layout" else "right", no_wrap=True)
    for _, r in front.iterrows():
        layout = f"tp{r['tp']} pp{r['pp']} dp{r['dp']} cp{r['cp']} b{r['micro_batch']} {r['zero']} {r['recompute']}"
        table.add_row(f"{r['step_time_s']:.3f}", f"{r['train_days']:.1f}", f"{r['cost_usd'] / 1e6:,.0f}",
                      f"{r['devices']:,}", str(r["domain"]), f"{r['scale_up']:g}", f"{r['scale_out']:g}",
                      str(r["hbm_gb"]), f"{r['flops']:g}", layout)
    out.print(table)
    out.print(f"\nLake: {lake} (kind=codesign/sweep={run.study})", soft_wrap=True)


def _plain(value):
    """A JSON-able scalar (numpy's as Python's)."""
    return value.item() if hasattr(value, "item") else value
