"""The co-design sampler against exhaustive enumeration, on the preset's reduced space.

    python scripts/bench_codesign.py               # the default preset, 5 seeds
    python scripts/bench_codesign.py --seeds 3 --budget 0.02

Enumerates the reduced space (every knob choice x every layout, costed by the step model),
takes its Pareto front of step time against cluster cost and the front's hypervolume up to
the nadir of the feasible points; then runs NSGA-II (the study ``commscale codesign`` runs,
in memory) on the same space for ``--budget`` of its points, and prints each seed's
hypervolume ratio at that budget and the evaluations it needed to reach 0.98, and their
medians. Target: at least 0.98 of the exhaustive hypervolume within 1 % of the evaluations.
Also prints the full space's size (target: at least 10^9 points).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import optuna

from sweeps.config.codesign import MIN_FULL_POINTS, load_codesign
from sweeps.search.codesign import codesign_sampler, optimize
from tasks.model.codesign.evaluate import exhaustive_points
from tasks.model.codesign.pareto import front_indices, hypervolume

TARGET_RATIO = 0.98
TARGET_BUDGET = 0.01


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="PRESET and FIELD=VALUE, as commscale codesign takes them")
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--budget", type=float, default=TARGET_BUDGET, help="share of the reduced space's points")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    setup = load_codesign(args.overrides)
    spec, problem = setup.spec, setup.problem
    knobs, space = spec.reduced.knobs, spec.reduced.space
    print(f"full space: {setup.full_size:,} points ({spec.knobs.size:,} hardware choices x {spec.space.size:,} layouts;"
          f" target >= {MIN_FULL_POINTS:.0e}: {'met' if setup.full_size >= MIN_FULL_POINTS else 'missed'})")
    started = time.perf_counter()
    points = exhaustive_points(problem, knobs, space)
    ok = np.isfinite(points["step_time_s"])
    step, cost = points["step_time_s"][ok], points["cost_usd"][ok]
    reference = (float(step.max()), float(cost.max()))
    exact = hypervolume(step, cost, reference)
    front = front_indices(step, cost)
    # A stricter yardstick: the front's own nadir, where the front's extremes add little area.
    tight = (float(step[front].max()) * 1.01, float(cost[front].max()) * 1.01)
    exact_tight = hypervolume(step, cost, tight)
    total = len(points["step_time_s"])
    print(f"reduced space: {total:,} points ({int(ok.sum()):,} feasible), enumerated in "
          f"{time.perf_counter() - started:.1f} s; front of {len(front_indices(step, cost))} points, hypervolume "
          f"{exact:.4g} (reference: the feasible points' nadir, {reference[0]:.3g} s, ${reference[1]:.3g})")
    budget = max(1, int(round(args.budget * total)))
    ratios, needed = [], []
    for seed in range(args.seeds):
        study = optuna.create_study(directions=["minimize", "minimize"],
                                    sampler=codesign_sampler(spec.population, seed))
        seen: list = []
        reached = [None]

        def record(trials, rows, seen=seen, reached=reached) -> None:
            seen.extend((r["step_time_s"], r["cost_usd"]) for r in rows if r["feasible"])
            found = np.asarray(seen).reshape(-1, 2)
            if reached[0] is None and len(found):
                if hypervolume(found[:, 0], found[:, 1], reference) / exact >= TARGET_RATIO:
                    reached[0] = trials[-1].number + 1

        started = time.perf_counter()
        optimize(study, problem, knobs, space, trials=budget, batch=min(spec.batch, budget), on_rows=record)
        found = np.asarray(seen).reshape(-1, 2)
        ratio = hypervolume(found[:, 0], found[:, 1], reference) / exact if len(found) else 0.0
        strict = hypervolume(found[:, 0], found[:, 1], tight) / exact_tight if len(found) else 0.0
        ratios.append(ratio)
        needed.append(reached[0])
        print(f"seed {seed}: {budget:,} evaluations ({budget / total:.1%} of the space) in "
              f"{time.perf_counter() - started:.1f} s: hypervolume ratio {ratio:.4f} ({strict:.4f} up to the front's "
              f"own nadir); reached {TARGET_RATIO} after {reached[0] if reached[0] else 'more than ' + str(budget)} "
              "evaluations")
    median = statistics.median(ratios)
    reached_all = [n for n in needed if n]
    print(f"median hypervolume ratio {median:.4f} at {budget:,} evaluations ({budget / total:.1%}), against "
          f"{total:,} for the enumeration; evaluations to {TARGET_RATIO}: "
          f"{statistics.median(reached_all) if len(reached_all) == len(needed) else 'not reached by every seed'} "
          f"(median); target >= {TARGET_RATIO} within {TARGET_BUDGET:.0%}: "
          f"{'met' if median >= TARGET_RATIO and args.budget <= TARGET_BUDGET else 'missed'}")


if __name__ == "__main__":
    main()
