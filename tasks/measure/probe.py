"""Synthetic points that stand in for device measurements: they sleep, and fail on
purpose in each of the ways a real point can, so a cluster's dispatch, retries, fault
sorting and lake can be checked end to end (``commscale probe``).

``fail`` modes: "" (succeed), "die_once" (the worker process exits on the first attempt),
"transient_once" (``TransientError`` on the first attempt), "infeasible", "oom", "bug".
"Once" is tracked by marker files in ``ProbeContext.marker_dir``, shared by the workers
of one machine (or a shared filesystem).
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa

from tasks.outcomes import InfeasibleError, TransientError

__all__ = ["FAIL_MODES", "PROBE_POINT_SCHEMA", "PROBE_SCHEMA", "SCHEMA_VERSION", "ProbeContext", "probe_table"]

FAIL_MODES = ("", "die_once", "transient_once", "infeasible", "oom", "bug")
SCHEMA_VERSION = 1

PROBE_POINT_SCHEMA = pa.schema([("key", pa.string()), ("index", pa.int64()), ("sleep_s", pa.float64()),
                                ("fail", pa.string())])
PROBE_SCHEMA = pa.schema(list(PROBE_POINT_SCHEMA) + [
    ("status", pa.string()), ("reason", pa.string()), ("host", pa.string()), ("pid", pa.int64()),
    ("started", pa.float64()), ("finished", pa.float64()),
])


@dataclass(frozen=True)
class ProbeContext:
    marker_dir: str


def _first_attempt(context: ProbeContext, key: str, mode: str) -> bool:
    marker = Path(context.marker_dir) / f"{key}.{mode}"
    if marker.exists():
        return False
    marker.parent.mkdir(parents=True, exist_ok=True)
    marker.touch()
    return True


def probe_table(points: pa.Table, context: ProbeContext) -> pa.Table:
    """Run each probe point in turn (sleep, then its failure mode); returns PROBE_SCHEMA."""
    rows = []
    for point in points.to_pylist():
        started = time.time()
        mode = point["fail"]
        if mode == "die_once" and _first_attempt(context, point["key"], mode):
            os._exit(17)  # the worker dies; the dispatcher's retry runs the chunk again
        if mode == "transient_once" and _first_attempt(context, point["key"], mode):
            raise TransientError(f"probe {point['index']}: transient fault on the first attempt")
        if mode == "infeasible":
            raise InfeasibleError(f"probe {point['index']} asks for more memory than the device has")
        if mode == "oom":
            raise MemoryError(f"probe {point['index']} ran out of memory")
        if mode == "bug":
            raise ZeroDivisionError(f"probe {point['index']}: a bug in the measurement code")
        time.sleep(point["sleep_s"])
        rows.append({**point, "status": "ok", "reason": None, "host": socket.gethostname(), "pid": os.getpid(),
                     "started": started, "finished": time.time()})
    return pa.Table.from_pylist(rows, schema=PROBE_SCHEMA)
