"""``commscale calibrate``: a measured calibration of one device, and its measured error.

    commscale calibrate calibration=cpu                       # this machine's CPU
    commscale calibrate calibration=h100 --address ray://...  # on a cluster's GPU worker
    commscale calibrate calibration=h200 --measured baseline.parquet   # measured elsewhere
    commscale run calibration=cpu                             # project with it

Bad input (an unknown preset or field, a held-out configuration that is also fitted)
ends with exit status 2 before any work and without touching the lake.
"""

from __future__ import annotations

import sys
from typing import Optional, Sequence

import click
import pandas as pd
from rich.console import Console
from rich.table import Table

from sweeps.cli.options import address_option, allow_large_option, default_report, lake_option, no_report_option, \
    num_cpus_option, restart_option
from sweeps.cli.render import console, run_line
from sweeps.cli.report import write_and_announce
from sweeps.lake import Lake
from tasks.measure.stability import STATUS_UNSTABLE

__all__ = ["calibrate", "render_accuracy"]


def _pct(x: float) -> str:
    return "-" if pd.isna(x) else f"{100 * x:+.1f}%"


def _judged(row: dict) -> str:
    """The "judged" cell: yes, or why not (an unstable measurement, a step under the floor)."""
    if row["judged"]:
        judged = "yes"
    elif row.get("status") == STATUS_UNSTABLE:
        judged = "no, unstable"
    else:
        judged = "no, < floor"
    return judged + (", extrapolated" if row["extrapolated"] else "")


def render_accuracy(out: Console, accuracy: pd.DataFrame, title: str) -> None:
    """Held-out configurations, projected against measured: end to end, then per class;
    unstable ones (measured under interference, not judged) with their reasons."""
    from tasks.fit.accuracy import error_summary
    from tasks.model.projection.operators import STEP

    steps = accuracy[accuracy["op_class"] == STEP].sort_values("measured_s")
    table = Table(title=f"{title}: held-out configurations, end to end (plain step, not profiled)",
                  title_justify="left")
    for name in ("H", "heads", "SL", "B", "TP", "measured ms", "projected ms", "band ms", "error", "judged"):
        table.add_column(name, justify="right")
    for r in steps.to_dict("records"):
        table.add_row(*(str(r[k]) for k in ("h", "heads", "sl", "b", "tp")), f"{1e3 * r['measured_s']:.1f}",
                      f"{1e3 * r['projected_s']:.1f}", f"{1e3 * r['band_low_s']:.1f}-{1e3 * r['band_high_s']:.1f}",
                      _pct(r["rel_error"]), _judged(r))
    out.print(table)
    unstable = steps[steps["status"] == STATUS_UNSTABLE] if "status" in steps.columns else steps.iloc[:0]
    for r in unstable.to_dict("records"):
        out.print(f"  unstable, not judged: H={r['h']}, SL={r['sl']}, B={r['b']}, TP={r['tp']}: {r['reason']}",
                  soft_wrap=True)
    per_class = error_summary(accuracy, sorted(set(accuracy["op_class"]) - {STEP}))
    per_class = per_class.sort_values("median_abs_error", ascending=False)
    classes = Table(title="per operator class, judged configurations (|error|)", title_justify="left")
    for name in ("class", "median", "worst"):
        classes.add_column(name, justify="left" if name == "class" else "right")
    for op_class, r in per_class.iterrows():
        classes.add_row(op_class, f"{100 * r['median_abs_error']:.1f}%", f"{100 * r['worst_abs_error']:.1f}%")
    out.print(classes)
    summary = error_summary(accuracy)
    if len(summary):
        s = summary.iloc[0]
        out.print(f"End to end over {int(s['configs'])} judged held-out configurations ({len(unstable)} unstable, "
                  f"not judged): median |error| {100 * s['median_abs_error']:.1f}%, "
                  f"worst {100 * s['worst_abs_error']:.1f}%", soft_wrap=True)
    elif len(unstable):
        out.print(f"No held-out configuration judged: {len(unstable)} unstable", soft_wrap=True)


def _render_unstable(out: Console, measured: pd.DataFrame) -> None:
    """The configurations still unstable after their re-measurements that the accuracy table
    does not list: those of the fit (fitted all the same, if measured at all) and the held-out
    ones the time cap left unmeasured."""
    unstable = measured[measured["status"] == STATUS_UNSTABLE]
    for r in unstable.to_dict("records"):
        timed = not pd.isna(r["plain_step_s"])
        if r["role"] == "held_out" and timed:
            continue  # in the accuracy table
        varied = f", {r['varied']} varied" if r["role"] == "variation" else ""
        fate = "not judged" if r["role"] == "held_out" else \
            ("fitted with the fastest of its profiled steps" if timed else "not fitted")
        out.print(f"  unstable {r['role']}{varied} (H={r['h']}, SL={r['sl']}, B={r['b']}, TP={r['tp']}), {fate}: "
                  f"{r['reason']}", soft_wrap=True)


def _check_cpus(spec, num_cpus: Optional[int]) -> None:
    """An embedded Ray of fewer CPUs than one CPU measurement asks for could never run it:
    the calibration would wait out its time cap. Refused instead (``ConfigError``)."""
    from sweeps.errors import ConfigError
    from sweeps.jobs.calibration import cpus_per_measurement
    from tasks.device import is_cuda

    needed = cpus_per_measurement(spec)
    if num_cpus is not None and not is_cuda(spec.device) and needed > num_cpus:
        raise ConfigError("--num-cpus", num_cpus, f"is fewer than the {needed:g} CPUs each measurement of "
                                                  f"calibration {spec.name} takes; raise it or set "
                                                  f"calibration.threads={num_cpus}")


def _fit_measured(out: Console, spec, lake: Lake, table, path: str):
    """``--measured``: the calibration fitted and judged from measurements made elsewhere."""
    from sweeps.calibrate import calibrate_measured

    result = calibrate_measured(spec, lake, table)
    out.print(f"[bold]calibration {spec.name}[/] ({spec.device}, {spec.dtype}): {len(result.measured)} "
              f"configurations read from {path}, fitted and judged in {result.fit_s:.2f} s", soft_wrap=True)
    return result


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("overrides", nargs=-1)
@click.option("--measured", default=None, metavar="FILE",
              help="Fit and judge the baseline rows in FILE, measured elsewhere (scripts/device_check.py writes "
                   "them on a GPU machine without Ray), instead of measuring here.")
@lake_option
@address_option
@num_cpus_option
@restart_option
@no_report_option
@allow_large_option
def calibrate(*, overrides: Sequence[str], measured: Optional[str], lake_root: str, address: Optional[str],
              num_cpus: Optional[int], restart: bool, no_report: bool, allow_large: bool) -> None:
    """Measure a layer on a device, fit operator models, and judge them on held-out
    configurations (e.g. `calibrate calibration=cpu`). Then `run calibration=NAME` projects with it."""
    from sweeps.calibrate import calibrate as run_calibration, timed_rows
    from sweeps.config import load_run_config
    from sweeps.errors import ConfigError

    for item in overrides:
        key, _, value = item.partition("=")
        if key.partition(".")[0] != "calibration":
            raise ConfigError(key, value, "is not read by `commscale calibrate`, which measures its calibration "
                                          "preset only (calibration=NAME, calibration.FIELD=VALUE)")
    config = load_run_config(overrides, allow_large=allow_large)  # --allow-large: a preset file beyond 1 MiB
    spec = config.calibration
    if spec is None:
        raise ConfigError("calibration", None, "choose a calibration preset: calibration=NAME (commscale presets)")
    _check_cpus(spec, num_cpus)
    if measured is not None:
        from sweeps.calibrate import read_measured

        table = read_measured(spec, measured)  # checked before the lake is opened (exit 2)
    lake = Lake(lake_root)
    out = console()
    if measured is not None:
        result = _fit_measured(out, spec, lake, table, measured)
    else:
        result = run_calibration(spec, lake, address=address, num_cpus=num_cpus, restart=restart,
                                 console=console(stderr=True))
        run_line(out, result.report, f"[bold]calibration {spec.name}[/] ({spec.device}, {spec.dtype})",
                 unit="configurations", new="measured",
                 timing=f"measured in {result.measure_s:.1f} s, fitted and judged in {result.fit_s:.2f} s")
    report = result.report
    measured = result.measured
    if result.calibration_id is None:
        _render_unstable(out, measured)
        out.print(f"[red]Not fitted[/]: {result.not_fitted}; see the baseline rows' status and reason.",
                  soft_wrap=True)
        sys.exit(1)
    ok = timed_rows(measured)
    base = ok[ok["role"] == "baseline"]
    if len(base):
        b = base.iloc[0]
        out.print(f"Baseline (H={b['h']}, SL={b['sl']}, B={b['b']}, TP={b['tp']}) on {b['device_model']}: step "
                  f"{1e3 * b['plain_step_s']:.1f} ms, {100 * b['unattributed_kernel_s'] / b['step_s']:.1f}% of it in "
                  f"kernels outside every operator class, {100 * b['unattributed_s'] / b['step_s']:.1f}% outside "
                  "every region in all", soft_wrap=True)
    _render_unstable(out, measured)
    if result.accuracy is not None and len(result.accuracy):
        render_accuracy(out, result.accuracy, f"calibration {spec.name}@{result.calibration_id}")
    out.print(f"\nLake: {lake} (kind=baseline, kind=opmodel, kind=accuracy). Project with it:  "
              f"commscale run calibration={spec.name}", soft_wrap=True)
    write_and_announce(out, lake, default_report(), first_sweep=spec.name, skip=no_report)
    if report is not None and report.failures:
        console(stderr=True).print(f"[bold red]{len(report.failures)} configurations failed[/]; "
                                   f"commscale query \"SELECT * FROM failure WHERE run_id = '{report.run_id}'\"")
        sys.exit(1)
