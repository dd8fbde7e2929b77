"""`LocalCluster`: a head and worker nodes as separate `ray start` processes on one host,
token authentication on, and every process it started gone after `stop`.

One cluster (a head and two workers with 2 `standin_gpu` each) serves the module's tests
in order; the last of them stops it through a `LocalCluster.load` of its saved state.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.loopback.launcher import RAY_START_PROGRAM
from harness.loopback.local import LocalCluster

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "cluster.py"
#: Client-side variables that would point a subprocess at another cluster or token.
_CLIENT_VARS = ("RAY_ADDRESS", "RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH",
                "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
#: The pid of a detached actor's worker, started by one test and stopped by the next.
_LINGERER: dict[str, int] = {}


def _gone(pid: int) -> bool:
    """The process has exited (or is a zombie waiting to be reaped)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLIENT_VARS}
    env.update(RAY_USAGE_STATS_ENABLED="0", **extra)
    return env


@contextlib.contextmanager
def _client_env(cluster: LocalCluster) -> Iterator[None]:
    """os.environ set from ``cluster.env`` for the block, restored after."""
    saved = {k: os.environ.get(k) for k in _CLIENT_VARS}
    os.environ.pop("RAY_AUTH_TOKEN_PATH", None)
    os.environ.update(cluster.env)
    try:
        # Ray caches the auth mode and token per process; re-read them from the env
        # in case an earlier test of this process talked to another cluster.
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
    except (ImportError, AttributeError):
        pass
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[LocalCluster]:
    """A head (1 CPU) and workers "a" and "b" (1 CPU, 2 standin_gpu each).

    The GCS health-checks nodes every second instead of every 3 s, so that a killed
    node is declared dead after ~5 s (5 failed checks) instead of ~15 s.
    """
    c = LocalCluster(state_dir=tmp_path_factory.mktemp("cluster"), head_cpus=1,
                     extra_env={"RAY_health_check_period_ms": "1000"})
    try:
        c.start_head()
        c.add_worker(cpus=1, resources={"standin_gpu": 2}, name="a")
        c.add_worker(cpus=1, resources={"standin_gpu": 2}, name="b")
        yield c
    finally:
        c.stop()


# -------------------------------------------------------------------- no Ray needed


def test_the_constructor_validates_eagerly_and_starts_nothing(tmp_path):
    with pytest.raises(TypeError):
        LocalCluster(state_dir=tmp_path, head_cpus=1.5)
    with pytest.raises(ValueError):
        LocalCluster(state_dir=tmp_path, head_cpus=-1)
    with pytest.raises(TypeError):
        LocalCluster(state_dir=tmp_path, dashboard="yes")
    with pytest.raises(ValueError):
        LocalCluster(state_dir=tmp_path, ray_bin=str(tmp_path / "no-such-ray"))
    (tmp_path / "file").write_text("")
    with pytest.raises(ValueError):
        LocalCluster(state_dir=tmp_path / "file")
    with pytest.raises(TypeError):
        LocalCluster(tmp_path)  # keyword-only
    idle = LocalCluster(state_dir=tmp_path / "idle")
    assert not (tmp_path / "idle").exists()
    with pytest.raises(RuntimeError):
        _ = idle.address
    with pytest.raises(RuntimeError):
        idle.add_worker()
    with pytest.raises(ValueError):
        idle.add_worker(resources={"CPU": 1})
    with pytest.raises(ValueError):
        idle.add_worker(name="no spaces")
    idle.stop()
    idle.stop()
    assert idle.pids() == []


# ------------------------------------------------------------ one cluster, in order


@pytest.mark.ray
@pytest.mark.slow
def test_a_client_needs_the_token(cluster):
    token = cluster.token_path
    assert stat.S_IMODE(token.stat().st_mode) == 0o600
    assert token.read_text() == cluster.env["RAY_AUTH_TOKEN"]
    join = (f"import ray; ray.init(address={cluster.address!r}, logging_level='ERROR'); "
            "print(sum(n['Alive'] for n in ray.nodes())); ray.shutdown()")

    # With the token file (RAY_AUTH_TOKEN_PATH), a client joins and sees the three nodes. The
    # nodes listen on 127.0.0.1 only, so a plain Ray client keeps to it (cluster.env says how).
    loopback = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": cluster.env["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"]}
    joined = subprocess.run([sys.executable, "-c", join], capture_output=True, text=True, timeout=120,
                            env=_clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN_PATH=str(token), **loopback))
    assert joined.returncode == 0, joined.stderr[-2000:]
    assert joined.stdout.split()[-1] == "3"

    # With a wrong token it is refused. Ray retries the GCS connection once a second,
    # RAY_NUM_REDIS_GET_RETRIES times (20 by default): 2 makes the refusal take ~3 s.
    start = time.monotonic()
    refused = subprocess.run([sys.executable, "-c", join], capture_output=True, text=True, timeout=120,
                             env=_clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="wrong",
                                            RAY_NUM_REDIS_GET_RETRIES="2", **loopback))
    assert refused.returncode != 0
    assert "InvalidAuthToken" in refused.stderr or "AuthenticationError" in refused.stderr, refused.stderr[-2000:]
    assert time.monotonic() - start < 60

    # Nor can a node join with a wrong token; it fails before it spawns anything.
    temp_dir = tempfile.mkdtemp(prefix="csr-", dir="/tmp")
    node = subprocess.Popen([sys.executable, RAY_START_PROGRAM, "start", f"--address={cluster.address}",
                             "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}", "--num-cpus=1",
                             "--disable-usage-stats"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env=_clean_env(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN="wrong",
                                           RAY_NUM_REDIS_GET_RETRIES="2"))
    try:
        output, _ = node.communicate(timeout=120)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(node.pid, signal.SIGKILL)  # in case it left anything behind
        node.wait()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert node.returncode != 0
    assert "InvalidAuthToken" in output or "AuthenticationError" in output, output[-2000:]
    assert cluster.alive_nodes() == 3


@pytest.mark.ray
@pytest.mark.slow
def test_work_no_node_could_run_is_refused_at_once(cluster):
    """The cluster has no autoscaler (Ray's read-only provider): what no node holds now, no
    node ever will. Two standin_gpu per worker: 2 fit one node, 3 (of the 4 in all) none."""
    from sweeps.cluster.capacity import check_runnable
    from sweeps.cluster.session import ray_session
    from sweeps.errors import UserError
    from sweeps.jobs.work import Resources

    with _client_env(cluster), ray_session(cluster.address) as session:
        assert not session.embedded
        check_runnable(Resources(cpus=1, custom={"standin_gpu": 2}), session.where, embedded=False)
        with pytest.raises(UserError) as refused:
            check_runnable(Resources(cpus=0, custom={"standin_gpu": 3}), session.where, embedded=False)
        assert "standin_gpu=3" in str(refused.value) and "standin_gpu=4" in str(refused.value)
        assert "at most standin_gpu=2 on one node" in str(refused.value)
        with pytest.raises(UserError, match=r"standin_tpu=1, which no node of the Ray cluster at 127\.0\.0\.1"):
            check_runnable(Resources(cpus=0, custom={"standin_tpu": 1}), session.where, embedded=False)


@pytest.mark.ray
@pytest.mark.slow
def test_submit_to_a_cluster_without_a_dashboard_says_so(cluster):
    """`submit --address HOST:PORT` finds the Jobs API through the cluster's GCS; this one
    runs no dashboard, so what it records does not serve it (``test_cluster_sweeps``
    submits to one that does)."""
    from sweeps.cluster.submit import jobs_api, submit_run
    from sweeps.errors import UserError

    with _client_env(cluster):
        url = jobs_api(cluster.address, None)
        assert url.startswith("http://127.0.0.1:") and jobs_api(None, "http://127.0.0.1:8266") == "http://127.0.0.1:8266"
        with pytest.raises(UserError, match=f"cannot reach the Jobs API at '{url}'.*runs the dashboard"):
            submit_run(["sweep=smoke"], address=cluster.address, dashboard=None, python_bin=sys.executable,
                       follow=False, echo=print)


@pytest.mark.ray
@pytest.mark.slow
def test_tasks_land_on_the_workers_and_a_lost_node_leaves(cluster):
    import ray

    from sweeps.cluster.session import ray_session

    with _client_env(cluster), ray_session(cluster.address):
        try:
            assert sum(1 for n in ray.nodes() if n["Alive"]) == 3
            assert ray.cluster_resources().get("standin_gpu") == 4

            @ray.remote(num_cpus=0, resources={"standin_gpu": 1})
            def where():
                return ray.util.get_node_ip_address(), ray.get_runtime_context().get_node_id()

            ip, node_id = ray.get(where.remote(), timeout=120)

            @ray.remote(num_cpus=0)
            class Lingerer:
                def pid(self) -> int:
                    return os.getpid()

            # A detached actor outlives this driver: a worker process that Ray puts in a
            # process group of its own, which only the node's session still holds.
            # On the head: worker node a is removed below, and its processes with it.
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            head = next(n["node_id"] for n in cluster.nodes() if n["alive"] and n["head"])
            lingerer = Lingerer.options(name="lingerer", lifetime="detached", scheduling_strategy=
                                        NodeAffinitySchedulingStrategy(head, soft=False)).remote()
            _LINGERER["pid"] = ray.get(lingerer.pid.remote(), timeout=120)
        finally:
            ray.shutdown()

    # The nodes keep 127.0.0.1 (Ray 2.60 on its own registers them under the host's
    # routable IP, and its servers then listen on every interface).
    assert ip == cluster.node_ip == "127.0.0.1"
    with socket.socket() as s:
        s.bind((ip, 0))  # an address of this host
    workers = {n["node_id"] for n in cluster.nodes() if n["alive"] and not n["head"]}
    assert node_id in workers and len(workers) == 2

    a_pids = cluster.pids()
    cluster.remove_worker("a", hard=True)
    assert cluster.workers == ["b"]
    lost = time.monotonic()
    assert cluster.wait_for_nodes(2, timeout_s=60) == 2
    print(f"the GCS declared the killed node dead after {time.monotonic() - lost:.1f} s")
    assert cluster.alive_nodes() == 2
    left = set(cluster.pids())
    assert all(_gone(p) for p in a_pids if p not in left)



@pytest.mark.ray
@pytest.mark.slow
def test_the_saved_state_lets_another_instance_stop_it(cluster):
    pids = cluster.pids()
    assert pids and _LINGERER.get("pid") in pids  # a worker in a process group of its own
    temp_dirs = [n["temp_dir"] for n in cluster.nodes() if n["alive"]]
    cluster.save_state()
    state = json.loads(cluster.state_file.read_text())
    assert state["address"] == cluster.address and state["token_path"] == str(cluster.token_path)
    assert cluster.env["RAY_AUTH_TOKEN"] not in cluster.state_file.read_text()

    status = subprocess.run([sys.executable, str(SCRIPT), "status", "--state", str(cluster.state_dir)],
                            capture_output=True, text=True, timeout=120, env=_clean_env())
    assert status.returncode == 0, status.stderr
    assert "2 alive" in status.stdout

    loaded = LocalCluster.load(cluster.state_dir)
    assert loaded.address == cluster.address and loaded.workers == ["b"]
    assert loaded.pids() == pids
    loaded.stop()
    assert all(_gone(p) for p in pids)
    assert not cluster.token_path.exists()
    assert json.loads(cluster.state_file.read_text())["stopped"] is True
    assert not any(Path(d).exists() for d in temp_dirs)
    loaded.stop()  # idempotent
    cluster.stop()  # the first instance reaps its children; nothing else is left
    assert cluster.pids() == []


@pytest.mark.ray
@pytest.mark.slow
def test_the_script_starts_reports_and_stops_a_cluster(tmp_path):
    state = tmp_path / "state"
    script = [sys.executable, str(SCRIPT)]
    started = subprocess.run([*script, "start", "--workers", "1", "--cpus", "1", "--head-cpus", "0",
                              "--resources", '{"standin_gpu": 2}', "--state", str(state)],
                             capture_output=True, text=True, timeout=300, env=_clean_env())
    try:
        assert started.returncode == 0, started.stderr
        loaded = LocalCluster.load(state)
        pids = loaded.pids()
        assert loaded.address in started.stdout
        assert f"export RAY_ADDRESS={loaded.address} RAY_AUTH_MODE=token RAY_AUTH_TOKEN_PATH={state / 'token'}" \
            in started.stdout
        status = subprocess.run([*script, "status", "--state", str(state)], capture_output=True, text=True,
                                timeout=120, env=_clean_env())
        assert status.returncode == 0 and "2 alive" in status.stdout, status.stdout + status.stderr
    finally:
        stopped = subprocess.run([*script, "stop", "--state", str(state)], capture_output=True, text=True,
                                 timeout=120, env=_clean_env())
    assert stopped.returncode == 0, stopped.stderr
    assert all(_gone(p) for p in pids)
    again = subprocess.run([*script, "status", "--state", str(state)], capture_output=True, text=True,
                           timeout=120, env=_clean_env())
    assert again.returncode == 1 and "stopped" in again.stdout
