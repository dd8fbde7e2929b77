"""Wall time of `commscale run` with the default config from a cold start.

    python scripts/bench_cold_run.py              # 3 runs, each with a new Ray and lake
    python scripts/bench_cold_run.py -- sweep=smoke

Each run is a fresh process that starts an embedded Ray (the start is included), projects
the default sweep into an empty lake and prints the summary. Prints each wall time.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    commscale = shutil.which("commscale") or str(Path(sys.executable).with_name("commscale"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    walls = []
    for i in range(args.runs):
        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            done = subprocess.run([commscale, "run", *args.overrides, "--lake", f"{tmp}/lake"],
                                  capture_output=True, text=True, env=env)
            wall = time.perf_counter() - start
            if done.returncode:
                sys.exit(f"run {i + 1} failed:\n{done.stderr}")
            header = next(line for line in done.stdout.splitlines() if "points" in line)
            walls.append(wall)
            print(f"run {i + 1}: {wall:.1f} s wall  | {header.strip()}")
    print(f"cold `commscale run {' '.join(args.overrides)}`: max {max(walls):.1f} s, min {min(walls):.1f} s "
          f"over {len(walls)} runs on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
