"""Time `commscale report`: cold, idle (the lake unchanged), and after one new sweep.

    python scripts/bench_report.py                  # builds the lakes with `commscale run`, then times reports
    python scripts/bench_report.py --repeats 5 --keep /tmp/report-bench

Prints, each as the wall time of its own `commscale report` process (cold: Python, DuckDB
and pandas imported anew; what a person waits for) and the report's own time inside it:

- cold: the first report of a lake of one sweep (every figure drawn);
- idle, one sweep and five sweeps: the same report again over an unchanged lake (target
  <= 2 s for five sweeps); then once with another --first, which rewrites the page but
  draws no figure;
- after one new sweep: the report of five sweeps after the fifth was run (only its
  figures drawn);
- an idle `commscale run` of a sweep the lake holds whole, over one sweep and over five:
  no Ray starts, the summary is printed and the report it writes is kept as it was;
- the page of five sweeps: its size (bound: 2 MB) and how many figures it embeds and links.

The lakes are built with the CLI (`commscale run sweep.name=s1 --num-cpus 1`, then
`hardware=b200`, `sweep=casestudy`, `sweep=smoke`, `hardware=h100`) in a scratch folder.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Tuple

COMMSCALE = str(Path(sys.executable).with_name("commscale"))
TARGET_IDLE_S = 2.0
SWEEPS = [["sweep.name=s1"], ["sweep.name=s2", "hardware=b200"], ["sweep=casestudy"], ["sweep=smoke"],
          ["sweep.name=s3", "hardware=h100"]]


def _run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS",)}
    env["COMMSCALE_REPORT"] = str(cwd / "run-report")  # the report `run` writes is not the one timed
    result = subprocess.run([COMMSCALE, *args], cwd=cwd, env=env, capture_output=True, text=True)
    if result.returncode:
        sys.exit(f"commscale {' '.join(args)} failed:\n{result.stderr}")
    return result


def _report(lake: Path, out: Path, *extra: str) -> Tuple[float, float, str]:
    """(process wall s, the report's own s, its figures line) of one `commscale report`."""
    started = time.perf_counter()
    done = _run("report", "--lake", str(lake), "--out", str(out), *extra, cwd=lake.parent)
    wall = time.perf_counter() - started
    line = done.stdout.strip().splitlines()[-1]
    inside = float(re.search(r"; ([0-9.]+) s\)$", line).group(1))
    figures = re.search(r"\((\d+ figures: \d+ drawn, \d+ unchanged)", line).group(1)
    return wall, inside, figures


def _print(what: str, timings: List[Tuple[float, float, str]]) -> None:
    walls, insides = [t[0] for t in timings], [t[1] for t in timings]
    many = f"median of {len(timings)}: " if len(timings) > 1 else ""
    print(f"{what:<44} {many}{statistics.median(walls):6.2f} s wall, {statistics.median(insides):5.2f} s in the "
          f"report ({timings[-1][2]})")


def _sweep(lake: Path, overrides: List[str]) -> None:
    _run("run", *overrides, "--lake", str(lake), "--num-cpus", "1", cwd=lake.parent)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="Build the lakes and reports here and keep them.")
    args = parser.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="commscale-bench-report-"))
    (work / "one").mkdir(parents=True, exist_ok=True)
    (work / "five").mkdir(parents=True, exist_ok=True)
    one, five = work / "one" / "lake", work / "five" / "lake"
    print(f"commscale report ({os.cpu_count()} CPUs; lakes under {work})")
    if not one.exists():
        _sweep(one, SWEEPS[0])
    for folder in (work / "one" / "cold", work / "five" / "report"):
        shutil.rmtree(folder, ignore_errors=True)  # every report below starts from no former report
    _print("cold, one sweep (table2 on mi210x4)", [_report(one, work / "one" / "cold")])
    _print("idle, one sweep", [_report(one, work / "one" / "cold") for _ in range(args.repeats)])
    if not five.exists():
        for overrides in SWEEPS[:4]:
            _sweep(five, overrides)
    if " s3 " in _run("status", "--lake", str(five), cwd=five.parent).stdout:
        print("(the kept lake holds s3 already: no report after one new sweep)")
    else:
        _report(five, work / "five" / "report")  # the report of four sweeps
        _sweep(five, SWEEPS[4])
        _print("after one new sweep (s3 on h100), five sweeps", [_report(five, work / "five" / "report")])
    idle = [_report(five, work / "five" / "report") for _ in range(args.repeats)]
    _print("idle, five sweeps (page kept)", idle)
    _print("idle, five sweeps, --first s1 (page rewritten)", [_report(five, work / "five" / "report", "--first", "s1")])
    for label, lake, overrides in (("one sweep", one, SWEEPS[0]), ("five sweeps", five, SWEEPS[3])):
        walls = []
        for _ in range(args.repeats):
            started = time.perf_counter()
            done = _run("run", *overrides, "--lake", str(lake), "--num-cpus", "1", cwd=lake.parent)
            walls.append(time.perf_counter() - started)
        said = next(line for line in done.stdout.splitlines() if line.startswith("Report:"))
        print(f"{'idle `commscale run` (nothing to compute), ' + label:<44} median of {len(walls)}: "
              f"{statistics.median(walls):6.2f} s wall, no Ray started; {said[said.find('('):]}")
    floor = []
    for _ in range(args.repeats):
        started = time.perf_counter()
        _run("report", "--help", cwd=work)
        floor.append(time.perf_counter() - started)
    print(f"{'floor: `commscale report --help`':<44} median of {len(floor)}: {statistics.median(floor):6.2f} s wall "
          "(starting the CLI; the idle report's wall time less this is the report's own)")
    worst = max(t[0] for t in idle)
    print(f"target: idle re-run over five sweeps <= {TARGET_IDLE_S:.0f} s wall: "
          f"{'met' if worst <= TARGET_IDLE_S else 'NOT met'} (worst {worst:.2f} s)")
    page = work / "five" / "report" / "report.html"
    text = page.read_text(encoding="utf-8")
    embedded, linked = text.count("<img src='data:"), text.count("<img src='figures/")
    print(f"page of five sweeps: {page.stat().st_size / 1e6:.2f} MB (bound 2 MB), {text.count('<figure ')} figures: "
          f"{embedded} embedded, {linked} linked")
    print(f"report: {page}")


if __name__ == "__main__":
    main()
