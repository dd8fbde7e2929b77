"""Scale-out: the same sleep-bound sweep on one worker node, then on two, in one run.

    python scripts/bench_scale_out.py                 # 64 points of 1 s, 2 slots per node
    python scripts/bench_scale_out.py --points 96 --sleep-ms 250

Starts a loopback cluster (`harness.loopback.local.LocalCluster`: a head and worker nodes as
separate `ray start` processes, token authentication on). Each point needs one
`standin_gpu`, the custom resource standing in for a GPU; each worker node has two. The
speed-up is the makespan ratio (first point started to last point finished, from the
rows' own timestamps), and the driver's wall-clock ratio beside it (which also counts
joining the cluster, about the same both times). Points are chunked as `commscale` does.
"""

from __future__ import annotations

import os
import secrets

# Ray reads its authentication mode when imported: the token must be in place before.
os.environ.setdefault("RAY_AUTH_MODE", "token")
os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(16))

import argparse  # noqa: E402
import tempfile  # noqa: E402

from rich.console import Console  # noqa: E402

from analysis.query import query  # noqa: E402
from harness.loopback.local import LocalCluster  # noqa: E402
from sweeps.jobs.probe import probe_job  # noqa: E402
from sweeps.lake import Lake  # noqa: E402
from sweeps.run import run_job  # noqa: E402


def sweep(cluster: LocalCluster, lake: Lake, name: str, points: int, sleep_s: float) -> tuple:
    job = probe_job(name=name, points=points, sleep_s=sleep_s, fail={}, resources={"standin_gpu": 1.0},
                    cpus_per_point=0.0)
    report = run_job(job, lake, address=cluster.address, console=Console(stderr=True, quiet=True))
    assert report.committed == points, report
    (span,) = query(lake, f"SELECT max(finished) - min(started) AS span FROM probe WHERE sweep = '{name}'").column(
        "span").to_pylist()
    return span, report.elapsed_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--points", type=int, default=64)
    parser.add_argument("--sleep-ms", type=float, default=1000.0)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp, LocalCluster(state_dir=f"{tmp}/cluster", head_cpus=1) as cluster:
        cluster.start_head()
        cluster.add_worker(cpus=1, resources={"standin_gpu": 2}, name="w1")
        os.environ.update(cluster.env)
        lake = Lake(f"{tmp}/lake")
        one_span, one_wall = sweep(cluster, lake, "one-node", args.points, args.sleep_ms / 1000)
        cluster.add_worker(cpus=1, resources={"standin_gpu": 2}, name="w2")
        two_span, two_wall = sweep(cluster, lake, "two-nodes", args.points, args.sleep_ms / 1000)
    print(f"{args.points} points of {args.sleep_ms:g} ms, 2 standin_gpu per worker node:")
    print(f"  one worker node:  makespan {one_span:.2f} s, driver wall {one_wall:.2f} s")
    print(f"  two worker nodes: makespan {two_span:.2f} s, driver wall {two_wall:.2f} s")
    print(f"  speed-up: {one_span / two_span:.2f}x makespan, {one_wall / two_wall:.2f}x wall")


if __name__ == "__main__":
    main()
