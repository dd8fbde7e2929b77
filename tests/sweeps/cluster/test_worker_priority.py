"""The embedded Ray on a shared machine: its workers run at the driver's priority (Ray starts
them at nice 15 by default, so any ordinary process took their cores, and a calibration
measuring in a worker beside two busy processes got under 4 % of a core), and its GCS has a
minute to come up (Ray's 20-30 s ran out on a loaded 2-core host: "Failed to start GCS")."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.ray


def test_the_embedded_rays_workers_run_at_the_drivers_priority_and_its_gcs_has_a_minute():
    script = """
import os, ray
from sweeps.cluster.session import ray_session
with ray_session(num_cpus=1):
    print(os.nice(0), ray.get(ray.remote(lambda: os.nice(0)).remote()),
          os.environ.get("RAY_gcs_server_port_wait_time_s"))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    driver, worker, gcs_wait = map(int, done.stdout.split()[-3:])
    assert worker == driver
    assert gcs_wait >= 60
