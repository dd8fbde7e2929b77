"""A multi-node Ray cluster on one host: a head and worker nodes, each its own `ray start`.

For tests, benchmarks and laptops: nodes that can be added and lost one at a time, with
token authentication on. Stopping the cluster, or losing one node, kills exactly the
process groups this cluster started (never ``ray stop``, which kills every Ray on the
host). How Ray 2.60 treats such a cluster's addresses and ports is told in
``sweeps.cluster``'s docstring. Importing this module starts nothing and imports no Ray:
it drives the ``ray`` command line (``launcher``, ``processes``) and asks the GCS about
nodes through a short Python subprocess (``gcs``).
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import tempfile
import time
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

from harness.loopback.host import (LOOPBACK, check_int, check_resources, check_settings, find_ray_bin, free_port,
                                 read_json_record, write_json_atomic, write_private)
from harness.loopback.launcher import LOOPBACK_ENV, STOP_GRACE_S, NodeLauncher
from harness.loopback.processes import Node, members, owns, process_table

__all__ = ["LocalCluster", "LOOPBACK", "STOP_GRACE_S"]

#: Files in the state dir.
STATE_FILE = "cluster.json"
TOKEN_FILE = "token"
HEAD_LOG = "head.log"
#: Seconds a node may take to start and register before the start counts as failed.
START_TIMEOUT_S = 90.0
#: Object store of each node, in bytes (Ray's own default is 30 % of RAM for every node).
DEFAULT_OBJECT_STORE_BYTES = 256 * 1024 * 1024
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")
_STATE_VERSION = 1


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
        self._state_dir, env_extra = check_settings(state_dir, head_cpus=head_cpus, dashboard=dashboard,
                                                    object_store_bytes=object_store_bytes, extra_env=extra_env,
                                                    start_timeout_s=start_timeout_s)
        self._head_cpus, self._dashboard = head_cpus, dashboard
        self._launcher = NodeLauncher(ray_bin=find_ray_bin(ray_bin), state_dir=self._state_dir,
                                      token=os.environ.get("RAY_AUTH_TOKEN") or secrets.token_hex(16),
                                      object_store_bytes=object_store_bytes, extra_env=env_extra,
                                      start_timeout_s=float(start_timeout_s))
        self._gcs_port: int | None = None
        self._dashboard_port: int | None = None
        self._node_ip: str | None = None
        self._head: Node | None = None
        self._workers: dict[str, Node] = {}
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
        """What a client needs in its environment: RAY_AUTH_MODE, RAY_AUTH_TOKEN, RAY_ADDRESS,
        and RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, which keeps a plain Ray client on 127.0.0.1
        (the nodes listen there only; ``ray_session`` does it by itself)."""
        return {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": self._launcher.token, "RAY_ADDRESS": self.address,
                **LOOPBACK_ENV}

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
        write_private(self.token_path, self._launcher.token)
        self._gcs_port = free_port()
        self._dashboard_port = free_port()
        temp_dir = tempfile.mkdtemp(prefix="csr-", dir="/tmp")
        log = self._state_dir / HEAD_LOG
        args = [
            "--head", f"--port={self._gcs_port}", f"--num-cpus={self._head_cpus}",
            f"--include-dashboard={'true' if self._dashboard else 'false'}",
            f"--dashboard-host={LOOPBACK}",
            # Even without the dashboard, the head runs a small dashboard process on
            # this port (8265 by default, which another Ray on the host may hold).
            f"--dashboard-port={self._dashboard_port}",
            f"--ray-client-server-port={free_port()}",
        ]
        # Fixed default ports of the head's metrics servers (44217, 44227); free ones
        # keep two clusters on one host apart.
        env = {"AUTOSCALER_METRIC_PORT": str(free_port()), "DASHBOARD_METRIC_PORT": str(free_port())}
        deadline = time.monotonic() + self._launcher.start_timeout_s
        node = self._launcher.spawn("head", "head", temp_dir, log, args, cpus=self._head_cpus, gpus=0,
                           resources={}, env=env)
        self._head = node
        try:
            self._launcher.wait_port(node, self._gcs_port, deadline, "the GCS port")
            if self._dashboard:
                self._launcher.wait_port(node, self._dashboard_port, deadline, "the dashboard port")
            info = self._launcher.wait_registered(node, deadline, self.address, self.env)
        except BaseException:
            self._launcher.kill([node], hard=True)
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
        check_int("cpus", cpus, minimum=0)
        check_int("gpus", gpus, minimum=0)
        res = check_resources(resources)
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
        deadline = time.monotonic() + self._launcher.start_timeout_s
        node = self._launcher.spawn(name, "worker", temp_dir, log, args, cpus=cpus, gpus=gpus, resources=res, env={})
        try:
            info = self._launcher.wait_registered(node, deadline, self.address, self.env)
        except BaseException:
            self._launcher.kill([node], hard=True)
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
        self._launcher.kill([node], hard=hard)
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
            self._launcher.kill(nodes, hard=False)
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
        return self._launcher.ask_gcs(self.address, self.env, "list", "", timeout_s=10.0)

    def alive_nodes(self) -> int:
        """The number of nodes the GCS lists as alive."""
        return sum(1 for n in self.nodes() if n["alive"])

    def wait_for_nodes(self, count: int, *, timeout_s: float = 60.0) -> int:
        """Wait until the GCS lists exactly ``count`` alive nodes; return the last count seen.

        Returns early on success; on timeout returns the count it saw last (the caller
        judges), so ``assert cluster.wait_for_nodes(2) == 2`` reads as a check.
        """
        check_int("count", count, minimum=0)
        nodes = self._launcher.ask_gcs(self.address, self.env, "count", str(count), timeout_s=timeout_s)
        return sum(1 for n in nodes if n["alive"])

    def pids(self) -> list[int]:
        """Pids of the live (not zombie) processes in this cluster's process groups."""
        nodes = list(self._workers.values()) + ([self._head] if self._head else [])
        table = process_table()
        return sorted(pid for node in nodes if owns(node, table)
                      for pid in members(node.pid, table))

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
            "ray_bin": self._launcher.ray_bin,
            "head_cpus": self._head_cpus,
            "object_store_bytes": self._launcher.object_store_bytes,
            "extra_env": self._launcher.extra_env,
            "start_timeout_s": self._launcher.start_timeout_s,
            "head": asdict(self._head) if self._head else None,
            "workers": [asdict(w) for w in self._workers.values()],
        }
        write_json_atomic(self.state_file, state)
        return self.state_file

    @classmethod
    def load(cls, state_dir: str | Path) -> LocalCluster:
        """The cluster saved in ``state_dir``, ready to be stopped, inspected or grown.

        Raises ``ValueError`` if there is no readable state file there.
        """
        path = Path(state_dir).expanduser().absolute() / STATE_FILE
        state = read_json_record(path, "cluster state", _STATE_VERSION)
        cluster = cls.__new__(cls)
        cluster._state_dir = path.parent
        cluster._head_cpus = state["head_cpus"]
        cluster._dashboard = state["dashboard"]
        token_file = Path(state["token_path"])
        token = token_file.read_text().strip() if token_file.is_file() else ""
        cluster._launcher = NodeLauncher(ray_bin=state["ray_bin"], state_dir=path.parent, token=token,
                                         object_store_bytes=state["object_store_bytes"],
                                         extra_env=dict(state.get("extra_env") or {}),
                                         start_timeout_s=float(state.get("start_timeout_s", START_TIMEOUT_S)))
        cluster._gcs_port = state["gcs_port"]
        cluster._dashboard_port = state["dashboard_port"]
        cluster._node_ip = state.get("node_ip")
        cluster._head = Node(**state["head"]) if state.get("head") else None
        cluster._workers = {w["name"]: Node(**w) for w in state.get("workers", [])}
        cluster._stopped = bool(state.get("stopped"))
        return cluster
