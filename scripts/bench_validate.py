"""The cost model's accuracy targets against the shipped published data, one figure each.

    python scripts/bench_validate.py

Predicts every row of conf/data with the models the layout search uses (``commscale
validate``'s own path: ``sweeps.jobs.validation``) and prints, per target of the model:
the figure reached, the target, and whether it is met.

- published runs (published_runs.csv): mean and max |error| over every run; every source listed;
- Korthikanti et al. Table 5 (the korthikanti22_t5_* rows): mean and max |error|;
- Korthikanti et al. Table 4 (layer_times.csv): the worst forward and backward |error| per variant;
- collective ladders: the worst |error| of all-reduce points from 1 MiB up;
- GEMM: the A100 square curve from 2048^3 up, and the maximum-achievable (MAMF) rows; the
  H800 K sweeps (no target: the fp16 sweep is where the wave overhead is fitted, the fp8
  sweeps show how far its K dependence holds where nothing was fitted);
- every run's memory judged as it ran, against the usable share and against the device's
  whole HBM: the shipped runs, Narayanan et al.'s ZeRO-3 table (published_runs_zero3.csv)
  and the held-out runs, each run over either named (tight: over the usable share only);
- the held-out runs (the holdout dataset, holdout_runs.csv: other frameworks, precisions and
  generations), per source: mean and max |error|, and each row's signed error (no target;
  nothing is fitted to them);
- Megatron-Bridge's mixture-of-experts runs (moe_bridge_runs.csv, written from moe_runs.csv by
  scripts/moe_runs_to_runs.py): per source, grouped as the held-out runs are by the rates each
  rests on, and mean, max and lean against the MoE targets;
- the headline (``tasks.validation.headline``): the shipped rows no figure was fitted to,
  the same with the fitted rows (each microbenchmark file's ``fitted_to`` column), and the
  held-out runs apart.
The whole-step model's speed (layouts per second on one core) is ``scripts/bench_search.py``'s.
"""

from __future__ import annotations

import statistics
from typing import Dict, List

from sweeps.jobs.validation import DATA_DIR, load_profiles, run_validation
from tasks.model.kernels.gemm_published import CURVE_FROM, read_gemm_rows
from tasks.validation.headline import headline_lines, headline_of
from tasks.validation.microbench_check import AT_SCALE_RANKS, JUDGED_FROM_BYTES, ladder_row_bytes, ladder_row_ranks
from tasks.validation.records import DATA_FILES, HELD_OUT, ValidationRecord, error_summary, lean
from tasks.validation.validate import ATTENTION_WORDS, NETWORK_WORDS, SM_HOLD_WORDS, SUSTAINED_WORDS, detail_parts


def _line(name: str, figure: str, met: bool, target: str) -> None:
    print(f"{name:44s} {figure:34s} target {target:24s} {'met' if met else 'MISSED'}")


def _in_sample(records: List[ValidationRecord]) -> str:
    """How many of ``records`` a figure was fitted to (each file's ``fitted_to`` column)."""
    return f"{sum(bool(r.fitted_to) for r in records)} of {len(records)} fitted"


def _lean(records: List[ValidationRecord]) -> float:
    """``records.lean`` of ``records``: positive where the model predicts faster than measured."""
    return lean([r.error for r in records], [r.unit for r in records])


def _per_source(runs: List[ValidationRecord], *, rows: bool = False) -> None:
    """Each source's count, mean and max |error| and lean (and, with ``rows``, every row's error)."""
    print(f"{'source':28s} {'n':>3s} {'mean |err|':>10s} {'max |err|':>10s} {'lean':>7s}")
    for source in sorted({r.source for r in runs}):
        mine = [r for r in runs if r.source == source]
        mean, worst = error_summary(mine)
        each = "   " + ", ".join(f"{r.model} {r.hardware} {r.error:+.0%}" for r in mine) if rows else ""
        print(f"{source:28s} {len(mine):3d} {mean:10.1%} {worst:10.1%} {_lean(mine):+7.1%}{each}")


def _runs(runs: List[ValidationRecord]) -> None:
    _per_source(runs)
    print()
    mean, worst = error_summary(runs)
    _line("published runs (all shipped)", f"mean {mean:.1%}, max {worst:.1%}, lean {_lean(runs):+.1%}",
          mean <= 0.05 and worst <= 0.12, "mean <= 5%, max <= 12%")
    mean, worst = error_summary([r for r in runs if r.source.startswith("korthikanti22_t5")])
    _line("Korthikanti Table 5 (8 runs)", f"mean {mean:.2%}, max {worst:.2%}", mean <= 0.0365 and worst <= 0.0887,
          "mean <= 3.65%, max <= 8.87%")


def _microbenchmarks(by: Dict[str, List[ValidationRecord]]) -> None:
    for row in sorted({r.row for r in by["layers"]}):
        pair = [r for r in by["layers"] if r.row == row]
        worst = error_summary(pair)[1]
        figure = ", ".join(f"{r.metric} {r.error:+.1%}" for r in pair)
        _line(f"Korthikanti Table 4: {pair[0].detail.split(' ', 2)[2]}", figure, worst <= 0.10, "each within 10%")
    sizes = ladder_row_bytes(DATA_DIR / DATA_FILES["collectives"])
    ranks = ladder_row_ranks(DATA_DIR / DATA_FILES["collectives"])
    judged = [r for r in by["collectives"] if r.model == "all_reduce" and sizes[r.row] >= JUDGED_FROM_BYTES]
    ladder = [r for r in judged if ranks[r.row] < AT_SCALE_RANKS]
    worst = error_summary(ladder)[1]
    _line("collective ladders: all-reduce from 1 MiB", f"{len(ladder)} points ({_in_sample(ladder)}), worst "
          f"{worst:.1%}", worst <= 0.15, "each within 15%")
    at_scale = [r for r in judged if ranks[r.row] >= AT_SCALE_RANKS]
    for source in sorted({r.source for r in at_scale}):
        errors = sorted(r.error for r in at_scale if r.source == source)
        median = statistics.median(errors)
        print(f"{'at scale: ' + source:44s} {len(errors)} points from 1 MiB, errors {errors[0]:+.1%} .. "
              f"{errors[-1]:+.1%}, median {median:+.1%}   (no target)")
    judged = {r.row for r in read_gemm_rows(DATA_DIR / DATA_FILES["gemm"]) if r.kind == "curve" and r.tolerance}
    curve = [r for r in by["gemm"] if r.source.endswith("curve") and r.row in judged]
    mamf = [r for r in by["gemm"] if r.source.endswith("MAMF")]
    worst = error_summary(curve)[1]
    _line(f"A100 square-GEMM curve from {CURVE_FROM}^3", f"{len(curve)} points ({_in_sample(curve)}), worst "
          f"{worst:.1%}", worst <= 0.10, "each within 10%")
    worst = error_summary(mamf)[1]
    _line("maximum-achievable GEMM rows", f"{len(mamf)} rows ({_in_sample(mamf)}), worst {worst:.1%}", worst <= 0.05,
          "each within 5%")
    sweep = [r for r in by["gemm"] if r.source.endswith("K sweep")]
    for dtype in sorted({r.model for r in sweep}):
        mine = [r for r in sweep if r.model == dtype]
        errors = [r.error for r in mine]
        print(f"{'GEMM K sweep, H800 ' + dtype:44s} {len(errors)} points, errors {min(errors):+.1%} .. "
              f"{max(errors):+.1%}   (no target; {_in_sample(mine)})")


def _feasible(by: Dict[str, List[ValidationRecord]], zero3: List[ValidationRecord]) -> None:
    """Every published run judged as it ran: the shipped runs, Narayanan et al.'s ZeRO-3 table
    and the held-out runs. A run over ``memory.usable_memory_bytes`` says so in its detail
    (``RunPrediction.describe_memory``): "usable" where it still fits the device's HBM (tight),
    only "of HBM" where it needs more than the device has (over)."""
    for name, runs in (("shipped runs", by["runs"]), ("ZeRO-3 table runs", zero3),
                       ("held-out runs", by[HELD_OUT])):
        tight = [r for r in runs if "GB usable" in r.detail]
        over = [r for r in runs if "GB of HBM" in r.detail and r not in tight]
        _line(f"{name} in usable memory", f"{len(runs) - len(tight) - len(over)} of {len(runs)}",
              not tight and not over, "every run")
        _line(f"{name} within HBM", f"{len(runs) - len(over)} of {len(runs)}", not over, "every run")
        for r in [*tight, *over]:
            print(f"{'':44s}   {'tight' if r in tight else 'over'}: row {r.row} {r.model} on {r.hardware}: "
                  f"{next(part for part in r.detail.split('; ') if ' GB' in part)}")


def main() -> None:
    profiles = load_profiles()
    result = run_validation(profiles).validation
    by = {d: [r for r in result.records if r.dataset == d] for d in ("runs", "layers", "collectives", "gemm", HELD_OUT)}
    _runs(by["runs"])
    _microbenchmarks(by)
    zero3 = run_validation(profiles, datasets=("runs",), runs_file=DATA_DIR / "published_runs_zero3.csv")
    _feasible(by, zero3.validation.records)
    print(f"\nskipped: {len(result.skipped)} rows (no hardware profile)")
    held_out(by[HELD_OUT])
    print("\nZeRO-3 runs (published_runs_zero3.csv: DeepSpeed, Narayanan et al. 2021 Table 2)")
    _per_source(zero3.validation.records, rows=True)
    together = by["runs"] + zero3.validation.records
    mean, worst = error_summary(together)
    _line("shipped runs with the ZeRO-3 table", f"mean {mean:.1%}, max {worst:.1%}, lean {_lean(together):+.1%}",
          mean <= 0.04 and worst <= 0.10, "mean <= 4%, max <= 10%")
    mixtures_of_experts(profiles)
    print("\nheadline")
    for line in headline_lines(headline_of(result.records)):
        print(f"  {line}")


def mixtures_of_experts(profiles) -> None:
    """Megatron-Bridge's published MoE runs (moe_bridge_runs.csv): per source and per row, and
    the MoE targets over all of them (nothing fitted to them; token-dropping rows skipped)."""
    moe = run_validation(profiles, datasets=("runs",), runs_file=DATA_DIR / "moe_bridge_runs.csv")
    runs = moe.validation.records
    print(f"\nmixture-of-experts runs (moe_bridge_runs.csv; {len(moe.validation.skipped)} token-dropping rows "
          "skipped)")
    _per_source(runs)
    _sustained(runs)
    mean, worst = error_summary(runs)
    _line("Megatron-Bridge MoE runs", f"mean {mean:.1%}, max {worst:.1%}, lean {_lean(runs):+.1%}",
          mean <= 0.10 and worst <= 0.20 and abs(_lean(runs)) <= 0.05, "mean <= 10%, max <= 20%, lean +-5%")


def held_out(runs: List[ValidationRecord]) -> None:
    """The held-out runs' errors, per source and per row (no target: never fitted to)."""
    print("\nheld-out runs (holdout_runs.csv; no target, nothing fitted to them)")
    _per_source(runs, rows=True)
    _sustained(runs)


def _sustained(runs: List[ValidationRecord]) -> None:
    """Runs (the held-out ones, the MoE ones) by the sustained rate their compute rests on, by
    the fused-attention rate, across nodes by the scale-out rate, and with DP collectives by
    where the SMs NCCL holds come from (each run's detail, ``validate.SUSTAINED_WORDS``,
    ``ATTENTION_WORDS``, ``NETWORK_WORDS`` and ``SM_HOLD_WORDS``, whatever kernel a bracket
    names after them): count, mean |error| and lean of each kind."""
    for words in [*SUSTAINED_WORDS.values(), *ATTENTION_WORDS.values(), *NETWORK_WORDS.values(),
                  *SM_HOLD_WORDS.values()]:
        mine = [r for r in runs if words in detail_parts(r.detail)]
        if mine:
            mean, worst = error_summary(mine)
            print(f"  {words:44s} {len(mine):2d} rows, mean {mean:.1%}, max {worst:.1%}, lean {_lean(mine):+.1%}")


if __name__ == "__main__":
    main()
