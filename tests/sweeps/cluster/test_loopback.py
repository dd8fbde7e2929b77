"""Nothing a cluster of ours runs answers beyond loopback without the token: the listening
sockets of a loopback cluster (head and two workers, dashboard on) and of the embedded Ray
are listed from /proc, and every HTTP endpoint beyond 127.0.0.1 must refuse an
unauthenticated request (Ray's Prometheus ``/metrics`` servers ask for none, so they must
stay on loopback)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from harness.loopback.local import LocalCluster
from harness.loopback.sockets import answers_without_token, is_loopback, listeners


def test_loopback_addresses_are_recognised():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("::ffff:127.0.0.1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("192.0.2.2")


@pytest.mark.ray
@pytest.mark.slow
def test_the_loopback_cluster_answers_nothing_beyond_loopback_without_its_token(tmp_path):
    with LocalCluster(state_dir=tmp_path / "cluster", head_cpus=1, dashboard=True) as cluster:
        cluster.start_head()
        cluster.add_worker(cpus=1)
        cluster.add_worker(cpus=1)
        assert cluster.node_ip == "127.0.0.1"
        found = listeners(cluster.pids())
        assert len(found) >= 10, found
        open_beyond = [(x, path) for x in found if not x.loopback and (path := answers_without_token(x))]
        assert open_beyond == []
        metrics = [x for x in found if answers_without_token(x) == "/metrics"]
        assert len(metrics) >= 4 and all(x.loopback for x in metrics), metrics  # agents, dashboard, autoscaler


@pytest.mark.ray
def test_the_embedded_ray_listens_on_loopback_only():
    """In a process of its own: Ray keeps its auth token per process."""
    script = """
import json, os
from sweeps.cluster.session import ray_session
from harness.loopback.sockets import descendants, listeners
with ray_session(num_cpus=1):
    found = listeners(descendants(os.getpid()))
print(json.dumps([[x.address, x.port, x.process] for x in found]))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=180, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found and [x for x in found if not is_loopback(x[0])] == [], found
