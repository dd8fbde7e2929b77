"""Where the time of a default ``commscale search`` goes, cold, and how far its best is from
the exhaustive optimum.

    python scripts/bench_startup_search.py                      # 5 cold runs, then the parts
    python scripts/bench_startup_search.py --runs 3 --ray       # the parts also with an embedded Ray
    python scripts/bench_startup_search.py --tree /path/to/other/checkout --skip-parts   # another version

(a) Cold runs. ``commscale search`` (the default preset: Llama 3 70B on 256 H100 under
megatron-core-2024, 200 TPE trials) as a new process each time, into a fresh lake: wall
and CPU time (the process's user and system seconds: on a loaded shared host, the wall
time an idle one would take), min and median, and the gap to the exhaustive optimum the
command prints. ``--tree`` runs the command of another
checkout (its ``sweeps`` package first on the path), for a before/after in one session.

(b) The parts, in one fresh process: imports (the CLI, then Optuna and the search), loading
the preset and enumerating the space (``check_space``), Ray's start and stop (with
``--ray`` only: the default runs no Ray), the trials (``run_search``: ask, evaluate,
commit, tell), reading the results back (the lake's rows, the top layouts, the exhaustive
optimum, why the best wins), and the trust line (the validation's predictions of the
published runs on the device class); the total, and the gap. CPU seconds beside wall
seconds, since this machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PARTS = r'''
import json, sys, time, tempfile
clock = lambda: (time.perf_counter(), time.process_time())
parts, last = {}, clock()
def mark(name):
    global last
    now = clock()
    parts[name] = (now[0] - last[0], now[1] - last[1])
    last = clock()
import sweeps.cli
mark("imports: the CLI")
import optuna
from sweeps.config import check_space, load_search
from sweeps.lake import Lake
from sweeps.search import run_search
from sweeps.search.results import optimum_gap, study_rows, top_layouts, why_best
from sweeps.search.trust import memory_margin, trust
optuna.logging.set_verbosity(optuna.logging.WARNING)
mark("imports: Optuna, the search")
setup = load_search([])
total, feasible = check_space(setup)
mark(f"preset + enumeration ({total:,} layouts)")
if RAY:
    from sweeps.cluster.session import ray_session
    with ray_session():
        pass
    mark("Ray start and stop")
lake = Lake(tempfile.mkdtemp())
report = run_search(setup, lake)
mark(f"{report.completed_now} trials ({report.where.split(' (')[0]})")
rows = study_rows(lake, setup.study_name)
top = top_layouts(rows, setup.spec.objective)
gap = optimum_gap(setup, rows, warm_start=report.warm_start)
why_best(top, setup)
mark("results: rows read back, optimum, why")
trust(top, setup), memory_margin(top, setup)
mark("trust: the model's error on published runs")
print(json.dumps({"parts": parts, "gap": gap.gap, "sampled_gap": gap.sampled_gap}))
'''


def cold_runs(runs: int, tree: Path) -> None:
    code = f"import sys; sys.path.insert(0, {str(tree)!r}); from sweeps.cli import main; main()"
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    walls, cpus, gaps = [], [], []
    for _ in range(runs):
        with tempfile.TemporaryDirectory() as root:
            started, before = time.perf_counter(), resource.getrusage(resource.RUSAGE_CHILDREN)
            done = subprocess.run([sys.executable, "-c", code, "search", "--lake", f"{root}/lake"], env=env,
                                  capture_output=True, text=True, timeout=600)
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        if done.returncode != 0:
            raise SystemExit(done.stderr)
        gaps.append(re.search(r"within ([\d.]+)%", done.stdout).group(1))
    print(f"(a) cold `commscale search` ({tree}): wall {min(walls):.2f} s min, {statistics.median(walls):.2f} s "
          f"median of {runs} ({', '.join(f'{w:.2f}' for w in walls)}); CPU {min(cpus):.2f} s min, "
          f"{statistics.median(cpus):.2f} s median; gap to the exhaustive optimum "
          f"{', '.join(g + '%' for g in gaps)}; target <= 5 s within 1%")


def parts(ray: bool) -> None:
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    done = subprocess.run([sys.executable, "-c", f"RAY = {ray}\n" + PARTS], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise SystemExit(done.stderr)
    found = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"(b) the parts of one cold process{' with an embedded Ray' if ray else ''} (wall s / CPU s):")
    for name, (wall, cpu) in found["parts"].items():
        print(f"    {name:<48} {wall:6.2f} / {cpu:5.2f}")
    wall = sum(w for w, _ in found["parts"].values())
    cpu = sum(c for _, c in found["parts"].values())
    sampled = found["sampled_gap"]
    print(f"    {'total':<48} {wall:6.2f} / {cpu:5.2f}\n    gap to the exhaustive optimum {found['gap']:.2%}"
          + ("" if sampled is None else f" (the sampler's own trials, past the warm start: {sampled:.2%})"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--tree", type=Path, default=ROOT, help="The checkout whose command (a) runs.")
    parser.add_argument("--ray", action="store_true", help="(b) also with an embedded Ray's start and stop.")
    parser.add_argument("--skip-parts", action="store_true")
    args = parser.parse_args()
    if args.runs:
        cold_runs(args.runs, args.tree.resolve())
    if not args.skip_parts:
        parts(False)
        if args.ray:
            parts(True)


if __name__ == "__main__":
    main()
