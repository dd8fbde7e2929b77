"""Which TCP ports a set of processes listens on, and whether one answers without a token.

Read from /proc (Linux): the listening sockets of ``/proc/net/tcp`` and ``tcp6`` whose
inodes the processes hold. ``python scripts/cluster.py status`` prints them for a loopback
cluster, and a test asserts that no listener beyond loopback answers without the token.
"""

from __future__ import annotations

import os
import socket
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional

__all__ = ["Listener", "listeners", "descendants", "answers_without_token", "is_loopback"]

_LISTEN = "0A"


@dataclass(frozen=True)
class Listener:
    """One listening TCP socket: its address, port, and the process that holds it."""

    address: str
    port: int
    pid: int
    process: str

    @property
    def loopback(self) -> bool:
        return is_loopback(self.address)


def is_loopback(address: str) -> bool:
    """127.0.0.0/8, ::1, or an IPv4-mapped loopback address."""
    bare = address[7:] if address.startswith("::ffff:") else address
    return bare.startswith("127.") or bare == "::1"


def _socket_inodes(pids: Iterable[int]) -> Dict[str, int]:
    inodes: Dict[str, int] = {}
    for pid in pids:
        try:
            names = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for name in names:
            try:
                target = os.readlink(f"/proc/{pid}/fd/{name}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes[target[8:-1]] = pid
    return inodes


def _address(hex_address: str, family: int) -> str:
    raw = bytes.fromhex(hex_address)
    if family == socket.AF_INET:
        return socket.inet_ntop(family, raw[::-1])
    return socket.inet_ntop(family, b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))


def _process(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            words = handle.read().split(b"\0")
    except OSError:
        return "?"
    names = [w.decode(errors="replace") for w in words if w]
    return " ".join(os.path.basename(n) if i == 0 else n for i, n in enumerate(names[:3]))[:80]


def listeners(pids: Iterable[int]) -> List[Listener]:
    """The listening TCP sockets held by ``pids``, sorted by address and port."""
    inodes = _socket_inodes(pids)
    found = []
    for path, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
        try:
            with open(path) as handle:
                lines = handle.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if fields[3] != _LISTEN or fields[9] not in inodes:
                continue
            hex_address, hex_port = fields[1].split(":")
            pid = inodes[fields[9]]
            found.append(Listener(_address(hex_address, family), int(hex_port, 16), pid, _process(pid)))
    return sorted(set(found), key=lambda x: (x.address, x.port))


def descendants(pid: int) -> List[int]:
    """``pid`` and every process below it."""
    children: Dict[int, List[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                parent = int(handle.read().decode(errors="replace").rsplit(")", 1)[-1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    out, stack = [], [pid]
    while stack:
        current = stack.pop()
        out.append(current)
        stack.extend(children.get(current, []))
    return out


def answers_without_token(listener: Listener, timeout_s: float = 2.0) -> Optional[str]:
    """The path that an HTTP GET without a token gets a 200 for (``/metrics`` or ``/``), or
    None: a listener that refuses, asks for the token, or does not speak HTTP/1.1 (Ray's
    gRPC servers, which check the token themselves)."""
    host = "127.0.0.1" if listener.address in ("0.0.0.0", "::") else listener.address.replace("::ffff:", "")
    host = f"[{host}]" if ":" in host else host
    for path in ("/metrics", "/"):
        try:
            with urllib.request.urlopen(f"http://{host}:{listener.port}{path}", timeout=timeout_s) as reply:
                if reply.status == 200:
                    return path
        except (urllib.error.URLError, OSError, ValueError):
            continue
        except Exception:  # noqa: BLE001 - a non-HTTP peer (BadStatusLine and the like)
            continue
    return None
