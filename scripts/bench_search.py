"""Layout search benchmarks: sampler efficiency against the exhaustive optimum, and the
exhaustive enumeration's rate on one core.

    python scripts/bench_search.py                    # both, 5 seeds
    python scripts/bench_search.py --seeds 9 --skip-rate
    python scripts/bench_search.py --preset moe --skip-rate    # the mixture-of-experts search
    python scripts/bench_search.py --preset moe --skip-rate --seeds 10 --first-seed 5

(a) Search efficiency. The space of ``conf/search/scaling.yaml`` (15,840 layouts: SP is
no layout of its own at TP = 1) for Llama 3 70B on 512 H100 at 2,048 sequences. The
exhaustive reference gives the optimum step time; then, per seed, a TPE study runs
through the real driver (``sweeps.search``, journal file storage, lake rows), evaluating
trials in this process, without the warm start (the sampler's own efficiency is the
question), until a completed trial comes within 1% of the optimum or 10% of the space is
spent. Prints the evaluations each seed needed, and the median. ``--preset moe``: the ``moe``
search (DeepSeek-V3 on 1,024 H100 over EP, ETP, the dispatcher, TP, PP, schedule, micro-batch,
ZeRO and recomputation, 8,640 layouts) as it ships, with a budget of 5% of its space.

(b) Enumeration rate. The same space enumerated and costed (``tasks.model.search.space.exhaustive``)
on one pinned core; layouts per second, median of repeats, and the page faults a call takes
(``tasks.model.search.heap``: about 2,300 a call where the process hands its heap back).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import optuna  # noqa: E402

from sweeps.lake import Lake  # noqa: E402
from sweeps.search import local_evaluator, run_search  # noqa: E402
from sweeps.search.params import feasible_trials  # noqa: E402
from sweeps.config import load_search  # noqa: E402
from tasks.model.search.space import best_index, exhaustive  # noqa: E402

TOLERANCE = 0.01
#: Each benchmarked search: its preset's overrides, and the share of its space it may spend.
PRESETS = {"scaling": (["scaling", "devices=512", "global_batch=2048"], 0.10), "moe": (["moe"], 0.05)}


def setup_for(seed: int, trials: int, preset: str = "scaling"):
    return load_search([*PRESETS[preset][0], "name=bench", f"seed={seed}", f"trials={trials}", "batch=8"])


def efficiency(seeds: int, preset: str = "scaling", first_seed: int = 0) -> None:
    share = PRESETS[preset][1]
    base = setup_for(0, 1, preset)
    layouts, costs = exhaustive(base.spec.space, base.step_context)
    size = len(layouts["tp"])
    best = costs["step_time_s"][best_index(costs)]
    budget = int(size * share)
    print(f"(a) space: {size:,} layouts ({int((costs['status_code'] == 0).sum()):,} feasible), "
          f"{base.model.name} on {base.spec.devices} x {base.hardware.name}; exhaustive optimum {best:.4f} s/step; "
          f"budget {budget:,} evaluations ({share:.0%})")
    needed = []
    for seed in range(first_seed, first_seed + seeds):
        setup = setup_for(seed, budget, preset)
        with tempfile.TemporaryDirectory() as root:
            reached = {}

            def within(study: optuna.Study, done: int, reached: dict = reached) -> bool:
                close = [t.number for t in feasible_trials(study) if t.value <= best * (1 + TOLERANCE)]
                if close and "at" not in reached:
                    reached["at"] = min(close) + 1
                return "at" in reached

            started = time.perf_counter()
            report = run_search(setup, Lake(root), evaluator=local_evaluator(setup), warm_start=False,
                                on_batch=within)
            elapsed = time.perf_counter() - started
        at = reached.get("at")
        needed.append(at if at is not None else float("inf"))
        print(f"  seed {seed}: {'within 1% after ' + str(at) + ' evaluations' if at else 'not within 1%'} "
              f"({report.completed_now} run, {elapsed:.1f} s)")
    median = statistics.median(needed)
    print(f"  median evaluations to within 1%: {median:g} = {median / size:.2%} of the space "
          f"(target <= {share:.0%}: {'met' if median <= budget else 'missed'})")


def rate(repeats: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    setup = setup_for(0, 1)
    exhaustive(setup.spec.space, setup.step_context)  # warm-up: imports, the heap's first growth
    times, faults = [], resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(repeats):
        started = time.perf_counter()
        layouts, _ = exhaustive(setup.spec.space, setup.step_context)
        times.append(time.perf_counter() - started)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / repeats
    n = len(layouts["tp"])
    print(f"(b) exhaustive enumeration + step model, one core: {n / statistics.median(times):,.0f} layouts/s "
          f"(median of {repeats}; best {n / min(times):,.0f}; {n:,} layouts per call; {faults:,.1f} page faults "
          f"a call; target >= 1,000,000)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--first-seed", type=int, default=0, help="the first of the seeds (0, 1, ... by default)")
    parser.add_argument("--repeats", type=int, default=21)
    parser.add_argument("--skip-efficiency", action="store_true")
    parser.add_argument("--skip-rate", action="store_true")
    parser.add_argument("--preset", choices=sorted(PRESETS), default="scaling",
                        help="the search whose efficiency is measured")
    args = parser.parse_args()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if not args.skip_rate:
        rate(args.repeats)
    if not args.skip_efficiency:
        efficiency(args.seeds, args.preset, args.first_seed)


if __name__ == "__main__":
    main()
