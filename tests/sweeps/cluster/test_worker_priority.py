"""The embedded Ray's workers run at the driver's priority: Ray starts them at nice 15 by
default, so on a shared machine any ordinary process took their cores, and a calibration
measuring in a worker beside two busy processes got under 4 % of a core."""

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
