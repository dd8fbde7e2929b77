"""Operator-model figures: calibration time, held-out accuracy, profiling-cost ratio.

    python scripts/bench_calibration.py                      # this machine's CPU
    python scripts/bench_calibration.py --load 2 --accuracy-only   # against 2 busy processes
    python scripts/bench_calibration.py --load-runs 1 --accuracy-only   # against a looping `commscale run`
    python scripts/bench_calibration.py --calibration h100   # on a GPU machine

1. `commscale calibrate calibration=NAME` into an empty lake, timed, with the load average
   (/proc/loadavg) before and after. The baseline, its variations and the fits are the
   strategy's cost: Ray start-up plus each fitted configuration's measurement (``wall_s``
   of its baseline row) plus the fit; the held-out configurations are measured only to
   judge it. ``--load N`` runs N busy Python processes (a competing CPU load) meanwhile,
   ``--load-runs N`` N loops of cold ``commscale run`` (each into a new lake, Ray started
   every time: bursts of load that come and go); both stopped afterwards.
2. Accuracy: the end-to-end error on the held-out configurations whose measured step
   lasts at least the preset's ``judged_from_ms`` and whose measurement is stable (median
   and worst |error|); how many configurations were re-measured, and how many stayed
   unstable (held out: not judged; fitted: left out where a stable one stands in).
3. Profiling cost for the study's Table 2 grid: `commscale run calibration=NAME`
   projects it (timed), and running every configuration end to end is estimated as
   start-up (measured: a fresh process that imports torch, builds the baseline layer and
   runs one step) plus (warm-up + profiled + plain steps) x the projected step time of
   each configuration; ``tasks.model.terms.metrics.profiling_cost_ratio`` of the two.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMSCALE = str(Path(sys.executable).with_name("commscale"))


BUSY = "while True: sum(i * i for i in range(10**6))"


def _run_loop(lake_dir: str) -> str:
    """A shell loop of cold `commscale run`s, each into a new lake under ``lake_dir``."""
    return (f'while true; do rm -rf "{lake_dir}"; '
            f'"{COMMSCALE}" run --no-report --lake "{lake_dir}" >/dev/null 2>&1; done')


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _commscale(*args: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    started = time.perf_counter()
    done = subprocess.run([COMMSCALE, *args], env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    not_fitted = [line for line in done.stdout.splitlines() if line.startswith("Not fitted")]
    if done.returncode == 1 and not_fitted:  # a calibration too unstable to fit: still a figure
        print(not_fitted[0])
    elif done.returncode != 0:
        sys.exit(f"commscale {' '.join(args)} failed:\n{done.stderr[-2000:]}")
    return wall


def _startup_s(spec) -> float:
    """A fresh process: import torch, build the baseline layer, run one step."""
    b = spec.baseline
    code = ("from tasks.measure.transformer_layer import LayerShape, build_layer; "
            f"build_layer(LayerShape({b.h}, {b.heads}, {b.sl}, {b.b}, {b.tp}), dtype='{spec.dtype}', "
            f"device='{spec.device}').step()")
    started = time.perf_counter()
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    return time.perf_counter() - started


def _calibrate(spec, lake_dir: str, load: int, load_runs: int) -> float:
    """`commscale calibrate` into ``lake_dir`` beside ``load`` busy processes and ``load_runs``
    loops of `commscale run`; its wall seconds."""
    load_before = _loadavg()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stop the busy processes when stopped
    busy = [subprocess.Popen([sys.executable, "-c", BUSY]) for _ in range(load)]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    loops = [subprocess.Popen(["bash", "-c", _run_loop(f"{lake_dir}-load-{i}")], env=env, start_new_session=True)
             for i in range(load_runs)]
    try:
        wall = _commscale("calibrate", f"calibration={spec.name}", "--lake", lake_dir)
    finally:
        for process in busy:
            process.kill()
            process.wait()
        for process in loops:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    print(f"load average (1, 5, 15 min) before: {load_before}, after: {_loadavg()}; "
          f"{load} busy processes and {load_runs} loops of `commscale run` of our own during the calibration")
    return wall


def _accuracy(lake, spec, measured) -> None:
    """Print the judged held-out error and the stability counts."""
    from analysis.query import frame
    from tasks.fit.accuracy import error_summary, newest_fit
    from tasks.model.projection.operators import STEP

    accuracy = newest_fit(frame(lake, f"SELECT * FROM accuracy WHERE calibration = '{spec.name}'"))
    summary = error_summary(accuracy)
    steps = accuracy[(accuracy["op_class"] == STEP) & accuracy["judged"]]
    if len(summary):
        s = summary.iloc[0]
        print(f"accuracy: {int(s['configs'])} held-out configurations judged (stable, step >= "
              f"{spec.judged_from_ms:g} ms, from {1e3 * steps['measured_s'].min():.0f} to "
              f"{1e3 * steps['measured_s'].max():.0f} ms): median |error| {100 * s['median_abs_error']:.1f}%, "
              f"worst {100 * s['worst_abs_error']:.1f}% end to end")
    else:
        print("accuracy: no held-out configuration judged")
    held = measured["role"] == "held_out"
    unstable = measured["status"] == "unstable"
    print(f"stability: {int((measured['attempts'] > 1).sum())} of {len(measured)} configurations re-measured; "
          f"unstable: {int((unstable & held).sum())} of {int(held.sum())} held-out (not judged), "
          f"{int((unstable & ~held).sum())} of {int((~held).sum())} fitted")


def _profiling_cost(lake, lake_dir: str, spec, strategy_calibration_s: float) -> None:
    """Project the Table 2 grid with the calibration and compare with running it end to end."""
    from analysis.query import frame
    from tasks.model.terms.metrics import profiling_cost_ratio

    project_wall = _commscale("run", f"calibration={spec.name}", "--lake", lake_dir)
    grid = frame(lake, "SELECT DISTINCT h, sl, b, tp, t_compute_s FROM projection "
                       f"WHERE calibration LIKE 'measured:{spec.name}@%' AND flop_vs_bw = 1 AND label = ''")
    startup = _startup_s(spec)
    iterations = spec.warmup + spec.steps + spec.plain_repeats
    strategy = strategy_calibration_s + project_wall
    ratio = profiling_cost_ratio(strategy, grid["t_compute_s"].to_numpy(), iterations, startup)
    end_to_end = len(grid) * startup + iterations * grid["t_compute_s"].sum()
    print(f"profiling cost, Table 2 grid ({len(grid)} configurations, one layer each on this device): strategy "
          f"{strategy:.0f} s (calibration {strategy_calibration_s:.0f} s + projection {project_wall:.1f} s) against "
          f"{end_to_end:.3g} s end to end ({startup:.1f} s start-up + {iterations} steps each; steps from "
          f"{grid['t_compute_s'].min():.3g} to {grid['t_compute_s'].max():.3g} s): ratio {ratio:,.0f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", default="cpu")
    parser.add_argument("--lake", default=None, help="lake to use (default: a new temporary one)")
    parser.add_argument("--load", type=int, default=0, help="busy processes to run during the calibration")
    parser.add_argument("--load-runs", type=int, default=0,
                        help="loops of cold `commscale run` to run during the calibration")
    parser.add_argument("--accuracy-only", action="store_true", help="skip the profiling-cost comparison (3.)")
    args = parser.parse_args()

    from analysis.query import frame
    from sweeps.config import load_run_config
    from sweeps.lake import Lake

    spec = load_run_config([f"calibration={args.calibration}"]).calibration
    lake_dir = args.lake or tempfile.mkdtemp(prefix="commscale-bench-calibration-")
    calibrate_wall = _calibrate(spec, lake_dir, args.load, args.load_runs)
    lake = Lake(lake_dir)
    measured = frame(lake, f"SELECT role, wall_s, status, attempts FROM baseline WHERE calibration = '{spec.name}' "
                           "AND status IN ('ok', 'unstable')")
    held_out_s = float(measured.loc[measured["role"] == "held_out", "wall_s"].sum())
    fitted = measured[measured["role"] != "held_out"]
    strategy_calibration_s = calibrate_wall - held_out_s
    print(f"calibration {spec.name}: {len(measured)} configurations measured, fitted and judged in "
          f"{calibrate_wall:.1f} s wall (Ray start included); baseline, {len(fitted) - 1} variations and the fits: "
          f"{strategy_calibration_s:.1f} s (the {len(measured) - len(fitted)} held-out configurations took "
          f"{held_out_s:.1f} s more)")
    _accuracy(lake, spec, measured)
    if not args.accuracy_only:
        _profiling_cost(lake, lake_dir, spec, strategy_calibration_s)
    print(f"lake: {lake_dir}")


if __name__ == "__main__":
    main()
