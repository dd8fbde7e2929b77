"""Starting one node of a local cluster and waiting until it serves: a ``ray start --block``
process in a session of its own, its log, its ports, and its registration with the GCS."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sweeps.cluster.gcs import ask_node_table, node_query_result, python_of, start_node_query
from harness.loopback.host import LOOPBACK, same_dir, tail
from harness.loopback.processes import Node, kill_nodes, members, owns, process_table, start_ticks

__all__ = ["NodeLauncher", "STOP_GRACE_S", "RAY_START_PROGRAM", "LOOPBACK_ENV"]

#: Seconds a SIGTERM'd node gets to exit before it is SIGKILL'd.
STOP_GRACE_S = 10.0

#: The program each node runs: ``ray start`` with every process of the node kept on 127.0.0.1
#: (``ray_start``, which says why).
RAY_START_PROGRAM = str(Path(__file__).with_name("ray_start.py"))

#: Environment under which a Ray process (not ``ray start``) takes 127.0.0.1 for its own
#: address: a node's children, and a client of a cluster on loopback.
LOOPBACK_ENV = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"}


class NodeLauncher:
    """Spawns, watches and stops the nodes of one cluster (all with the same ``ray``
    executable, object store size, extra environment and token).

    ``children`` maps the pids of the nodes this process spawned to their ``Popen``.
    """

    def __init__(self, *, ray_bin: str, state_dir: Path, token: str, object_store_bytes: int,
                 extra_env: Mapping[str, str], start_timeout_s: float) -> None:
        self.ray_bin, self.state_dir, self.token = ray_bin, state_dir, token
        self.object_store_bytes, self.extra_env = object_store_bytes, dict(extra_env)
        self.start_timeout_s = start_timeout_s
        self.children: dict[int, subprocess.Popen] = {}

    def node_env(self, extra: Mapping[str, str]) -> dict[str, str]:
        """The environment of a node: token authentication on, no usage stats."""
        env = {k: v for k, v in os.environ.items() if k not in ("RAY_ADDRESS", "RAY_AUTH_TOKEN_PATH")}
        env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=self.token, RAY_USAGE_STATS_ENABLED="0", **LOOPBACK_ENV)
        env.update(self.extra_env)
        env.update(extra)
        return env

    def spawn(self, name: str, role: str, temp_dir: str, log: Path, args: list[str], *, cpus: int,
              gpus: int, resources: dict[str, float], env: Mapping[str, str]) -> Node:
        """Start ``ray start --block ARGS`` on loopback, its output appended to ``log``."""
        command = [
            python_of(self.ray_bin), RAY_START_PROGRAM, "start", "--block", *args,
            f"--node-ip-address={LOOPBACK}", f"--num-gpus={gpus}", f"--temp-dir={temp_dir}",
            f"--object-store-memory={self.object_store_bytes}",
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
                                    env=self.node_env(env), cwd=str(self.state_dir), start_new_session=True)
        self.children[proc.pid] = proc
        return Node(name=name, role=role, pid=proc.pid, start_ticks=start_ticks(proc.pid),
                    temp_dir=temp_dir, log=str(log), cpus=cpus, gpus=gpus, resources=resources)

    def leader_alive(self, node: Node) -> bool:
        proc = self.children.get(node.pid)
        if proc is not None:
            return proc.poll() is None
        table = process_table()
        return owns(node, table) and node.pid in members(node.pid, table)

    @staticmethod
    def failure(node: Node, what: str) -> RuntimeError:
        return RuntimeError(f"{what}\n--- last lines of {node.log} ---\n{tail(node.log)}")

    def wait_port(self, node: Node, port: int, deadline: float, what: str) -> None:
        """Return once ``127.0.0.1:port`` accepts connections; ``RuntimeError`` if the node
        exits first or the deadline passes."""
        while True:
            with socket.socket() as sock:
                sock.settimeout(1.0)
                if sock.connect_ex((LOOPBACK, port)) == 0:
                    return
            if not self.leader_alive(node):
                raise self.failure(node, f"the {node.role} node {node.name!r} exited before {what} "
                                         f"{LOOPBACK}:{port} accepted connections")
            if time.monotonic() > deadline:
                raise self.failure(node, f"{what} {LOOPBACK}:{port} did not accept connections within "
                                         f"{self.start_timeout_s:.0f} s")
            time.sleep(0.2)

    def gcs_env(self, client_env: Mapping[str, str]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_TOKEN_PATH"}
        env.update(self.extra_env)
        env.update(client_env, RAY_USAGE_STATS_ENABLED="0")
        return env

    def ask_gcs(self, address: str, client_env: Mapping[str, str], mode: str, arg: str, *,
                timeout_s: float) -> list[dict[str, Any]]:
        return ask_node_table(python_of(self.ray_bin), address, self.gcs_env(client_env), mode, arg,
                              timeout_s=timeout_s)

    def wait_registered(self, node: Node, deadline: float, address: str, client_env: Mapping[str, str]
                        ) -> dict[str, Any]:
        """Poll the GCS (one query subprocess) until the node with ``node.temp_dir`` is alive."""
        remaining = max(1.0, deadline - time.monotonic())
        query = start_node_query(python_of(self.ray_bin), address, self.gcs_env(client_env), "temp_dir",
                                 node.temp_dir, remaining)
        try:
            while query.poll() is None:
                if not self.leader_alive(node):
                    raise self.failure(node, f"the {node.role} node {node.name!r} exited before it registered")
                if time.monotonic() > deadline + 30:
                    raise self.failure(node, f"the GCS could not be asked whether node {node.name!r} registered")
                time.sleep(0.1)
            nodes = node_query_result(query)
        finally:
            if query.poll() is None:
                query.kill()
                query.communicate()
        for info in nodes:
            if info["alive"] and same_dir(info["temp_dir"], node.temp_dir):
                return info
        raise self.failure(node, f"the {node.role} node {node.name!r} did not register as alive with the GCS "
                                 f"within {self.start_timeout_s:.0f} s")

    def kill(self, nodes: list[Node], *, hard: bool) -> None:
        kill_nodes(nodes, self.children, hard=hard, grace_s=STOP_GRACE_S)
