"""A client without the cluster's token, or with a wrong one, is refused in one line with
exit status 2, by `commscale submit` (the Jobs API) and by `commscale run --address` (the
GCS), before anything is submitted or written. Runs a real token-protected cluster on
loopback (``LocalCluster``, dashboard on)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.loopback.local import LocalCluster

pytestmark = [pytest.mark.ray, pytest.mark.slow]

#: Client-side variables that would hand a subprocess this cluster's token or another's.
_CLIENT_VARS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH", "COMMSCALE_LAKE")
#: Long enough for Python and Ray to start; far below the minutes Ray's own retries take.
_QUICK_S = 60


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with LocalCluster(state_dir=tmp_path_factory.mktemp("cluster"), head_cpus=1, dashboard=True) as running:
        running.start_head()
        yield running


def _commscale(args: list[str], tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    home = tmp_path / "home"  # no ~/.ray/auth_token of this machine's user
    home.mkdir(exist_ok=True)
    clean = {k: v for k, v in os.environ.items() if k not in _CLIENT_VARS}
    return subprocess.run([sys.executable, "-m", "sweeps.cli", *args], cwd=tmp_path, capture_output=True, text=True,
                          env={**clean, "HOME": str(home), **env}, timeout=_QUICK_S)


def _assert_refused(result: subprocess.CompletedProcess, lake: Path, fragments: list[str]) -> None:
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, (fragment, result.stderr)
    assert "submitted" not in result.stdout
    assert not lake.exists()


@pytest.mark.parametrize("env, problem", [
    pytest.param({"RAY_AUTH_MODE": "token"}, "no token was found", id="missing"),
    pytest.param({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"}, "the cluster refused the token",
                 id="wrong"),
])
def test_submit_without_the_token_is_refused_in_one_line(cluster, tmp_path, env, problem):
    lake = tmp_path / "lake"
    result = _commscale(["submit", "sweep=smoke", "--dashboard", cluster.dashboard_url, "--lake", str(lake)],
                        tmp_path, **env)
    _assert_refused(result, lake, [repr(cluster.dashboard_url), problem, "RAY_AUTH_TOKEN"])


@pytest.mark.parametrize("env, problem", [
    pytest.param({"RAY_AUTH_MODE": "token"}, "no token found", id="missing"),
    pytest.param({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": "not-the-token"}, "the cluster refused the token",
                 id="wrong"),
])
def test_run_without_the_token_is_refused_in_seconds(cluster, tmp_path, env, problem):
    lake = tmp_path / "lake"
    started = time.monotonic()
    result = _commscale(["run", "sweep=smoke", "--address", cluster.address, "--lake", str(lake)], tmp_path, **env)
    assert time.monotonic() - started < 30
    _assert_refused(result, lake, [repr(cluster.address), problem])
