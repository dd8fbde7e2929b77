"""``commscale search``: find the parallel layout that exposes least communication.

    commscale search [PRESET] [FIELD=VALUE ...] [--lake PATH] [--storage FILE] [--address ADDR]
    commscale search small --exhaustive          # enumerate the whole space instead (small spaces)
    commscale search scaling --scaling           # best layout per model and device count
    commscale search small --verify 3            # measure the top 3 layouts' kernels and collectives

Bad input (an unknown preset or field, a space in which no layout is feasible, bad --verify
options) ends with
exit status 2 before any work and without touching the lake.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import click
import numpy as np
import pandas as pd
from rich.console import Console
from rich.table import Table

from sweeps.errors import ConfigError
from sweeps.lake import Lake
from sweeps.lake.kinds import ROI

__all__ = ["search"]

_LAYOUT_COLUMNS = ("tp", "pp", "dp", "micro_batch", "schedule", "virtual_stages", "zero", "sequence_parallel", "recompute")


def _layout(row):
    from tasks.model.layout import Layout

    return Layout(**{name: (bool(row[name]) if name == "sequence_parallel" else
                            row[name] if isinstance(row[name], str) else int(row[name]))
                     for name in _LAYOUT_COLUMNS})


def _label(row) -> str:
    return _layout(row).describe()


def _layout_table(title: str, rows: pd.DataFrame, extra: Sequence[str] = ()) -> Table:
    table = Table(title=title, title_justify="left")
    for name in ("layout", "family", "step s", "exposed comm", "memory GB", "tokens/s/device", *extra):
        table.add_column(name, justify="left" if name in ("layout", "family") else "right", no_wrap=True)
    for _, row in rows.iterrows():
        table.add_row(_label(row), row["family"], f"{row['step_time_s']:.3f}", f"{row['exposed_comm_share']:.1%}",
                      f"{row['memory_per_device_bytes'] / 1e9:.1f}", f"{row['tokens_per_s_per_device']:,.0f}",
                      *(str(row[e]) for e in extra))
    return table


def _study_rows(lake: Lake, study: str) -> pd.DataFrame:
    from sweeps.lake.views import query

    return query(lake, f"SELECT * FROM search WHERE study = '{study}'").to_pandas()


def _pareto(rows: pd.DataFrame) -> pd.DataFrame:
    """Rows no other row beats on both exposed-comm share (lower) and tokens/s (higher)."""
    ok = rows[rows["status"] == "ok"].drop_duplicates(subset=list(_LAYOUT_COLUMNS))
    share, speed = ok["exposed_comm_share"].to_numpy(), ok["tokens_per_s_per_device"].to_numpy()
    dominated = [bool(np.any((share <= s) & (speed >= t) & ((share < s) | (speed > t)))) for s, t in zip(share, speed, strict=True)]
    return ok[~np.asarray(dominated, dtype=bool)].sort_values("exposed_comm_share")


def _exhaustive(out: Console, setup, top: int) -> None:
    from tasks.model.layout import RECOMPUTE_MODES, SCHEDULES, ZERO_MODES, families
    from tasks.model.search_rows import OBJECTIVES
    from tasks.model.space import exhaustive

    layouts, costs = exhaustive(setup.spec.space, setup.step_context)
    frame = pd.DataFrame({**layouts, **{k: v for k, v in costs.items() if k != "dp"}})
    frame = frame[frame["status_code"] == 0].copy()
    frame["schedule"] = [SCHEDULES[c] for c in frame["schedule"]]
    frame["zero_name"] = [ZERO_MODES[c] for c in frame["zero"]]
    frame["recompute"] = [RECOMPUTE_MODES[c] for c in frame["recompute"]]
    frame["family"] = families(frame["tp"], frame["pp"], frame["dp"], frame["zero"])
    frame["zero"] = frame["zero_name"]
    column, direction = OBJECTIVES[setup.spec.objective][0]
    frame = frame.sort_values(column, ascending=direction == "minimize")
    out.print(_layout_table(f"Exhaustive: best {top} of {len(layouts['tp']):,} layouts ({len(frame):,} feasible) by "
                            f"{column}", frame.head(top)))


def _run_scaling(out: Console, setup, lake: Lake, address: Optional[str], num_cpus: Optional[int], restart: bool) -> None:
    from sweeps.lake.views import read_rows
    from sweeps.run import run_job
    from sweeps.scaling import KIND, scaling_job

    job = scaling_job(setup)
    report = run_job(job, lake, address=address, num_cpus=num_cpus, chunk_size=1, restart=restart,
                     console=Console(stderr=True))
    out.print(f"[bold]scaling {setup.spec.name}[/] on {setup.hardware.name}: {report.planned} points, "
              f"{report.committed} new, {report.cached} already in the lake; {report.where}; {report.elapsed_s:.1f} s",
              soft_wrap=True)
    rows = read_rows(lake, KIND, job.points, status=None).sort_values(["model", "devices"])
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
            table.add_row(model, str(row["devices"]), _label(row), row["winner_family"],
                          f"{row['tokens_per_s_per_device']:,.0f}",
                          f"{row['tokens_per_s_per_device'] / first.iloc[0]:.0%}", f"{row['exposed_comm_share']:.1%}",
                          f"{row['memory_per_device_bytes'] / 1e9:.1f}", f"{row['latency_s']:.3f}")
    out.print(table)
    for model, group in rows[rows["status"] == "ok"].groupby("model"):
        fsdp = group[group["winner_family"] == "fsdp"]["devices"]
        out.print(f"  {model}: plain FSDP wins " + (f"up to {fsdp.max()} devices" if len(fsdp) else "at no device count")
                  + "; " + ", ".join(f"{f} at {d}" for d, f in zip(group["devices"], group["winner_family"], strict=True)),
                  soft_wrap=True)
    out.print(f"\nLake: {lake} (kind=scaling/sweep={setup.spec.name}/hardware={setup.hardware.name})", soft_wrap=True)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@click.option("--lake", "lake_root", default=None, help="Lake root (default: COMMSCALE_LAKE or ./lake).")
@click.option("--storage", default=None, help="The study's journal file (default: LAKE/_studies/STUDY.journal).")
@click.option("--address", default=None, help="Ray cluster address (default: RAY_ADDRESS, else an embedded local Ray).")
@click.option("--num-cpus", type=click.IntRange(min=1), default=None, help="CPUs of the embedded Ray (default: all).")
@click.option("--exhaustive", is_flag=True, help="Enumerate the whole space instead of searching (nothing is written).")
@click.option("--scaling", is_flag=True, help="The scaling view: best layout per model and device count.")
@click.option("--restart", is_flag=True, help="With --scaling: start the scaling sweep anew if its config changed.")
@click.option("--verify", "verify_top", type=int, default=None,
              help="Measure the top N layouts' layer GEMMs and collectives on the cluster's workers (ROI microbenchmarks).")
@click.option("--verify-device", default="cpu", show_default=True, help="Device of the --verify measurements: cpu or cuda.")
@click.option("--verify-dtype", default="fp32", show_default=True, help="Element type of the --verify GEMMs and collectives.")
@click.option("--verify-world", type=int, default=2, show_default=True,
              help="Ranks of the measured collectives (what the cluster can form); scaled to each layout's group size.")
def search(overrides: Sequence[str], lake_root: Optional[str], storage: Optional[str], address: Optional[str],
           num_cpus: Optional[int], exhaustive: bool, scaling: bool, restart: bool, verify_top: Optional[int],
           verify_device: str, verify_dtype: str, verify_world: int) -> None:
    """Search the parallel layout with least exposed communication (Optuna: TPE, or NSGA-II
    for objective=pareto), e.g. `search default devices=512 space.tp=[2,4,8]`.

    Run it again to resume the study at its trial count; raise `trials=` to extend it."""
    import optuna

    from sweeps.cli import DEFAULT_LAKE
    from sweeps.config import check_space, load_search

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if verify_top is not None:
        from sweeps.verify import check_verify

        check_verify(verify_top, verify_device, verify_dtype, verify_world)
        if exhaustive or scaling:
            raise ConfigError("--verify", verify_top, "verifies a search's winners; not with --exhaustive or --scaling")
    setup = load_search(overrides)
    lake = Lake(lake_root or DEFAULT_LAKE)
    out = Console(width=max(Console().width, 140))
    if scaling:
        _run_scaling(out, setup, lake, address, num_cpus, restart)
        return
    total, feasible = check_space(setup)  # bad input ends here, before any work
    spec = setup.spec
    out.print(f"[bold]search {setup.study_name}[/]: {setup.model.name} on {spec.devices} x {setup.hardware.name}, "
              f"global batch {spec.global_batch}; {total:,} layouts ({feasible:,} feasible); objective {spec.objective}, "
              f"sampler {setup.sampler}", soft_wrap=True)
    if exhaustive:
        _exhaustive(out, setup, spec.top)
        return
    top = _run_study(out, setup, lake, storage=storage, address=address, num_cpus=num_cpus, total=total)
    if verify_top is not None:
        _verify(out, setup, lake, top.head(verify_top), device=verify_device, dtype=verify_dtype, world=verify_world,
                address=address, num_cpus=num_cpus)


def _verify(out: Console, setup, lake: Lake, top: pd.DataFrame, *, device: str, dtype: str, world: int,
            address: Optional[str], num_cpus: Optional[int]) -> None:
    """Measure the ``top`` layouts' layer GEMMs and collectives and print them beside the projection."""
    import torch

    from sweeps.lake.views import read_rows
    from sweeps.run import run_job
    from sweeps.verify import compare, verify_job, verify_points

    layouts = [_layout(row) for _, row in top.iterrows()]
    if not layouts:
        out.print("Verify: no feasible layout to measure")
        return
    points = verify_points(setup, layouts, device=device, dtype=dtype, world=world, torch_version=torch.__version__)
    job = verify_job(setup, points, device=device, dtype=dtype, world=world)
    report = run_job(job, lake, address=address, num_cpus=num_cpus, console=Console(stderr=True))
    out.print(f"\n[bold]verify[/] {len(layouts)} layouts: {report.planned} ROI points, {report.committed} measured now, "
              f"{report.cached} already in the lake; {report.where}; {report.elapsed_s:.1f} s", soft_wrap=True)
    rows = read_rows(lake, ROI, points, status=None)
    bad = rows[rows["status"] != "ok"]
    if len(bad):
        out.print(f"[yellow]{len(bad)} points not measured[/]: {bad['reason'].iloc[0]}", soft_wrap=True)
    measured_on = ", ".join(sorted(set(rows["device_model"].dropna()))) or device
    frame = compare(setup, layouts, rows)
    table = Table(title=f"Projected vs measured, per layer and micro-batch (ms): projected = spec step model on "
                        f"{setup.hardware.name}, {setup.spec.dtype_bytes}-byte elements; measured = {measured_on} "
                        f"({device}, {dtype}) on this cluster's workers", title_justify="left")
    for name in ("layout", "GEMMs proj", "GEMMs meas", "x", "TP comm proj", "TP comm meas", "x ", "DP comm proj",
                 "DP comm meas", "x  "):
        table.add_column(name, justify="left" if name == "layout" else "right", no_wrap=True)

    def cells(part: str):
        projected, measured = frame_row[f"projected_{part}"], frame_row[f"measured_{part}"]
        ratio = f"{measured / projected:,.1f}" if projected > 0 and measured == measured else "-"
        return f"{1e3 * projected:.3f}", f"{1e3 * measured:.3f}" if measured == measured else "-", ratio

    for _, frame_row in frame.iterrows():
        table.add_row(frame_row["layout"], *cells("gemm_s"), *cells("tp_comm_s"), *cells("dp_comm_s"))
    table.caption = (f"GEMMs: fwd, ig and wg of one device's layer share, each measured and summed. Collectives: the "
                     f"layer's TP ops and its DP/ZeRO ops at one micro-batch, at the exact message sizes, measured among "
                     f"{world} ranks (--verify-world), α-β fitted and scaled to the layout's group size by "
                     f"the ring formula. x = measured / projected.")
    out.print(table)


def _run_study(out: Console, setup, lake: Lake, *, storage, address, num_cpus, total: int) -> pd.DataFrame:
    """Run or resume the study, print its top layouts (or Pareto front) and return them, best first."""
    from sweeps.search import run_search
    from tasks.model.search_rows import OBJECTIVES
    from tasks.model.space import best_index, exhaustive

    spec = setup.spec
    err = Console(stderr=True)
    report = run_search(setup, lake, storage=storage, address=address, num_cpus=num_cpus,
                        on_batch=lambda study, done: bool(err.print(f"  {done}/{spec.trials} trials", end="\r")))
    out.print(f"{report.trials} trials: {report.completed_now} new, {report.completed_before} from before"
              + (f", {report.told_from_lake} settled from the lake" if report.told_from_lake else "")
              + (f", {report.reasked} left running by a dead driver asked again" if report.reasked else "")
              + f"; {report.where}; {report.elapsed_s:.1f} s\nStudy: {report.storage}", soft_wrap=True)
    rows = _study_rows(lake, setup.study_name)
    ok = rows[rows["status"] == "ok"]
    out.print(f"{len(rows)} trials in the lake: {len(ok)} feasible, {len(rows) - len(ok)} infeasible")
    objectives = OBJECTIVES[spec.objective]
    if len(objectives) > 1:
        top = _pareto(rows)
        out.print(_layout_table("Pareto front: exposed-communication share vs tokens/s per device", top,
                                extra=("trial",)))
    else:
        column, direction = objectives[0]
        best = ok.sort_values(column, ascending=direction == "minimize").drop_duplicates(subset=list(_LAYOUT_COLUMNS))
        top = best
        out.print(_layout_table(f"Top {spec.top} layouts by {column}", best.head(spec.top), extra=("trial",)))
        if total <= 100_000 and len(best):
            _, costs = exhaustive(spec.space, setup.step_context)
            optimum = costs[column][best_index(costs, column, maximize=direction == "maximize")]
            gap = abs(best[column].iloc[0] - optimum) / abs(optimum)
            out.print(f"Exhaustive optimum of the space: {column} = {optimum:.6g}; the search's best is within "
                      f"{gap:.2%}", soft_wrap=True)
    out.print(f"\nLake: {lake} (kind=search/sweep={setup.study_name}/hardware={setup.hardware.name})", soft_wrap=True)
    if report.failures:
        Console(stderr=True).print(f"[bold red]{len(report.failures)} trials failed[/]: "
                                   f"{report.failures[0]['error_type']}: {report.failures[0]['message']}", soft_wrap=True)
        sys.exit(1)
    return top
