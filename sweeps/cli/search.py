"""``commscale search``: find the parallel layout that exposes least communication.

    commscale search [PRESET] [FIELD=VALUE ...] [--lake PATH] [--storage FILE] [--address ADDR | --ray]
    commscale search small --exhaustive          # enumerate the whole space instead (small spaces)
    commscale search scaling --scaling           # best layout per model and device count
    commscale search hardware.devices_per_node=4 # one field of the preset's hardware (or model, stack)
    commscale search small --measure 3           # measure the top 3 layouts' kernels and collectives
    commscale search small --repair-journal      # rebuild a damaged study journal from the lake's rows

Bad input (an unknown preset or field, a space in which no layout is feasible, more trials
than the space holds or than ``TRIALS_BOUND`` without --allow-large, a --storage file that
is no Optuna journal, bad --measure options) ends with exit status 2 before any work and
without touching the lake.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Optional, Sequence

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from sweeps.cli.act import Act, act, act_options, check_act
from sweeps.cli.options import RESTART_HELP, address_option, allow_large_option, lake_option, num_cpus_option
from sweeps.cli.render import console, run_line
from sweeps.cli.search_render import (explain, explain_front, front_line, layout_table, optimum_line, record_line,
                                      trust_lines)
from sweeps.config import SearchSetup
from sweeps.errors import ConfigError, UserError
from sweeps.lake import Lake
from sweeps.lake.kinds import SCALING, SEARCH

__all__ = ["search"]


def _deprecated(option: str, instead: str):
    def warn(ctx: click.Context, param: click.Parameter, value):
        if value is not None:
            click.echo(f"warning: {option} is deprecated and will go in the next release; use {instead}", err=True)
        return value
    return warn


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@lake_option
@click.option("--storage", default=None, help="The study's journal file (default: LAKE/_studies/STUDY.journal).")
@address_option
@num_cpus_option
@click.option("--ray", "embedded_ray", is_flag=True,
              help="Evaluate the trials as tasks of an embedded Ray (--num-cpus sizes it and implies it); without "
                   "it, and without --address or RAY_ADDRESS, they run in this process.")
@click.option("--no-warm-start", "cold", is_flag=True,
              help="Start a fresh study from the sampler alone, not from the step model's best layouts.")
@click.option("--repair-journal", "repair_journal", is_flag=True,
              help="Set the study's journal aside (kept beside it) and rebuild the study from the lake's rows.")
@allow_large_option
@click.option("--exhaustive", is_flag=True, help="Enumerate the whole space instead of searching (nothing is written).")
@click.option("--scaling", is_flag=True, help="The scaling view: best layout per model and device count.")
@click.option("--restart", is_flag=True, help=f"With --scaling: {RESTART_HELP}")
@click.option("--measure", "measure_top", type=int, default=None,
              help="Measure the top N layouts' layer GEMMs and collectives on the cluster's workers "
                   "(ROI microbenchmarks).")
@click.option("--measure-device", default="cpu", show_default=True, help="Device of the --measure runs: cpu or cuda.")
@click.option("--measure-dtype", default="fp32", show_default=True,
              help="Element type of the measured GEMMs and collectives.")
@click.option("--measure-world", type=int, default=2, show_default=True,
              help="Ranks of the measured collectives (what the cluster can form); scaled to each layout's group size.")
@click.option("--verify", "verify_top", type=int, default=None, hidden=True,
              callback=_deprecated("--verify", "--measure"))
@click.option("--verify-device", default=None, hidden=True, callback=_deprecated("--verify-device", "--measure-device"))
@click.option("--verify-dtype", default=None, hidden=True, callback=_deprecated("--verify-dtype", "--measure-dtype"))
@click.option("--verify-world", type=int, default=None, hidden=True,
              callback=_deprecated("--verify-world", "--measure-world"))
@act_options
def search(*, overrides: Sequence[str], lake_root: str, storage: Optional[str], address: Optional[str],
           num_cpus: Optional[int], embedded_ray: bool, cold: bool, repair_journal: bool, allow_large: bool,
           exhaustive: bool, scaling: bool, restart: bool,
           measure_top: Optional[int], measure_device: str, measure_dtype: str, measure_world: int,
           verify_top: Optional[int], verify_device: Optional[str], verify_dtype: Optional[str],
           verify_world: Optional[int], tokens: Optional[float], price: Optional[float],
           export_to: Optional[str]) -> None:
    """Search the parallel layout with least exposed communication (Optuna: TPE, or NSGA-II
    for objective=pareto), e.g. `search default devices=512 space.tp=[2,4,8]`.

    Run it again to resume the study at its trial count; raise `trials=` to extend it."""
    import optuna

    from sweeps.config import check_space, load_search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    measure_top = measure_top if verify_top is None else verify_top
    device, dtype = verify_device or measure_device, verify_dtype or measure_dtype
    world = measure_world if verify_world is None else verify_world
    if measure_top is not None:
        from sweeps.jobs.winners import check_measure_options

        check_measure_options(measure_top, device, dtype, world)
        if exhaustive or scaling:
            raise ConfigError("--measure", measure_top,
                              "measures a search's winners; not with --exhaustive or --scaling")
    _refuse_unused_options(click.get_current_context(), exhaustive=exhaustive, scaling=scaling,
                           measure=measure_top is not None)
    setup = load_search(overrides, scaling=scaling, exhaustive=exhaustive, allow_large=allow_large)
    action = Act(export_to, tokens, price)
    check_act(action, setup, scaling=scaling)
    if not (scaling or exhaustive):
        from sweeps.config.search import check_budget

        check_budget(setup.spec, allow_large=allow_large)
    lake = Lake(lake_root)
    out = Console(width=max(console().width, 140))
    if scaling:
        _run_scaling(out, setup, lake, address=address, num_cpus=num_cpus, restart=restart)
        return
    total, feasible = check_space(setup)  # bad input ends here, before any work
    spec = setup.spec
    sampler = "" if exhaustive else f", sampler {setup.sampler}"
    out.print(f"[bold]search {setup.study_name}[/]: {setup.model.name} on {spec.devices} x {setup.hardware.name}, "
              f"global batch {spec.global_batch}, stack {spec.stack}; {total:,} layouts ({feasible:,} feasible); "
              f"objective {spec.objective}{sampler}", soft_wrap=True)
    out.print(record_line(setup), soft_wrap=True, highlight=False, markup=False)
    if exhaustive:
        act(out, setup, _exhaustive(out, setup, total), action)
        return
    top = _run_study(out, setup, lake, storage=storage, address=address, num_cpus=num_cpus,
                     embedded_ray=embedded_ray, warm_start=not cold, repair_journal=repair_journal)
    if measure_top is not None:
        _measure(out, setup, lake, top.head(measure_top), device=device, dtype=dtype, world=world,
                 address=address, num_cpus=num_cpus)
    act(out, setup, top, action)


def _refuse_unused_options(ctx: click.Context, *, exhaustive: bool, scaling: bool, measure: bool) -> None:
    """``UserError`` for an option given where the mode does not read it, and for a
    ``--storage`` path that cannot hold a journal (a folder, under a file, or a file that
    is no Optuna journal): before any work, before the lake is created."""
    from click.core import ParameterSource

    def given(name: str) -> bool:
        return ctx.get_parameter_source(name) not in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP)

    unused = [("restart", "--restart", "only the scaling view (--scaling) starts anew", not scaling)]
    unused += [(name, f"--{name.replace('_', '-')}", "only with --measure", not measure)
               for name in ("measure_device", "measure_dtype", "measure_world")]
    mode = "--exhaustive" if exhaustive else "--scaling"
    unused += [(name, flag, f"{mode} keeps no study", exhaustive or scaling)
               for name, flag in (("storage", "--storage"), ("cold", "--no-warm-start"),
                                  ("repair_journal", "--repair-journal"))]
    unused += [(name, flag, "--exhaustive enumerates in this process", exhaustive)
               for name, flag in (("embedded_ray", "--ray"), ("address", "--address"), ("num_cpus", "--num-cpus"))]
    for name, flag, why, refused in unused:
        if refused and given(name):
            raise UserError(f"{flag}: {why}; leave it out")
    storage = ctx.params.get("storage")
    if storage:
        from sweeps.search.journal import journal_problem

        path = Path(storage).expanduser()
        blocking = next((p for p in path.parents if p.exists() and not p.is_dir()), None)
        if path.is_dir() or blocking is not None:
            why = "is a folder; name the journal file" if path.is_dir() else f"{blocking} is a file, not a folder"
            raise UserError(f"--storage {storage}: {why}")
        problem = journal_problem(path)
        if problem:
            raise UserError(f"--storage {storage}: {problem}; name a journal file, a new path or an empty file (if it "
                            "was this study's journal, move it away: the study is rebuilt from the lake's rows)")


def _exhaustive(out: Console, setup: SearchSetup, total: int) -> pd.DataFrame:
    """Every layout of the space costed; the best ``top`` printed, and why the first wins;
    returns the feasible layouts best first (or the Pareto front)."""
    from sweeps.search.results import exhaustive_frame, pareto, why_best
    from tasks.model.search.rows import OBJECTIVES

    frame = exhaustive_frame(setup)
    column = OBJECTIVES[setup.spec.objective][0][0]
    if len(OBJECTIVES[setup.spec.objective]) > 1:
        rows = frame.assign(status="ok")
        front = pareto(rows)
        out.print(layout_table(f"Exhaustive Pareto front of {total:,} layouts ({len(frame):,} feasible): "
                               "exposed-communication share vs tokens/s per device", front))
        explain_front(out, front, rows)
        return front
    out.print(layout_table(f"Exhaustive: best {setup.spec.top} of {total:,} layouts ({len(frame):,} feasible) by "
                           f"{column}", frame.head(setup.spec.top)))
    explain(out, why_best(frame, setup), frame)
    _trust(out, frame, setup)
    return frame


def _run_scaling(out: Console, setup: SearchSetup, lake: Lake, **options) -> None:
    from sweeps.search.results import fsdp_wins, layout_of
    from sweeps.sweep import run_scaling

    scaling = run_scaling(setup, lake, console=console(stderr=True), **options)
    report, rows = scaling.report, scaling.rows
    run_line(out, report, f"[bold]scaling {setup.spec.name}[/] on {setup.hardware.name}, stack {setup.spec.stack}")
    table = Table(title=f"Best layout per device count, global batch {setup.spec.scaling.global_batch} sequences "
                        f"({setup.hardware.name}, {setup.spec.space.size:,} layouts each)", title_justify="left")
    for name in ("model", "devices", "layout", "family", "tokens/s/device", "vs first", "exposed comm", "memory GB",
                 "latency s"):
        table.add_column(name, justify="left" if name in ("model", "layout", "family") else "right", no_wrap=True)
    for model, group in rows.groupby("model", sort=False):
        first = group[group["status"] == "ok"]["tokens_per_s_per_device"].head(1)
        for _, row in group.iterrows():
            if row["status"] != "ok":
                table.add_row(model, str(row["devices"]), "no layout fits", "", "", "", "", "", "")
                continue
            table.add_row(model, str(row["devices"]), layout_of(row).describe(), row["winner_family"],
                          f"{row['tokens_per_s_per_device']:,.0f}",
                          f"{row['tokens_per_s_per_device'] / first.iloc[0]:.0%}", f"{row['exposed_comm_share']:.1%}",
                          f"{row['memory_per_device_bytes'] / 1e9:.1f}", f"{row['latency_s']:.3f}")
    out.print(table)
    for line in fsdp_wins(rows):
        out.print(f"  {line}", soft_wrap=True)
    out.print(f"\nLake: {lake} (kind={SCALING}/sweep={setup.spec.name}/hardware={setup.hardware.name})", soft_wrap=True)


def _trust(out: Console, top: pd.DataFrame, setup: SearchSetup) -> None:
    """Whether the top layouts lie within the model's measured error, and a winner near the memory bound."""
    from sweeps.search.trust import memory_margin, trust

    for line in trust_lines(trust(top, setup), memory_margin(top, setup)):
        out.print(line, soft_wrap=True, highlight=False)


class _Progress:
    """``N/TOTAL trials`` on stderr after each batch, on one line that ``end`` closes."""

    def __init__(self, total: int) -> None:
        self.total, self.shown, self.err = total, False, console(stderr=True)

    def __call__(self, study, done: int) -> bool:
        self.err.print(f"  {done}/{self.total} trials", end="\r", highlight=False)
        self.shown = True
        return False

    def end(self) -> None:
        if self.shown:
            self.err.print()


def _run_study(out: Console, setup: SearchSetup, lake: Lake, **options) -> pd.DataFrame:
    """Run or resume the study, print its top layouts (or Pareto front) and return them, best first."""
    from sweeps.search import run_search
    from sweeps.search.front import front_gap
    from sweeps.search.results import optimum_gap, pareto, study_rows, top_layouts, why_best
    from tasks.model.search.rows import OBJECTIVES

    spec = setup.spec
    progress = _Progress(spec.trials)
    report = run_search(setup, lake, **options, on_batch=progress)
    progress.end()
    for note in report.notes:
        out.print(note, soft_wrap=True, highlight=False)
    out.print(f"{report.trials} trials: {report.completed_now} new, {report.completed_before} from before"
              + (f", {report.restored} rows the lake had lost recomputed" if report.restored else "")
              + (f", {report.told_from_lake} settled from the lake" if report.told_from_lake else "")
              + (f", {report.reasked} left running by a dead driver asked again" if report.reasked else "")
              + f"; {report.where}; {report.elapsed_s:.1f} s\nStudy: {report.storage}", soft_wrap=True)
    if report.warm_start:
        out.print(f"Warm start: the study's first {report.warm_start} trials were the best layouts of the space by "
                  f"the step model; the sampler ({setup.sampler}) chose the rest", soft_wrap=True)
    rows = study_rows(lake, setup.study_name)
    ok = rows[rows["status"] == "ok"]
    out.print(f"{len(rows)} trials in the lake: {len(ok)} feasible, {len(rows) - len(ok)} infeasible")
    if len(OBJECTIVES[spec.objective]) > 1:
        top = pareto(rows)
        out.print(layout_table("Pareto front: exposed-communication share vs tokens/s per device", top,
                               extra=("trial",)))
        front = front_gap(setup, rows)
        if front is not None:
            out.print(front_line(front), soft_wrap=True, highlight=False)
        explain_front(out, top, rows)
    else:
        top = top_layouts(rows, spec.objective)
        out.print(layout_table(f"Top {spec.top} layouts by {OBJECTIVES[spec.objective][0][0]}", top.head(spec.top),
                               extra=("trial",)))
        gap = optimum_gap(setup, rows, warm_start=report.warm_start)
        if gap is not None:
            out.print(optimum_line(gap), soft_wrap=True, highlight=False)
        explain(out, why_best(top, setup), top)
        _trust(out, top, setup)
    out.print(f"\nLake: {lake} (kind={SEARCH}/sweep={setup.study_name}/hardware={setup.hardware.name})", soft_wrap=True)
    if report.failures:
        first = report.failures[0]
        console(stderr=True).print(f"[bold red]{len(report.failures)} trials failed[/]: "
                                   f"{first['error_type']}: {first['message']}", soft_wrap=True)
        sys.exit(1)
    return top


def _measure(out: Console, setup: SearchSetup, lake: Lake, top: pd.DataFrame, *, device: str, dtype: str, world: int,
             **options) -> None:
    """Measure the ``top`` layouts' layer GEMMs and collectives and print them beside the projection."""
    from sweeps.sweep import measure_winners

    run = measure_winners(setup, lake, top, device=device, dtype=dtype, world=world, console=console(stderr=True),
                          **options)
    if run is None:
        out.print("Measure: no feasible layout to measure")
        return
    out.print()
    run_line(out, run.report, f"[bold]measure[/] {len(run.layouts)} layouts", unit="ROI points", new="measured now")
    rows = run.rows
    bad = rows[rows["status"] != "ok"]
    if len(bad):
        out.print(f"[yellow]{len(bad)} points not measured[/]: {bad['reason'].iloc[0]}", soft_wrap=True)
    measured_on = ", ".join(sorted(set(rows["device_model"].dropna()))) or device
    out.print(_comparison_table(run.comparison, setup, measured_on=measured_on, device=device, dtype=dtype,
                                world=world))


def _comparison_table(frame: pd.DataFrame, setup: SearchSetup, *, measured_on: str, device: str, dtype: str,
                      world: int) -> Table:
    table = Table(title=f"Projected vs measured, per layer and micro-batch (ms): projected = spec step model on "
                        f"{setup.hardware.name}, {setup.spec.dtype_bytes}-byte elements; measured = {measured_on} "
                        f"({device}, {dtype}) on this cluster's workers", title_justify="left")
    for name in ("layout", "GEMMs proj", "GEMMs meas", "x", "TP comm proj", "TP comm meas", "x ", "DP comm proj",
                 "DP comm meas", "x  "):
        table.add_column(name, justify="left" if name == "layout" else "right", no_wrap=True)

    def cells(row, part: str):
        projected, measured = row[f"projected_{part}"], row[f"measured_{part}"]
        ratio = f"{measured / projected:,.1f}" if projected > 0 and measured == measured else "-"
        return f"{1e3 * projected:.3f}", f"{1e3 * measured:.3f}" if measured == measured else "-", ratio

    for _, row in frame.iterrows():
        table.add_row(row["layout"], *cells(row, "gemm_s"), *cells(row, "tp_comm_s"), *cells(row, "dp_comm_s"))
    table.caption = (f"GEMMs: fwd, ig and wg of one device's layer share, each measured and summed. Collectives: "
                     f"the layer's TP ops and its DP/ZeRO ops at one micro-batch, at the exact message sizes, measured "
                     f"among "
                     f"{world} ranks (--measure-world), α-β fitted and scaled to the layout's group size by "
                     f"the ring formula. x = measured / projected.")
    return table
