"""The shape-aware GEMM law against published matmul throughput.

    python scripts/bench_gemm.py             # the table and its summary
    python scripts/bench_gemm.py --timing    # also the law's time on 1e5-element arrays

Each row of conf/data/gemm_efficiency.csv is predicted on the hardware profile
``tasks.model.kernels.gemm_published.PROFILE_OF_GPU`` names (``roofline.gemm_tflops`` at the row's
shape; 'best found' rows: the best of ``BEST_FOUND_SIDES`` cubed). Prints accelerator,
dtype, shape, published and predicted TFLOP/s, the signed error (predicted / published - 1)
and the row's target; then a summary line and the rows skipped (no profile). Exits 1 when
a row misses its target.
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

from conf import CONF_DIR
from sweeps.config.compose import load_preset
from tasks.model.kernels import roofline
from tasks.model.kernels.gemm_published import predict_row, read_gemm_rows

CSV = CONF_DIR / "data" / "gemm_efficiency.csv"


def _table() -> int:
    rows = read_gemm_rows(CSV)
    skipped = [r for r in rows if r.profile is None]
    misses, errors = [], []
    print(f"{'accelerator':<10} {'dtype':<5} {'shape (m x n x k)':<21} {'published':>9} {'predicted':>9} "
          f"{'error':>7}  target")
    for row in rows:
        if row.profile is None:
            continue
        predicted, shape = predict_row(row, load_preset("hardware", row.profile))
        error = predicted / row.tflops - 1.0
        shown = "x".join(str(s) for s in shape) + ("*" if row.shape is None else "")
        target = "none" if row.tolerance is None else f"{row.tolerance:.0%}"
        if row.tolerance is not None:
            errors.append(abs(error))
            if abs(error) > row.tolerance:
                misses.append(row)
                target += " MISSED"
        print(f"{row.gpu:<10} {row.dtype:<5} {shown:<21} {row.tflops:>9.1f} {predicted:>9.1f} {error:>+7.1%}  {target}")
    print(f"summary: {len(errors) - len(misses)} of {len(errors)} target rows within target "
          f"(MAMF 5%, A100 curve 10% from 2048^3); worst |error| {max(errors):.1%}, "
          f"mean |error| {np.mean(errors):.1%}; * = best of the shapes tried for a 'best found' row")
    print("skipped (no hardware profile): " + ", ".join(f"{r.gpu} {r.dtype}" for r in skipped))
    return 1 if misses else 0


def _timing(size: int = 100_000) -> None:
    hw = load_preset("hardware", "h100")
    rng = np.random.default_rng(0)
    m, n = rng.integers(1, 16384, size).astype(float), rng.integers(1, 16384, size).astype(float)
    k, batch = rng.integers(1, 16384, size).astype(float), rng.integers(1, 64, size).astype(float)
    best = min(_seconds(lambda: roofline.gemm_kernel_time(m, n, k, batch, hw)) for _ in range(20))
    print(f"gemm_kernel_time on {size:,} elements: {best * 1e3:.2f} ms, {best / size * 1e9:.1f} ns per element "
          f"(best of 20, one core)")


def _seconds(call) -> float:
    start = time.perf_counter()
    call()
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timing", action="store_true", help="also time the law on 1e5-element arrays")
    args = parser.parse_args()
    status = _table()
    if args.timing:
        _timing()
    return status


if __name__ == "__main__":
    sys.exit(main())
