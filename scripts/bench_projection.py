"""Projection throughput of the cost model on one core.

    python scripts/bench_projection.py            # 1,048,576 configuration-scenarios
    python scripts/bench_projection.py --repeats 9

Builds a grid of H x SL x B x TP x DP x m (at least one million rows), pins the process
to one CPU, and times ``project_columns`` over it in cache-sized chunks, then the Arrow
path ``project_table`` that Ray tasks run. Prints rows per second (median and best).
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from sweeps.config import load_preset  # noqa: E402
from tasks.model.projection.grid import POINT_SCHEMA, project_columns, project_table  # noqa: E402


def grid() -> dict:
    """1,048,576 points: 64 H x 16 SL x 8 B x 8 TP x 4 DP x 4 m."""
    axes = dict(
        h=np.arange(1, 65) * 1024.0, sl=np.arange(1, 17) * 512.0, b=np.arange(1, 9, dtype=float),
        tp=2.0 ** np.arange(1, 9), dp=np.array([2.0, 4, 8, 16]), flop_vs_bw=np.array([1.0, 2, 3, 4]),
    )
    mesh = np.meshgrid(*axes.values(), indexing="ij")
    cols = {name: m.ravel() for name, m in zip(axes, mesh, strict=True)}
    n = cols["h"].size
    cols.update(heads=cols["h"] / 128, dtype_bytes=np.full(n, 2.0), dp_slowdown=np.ones(n),
                placed=np.zeros(n, bool))
    return cols


def time_columns(cols: dict, hw, chunk: int) -> float:
    n = cols["h"].size
    start = time.perf_counter()
    for lo in range(0, n, chunk):
        project_columns({k: v[lo:lo + chunk] for k, v in cols.items()}, hw)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--chunk", type=int, default=1 << 16, help="rows per vectorised call")
    parser.add_argument("--hardware", default="h100")
    args = parser.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    hw = load_preset("hardware", args.hardware)
    cols = grid()
    n = cols["h"].size
    time_columns(cols, hw, args.chunk)  # warm-up: first-touch page faults, imports
    times = [time_columns(cols, hw, args.chunk) for _ in range(args.repeats)]
    median, best = statistics.median(times), min(times)
    print(f"grid: {n:,} configuration-scenarios (64 H x 16 SL x 8 B x 8 TP x 4 DP x 4 m), hardware {hw.name}")
    print(f"cost model (NumPy columns, {args.chunk:,}-row chunks, 1 core): "
          f"median {n / median:,.0f} rows/s ({median:.3f} s), best {n / best:,.0f} rows/s")

    arrow_rows = 1 << 18
    table = pa.table({
        **{k: pa.array(cols[k][:arrow_rows].astype(np.int64))
           for k in ("h", "heads", "sl", "b", "tp", "dp", "dtype_bytes")},
        "flop_vs_bw": cols["flop_vs_bw"][:arrow_rows], "dp_slowdown": cols["dp_slowdown"][:arrow_rows],
        "key": pa.array([""] * arrow_rows), "label": pa.array([""] * arrow_rows),
        "links": pa.array(["ideal"] * arrow_rows),
    }).select(POINT_SCHEMA.names)
    project_table(table.slice(0, 4096), hw)
    arrow_times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        for lo in range(0, arrow_rows, args.chunk):
            project_table(table.slice(lo, args.chunk), hw)
        arrow_times.append(time.perf_counter() - start)
    median = statistics.median(arrow_times)
    print(f"task body (Arrow table in and out, {arrow_rows:,} rows, 1 core): median {arrow_rows / median:,.0f} rows/s")


if __name__ == "__main__":
    main()
