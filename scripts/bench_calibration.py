"""Operator-model figures: calibration time, held-out accuracy, profiling-cost ratio.

    python scripts/bench_calibration.py                      # this machine's CPU
    python scripts/bench_calibration.py --calibration h100   # on a GPU machine

1. `commscale calibrate calibration=NAME` into an empty lake, timed. The baseline, its
   variations and the fits are the strategy's cost: Ray start-up plus each fitted
   configuration's measurement (``wall_s`` of its baseline row) plus the fit; the
   held-out configurations are measured only to judge it.
2. Accuracy: the end-to-end error on the held-out configurations whose measured step
   lasts at least the preset's ``judged_from_ms`` (median and worst |error|).
3. Profiling cost for the study's Table 2 grid: `commscale run calibration=NAME`
   projects it (timed), and running every configuration end to end is estimated as
   start-up (measured: a fresh process that imports torch, builds the baseline layer and
   runs one step) plus (warm-up + profiled + plain steps) x the projected step time of
   each configuration; ``tasks.model.metrics.profiling_cost_ratio`` of the two.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

COMMSCALE = str(Path(sys.executable).with_name("commscale"))


def _commscale(*args: str) -> float:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    started = time.perf_counter()
    done = subprocess.run([COMMSCALE, *args], env=env, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - started
    if done.returncode != 0:
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calibration", default="cpu")
    parser.add_argument("--lake", default=None, help="lake to use (default: a new temporary one)")
    args = parser.parse_args()

    from analysis.query import frame
    from sweeps.config import load_run_config
    from sweeps.lake import Lake
    from tasks.fit.accuracy import error_summary, newest_fit
    from tasks.model.operators import STEP
    from tasks.model.metrics import profiling_cost_ratio

    config = load_run_config([f"calibration={args.calibration}"])
    spec = config.calibration
    lake_dir = args.lake or tempfile.mkdtemp(prefix="commscale-bench-calibration-")
    calibrate_wall = _commscale("calibrate", f"calibration={spec.name}", "--lake", lake_dir)
    lake = Lake(lake_dir)
    measured = frame(lake, f"SELECT role, wall_s FROM baseline WHERE calibration = '{spec.name}' AND status = 'ok'")
    held_out_s = float(measured.loc[measured["role"] == "held_out", "wall_s"].sum())
    fitted = measured[measured["role"] != "held_out"]
    strategy_calibration_s = calibrate_wall - held_out_s
    print(f"calibration {spec.name}: {len(measured)} configurations measured, fitted and judged in "
          f"{calibrate_wall:.1f} s wall (Ray start included); baseline, {len(fitted) - 1} variations and the fits: "
          f"{strategy_calibration_s:.1f} s (the {len(measured) - len(fitted)} held-out configurations took "
          f"{held_out_s:.1f} s more)")

    accuracy = newest_fit(frame(lake, f"SELECT * FROM accuracy WHERE calibration = '{spec.name}'"))
    summary = error_summary(accuracy)
    steps = accuracy[(accuracy["op_class"] == STEP) & accuracy["judged"]]
    if len(summary):
        s = summary.iloc[0]
        print(f"accuracy: {int(s['configs'])} held-out configurations with a measured step >= {spec.judged_from_ms:g} ms "
              f"(from {1e3 * steps['measured_s'].min():.0f} to {1e3 * steps['measured_s'].max():.0f} ms): "
              f"median |error| {100 * s['median_abs_error']:.1f}%, worst {100 * s['worst_abs_error']:.1f}% end to end")

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
    print(f"lake: {lake_dir}")


if __name__ == "__main__":
    main()
