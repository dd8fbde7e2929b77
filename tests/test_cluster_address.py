"""`commscale run --address` joins a separately started Ray head on loopback, with token
authentication on, and a wrong token is refused with one line and exit status 2."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def ray_head():
    """A Ray head (`ray start --block`) on 127.0.0.1 with token auth; stopped by SIGTERM to
    `ray start`, its process group killed if that takes over 30 s.

    Its temp dir is short: Ray's unix sockets live there, and AF_UNIX paths stop at 107 bytes.
    """
    port = _free_port()
    temp_dir = tempfile.mkdtemp(prefix="cs-ray-", dir="/tmp")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(16), RAY_USAGE_STATS_ENABLED="0")
    head = subprocess.Popen(
        [str(BIN / "ray"), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
         "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
         f"--temp-dir={temp_dir}"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.5)
    else:
        os.killpg(head.pid, signal.SIGKILL)
        pytest.fail("the Ray head did not open its port within 60 s")
    yield f"127.0.0.1:{port}", env
    os.kill(head.pid, signal.SIGTERM)  # `ray start --block` shuts its node down in order
    try:
        head.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(head.pid, signal.SIGKILL)
        head.wait()
    shutil.rmtree(temp_dir, ignore_errors=True)


def test_run_joins_a_token_protected_cluster_on_loopback(ray_head, tmp_path):
    address, env = ray_head
    lake = tmp_path / "lake"
    done = subprocess.run([str(BIN / "commscale"), "run", "sweep=smoke", "--address", address, "--lake", str(lake)],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"Ray cluster at {address}" in done.stdout and "auth: token" in done.stdout
    [(n,)] = duckdb.sql(f"SELECT count(*) FROM read_parquet('{lake}/**/*.parquet')").fetchall()
    assert n > 0

    refused = subprocess.run(
        [str(BIN / "commscale"), "run", "sweep=smoke", "sweep.name=other", "--address", address, "--lake", str(lake)],
        env={**env, "RAY_AUTH_TOKEN": "not-the-token", "RAY_NUM_REDIS_GET_RETRIES": "2"},  # refuse in seconds
        capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2
    assert "cannot join the Ray cluster" in refused.stderr and "Traceback" not in refused.stderr
    assert not (lake / "kind=projection" / "sweep=other").exists()
