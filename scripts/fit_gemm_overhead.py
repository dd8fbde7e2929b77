"""Fit the GEMM law's per-wave overhead to the fp16 K sweep and check it on the fp8 sweeps.

    python scripts/fit_gemm_overhead.py

The h100 profile's ``gemm_tile_overhead_us`` comes from here (``tasks.fit.gemm_overhead``):
minimax over the H800 SXM fp16 sweep of ``conf/data/gemm_k_sweeps.csv`` (an H800 SXM has the
H100 SXM's SMs, clocks and tensor peaks). The fp8 sweeps are not fitted: they check that the
overhead is a time, not a number of K steps (fp8 runs its K steps twice as fast). Prints the
fit and each point's error with the fitted figure and with the profile's own.
"""

from __future__ import annotations

from dataclasses import replace

from conf import CONF_DIR
from sweeps.config.compose import load_preset
from tasks.fit.gemm_overhead import fit_tile_overhead
from tasks.model.kernels.gemm_published import predict_row, read_gemm_rows
from tasks.validation.records import GEMM_SWEEPS_FILE

FITTED_DTYPE = "fp16"


def main() -> int:
    rows = read_gemm_rows(CONF_DIR / "data" / GEMM_SWEEPS_FILE, sweep=True)
    hw = load_preset("hardware", "h100")
    fitted = [r for r in rows if r.dtype == FITTED_DTYPE]
    fit = fit_tile_overhead(fitted, hw)
    print(f"fitted to {fit.points} {FITTED_DTYPE} points: gemm_tile_overhead_us = {fit.overhead_us:.2f} "
          f"(worst |error| {fit.worst_error:.1%}); the h100 profile holds {hw.gemm_tile_overhead_us}")
    at_fit = replace(hw, gemm_tile_overhead_us=fit.overhead_us)
    print(f"{'dtype':<5} {'row':>3} {'k':>6} {'published':>9} {'at fit':>8} {'error':>7}")
    for row in rows:
        predicted = predict_row(row, at_fit)[0]
        print(f"{row.dtype:<5} {row.row:>3} {row.shape[2]:>6} {row.tflops:>9.0f} {predicted:>8.0f} "
              f"{predicted / row.tflops - 1:>+7.1%}")
    for run in _runs(rows):
        if run[0].dtype == FITTED_DTYPE:
            continue
        errors = [predict_row(r, at_fit)[0] / r.tflops - 1 for r in run]
        print(f"{run[0].dtype} run from row {run[0].row}: errors {min(errors):+.1%} .. {max(errors):+.1%} "
              f"(spread {max(errors) - min(errors):.1%}: how far the K dependence misses; the level "
              f"is the ceiling's)")
    return 0


def _runs(rows):
    """The file's runs in order: each starts at a row naming its source, and the rows that
    follow it say 'same run'."""
    runs = []
    for row in rows:
        if row.source != "same run":
            runs.append([])
        runs[-1].append(row)
    return runs


if __name__ == "__main__":
    raise SystemExit(main())
