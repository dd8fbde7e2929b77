"""What a local cluster needs of this host: validated settings, the ``ray`` executable, free
loopback ports, private files, and the tail of a node's log."""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["LOOPBACK", "RESERVED_RESOURCES", "MIN_OBJECT_STORE_BYTES", "check_settings", "check_int", "check_resources",
           "find_ray_bin", "free_port", "ephemeral_ports", "EXPLICIT_PORTS_FROM", "DEFAULT_EPHEMERAL_PORTS",
           "write_private", "write_json_atomic", "read_json_record", "same_dir", "tail"]

#: The address every node is started on, and the host part of the address handed out.
LOOPBACK = "127.0.0.1"
#: Resources Ray manages itself; ``--resources`` must not name them.
RESERVED_RESOURCES = {"CPU", "GPU", "memory", "object_store_memory"}


def check_int(name: str, value: object, *, minimum: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be >= {minimum}, not {value}")


def check_resources(resources: Mapping[str, float] | None) -> dict[str, float]:
    if resources is None:
        return {}
    if not isinstance(resources, Mapping):
        raise TypeError(f"resources must be a dict of name -> amount, not {resources!r}")
    checked: dict[str, float] = {}
    for key, amount in resources.items():
        if not isinstance(key, str) or not key:
            raise TypeError(f"resource names must be non-empty strings, not {key!r}")
        if key in RESERVED_RESOURCES:
            raise ValueError(f"resource {key!r} is Ray's own: use cpus= or gpus= (or leave it to Ray)")
        if not isinstance(amount, (int, float)) or isinstance(amount, bool):
            raise TypeError(f"resource {key!r} needs a number, not {amount!r}")
        if not amount >= 0 or amount == float("inf"):
            raise ValueError(f"resource {key!r} needs a finite amount >= 0, not {amount!r}")
        checked[key] = float(amount)
    return checked


def find_ray_bin(ray_bin: str | None) -> str:
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


#: Where ``free_port`` looks: above Ray's default worker ports (10002-19999, which an embedded
#: Ray binds by number) and below the kernel's ephemeral range (``ephemeral_ports``).
EXPLICIT_PORTS_FROM = 20000
#: Linux's ephemeral range when the kernel does not say (its default; macOS starts at 49152).
DEFAULT_EPHEMERAL_PORTS = (32768, 60999)


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The range the kernel hands out for port 0 and for every outgoing connection's local
    end (Linux's ``ip_local_port_range``; ``DEFAULT_EPHEMERAL_PORTS`` where it cannot be read)."""
    try:
        low, high = (int(x) for x in path.read_text().split()[:2])
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL_PORTS
    return low, high


def free_port() -> int:
    """A loopback TCP port free now, chosen below the kernel's ephemeral range: a node is told
    the port and binds it seconds later, and a port the kernel picked for port 0 could be handed
    to another process in between (each of Ray's servers binding port 0, each outgoing
    connection), as a GCS once found its port taken. Falls back to the kernel's pick when every
    try in the range is taken."""
    high = max(EXPLICIT_PORTS_FROM + 1, min(ephemeral_ports()[0], 65536))
    chooser = random.SystemRandom()
    for _ in range(200):
        port = chooser.randrange(EXPLICIT_PORTS_FROM, high)
        with socket.socket() as s:
            try:
                s.bind((LOOPBACK, port))
            except OSError:
                continue
            return port
    with socket.socket() as s:
        s.bind((LOOPBACK, 0))
        return s.getsockname()[1]


def write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` with mode 0600 (tightened too if the file existed)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def same_dir(a: str, b: str) -> bool:
    return a == b or os.path.realpath(a) == os.path.realpath(b)


def tail(path: str, lines: int = 30) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 16384))
            text = f.read().decode(errors="replace")
    except OSError as exc:
        return f"(cannot read the log: {exc})"
    return "\n".join(text.splitlines()[-lines:])


#: Ray refuses object stores smaller than this (ray_constants.OBJECT_STORE_MINIMUM_MEMORY_BYTES).
MIN_OBJECT_STORE_BYTES = 75 * 1024 * 1024


def check_settings(state_dir: object, *, head_cpus: object, dashboard: object, object_store_bytes: object,
                   extra_env: object, start_timeout_s: object) -> tuple[Path, dict[str, str]]:
    """Check a local cluster's settings eagerly (``TypeError`` or ``ValueError`` naming the
    argument); returns the absolute state dir and the extra environment as a dict."""
    if not isinstance(state_dir, (str, Path)) or not str(state_dir):
        raise TypeError(f"state_dir must be a non-empty str or Path, not {state_dir!r}")
    check_int("head_cpus", head_cpus, minimum=0)
    if not isinstance(dashboard, bool):
        raise TypeError(f"dashboard must be a bool, not {dashboard!r}")
    check_int("object_store_bytes", object_store_bytes, minimum=MIN_OBJECT_STORE_BYTES)
    if not isinstance(start_timeout_s, (int, float)) or isinstance(start_timeout_s, bool) \
            or not start_timeout_s > 0:
        raise ValueError(f"start_timeout_s must be a positive number, not {start_timeout_s!r}")
    env_extra = dict(extra_env or {})  # type: ignore[call-overload]
    for key, value in env_extra.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"extra_env must map str to str, not {key!r}: {value!r}")
    directory = Path(state_dir).expanduser().absolute()
    if directory.exists() and not directory.is_dir():
        raise ValueError(f"state_dir {str(directory)!r} exists and is not a directory")
    return directory, env_extra


def write_json_atomic(path: Path, record: dict) -> None:
    """Write ``record`` as JSON to ``path`` under a temporary name, then rename: a reader
    sees a whole file or none."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(record, indent=2) + "\n")
    os.replace(temporary, path)


def read_json_record(path: Path, what: str, version: int) -> dict:
    """A JSON record of ``version`` from ``path``; ``ValueError`` naming ``what`` otherwise."""
    try:
        record = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ValueError(f"no readable {what} at {str(path)!r}: {exc}") from None
    if not isinstance(record, dict) or record.get("version") != version:
        raise ValueError(f"{str(path)!r} is not a {what} file of version {version}")
    return record
