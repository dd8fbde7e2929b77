"""Sweeps on a multi-node Ray cluster on loopback (separate `ray start` processes, token
authentication on): submitted as a Ray job, and surviving the loss of a worker node."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from analysis.query import query
from harness.loopback.local import LocalCluster
from sweeps.config import load_run_config
from sweeps.jobs.probe import probe_job
from sweeps.lake import Lake
from sweeps.jobs.projection import plan_points

pytestmark = [pytest.mark.ray, pytest.mark.slow]

COMMSCALE = str(Path(sys.executable).with_name("commscale"))
RAY_LOG_LINE = re.compile(r"\s(INFO|WARNING)\s+\S+\.py:\d+ -- ")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head (1 CPU, dashboard for the Jobs API) and two workers with 2 standin_gpu each."""
    state = tmp_path_factory.mktemp("cluster")
    with LocalCluster(state_dir=state, head_cpus=1, dashboard=True,
                      extra_env={"RAY_health_check_period_ms": "1000"}) as running:
        running.start_head()
        running.add_worker(cpus=1, resources={"standin_gpu": 2}, name="w1")
        running.add_worker(cpus=1, resources={"standin_gpu": 2}, name="w2")
        yield running


def _client_env(cluster: LocalCluster) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, **cluster.env}


def test_submit_runs_a_sweep_as_a_ray_job_and_leaves_the_report_where_it_was_run(cluster, tmp_path):
    lake = tmp_path / "lake"
    env = _client_env(cluster)
    env["PATH"] = "/usr/bin:/bin"  # no venv active: the job must still find commscale's packages
    env.pop("RAY_ADDRESS")  # --address alone names the cluster, as in every command; its Jobs API is found
    done = subprocess.run([COMMSCALE, "submit", "sweep=smoke", "--address", cluster.address,
                           "--lake", str(lake)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "submitted job raysubmit_" in done.stdout and f"to {cluster.dashboard_url}:" in done.stdout
    assert "SUCCEEDED" in done.stdout
    assert "sweep smoke on mi210x4" in done.stdout  # the job's own output, followed
    ray_lines = [x for x in (done.stdout + done.stderr).splitlines() if RAY_LOG_LINE.search(x)]
    assert not ray_lines, ray_lines  # Ray's packaging and set-up lines only with --verbose
    expected = set(plan_points(load_run_config(["sweep=smoke"])).points.column("key").to_pylist())
    keys = query(Lake(str(lake)), "SELECT key FROM projection").column("key").to_pylist()
    assert len(keys) == len(set(keys)) and set(keys) == expected
    assert (tmp_path / "report" / "report.html").is_file(), "the report lands where submit was run"


def test_bad_input_is_refused_before_anything_is_submitted(cluster, tmp_path):
    done = subprocess.run([COMMSCALE, "submit", "sweep.tp=[0]", "--address", cluster.address,
                           "--lake", str(tmp_path / "lake")],
                          env=_client_env(cluster), capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "sweep.tp" in done.stderr and "submitted" not in done.stdout



def test_a_job_that_exits_2_makes_submit_exit_2(cluster, tmp_path):
    """The README promises the job's exit status: a job refusing its input (an unwritable
    lake, found only where the job runs) must not read as any other failure."""
    done = subprocess.run([COMMSCALE, "submit", "sweep=smoke", "--dashboard", cluster.dashboard_url,
                           "--lake", "/proc/commscale-lake"], cwd=tmp_path, env=_client_env(cluster),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "FAILED" in done.stdout and "not writable" in done.stdout + done.stderr

@pytest.mark.chaos
def test_a_worker_node_lost_mid_sweep_is_retried_elsewhere(cluster, tmp_path):
    lake = tmp_path / "lake"
    args = ["--name", "lost", "--points", "40", "--sleep-ms", "400", "--chunk-size", "1",
            "--resource", "standin_gpu=1", "--cpus-per-point", "0"]
    driver = subprocess.Popen([COMMSCALE, "probe", "--address", cluster.address, "--lake", str(lake), *args],
                              env=_client_env(cluster), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 180
    while not ((lake / "_log").exists() and len(Lake(str(lake)).keys("probe")) >= 6):
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    cluster.remove_worker("w2", hard=True)  # a node lost with tasks running on it
    out, err = driver.communicate(timeout=600)
    assert driver.returncode == 0, out + err
    keys = query(Lake(str(lake)), "SELECT key FROM probe").column("key").to_pylist()
    expected = probe_job(name="lost", points=40, sleep_s=0.4, fail={}, resources={"standin_gpu": 1.0}).points
    assert len(keys) == len(set(keys)) and set(keys) == set(expected.column("key").to_pylist())
