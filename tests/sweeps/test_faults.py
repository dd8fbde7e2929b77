"""Sweeps on a real embedded Ray that fail on purpose (``commscale probe``): every kind of
fault is sorted, a hung point times out, a killed driver resumes, a changed sweep is
refused. Each test checks the committed key set against the expected one, no duplicates."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Iterator

import pytest

from analysis.query import query
from analysis.status import sweep_status
from sweeps.jobs.probe import probe_job
from sweeps.lake import Lake

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.chaos]

COMMSCALE = str(Path(sys.executable).with_name("commscale"))


def _probe(lake: Path, *args: str, **popen) -> subprocess.CompletedProcess:
    popen.setdefault("env", {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"})
    return subprocess.run([COMMSCALE, "probe", "--lake", str(lake), "--num-cpus", "2", *args],
                          capture_output=True, text=True, timeout=600, **popen)


def _expected_keys(name: str, points: int, sleep_ms: float, fail: dict) -> set:
    job = probe_job(name=name, points=points, sleep_s=sleep_ms / 1000.0, fail=fail, resources={})
    return set(job.points.column("key").to_pylist())


def _rows(lake: Path, sql: str) -> list:
    return query(Lake(str(lake)), sql).to_pylist()


def test_every_kind_of_fault_is_sorted_and_a_rerun_retries_only_the_bugs(tmp_path):
    lake = tmp_path / "lake"
    fail = {"die_once": 2, "transient_once": 2, "infeasible": 1, "oom": 1, "bug": 2}
    args = ["--points", "30", "--sleep-ms", "5", "--chunk-size", "3"]
    args += [a for mode, n in fail.items() for a in ("--fail", f"{mode}:{n}")]
    first = _probe(lake, *args)
    assert first.returncode == 1, first.stderr  # bugs fail the run loudly
    assert "2 points failed" in first.stderr and "ZeroDivisionError" in first.stderr

    keys = [r["key"] for r in _rows(lake, "SELECT key FROM probe")]
    expected = _expected_keys("probe", 30, 5, fail)
    bug_points = {r["key"] for r in _rows(lake, "SELECT DISTINCT point_key AS key FROM failure")}
    assert len(keys) == len(set(keys)) == 28
    assert set(keys) | bug_points == expected and not set(keys) & bug_points
    statuses = {r["status"]: r["n"] for r in _rows(lake, "SELECT status, count(*) AS n FROM probe GROUP BY status")}
    assert statuses == {"ok": 26, "infeasible": 1, "oom": 1}
    modes = {r["fail"]: r["status"] for r in _rows(lake, "SELECT fail, status FROM probe WHERE fail <> ''")}
    assert modes == {"die_once": "ok", "transient_once": "ok", "infeasible": "infeasible", "oom": "oom"}
    tracebacks = _rows(lake, "SELECT error_type, traceback FROM failure")
    assert len(tracebacks) == 2 and all("ZeroDivisionError" in r["traceback"] for r in tracebacks)
    (status,) = sweep_status(Lake(str(lake)), "probe").to_dict("records")
    assert {k: status[k] for k in ("planned", "done", "ok", "infeasible", "oom", "failed", "pending")} == {
        "planned": 30, "done": 28, "ok": 26, "infeasible": 1, "oom": 1, "failed": 2, "pending": 2}

    second = _probe(lake, *args)
    assert second.returncode == 1
    assert "0 new, 28 already in the lake" in second.stdout and "2 failed" in second.stdout
    assert len(_rows(lake, "SELECT key FROM probe")) == 28
    assert len(_rows(lake, "SELECT key FROM failure")) == 4  # each run's failures are kept


def test_a_hung_point_times_out_instead_of_hanging_the_sweep(tmp_path):
    lake = tmp_path / "lake"
    started = time.monotonic()
    result = _probe(lake, "--name", "hang", "--points", "3", "--sleep-ms", "600000", "--timeout-s", "2",
                    "--chunk-size", "1")
    assert time.monotonic() - started < 120
    assert result.returncode == 1
    failures = _rows(lake, "SELECT status FROM failure")
    assert [r["status"] for r in failures] == ["timeout"] * 3


def test_a_driver_killed_mid_sweep_resumes_with_nothing_lost_or_doubled(tmp_path):
    lake = tmp_path / "lake"
    args = ["--name", "resume", "--points", "60", "--sleep-ms", "250", "--chunk-size", "2"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen([COMMSCALE, "probe", "--lake", str(lake), "--num-cpus", "2", *args], env=env,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(Lake(str(lake)).keys("probe")) < 6 if (lake / "_log").exists() else True:
            assert driver.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.1)
    finally:
        os.killpg(driver.pid, signal.SIGKILL)  # the driver and the Ray it started, at once
        driver.wait()
    before = Lake(str(lake)).keys("probe")
    assert 6 <= len(before) < 60

    resumed = _probe(lake, *args)
    assert resumed.returncode == 0, resumed.stderr
    assert f"{60 - len(before)} new, {len(before)} already in the lake" in resumed.stdout
    keys = [r["key"] for r in _rows(lake, "SELECT key FROM probe")]
    assert len(keys) == len(set(keys)) and set(keys) == _expected_keys("resume", 60, 250, {})


def test_a_changed_sweep_adds_a_version_and_restart_replaces_only_it(tmp_path):
    lake = tmp_path / "lake"
    assert _probe(lake, "--name", "same", "--points", "4", "--sleep-ms", "1").returncode == 0
    changed = _probe(lake, "--name", "same", "--points", "5", "--sleep-ms", "1")
    assert changed.returncode == 0, changed.stderr
    assert "adding version" in changed.stderr and "The 4 rows of earlier versions stay" in changed.stderr
    assert "5 points, 5 new" in changed.stdout
    keys = {r["key"] for r in _rows(lake, "SELECT key FROM probe")}
    assert keys == _expected_keys("same", 5, 1, {}), "the plain view serves the newest version"
    versions = _rows(lake, "SELECT sweep_version, count(*) AS n FROM probe_all_versions GROUP BY 1 ORDER BY n")
    assert [v["n"] for v in versions] == [4, 5]
    status = sweep_status(Lake(str(lake)), "same")
    assert status[["planned", "done", "newest"]].values.tolist() == [[4, 4, ""], [5, 5, "yes"]]
    restarted = _probe(lake, "--name", "same", "--points", "5", "--sleep-ms", "1", "--restart")
    assert restarted.returncode == 0, restarted.stderr
    assert f"removing 5 probe rows (and 0 failure rows) of sweep same version {versions[1]['sweep_version']}" \
        in restarted.stderr
    assert len(_rows(lake, "SELECT key FROM probe_all_versions")) == 9, "the first version's rows stay"


@contextlib.contextmanager
def _scratch_temp() -> Iterator[Path]:
    """An empty folder of its own as TMPDIR, short enough for the socket paths Ray makes
    under it (at most 107 bytes), removed with what is left in it."""
    scratch = Path(tempfile.mkdtemp(prefix="cs-", dir="/tmp"))
    try:
        yield scratch
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_a_probe_leaves_nothing_in_the_temp_folder(tmp_path):
    """It left its folder of "once" markers (commscale-probe-*), and the embedded Ray its
    session folder (logs, sockets: TMPDIR/ray/session_*), behind every run."""
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    with _scratch_temp() as scratch:
        done = _probe(tmp_path / "lake", "--points", "6", "--sleep-ms", "1", "--fail", "die_once:1", "--fail",
                      "transient_once:1", env={**env, "TMPDIR": str(scratch)})
        assert done.returncode == 0, done.stderr
        assert "6 points, 6 new" in done.stdout
        assert sorted(p.name for p in scratch.iterdir()) == []


def test_two_runs_of_one_sweep_account_for_every_point(tmp_path):
    """Both runs find the lake empty (each plans before its Ray starts), so both compute
    every point; the one whose commits come second says its rows were committed meanwhile
    by the other run instead of "0 new, 0 already in the lake"."""
    lake = tmp_path / "lake"
    args = ["--name", "race", "--points", "24", "--sleep-ms", "50", "--chunk-size", "4"]
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    runs = [subprocess.Popen([COMMSCALE, "probe", "--lake", str(lake), "--num-cpus", "1", *args], env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    said = [run.communicate(timeout=600) for run in runs]
    assert [run.returncode for run in runs] == [0, 0], said
    counts = []
    for stdout, _ in said:
        line = next(x for x in stdout.splitlines() if x.startswith("probe race"))
        new = int(line.split(" new,")[0].rsplit(" ", 1)[-1])
        cached = int(line.split(" already in the lake")[0].rsplit(" ", 1)[-1])
        meanwhile = int(line.split(" committed meanwhile")[0].rsplit(" ", 1)[-1]) if "meanwhile" in line else 0
        assert new + cached + meanwhile == 24, line
        counts.append(new)
    assert sum(counts) == 24
    keys = [r["key"] for r in _rows(lake, "SELECT key FROM probe")]
    assert len(keys) == len(set(keys)) == 24


def _descendants(root: int) -> dict:
    """pid -> start time of every live process under ``root`` (from /proc)."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                fields = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            if fields[0] != "Z":
                table[int(name)] = (int(fields[1]), fields[19])
    family, grew = {root}, True
    while grew:
        grew = False
        for pid, (parent, _) in table.items():
            if parent in family and pid not in family:
                family.add(pid)
                grew = True
    return {pid: table[pid][1] for pid in family - {root}}


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process tree from /proc (Linux)")
def test_a_driver_killed_alone_takes_its_embedded_cluster_with_it(tmp_path):
    """SIGKILL to the driver only (not its process group): Ray's agents used to wait a
    minute for a GCS that was gone; every process the driver started is gone within 15 s,
    and the embedded Ray's session folder with them."""
    lake = tmp_path / "lake"
    stack = contextlib.ExitStack()
    scratch = stack.enter_context(_scratch_temp())
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_TMPDIR")}
    driver = subprocess.Popen([COMMSCALE, "probe", "--lake", str(lake), "--num-cpus", "2", "--name", "alone",
                               "--points", "60", "--sleep-ms", "250", "--chunk-size", "2"],
                              env={**env, "TMPDIR": str(scratch)},
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while len(Lake(str(lake)).keys("probe")) < 4 if (lake / "_log").exists() else True:
            assert driver.poll() is None, "the sweep ended before it could be killed"
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(1.0)  # the agents are up by the time points commit; give the reaper a look at them
        started = _descendants(driver.pid)
        assert any("DashboardAgent" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
                   for pid in started if os.path.exists(f"/proc/{pid}/cmdline"))
        os.kill(driver.pid, signal.SIGKILL)
        driver.wait()
        deadline = time.monotonic() + 15
        while True:
            now = {}
            for pid, start in started.items():
                try:
                    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
                except OSError:
                    continue
                if fields[0] != "Z" and fields[19] == start:
                    now[pid] = Path(f"/proc/{pid}/cmdline").read_text(errors="replace").replace("\0", " ")[:80]
            left = sorted(p.name for p in scratch.iterdir())
            if (not now and not left) or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert not now, f"still running 15 s after the driver was killed: {now}"
        assert not left, f"left in the temp folder 15 s after the driver was killed: {left}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(driver.pid, signal.SIGKILL)
        stack.close()
