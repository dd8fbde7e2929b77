"""A multi-node Ray cluster on one host: a head and worker nodes, each its own `ray start`.

For tests, benchmarks and laptops: nodes that can be added and lost one at a time, with
token authentication on. Every node is a separate ``ray start --block`` process, started
in a session (and process group) of its own, so that stopping the cluster, or losing one
node, kills exactly the processes this cluster started and nothing else (never
``ray stop``, which kills every Ray on the host).

What Ray 2.60 does with the addresses, found by running it (see ``LocalCluster``):

- Every node is started with ``--node-ip-address=127.0.0.1``, and the GCS address the
  cluster hands out is ``127.0.0.1:PORT``. On Linux Ray then swaps a loopback address for
  the host's own routable address (``resolve_ip_for_localhost``): the nodes register
  under that IP (``LocalCluster.node_ip``), and a client that connects to
  ``127.0.0.1:PORT`` is redirected to it. The dashboard binds to 127.0.0.1.
- The C++ servers (GCS, raylets, object managers, core workers) listen on every
  interface whatever the flags say; token authentication is what keeps other hosts out.
  The dashboard asks for the token too (``Authorization: Bearer <token>``).
- Several nodes on one host need ports of their own: each node gets its own temp dir,
  and lets the OS pick its dashboard agent port and its workers' ports (the defaults,
  52365 and 10002-19999, are the same for every node).
- A client with a wrong token is refused only after Ray has retried the GCS once a
  second ``RAY_NUM_REDIS_GET_RETRIES`` times (20 by default); set it to 1-2 in a client
  that should fail fast. A node (``ray start --address``) with a wrong token fails the
  same way, before it spawns anything.

Importing this module starts nothing and imports no Ray: it drives the ``ray`` command
line, and asks the GCS about nodes through a short Python subprocess.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["LocalCluster", "LOOPBACK"]

#: The address every node is started on, and the host part of the address handed out.
LOOPBACK = "127.0.0.1"
#: Files in the state dir.
STATE_FILE = "cluster.json"
TOKEN_FILE = "token"
HEAD_LOG = "head.log"
#: Seconds a node may take to start and register before the start counts as failed.
START_TIMEOUT_S = 90.0
#: Seconds a SIGTERM'd node gets to exit before it is SIGKILL'd.
STOP_GRACE_S = 10.0
#: Object store of each node, in bytes (Ray's own default is 30 % of RAM for every node).
DEFAULT_OBJECT_STORE_BYTES = 256 * 1024 * 1024
#: Ray refuses object stores smaller than this (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES).
MIN_OBJECT_STORE_BYTES = 75 * 1024 * 1024
#: Resources Ray manages itself; ``--resources`` must not name them.
_RESERVED_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_STATE_VERSION = 1

# Asks the GCS for its node table and prints it as one JSON line. Modes: "list" (once),
# "temp_dir DIR" (until a node started with --temp-dir=DIR is alive), "count N" (until
# exactly N nodes are alive). Ends at the deadline either way; the caller judges.
_PROBE = r"""
import json, sys, time
from ray._raylet import GcsClient
from ray.core.generated.gcs_pb2 import GcsNodeInfo

address, mode, arg = sys.argv[1], sys.argv[2], sys.argv[3]
deadline = time.monotonic() + float(sys.argv[4])
ALIVE = GcsNodeInfo.GcsNodeState.ALIVE
client = None
while client is None:
    try:
        client = GcsClient(address=address)
    except Exception:
        if time.monotonic() > deadline:
            raise
        time.sleep(0.25)
while True:
    nodes = [
        {"node_id": info.node_id.hex(), "alive": info.state == ALIVE,
         "ip": info.node_manager_address, "head": bool(info.is_head_node),
         "temp_dir": info.temp_dir, "resources": dict(info.resources_total)}
        for info in client.get_all_node_info(timeout=10).values()
    ]
    alive = [n for n in nodes if n["alive"]]
    done = (mode == "list"
            or (mode == "temp_dir" and any(n["temp_dir"] == arg for n in alive))
            or (mode == "count" and len(alive) == int(arg)))
    if done or time.monotonic() > deadline:
        print(json.dumps(nodes), flush=True)
        break
    time.sleep(0.25)
"""


@dataclass
class _Node:
    """One ``ray start --block`` process: the leader of its own process group."""

    name: str
    role: str  # "head" or "worker"
    pid: int  # also the process group id (started with start_new_session=True)
    start_ticks: int | None  # start time from /proc, to tell the pid from a reused one
    temp_dir: str
    log: str
    cpus: int
    gpus: int = 0
    resources: dict[str, float] = field(default_factory=dict)
    node_id: str | None = None


class LocalCluster:
    """A Ray cluster of separate ``ray start`` processes on this host, token auth on.

    Contracts:

    - The constructor only validates (eagerly: a bad argument raises ``TypeError`` or
      ``ValueError`` before anything starts) and starts nothing.
    - ``start_head`` starts the head; ``add_worker`` adds a worker node; both return only
      once the GCS lists the new node as alive, and raise ``RuntimeError`` (with the tail
      of the node's log) if it is not alive within ``start_timeout_s``, after killing
      what they started.
    - Each node runs in a session of its own with its own short temp dir under /tmp
      (Ray's unix sockets live there, and AF_UNIX paths stop at 107 bytes). Each node's
      output goes to ``head.log`` / ``worker-NAME.log`` in the state dir.
    - ``remove_worker`` and ``stop`` kill only process groups this cluster started, and
      return once those processes have exited. ``stop`` is idempotent, and so is leaving
      the ``with`` block.
    - The token: ``RAY_AUTH_TOKEN`` from the environment if set, else a new random one.
      It is written to ``<state_dir>/token`` (mode 0600) while the cluster runs, for
      clients that use ``RAY_AUTH_TOKEN_PATH``, and removed by ``stop``.
    - The state (pids, ports, address, token path) is saved to ``<state_dir>/cluster.json``
      after every change, so that ``LocalCluster.load`` in another process can stop it.
    - Nodes claim no GPUs unless asked (``gpus=``): nodes on one host would otherwise each
      claim every GPU of the host.
    """

    def __init__(
        self,
        *,
        state_dir: str | Path,
        head_cpus: int = 1,
        dashboard: bool = False,
        ray_bin: str | None = None,
        object_store_bytes: int = DEFAULT_OBJECT_STORE_BYTES,
        extra_env: Mapping[str, str] | None = None,
        start_timeout_s: float = START_TIMEOUT_S,
    ) -> None:
        """Validate the settings; start nothing.

        Args:
            state_dir: where the state file, the token file and the logs go (created on
                ``start_head``). It must not hold a cluster that is still running.
            head_cpus: CPUs the head offers to tasks (0: the head runs none).
            dashboard: run Ray's dashboard on 127.0.0.1 at a free port.
            ray_bin: the ``ray`` executable; default: the one beside this Python, else
                the one on PATH.
            object_store_bytes: object store size of each node.
            extra_env: more environment for every Ray process, e.g. ``RAY_*`` settings
                such as ``RAY_health_check_period_ms``.
            start_timeout_s: how long a node may take to start and register.
        """
        if not isinstance(state_dir, (str, Path)) or not str(state_dir):
            raise TypeError(f"state_dir must be a non-empty str or Path, not {state_dir!r}")
        _check_int("head_cpus", head_cpus, minimum=0)
        if not isinstance(dashboard, bool):
            raise TypeError(f"dashboard must be a bool, not {dashboard!r}")
        _check_int("object_store_bytes", object_store_bytes, minimum=MIN_OBJECT_STORE_BYTES)
        if not isinstance(start_timeout_s, (int, float)) or isinstance(start_timeout_s, bool) \
                or not start_timeout_s > 0:
            raise ValueError(f"start_timeout_s must be a positive number, not {start_timeout_s!r}")
        env_extra = dict(extra_env or {})
        for key, value in env_extra.items():
            if not isinstance(key, str) or not isinstance(value, str):
                raise TypeError(f"extra_env must map str to str, not {key!r}: {value!r}")
        self._state_dir = Path(state_dir).expanduser().absolute()
        if self._state_dir.exists() and not self._state_dir.is_dir():
            raise ValueError(f"state_dir {str(self._state_dir)!r} exists and is not a directory")
        self._ray_bin = _find_ray_bin(ray_bin)
        self._head_cpus = head_cpus
        self._dashboard = dashboard
        self._object_store_bytes = object_store_bytes
        self._extra_env = env_extra
        self._start_timeout_s = float(start_timeout_s)
        self._token = os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(16)
        self._gcs_port: int | None = None
        self._dashboard_port: int | None = None
        self._node_ip: str | None = None
        self._head: _Node | None = None
        self._workers: dict[str, _Node] = {}
        self._procs: dict[int, subprocess.Popen] = {}  # pid -> Popen, for nodes this process started
        self._stopped = False
        if self.state_file.exists():
            try:
                previous = LocalCluster.load(self._state_dir)
            except (ValueError, OSError):
                previous = None
            if previous is not None and previous.pids():
                raise ValueError(
                    f"state_dir {str(self._state_dir)!r} holds a running cluster "
                    f"({previous.address}); stop it first (LocalCluster.load(...).stop())")

    # ----------------------------------------------------------------- properties

    @property
    def state_dir(self) -> Path:
        """The directory of the state file, the token file and the logs."""
        return self._state_dir

    @property
    def state_file(self) -> Path:
        """``<state_dir>/cluster.json``."""
        return self._state_dir / STATE_FILE

    @property
    def token_path(self) -> Path:
        """``<state_dir>/token``: the token, mode 0600, while the cluster runs."""
        return self._state_dir / TOKEN_FILE

    @property
    def address(self) -> str:
        """The GCS address, ``127.0.0.1:PORT``. Raises ``RuntimeError`` before ``start_head``."""
        if self._gcs_port is None:
            raise RuntimeError("the cluster has no head yet: call start_head() first")
        return f"{LOOPBACK}:{self._gcs_port}"

    @property
    def dashboard_url(self) -> str | None:
        """``http://127.0.0.1:PORT`` when started with ``dashboard=True``, else None.

        The dashboard wants the token: ``Authorization: Bearer <token>`` from API clients.
        """
        if not self._dashboard or self._dashboard_port is None:
            return None
        return f"http://{LOOPBACK}:{self._dashboard_port}"

    @property
    def env(self) -> dict[str, str]:
        """What a client needs in its environment: RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_ADDRESS."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self._token, "RAY_ADDRESS": self.address}

    @property
    def node_ip(self) -> str | None:
        """The IP the nodes registered under (Ray 2.60 on Linux: the host's routable IP,
        not 127.0.0.1, see the module docstring); None before ``start_head``."""
        return self._node_ip

    @property
    def workers(self) -> list[str]:
        """Names of the worker nodes this cluster started and has not removed."""
        return list(self._workers)

    # ------------------------------------------------------------------ lifecycle

    def start_head(self) -> str:
        """Start the head node and return the GCS address ``127.0.0.1:PORT``.

        Returns once the GCS port accepts connections (and the dashboard's, if any) and
        the GCS lists the head node as alive. Raises ``RuntimeError`` with the tail of
        ``head.log`` if that takes longer than ``start_timeout_s`` or the head exits, and
        if the cluster already has a head or was stopped.
        """
        if self._head is not None or self._stopped:
            raise RuntimeError("start_head() runs once per LocalCluster")
        self._state_dir.mkdir(parents=True, exist_ok=True)
        _write_private(self.token_path, self._token)
        self._gcs_port = _free_port()
        self._dashboard_port = _free_port()
        temp_dir = tempfile.mkdtemp(prefix="csr-", dir="/tmp")
        log = self._state_dir / HEAD_LOG
        args = [
            "--head", f"--port={self._gcs_port}", f"--num-cpus={self._head_cpus}",
            f"--include-dashboard={'true' if self._dashboard else 'false'}",
            f"--dashboard-host={LOOPBACK}",
            # Even without the dashboard, the head runs a small dashboard process on
            # this port (8265 by default, which another Ray on the host may hold).
            f"--dashboard-port={self._dashboard_port}",
            f"--ray-client-server-port={_free_port()}",
        ]
        # Fixed default ports of the head's metrics servers (44217, 44227); free ones
        # keep two clusters on one host apart.
        env = {"AUTOSCALER_METRIC_PORT": str(_free_port()), "DASHBOARD_METRIC_PORT": str(_free_port())}
        deadline = time.monotonic() + self._start_timeout_s
        node = self._spawn("head", "head", temp_dir, log, args, cpus=self._head_cpus, gpus=0,
                           resources={}, env=env)
        self._head = node
        try:
            self._wait_port(node, self._gcs_port, deadline, "the GCS port")
            if self._dashboard:
                self._wait_port(node, self._dashboard_port, deadline, "the dashboard port")
            info = self._wait_registered(node, deadline)
        except BaseException:
            self._kill([node], hard=True)
            self._head = None
            self._gcs_port = None
            shutil.rmtree(temp_dir, ignore_errors=True)
            self.token_path.unlink(missing_ok=True)
            raise
        node.node_id = info["node_id"]
        self._node_ip = info["ip"]
        self.save_state()
        return self.address

    def add_worker(self, *, cpus: int = 1, resources: dict[str, float] | None = None,
                   name: str | None = None, gpus: int = 0) -> str:
        """Start a worker node and return its name (the handle for ``remove_worker``).

        Runs ``ray start --block --address=... --node-ip-address=127.0.0.1 --num-cpus=..
        --resources='<json>'`` in a session of its own, with its own temp dir, and
        returns once the GCS lists the node (found by its temp dir) as alive. Raises
        ``RuntimeError`` with the tail of ``worker-NAME.log`` if that takes longer than
        ``start_timeout_s`` or the node exits (the node is killed first).

        Args:
            cpus: CPUs the node offers.
            resources: custom resources, e.g. ``{"standin_gpu": 2}`` (not CPU, GPU,
                memory or object_store_memory).
            name: letters, digits, ``_`` and ``-``, unique among this cluster's workers;
                default ``w1``, ``w2``, ...
            gpus: GPUs the node claims (default 0).
        """
        _check_int("cpus", cpus, minimum=0)
        _check_int("gpus", gpus, minimum=0)
        res = _check_resources(resources)
        if name is None:
            n = len(self._workers) + 1
            while f"w{n}" in self._workers:
                n += 1
            name = f"w{n}"
        if not isinstance(name, str) or not _NAME.match(name):
            raise ValueError(f"worker name must be 1-32 letters, digits, '_' or '-', not {name!r}")
        if name in self._workers:
            raise ValueError(f"a worker named {name!r} already exists")
        if self._head is None or self._stopped:
            raise RuntimeError("add_worker() needs a running head: call start_head() first")
        temp_dir = tempfile.mkdtemp(prefix="csr-", dir="/tmp")
        log = self._state_dir / f"worker-{name}.log"
        args = [f"--address={self.address}", f"--num-cpus={cpus}"]
        if res:
            args.append(f"--resources={json.dumps(res)}")
        deadline = time.monotonic() + self._start_timeout_s
        node = self._spawn(name, "worker", temp_dir, log, args, cpus=cpus, gpus=gpus, resources=res, env={})
        try:
            info = self._wait_registered(node, deadline)
        except BaseException:
            self._kill([node], hard=True)
            shutil.rmtree(temp_dir, ignore_errors=True)
            raise
        node.node_id = info["node_id"]
        self._workers[name] = node
        self.save_state()
        return name

    def remove_worker(self, name: str, *, hard: bool = True) -> None:
        """Kill worker node ``name``'s process group, standing in for a lost node.

        ``hard``: SIGKILL to the whole group, so that the node just vanishes and the GCS
        finds out through its health checks (about 15 s with Ray's defaults); otherwise
        SIGTERM to the node's ``ray start``, a graceful shutdown in 1-3 s that the GCS
        learns of at once (SIGKILL to the group after ``STOP_GRACE_S``). Returns
        once the node's processes have exited; the GCS may still list the node as alive
        for a while (see ``wait_for_nodes``). Raises ``KeyError`` for an unknown name.
        """
        if name not in self._workers:
            raise KeyError(f"no worker named {name!r} (workers: {sorted(self._workers)})")
        node = self._workers.pop(name)
        self._kill([node], hard=hard)
        shutil.rmtree(node.temp_dir, ignore_errors=True)
        self.save_state()

    def stop(self) -> None:
        """Kill every process group this cluster started and wait for them; idempotent.

        SIGTERM to each node's ``ray start`` first (an orderly shutdown), SIGKILL to the
        groups for what is left after ``STOP_GRACE_S``. Removes the nodes'
        temp dirs and the token file; keeps the logs, and saves the state as stopped.
        """
        nodes = list(self._workers.values()) + ([self._head] if self._head else [])
        if nodes:
            self._kill(nodes, hard=False)
        for node in nodes:
            shutil.rmtree(node.temp_dir, ignore_errors=True)
        self._workers.clear()
        was_running = self._head is not None or not self._stopped
        self._head = None
        self._stopped = True
        self.token_path.unlink(missing_ok=True)
        if was_running and self._state_dir.is_dir():
            self.save_state()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # ---------------------------------------------------------------- the GCS view

    def nodes(self) -> list[dict[str, Any]]:
        """The GCS's node table: dicts with node_id, alive, ip, head, temp_dir, resources.

        Dead nodes stay in the table. Raises ``RuntimeError`` if the GCS cannot be asked.
        """
        return self._probe("list", "", timeout_s=10.0)

    def alive_nodes(self) -> int:
        """The number of nodes the GCS lists as alive."""
        return sum(1 for n in self.nodes() if n["alive"])

    def wait_for_nodes(self, count: int, *, timeout_s: float = 60.0) -> int:
        """Wait until the GCS lists exactly ``count`` alive nodes; return the last count seen.

        Returns early on success; on timeout returns the count it saw last (the caller
        judges), so ``assert cluster.wait_for_nodes(2) == 2`` reads as a check.
        """
        _check_int("count", count, minimum=0)
        nodes = self._probe("count", str(count), timeout_s=timeout_s)
        return sum(1 for n in nodes if n["alive"])

    def pids(self) -> list[int]:
        """Pids of the live (not zombie) processes in this cluster's process groups."""
        nodes = list(self._workers.values()) + ([self._head] if self._head else [])
        table = _process_table()
        return sorted(pid for node in nodes if self._owns(node, table)
                      for pid in _members(node.pid, table))

    # ---------------------------------------------------------------------- state

    def save_state(self) -> Path:
        """Write the state (pids, ports, address, token path) to ``<state_dir>/cluster.json``.

        Written to a temporary name and renamed, so a reader sees a whole file. The token
        itself is not in it, only the token file's path. Returns the file's path.
        """
        state = {
            "version": _STATE_VERSION,
            "stopped": self._stopped,
            "address": self.address if self._gcs_port is not None else None,
            "gcs_port": self._gcs_port,
            "dashboard": self._dashboard,
            "dashboard_port": self._dashboard_port,
            "dashboard_url": self.dashboard_url,
            "node_ip": self._node_ip,
            "token_path": str(self.token_path),
            "ray_bin": self._ray_bin,
            "head_cpus": self._head_cpus,
            "object_store_bytes": self._object_store_bytes,
            "extra_env": self._extra_env,
            "start_timeout_s": self._start_timeout_s,
            "head": asdict(self._head) if self._head else None,
            "workers": [asdict(w) for w in self._workers.values()],
        }
        self._state_dir.mkdir(parents=True, exist_ok=True)
        tmp = self.state_file.with_name(f".{STATE_FILE}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, self.state_file)
        return self.state_file

    @classmethod
    def load(cls, state_dir: str | Path) -> LocalCluster:
        """The cluster saved in ``state_dir``, ready to be stopped, inspected or grown.

        Raises ``ValueError`` if there is no readable state file there.
        """
        path = Path(state_dir).expanduser().absolute() / STATE_FILE
        try:
            state = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise ValueError(f"no readable cluster state at {str(path)!r}: {exc}") from None
        if not isinstance(state, dict) or state.get("version") != _STATE_VERSION:
            raise ValueError(f"{str(path)!r} is not a cluster state file of version {_STATE_VERSION}")
        cluster = cls.__new__(cls)
        cluster._state_dir = path.parent
        cluster._ray_bin = state["ray_bin"]
        cluster._head_cpus = state["head_cpus"]
        cluster._dashboard = state["dashboard"]
        cluster._object_store_bytes = state["object_store_bytes"]
        cluster._extra_env = dict(state.get("extra_env") or {})
        cluster._start_timeout_s = float(state.get("start_timeout_s", START_TIMEOUT_S))
        try:
            cluster._token = Path(state["token_path"]).read_text().strip()
        except OSError:
            cluster._token = ""
        cluster._gcs_port = state["gcs_port"]
        cluster._dashboard_port = state["dashboard_port"]
        cluster._node_ip = state.get("node_ip")
        cluster._head = _Node(**state["head"]) if state.get("head") else None
        cluster._workers = {w["name"]: _Node(**w) for w in state.get("workers", [])}
        cluster._procs = {}
        cluster._stopped = bool(state.get("stopped"))
        return cluster

    # ------------------------------------------------------------------ internals

    def _node_env(self, extra: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self._token, RAY_USAGE_STATS_ENABLED="0")
        env.update(self._extra_env)
        env.update(extra)
        return env

    def _spawn(self, name: str, role: str, temp_dir: str, log: Path, args: list[str], *, cpus: int,
               gpus: int, resources: dict[str, float], env: Mapping[str, str]) -> _Node:
        command = [
            self._ray_bin, "start", "--block", *args,
            f"--node-ip-address={LOOPBACK}", f"--num-gpus={gpus}", f"--temp-dir={temp_dir}",
            f"--object-store-memory={self._object_store_bytes}",
            # Several nodes on one host: let the OS pick every node's ports. The dashboard
            # agent's default (52365) and the worker port range (10002-19999) are the same
            # for every node and would collide.
            "--dashboard-agent-listen-port=0", "--min-worker-port=0", "--max-worker-port=0",
            "--disable-usage-stats",
        ]
        with open(log, "ab") as out:
            out.write(f"$ {' '.join(command)}\n".encode())
            out.flush()
            proc = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    env=self._node_env(env), cwd=str(self._state_dir), start_new_session=True)
        self._procs[proc.pid] = proc
        return _Node(name=name, role=role, pid=proc.pid, start_ticks=_start_ticks(proc.pid),
                     temp_dir=temp_dir, log=str(log), cpus=cpus, gpus=gpus, resources=resources)

    def _leader_alive(self, node: _Node) -> bool:
        proc = self._procs.get(node.pid)
        if proc is not None:
            return proc.poll() is None
        table = _process_table()
        return self._owns(node, table) and node.pid in _members(node.pid, table)

    def _failure(self, node: _Node, what: str) -> RuntimeError:
        return RuntimeError(f"{what}\n--- last lines of {node.log} ---\n{_tail(node.log)}")

    def _wait_port(self, node: _Node, port: int, deadline: float, what: str) -> None:
        while True:
            with socket.socket() as probe:
                probe.settimeout(1.0)
                if probe.connect_ex((LOOPBACK, port)) == 0:
                    return
            if not self._leader_alive(node):
                raise self._failure(node, f"the {node.role} node {node.name!r} exited before {what} "
                                          f"{LOOPBACK}:{port} accepted connections")
            if time.monotonic() > deadline:
                raise self._failure(node, f"{what} {LOOPBACK}:{port} did not accept connections within "
                                          f"{self._start_timeout_s:.0f} s")
            time.sleep(0.2)

    def _wait_registered(self, node: _Node, deadline: float) -> dict[str, Any]:
        """Poll the GCS (one probe subprocess) until the node with ``node.temp_dir`` is alive."""
        remaining = max(1.0, deadline - time.monotonic())
        probe = self._start_probe("temp_dir", node.temp_dir, remaining)
        try:
            while probe.poll() is None:
                if not self._leader_alive(node):
                    raise self._failure(node, f"the {node.role} node {node.name!r} exited before it registered")
                if time.monotonic() > deadline + 30:
                    raise self._failure(node, f"the GCS could not be asked whether node {node.name!r} registered")
                time.sleep(0.1)
            nodes = self._probe_result(probe)
        finally:
            if probe.poll() is None:
                probe.kill()
                probe.communicate()
        for info in nodes:
            if info["alive"] and _same_dir(info["temp_dir"], node.temp_dir):
                return info
        raise self._failure(node, f"the {node.role} node {node.name!r} did not register as alive with the GCS "
                                  f"within {self._start_timeout_s:.0f} s")

    def _probe_python(self) -> str:
        return _python_of(self._ray_bin)

    def _start_probe(self, mode: str, arg: str, timeout_s: float) -> subprocess.Popen:
        env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN_PATH"}
        env.update(self._extra_env)
        env.update(self.env, RAY_USAGE_STATS_ENABLED="0")
        return subprocess.Popen([self._probe_python(), "-c", _PROBE, self.address, mode, arg, str(timeout_s)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, text=True)

    @staticmethod
    def _probe_result(probe: subprocess.Popen) -> list[dict[str, Any]]:
        out, err = probe.communicate()
        lines = [line for line in out.splitlines() if line.startswith("[")]
        if probe.returncode != 0 or not lines:
            message = (err.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"cannot read the node table from the GCS: {message}")
        return json.loads(lines[-1])

    def _probe(self, mode: str, arg: str, *, timeout_s: float) -> list[dict[str, Any]]:
        probe = self._start_probe(mode, arg, timeout_s)
        try:
            probe.wait(timeout=timeout_s + 30)
        except subprocess.TimeoutExpired:
            probe.kill()
            probe.communicate()
            raise RuntimeError(f"the GCS at {self.address} did not answer within {timeout_s + 30:.0f} s") from None
        return self._probe_result(probe)

    def _owns(self, node: _Node, table: dict[int, _Proc]) -> bool:
        """Whether process group ``node.pid`` is still the one this cluster started.

        The leader, if alive, must have the recorded start time (pids are reused). If the
        leader is gone, its group can only live on as processes that started after it
        and run Ray.
        """
        leader = table.get(node.pid)
        if leader is not None:
            return node.start_ticks is None or leader.start_ticks is None or leader.start_ticks == node.start_ticks
        for pid in _members(node.pid, table):
            proc = table[pid]
            if node.start_ticks is not None and proc.start_ticks is not None and proc.start_ticks < node.start_ticks:
                return False
            if "ray" not in _cmdline(pid):
                return False
        return True

    def _kill(self, nodes: list[_Node], *, hard: bool) -> None:
        """Stop the nodes' process groups and wait until no live member is left.

        Hard: SIGKILL to each whole group. Soft: SIGTERM to each group's leader, the
        ``ray start --block`` process, which shuts its node down in order (a node is gone
        in 1-3 s that way, where SIGTERM to every process of the group at once takes
        ~10 s); SIGKILL to the group for whatever is left after ``STOP_GRACE_S``.
        """
        table = _process_table()
        owned = [n for n in nodes if self._owns(n, table)]
        steps = [("group", signal.SIGKILL)] if hard else [("leader", signal.SIGTERM), ("group", signal.SIGKILL)]
        for target, sig in steps:
            for node in owned:
                try:
                    if target == "group":
                        os.killpg(node.pid, sig)
                    elif node.pid in _members(node.pid, table):
                        os.kill(node.pid, sig)
                    else:  # the leader is gone: nothing left to shut the group down in order
                        os.killpg(node.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            deadline = time.monotonic() + STOP_GRACE_S
            while True:
                for node in owned:
                    proc = self._procs.get(node.pid)
                    if proc is not None:
                        proc.poll()  # reap the leader, our child
                table = _process_table()
                left = any(_members(n.pid, table) for n in owned)
                if not left or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            if not left:
                break
        for node in nodes:
            proc = self._procs.pop(node.pid, None)
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    pass


# ----------------------------------------------------------------- process table


@dataclass(frozen=True)
class _Proc:
    pgid: int
    state: str
    start_ticks: int | None


def _process_table() -> dict[int, _Proc]:
    """Every process on the host: pid -> (process group, state, start time).

    From /proc on Linux; elsewhere from ``ps`` (without start times).
    """
    table: dict[int, _Proc] = {}
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read().decode(errors="replace")
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[-1].split()
            # After the command name: state ppid pgrp session ... starttime (the 20th).
            table[int(entry)] = _Proc(pgid=int(fields[2]), state=fields[0], start_ticks=int(fields[19]))
        return table
    out = subprocess.run(["ps", "-A", "-o", "pid=,pgid=,stat="], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0].isdigit() and parts[1].isdigit():
            table[int(parts[0])] = _Proc(pgid=int(parts[1]), state=parts[2][0], start_ticks=None)
    return table


def _members(pgid: int, table: dict[int, _Proc]) -> list[int]:
    """Live (not zombie, not dead) processes of process group ``pgid``."""
    return [pid for pid, proc in table.items() if proc.pgid == pgid and proc.state not in ("Z", "X")]


def _start_ticks(pid: int) -> int | None:
    proc = _process_table().get(pid) if os.path.isdir("/proc/self") else None
    return proc.start_ticks if proc else None


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True)
        return out.stdout


# ------------------------------------------------------------------------ helpers


def _check_int(name: str, value: object, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")


def _check_resources(resources: Mapping[str, float] | None) -> dict[str, float]:
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise TypeError(f"resources must be a dict of name -> amount, not {resources!r}")
    checked: dict[str, float] = {}
    for key, amount in resources.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"resource names must be non-empty strings, not {key!r}")
        if key in _RESERVED_RESOURCES:
            raise ValueError(f"resource {key!r} is Ray's own: use cpus= or gpus= (or leave it to Ray)")
        if not isinstance(amount, (int, float)) or isinstance(amount, bool):
            raise TypeError(f"resource {key!r} needs a number, not {amount!r}")
        if not amount >= 0 or amount == float("inf"):
            raise ValueError(f"resource {key!r} needs a finite amount >= 0, not {amount!r}")
        checked[key] = float(amount)
    return checked


def _find_ray_bin(ray_bin: str | None) -> str:
    if ray_bin is not None:
        if not isinstance(ray_bin, str) or not ray_bin:
            raise TypeError(f"ray_bin must be a path, not {ray_bin!r}")
        found = shutil.which(ray_bin)
        if found is None:
            raise ValueError(f"ray_bin {ray_bin!r} is not an executable")
        return str(Path(found).absolute())
    beside = Path(sys.executable).with_name("ray")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("ray")
    if found is None:
        raise ValueError("no `ray` executable beside this Python or on PATH; pass ray_bin=")
    return str(Path(found).absolute())


def _python_of(ray_bin: str) -> str:
    """The Python that runs ``ray_bin`` (from its #! line), to ask the GCS with; else ours."""
    try:
        with open(ray_bin, "rb") as f:
            first = f.readline(512).decode(errors="replace").strip()
    except OSError:
        return sys.executable
    if first.startswith("#!"):
        parts = first[2:].split()
        if parts and parts[0].endswith("/env") and len(parts) > 1:
            parts = [shutil.which(parts[1]) or ""]
        if parts and parts[0] and os.access(parts[0], os.X_OK):
            return parts[0]
    return sys.executable


def _free_port() -> int:
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (tightened too if the file existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def _same_dir(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def _tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read the log: {exc})"
    return "\n".join(text.splitlines()[-lines:])
