"""Dispatch overhead: a sweep of trivial points on a local Ray, per point amortised.

    python scripts/bench_dispatch.py                 # 10,000 points, 2 CPUs
    python scripts/bench_dispatch.py --points 50000

Each point does nothing (a probe that sleeps 0 s), so the time is the sweep machinery's:
planning, chunking into Ray tasks, retries armed, results committed to a fresh lake.
Prints ms per point including the embedded Ray's start, and excluding it.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from rich.console import Console

from sweeps.cluster.session import ray_session
from sweeps.jobs.probe import probe_job
from sweeps.lake import Lake
from sweeps.run import run_job


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=10_000)
    parser.add_argument("--num-cpus", type=int, default=2)
    args = parser.parse_args()
    start = time.perf_counter()
    with ray_session(None, args.num_cpus):
        pass
    ray_start = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as tmp:
        job = probe_job(name="dispatch", points=args.points, sleep_s=0.0, fail={}, resources={})
        report = run_job(job, Lake(f"{tmp}/lake"), num_cpus=args.num_cpus, console=Console(stderr=True, quiet=True))
        assert report.committed == args.points, report
    total = report.elapsed_s
    print(f"{args.points:,} trivial points on an embedded {args.num_cpus}-CPU Ray: {total:.2f} s wall, "
          f"{1000 * total / args.points:.3f} ms per point amortised (Ray start included); "
          f"{1000 * max(0.0, total - ray_start) / args.points:.3f} ms per point without the "
          f"{ray_start:.1f} s Ray start (measured apart)")


if __name__ == "__main__":
    main()
