"""The bounds of the work and the inputs a command takes on before it starts, as data in one
place, and their checks.

A sweep of 10^9 points, a runs file of 10^6 rows or a YAML file of gigabytes is never what
a user meant; each would run for hours or exhaust the machine's memory before its first
result. Each is refused before any work and before the lake is touched, in one line naming
the figure and its bound; ``--allow-large`` (``sweeps.cli.options.allow_large_option``) goes
on all the same. The bounds lie far beyond every shipped preset and published dataset.
"""

from __future__ import annotations

import os
from typing import Optional

from sweeps.errors import UserError

__all__ = ["MAX_POINTS", "MAX_YAML_BYTES", "ALLOW_LARGE", "available_memory", "check_points"]

#: Points (configurations x scenarios) a sweep may plan: the largest shipped grid plans
#: about 10^4, a projection runs about 10^6 a second.
MAX_POINTS = 10**8
#: Bytes of a YAML config file (a preset given by path): a shipped preset is under 10 KiB.
MAX_YAML_BYTES = 2**20
#: What each refusal says to go on.
ALLOW_LARGE = "pass --allow-large to go on"


def available_memory() -> int:
    """Bytes of memory this machine can give a process now: ``MemAvailable`` of
    ``/proc/meminfo``, else the physical memory (``sysconf``)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _gb(nbytes: float) -> str:
    return f"{nbytes / 1e9:,.1f} GB"


def check_points(what: str, points: int, bytes_per_point: float, *, allow_large: bool,
                 available: Optional[int] = None) -> None:
    """Refuse (``UserError``) ``points`` beyond ``MAX_POINTS``, or whose driver memory
    (``points`` x ``bytes_per_point``, bytes) exceeds ``available`` (default:
    ``available_memory()``), unless ``allow_large``. ``what`` names the work ("sweep
    table2")."""
    if allow_large:
        return
    if points > MAX_POINTS:
        raise UserError(f"{what}: {points:,} points exceed the bound of {MAX_POINTS:,} points; narrow the grid, "
                        f"or {ALLOW_LARGE}")
    needed = points * bytes_per_point
    available = available_memory() if available is None else available
    if needed > available:
        raise UserError(f"{what}: {points:,} points would take about {_gb(needed)} of driver memory "
                        f"({bytes_per_point:,.0f} bytes a point), more than the {_gb(available)} this machine has "
                        f"available; narrow the grid, or {ALLOW_LARGE}")
