"""Time `commscale report` over a lake of the default sweep (target: under 20 s on 2 cores).

    python scripts/bench_report.py              # builds the lake with `commscale run`, then 3 timed reports
    python scripts/bench_report.py --repeats 5 --keep /tmp/report-bench

Each report runs as its own `commscale report` process (cold: Python, DuckDB and
matplotlib imported anew), so the time is what a person waits for.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COMMSCALE = str(Path(sys.executable).with_name("commscale"))
TARGET_S = 20.0


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "COMMSCALE_REPORT")}
    result = subprocess.run([COMMSCALE, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"commscale {' '.join(args)} failed:\n{result.stderr}")
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="Build the lake and reports here and keep them.")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="commscale-bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    lake = work / "lake"
    if not lake.exists():
        _run("run", "--lake", str(lake), cwd=work)  # the default sweep (table2 on mi210x4)
    times, last = [], None
    for i in range(args.repeats):
        started = time.perf_counter()
        last = _run("report", "--lake", str(lake), "--out", str(work / f"report-{i}"), cwd=work)
        times.append(time.perf_counter() - started)
    figures = last.stdout.count("  wrote ")
    print(f"commscale report over the default sweep's lake ({os.cpu_count()} CPUs): {figures} figures; "
          f"median {statistics.median(times):.2f} s, best {min(times):.2f} s over {args.repeats} cold runs "
          f"(target < {TARGET_S:.0f} s: {'met' if max(times) < TARGET_S else 'NOT met'})")
    print(f"report: {work / f'report-{args.repeats - 1}' / 'report.html'}")


if __name__ == "__main__":
    main()
