"""Lake speed: committing result rows, a DuckDB aggregate over a million rows, and what
checking the files against their commits costs a reader.

    python scripts/bench_lake.py

Rows are real projection rows (the cost model over a grid), keyed uniquely. Prints the
commit rate for 100,000 rows (one commit, and ten commits of 10,000), the time of a
grouped aggregate through `commscale query`'s views over a lake of 1,000,000 rows, and
that aggregate's first run in a fresh process with every file checked (size and sha256
against its commit) and without the check.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

from analysis.query import query
from sweeps.config import load_preset
from sweeps.lake import Lake
from tasks.model.projection.grid import POINT_SCHEMA, PROJECTION_SCHEMA, SCHEMA_VERSION, project_table


def projection_rows(n: int, offset: int, hw) -> pa.Table:
    rng = np.random.default_rng(offset)
    h = 1024 * rng.integers(1, 65, n)
    columns = {
        "key": pa.array([f"k{offset + i}" for i in range(n)]), "label": pa.array([""] * n),
        "h": h, "heads": h // 128, "sl": 512 * rng.integers(1, 17, n), "b": rng.integers(1, 9, n),
        "tp": 2 ** rng.integers(1, 9, n), "dp": np.full(n, 4), "dtype_bytes": np.full(n, 2),
        "flop_vs_bw": rng.choice([1.0, 2.0, 4.0], n), "dp_slowdown": np.ones(n), "links": pa.array(["ideal"] * n),
    }
    return project_table(pa.table(columns).cast(POINT_SCHEMA), hw)


def main() -> None:
    hw = load_preset("hardware", "h100")
    rows = projection_rows(100_000, 0, hw)
    assert rows.schema == PROJECTION_SCHEMA
    partition = {"sweep": "bench", "hardware": hw.name}
    with tempfile.TemporaryDirectory() as tmp:
        lake = Lake(f"{tmp}/one")
        start = time.perf_counter()
        lake.commit("projection", partition, rows, schema_version=SCHEMA_VERSION)
        one = time.perf_counter() - start
        lake = Lake(f"{tmp}/ten")
        start = time.perf_counter()
        for i in range(10):
            lake.commit("projection", partition, rows.slice(10_000 * i, 10_000), schema_version=SCHEMA_VERSION)
        ten = time.perf_counter() - start
        print(f"commit 100,000 rows: {one:.2f} s as one commit ({100_000 / one:,.0f} rows/s); "
              f"{ten:.2f} s as ten commits of 10,000 ({100_000 / ten:,.0f} rows/s)")

        lake = Lake(f"{tmp}/million")
        for i in range(10):
            lake.commit("projection", partition, projection_rows(100_000, 100_000 * i, hw),
                        schema_version=SCHEMA_VERSION)
        sql = ("SELECT tp, flop_vs_bw, count(*) AS n, avg(serialized_fraction) AS serialized, "
               "quantile_cont(overlap_percent, 0.9) AS overlap_p90 FROM projection GROUP BY tp, flop_vs_bw")
        times = []
        for _ in range(5):
            start = time.perf_counter()
            result = query(Lake(f"{tmp}/million"), sql)
            times.append(time.perf_counter() - start)
        assert sum(result.column("n").to_pylist()) == 1_000_000
        best, median = min(times), sorted(times)[len(times) // 2]
        print(f"DuckDB aggregate over 1,000,000 rows (views from the commit log included): "
              f"median {median:.3f} s, best {best:.3f} s ({1_000_000 / median:,.0f} rows/s)")
        cold = {check: _cold_query(f"{tmp}/million", sql, check) for check in (True, False)}
        print(f"the same aggregate in a fresh process: {cold[True]:.3f} s with every file checked against its "
              f"commit, {cold[False]:.3f} s without: the check costs {cold[True] - cold[False]:.3f} s "
              f"({_size_mb(f'{tmp}/million'):.0f} MB of data files hashed)")


def _cold_query(root: str, sql: str, check: bool) -> float:
    """Seconds of one query in a fresh process (median of three)."""
    code = ("import sys, time; from sweeps.lake import Lake; from sweeps.lake.views import query; "
            "t = time.perf_counter(); query(Lake(sys.argv[1]), sys.argv[2], check=sys.argv[3] == '1'); "
            "print(time.perf_counter() - t)")
    runs = [float(subprocess.run([sys.executable, "-c", code, root, sql, "1" if check else "0"], capture_output=True,
                                 text=True, check=True).stdout.split()[-1]) for _ in range(3)]
    return sorted(runs)[1]


def _size_mb(root: str) -> float:
    return sum(p.stat().st_size for p in Path(root).rglob("*.parquet")) / 1e6


if __name__ == "__main__":
    main()
