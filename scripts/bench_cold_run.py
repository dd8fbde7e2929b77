"""Where the time of a cold `commscale run` (the default config) goes, against Ray's own start.

    python scripts/bench_cold_run.py                       # 3 cold runs, Ray alone, then the parts
    python scripts/bench_cold_run.py --runs 5 -- sweep=smoke
    python scripts/bench_cold_run.py --tree /path/to/other/checkout --skip-parts   # another version

(a) Cold runs: ``commscale run`` as a new process each time, into an empty lake, with an
embedded Ray (its start and stop included) and the report written at the end: wall time
of each, and their median.

(b) Ray alone, the floor a run cannot go under: a new process that imports Ray, starts the
embedded cluster exactly as a run does (``sweeps.cluster.session.ray_session``: loopback,
token authentication, no dashboard, no autoscaler, log monitor or API server) and stops it;
with the CPU seconds Ray's processes (GCS, raylet, agents, idle workers) have used by the
time it has started. The target is a cold run within 1 s of this, medians of the same
session. ``--tree`` runs (a) and (b) from another checkout.

(c) The parts of one cold run, in a new process: the CLI's imports, the config, the job
(the grid and its keys), Ray's start, the execution on Ray (its workers' start-up
included), the lake's commits, Ray's stop (in the background while the summary and the
report are written; what is left of it when they are done), the summary, the report; wall
and CPU seconds, since this machine is shared. ``--no-report`` among the overrides leaves
the report out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RAY_ALONE = r'''
import json, time
began = time.perf_counter()
from sweeps.cluster.session import ray_session, wait_stopped
import psutil  # Ray ships it (ray/thirdparty_files), on the path once ray is imported
imported = time.perf_counter()
with ray_session() as session:
    started = time.perf_counter()
    ray_cpu = 0.0
    for process in psutil.Process().children(recursive=True):
        try:
            times = process.cpu_times()
            ray_cpu += times.user + times.system
        except psutil.Error:
            pass
wait_stopped()
stopped = time.perf_counter()
print(json.dumps({"import": imported - began, "start": started - imported, "stop": stopped - started,
                  "total": stopped - began, "ray_cpu": ray_cpu}))
'''

PARTS = r'''
import contextlib, json, sys, time
clock = lambda: (time.perf_counter(), time.process_time())
parts, began = {}, clock()
def timed(name, fn):
    def wrapper(*args, **kwargs):
        start = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            end = clock()
            wall, cpu = parts.get(name, (0.0, 0.0))
            parts[name] = (wall + end[0] - start[0], cpu + end[1] - start[1])
    return wrapper
start = clock()
import importlib
import sweeps.cli  # the whole CLI, as the command imports it
cli_run, run, sweep = (importlib.import_module(m) for m in ("sweeps.cli.run", "sweeps.run", "sweeps.sweep"))
end = clock()
parts["CLI imports"] = (end[0] - start[0], end[1] - start[1])
import sweeps.cluster.session as session_module
import sweeps.cluster.dispatch as dispatch
real_session = session_module.ray_session
@contextlib.contextmanager
def session(*args, **kwargs):
    start = clock()
    context = real_session(*args, **kwargs)
    value = context.__enter__()
    end = clock()
    parts["Ray start"] = (end[0] - start[0], end[1] - start[1])
    try:
        yield value
    finally:
        start = clock()
        context.__exit__(None, None, None)
        end = clock()
        parts["Ray stop (started; runs on meanwhile)"] = (end[0] - start[0], end[1] - start[1])
session_module.ray_session = session  # run_job imports it from the module when points are to run
cli_run.load_run_config = timed("config", cli_run.load_run_config)
sweep.projection_job = timed("job (grid, keys)", sweep.projection_job)
real_commit = run.Lake.commit
run.Lake.commit = timed("lake commits", real_commit)
dispatch.execute = timed("execute on Ray (workers included)", dispatch.execute)
import analysis.summary as summary
summary.render_summary = timed("summary", summary.render_summary)
cli_run.write_and_announce = timed("report", cli_run.write_and_announce)
try:
    cli_run.run.main(sys.argv[1:], standalone_mode=False)
finally:
    timed("Ray stop left at exit (it ran meanwhile)", session_module.wait_stopped)()
    end = clock()
    parts["total"] = (end[0] - began[0], end[1] - began[1])
    print("PARTS " + json.dumps(parts))
'''


def _env() -> dict:
    return {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}


def cold_runs(runs: int, overrides: list, tree: Path) -> list:
    """Wall seconds of ``runs`` cold `commscale run` processes of the checkout ``tree``."""
    walls = []
    for i in range(runs):
        with tempfile.TemporaryDirectory() as tmp:
            command = [sys.executable, "-c", "from sweeps.cli import main; main()", "run", *overrides,
                       "--lake", f"{tmp}/lake"]
            env = dict(_env(), COMMSCALE_REPORT=f"{tmp}/report", PYTHONPATH=str(tree))
            start = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tree)
            wall = time.perf_counter() - start
            if done.returncode:
                sys.exit(f"run {i + 1} failed:\n{done.stderr[-3000:]}")
            header = next((line for line in done.stdout.splitlines() if "points" in line), "")
            walls.append(wall)
            print(f"cold run {i + 1}: {wall:.2f} s wall | {header.strip()}")
    return walls


def ray_alone(runs: int, tree: Path) -> list:
    """Wall seconds of ``runs`` processes that import Ray, start it as a run of the checkout
    ``tree`` does and stop it."""
    walls, cpus = [], []
    for i in range(runs):
        done = subprocess.run([sys.executable, "-c", RAY_ALONE], capture_output=True, text=True,
                              env=dict(_env(), PYTHONPATH=str(tree)), cwd=tree, check=True)
        figures = json.loads(done.stdout.strip().splitlines()[-1])
        walls.append(figures["total"])
        cpus.append(figures["ray_cpu"])
        print(f"Ray alone {i + 1}: {figures['total']:.2f} s (import {figures['import']:.2f}, start "
              f"{figures['start']:.2f}, stop {figures['stop']:.2f}); Ray's processes {figures['ray_cpu']:.2f} CPU s")
    print(f"Ray's processes: median {statistics.median(cpus):.2f} CPU s a start")
    return walls


def parts(overrides: list) -> None:
    """Print the parts of one cold run, wall and CPU seconds."""
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(_env(), COMMSCALE_REPORT=f"{tmp}/report")
        done = subprocess.run([sys.executable, "-c", PARTS, *overrides, "--lake", f"{tmp}/lake"],
                              capture_output=True, text=True, env=env, cwd=ROOT)
    line = next((x for x in done.stdout.splitlines() if x.startswith("PARTS ")), None)
    if done.returncode or line is None:
        sys.exit(f"the parts run failed:\n{done.stderr[-3000:]}")
    figures = json.loads(line[len("PARTS "):])
    print("parts of one cold run (wall / CPU s):")
    for name, (wall, cpu) in figures.items():
        print(f"  {name:<36} {wall:6.2f} / {cpu:5.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--tree", type=Path, default=ROOT, help="checkout whose commscale to run (a, b)")
    parser.add_argument("--skip-parts", action="store_true")
    parser.add_argument("overrides", nargs="*")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; load average before: {os.getloadavg()[0]:.2f} (1 min)")
    walls = cold_runs(args.runs, args.overrides, args.tree.resolve())
    alone = ray_alone(args.runs, args.tree.resolve())
    run_s, ray_s = statistics.median(walls), statistics.median(alone)
    print(f"cold `commscale run {' '.join(args.overrides)}`: median {run_s:.2f} s (min {min(walls):.2f}, max "
          f"{max(walls):.2f}) over {len(walls)} runs; Ray alone (import, start, stop): median {ray_s:.2f} s; "
          f"the run costs {run_s - ray_s:+.2f} s beyond Ray (target: <= +1 s)")
    if not args.skip_parts:
        parts(args.overrides)


if __name__ == "__main__":
    main()
