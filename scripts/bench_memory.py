"""Peak memory (RSS) of the driver of `commscale run` as the grid grows.

    python scripts/bench_memory.py                      # 10^5 and 10^6 points, run only
    python scripts/bench_memory.py --points 1000000 --report

Each size runs in a fresh process: `commscale run` of a grid of about that many points
(H x SL x B x TP x m, the study's sweep widened) into an empty lake on an embedded Ray, in
this process, and prints the process's peak resident memory (``ru_maxrss``: the driver
alone; Ray's workers are processes of their own). By default the report at the end of the
run is left out (its cost is its own: ``--report`` includes it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

#: 25 H x 10 SL x 8 B x 7 TP = 14,000 configurations (every TP divides every H's heads at a
#: head dimension of 32); m multiplies them.
_H = [2048 * k for k in range(1, 26)]
_SL = [512 * k for k in range(1, 11)]
_B = [1, 2, 3, 4, 5, 6, 7, 8]
_TP = [1, 2, 4, 8, 16, 32, 64]
_CHILD = "--child"


def overrides(points: int) -> list:
    """Sweep overrides of about ``points`` points (the grid times m values, highlights aside)."""
    grid = len(_H) * len(_SL) * len(_B) * len(_TP)
    multipliers = [round(1.0 + 0.1 * i, 1) for i in range(max(1, -(-points // grid)))]
    return ["sweep=table2", "sweep.name=memory", f"sweep.h={_H}", f"sweep.sl={_SL}", f"sweep.b={_B}",
            f"sweep.tp={_TP}", "sweep.head_dim=32", "sweep.overlap_tp=16", f"sweep.flop_vs_bw={multipliers}"]


def child(points: int, report: bool) -> None:
    """Run the sweep in this process and print one JSON line with its peak RSS."""
    import importlib
    import resource

    from sweeps.cli import main

    if not report:  # the report's writer, wherever the command module imports it from
        for name in ("sweeps.cli.run", "sweeps.cli"):
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            if hasattr(module, "write_and_announce"):
                module.write_and_announce = lambda *args, **kwargs: None
    lake = tempfile.mkdtemp(prefix="bench-memory-")
    started = time.perf_counter()
    try:
        main(["run", *overrides(points), "--lake", os.path.join(lake, "lake")], standalone_mode=False)
    except SystemExit as exc:
        if exc.code:
            raise
    peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"points": points, "peak_rss_mb": peak_kib / 1024, "wall_s": time.perf_counter() - started}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--report", action="store_true", help="include the report written at the end of the run")
    parser.add_argument(_CHILD, type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.report)
        return
    for points in args.points:
        command = [sys.executable, __file__, _CHILD, str(points)] + (["--report"] if args.report else [])
        done = subprocess.run(command, capture_output=True, text=True,
                              env={k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
        lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
        if done.returncode != 0 or not lines:
            print(f"{points:,} points: failed (exit {done.returncode})\n{done.stderr[-2000:]}")
            continue
        result = json.loads(lines[-1])
        print(f"{points:,} points: driver peak RSS {result['peak_rss_mb']:,.0f} MB, "
              f"{result['wall_s']:.1f} s{' (report included)' if args.report else ''}", flush=True)


if __name__ == "__main__":
    main()
