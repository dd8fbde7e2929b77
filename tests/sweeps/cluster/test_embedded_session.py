"""The embedded Ray in a shared process and on a shared machine: it starts with its own
token whatever cluster the process talked to before; its workers run at the driver's priority (Ray starts
them at nice 15 by default, so any ordinary process took their cores, and a calibration
measuring in a worker beside two busy processes got under 4 % of a core)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray


def test_the_embedded_rays_workers_run_at_the_drivers_priority():
    script = """
import os, ray
from sweeps.cluster.session import ray_session
with ray_session(num_cpus=1):
    print(os.nice(0), ray.get(ray.remote(lambda: os.nice(0)).remote()))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    driver, worker = map(int, done.stdout.split()[-2:])
    assert worker == driver


def test_an_embedded_ray_after_another_clusters_token_starts_with_its_own():
    """Ray caches a process's token at first use: a driver that had talked to a cluster of
    another token (a test's loopback cluster, a notebook's earlier join) sent that token to
    its new embedded GCS, which refused it: "Failed to start GCS", InvalidAuthToken."""
    script = """
import os
os.environ["RAY_AUTH_MODE"] = "token"
os.environ["RAY_AUTH_TOKEN"] = "a" * 32
from ray._raylet import AuthenticationTokenLoader
assert AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True)  # cached now
del os.environ["RAY_AUTH_TOKEN"]
from sweeps.cluster.session import ray_session
with ray_session(num_cpus=1) as session:
    print("started", session.auth)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split()[-2:] == ["started", "token"]


def test_the_embedded_ray_starts_no_autoscaler_log_monitor_or_api_server_and_ray_is_put_back():
    """Ray's ``ray.init(address="local")`` starts an autoscaler monitor, a log monitor and an
    API server, about 3 CPU-seconds of a start: the embedded cluster has no use for them."""
    script = """
import ray
import psutil  # Ray ships it (ray/thirdparty_files), on the path once ray is imported
from sweeps.cluster.lean_head import SKIPPED_SERVICES
from sweeps.cluster.session import ray_session, wait_stopped
with ray_session(num_cpus=1):
    assert ray.get(ray.remote(lambda: 6 * 7).remote()) == 42
    processes = psutil.Process().children(recursive=True)
    programs, names = [" ".join(p.cmdline()) for p in processes], [p.name() for p in processes]
    print("core", names.count("gcs_server"), names.count("raylet"))
    print("skipped services running", sum(s in c for s in SKIPPED_SERVICES for c in programs))
wait_stopped()
from ray._private.parameter import RayParams
params = RayParams()
print("restored", params.no_monitor, params.include_log_monitor)
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "core 1 1" in lines  # the GCS and the raylet were found among the driver's descendants
    assert "skipped services running 0" in lines
    assert "restored False None" in lines
