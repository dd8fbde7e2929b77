"""The processes of a local cluster's nodes: each node is a ``ray start --block`` process
leading its own session, and a node is stopped by signalling exactly its session's
processes. (Ray puts each worker in a process group of its own, but the workers stay in
the node's session, so the session is what holds the whole node.)

Pids are reused, so a group is ours only while its leader has the start time recorded
when it was spawned (``owns``). Read from /proc on Linux; elsewhere from ``ps``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field

__all__ = ["Node", "process_table", "members", "start_ticks", "owns", "kill_nodes"]


@dataclass
class Node:
    """One ``ray start --block`` process: the leader of its own process group."""

    name: str
    role: str  # "head" or "worker"
    pid: int  # also the session and process group id (started with start_new_session=True)
    start_ticks: int | None  # start time from /proc, to tell the pid from a reused one
    temp_dir: str
    log: str
    cpus: int
    gpus: int = 0
    resources: dict[str, float] = field(default_factory=dict)
    node_id: str | None = None


@dataclass(frozen=True)
class Proc:
    """One process of the host's process table."""

    pgid: int
    sid: int
    state: str
    start_ticks: int | None


def process_table() -> dict[int, Proc]:
    """Every process on the host: pid -> (process group, session, state, start time).

    From /proc on Linux; elsewhere from ``ps`` (without start times).
    """
    table: dict[int, Proc] = {}
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
            table[int(entry)] = Proc(pgid=int(fields[2]), sid=int(fields[3]), state=fields[0],
                                     start_ticks=int(fields[19]))
        return table
    out = subprocess.run(["ps", "-A", "-o", "pid=,pgid=,sess=,stat="], capture_output=True, text=True).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) >= 4 and all(p.isdigit() for p in parts[:3]):
            table[int(parts[0])] = Proc(pgid=int(parts[1]), sid=int(parts[2]), state=parts[3][0], start_ticks=None)
    return table


def members(leader: int, table: dict[int, Proc]) -> list[int]:
    """Live (not zombie, not dead) processes of the session (or process group) that
    ``leader`` started: the node's own processes and the workers Ray put in groups of
    their own."""
    return [pid for pid, proc in table.items()
            if (proc.sid == leader or proc.pgid == leader) and proc.state not in ("Z", "X")]


def _kill_all(leader: int, table: dict[int, Proc], sig: int) -> None:
    """``sig`` to the leader's process group and to every other member of its session."""
    try:
        os.killpg(leader, sig)
    except (ProcessLookupError, PermissionError):
        pass
    for pid in members(leader, table):
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):
            pass


def start_ticks(pid: int) -> int | None:
    proc = process_table().get(pid) if os.path.isdir("/proc/self") else None
    return proc.start_ticks if proc else None


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        out = subprocess.run(["ps", "-p", str(pid), "-o", "command="], capture_output=True, text=True)
        return out.stdout


def owns(node: Node, table: dict[int, Proc]) -> bool:
    """Whether process group ``node.pid`` is still the one this cluster started.

    The leader, if alive, must have the recorded start time (pids are reused). If the
    leader is gone, its group can only live on as processes that started after it
    and run Ray.
    """
    leader = table.get(node.pid)
    if leader is not None:
        return node.start_ticks is None or leader.start_ticks is None or leader.start_ticks == node.start_ticks
    for pid in members(node.pid, table):
        proc = table[pid]
        if node.start_ticks is not None and proc.start_ticks is not None and proc.start_ticks < node.start_ticks:
            return False
        if "ray" not in cmdline(pid):
            return False
    return True


def kill_nodes(nodes: list[Node], children: dict[int, subprocess.Popen], *, hard: bool, grace_s: float) -> None:
    """Stop the nodes' sessions and wait until no live member is left; ``children``
    maps the pids of nodes this process spawned to their ``Popen`` (reaped and removed).

    Hard: SIGKILL to every member. Soft: SIGTERM to each session's leader, the
    ``ray start --block`` process, which shuts its node down in order (a node is gone
    in 1-3 s that way, where SIGTERM to every process at once takes ~10 s); SIGKILL to
    every member left after ``grace_s``.
    """
    table = process_table()
    owned = [n for n in nodes if owns(n, table)]
    steps = [("group", signal.SIGKILL)] if hard else [("leader", signal.SIGTERM), ("group", signal.SIGKILL)]
    for target, sig in steps:
        for node in owned:
            if target == "leader" and node.pid in members(node.pid, table):
                try:
                    os.kill(node.pid, sig)
                except (ProcessLookupError, PermissionError):
                    pass
            else:  # the whole node, or the leader is gone: nothing left to shut it down in order
                _kill_all(node.pid, table, signal.SIGKILL)
        deadline = time.monotonic() + grace_s
        while True:
            for node in owned:
                proc = children.get(node.pid)
                if proc is not None:
                    proc.poll()  # reap the leader, our child
            table = process_table()
            left = any(members(n.pid, table) for n in owned)
            if not left or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        if not left:
            break
    for node in nodes:
        proc = children.pop(node.pid, None)
        if proc is not None:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
