"""How a point ends, decided where it runs: plain functions, no Ray.

- transient (``TransientError``, ``ConnectionError``): re-raised, so the dispatcher's
  retries run the chunk again;
- infeasible (``InfeasibleError``) or out of memory (``MemoryError``, torch's
  ``OutOfMemoryError``): a result row with ``status`` and ``reason``, a final answer;
- anything else is a bug: a failure row with the traceback, and the run fails loudly.

A chunk runs as one vectorised call; only when that raises does each point run alone, so
one bad point does not take its neighbours down with it.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional

import pyarrow as pa

__all__ = [
    "TransientError",
    "InfeasibleError",
    "STATUS_OK",
    "STATUS_INFEASIBLE",
    "STATUS_OOM",
    "FAILURE_SCHEMA",
    "ChunkOutcome",
    "classify",
    "status_rows",
    "run_chunk",
]

STATUS_OK, STATUS_INFEASIBLE, STATUS_OOM = "ok", "infeasible", "oom"


class TransientError(RuntimeError):
    """A fault worth retrying as is (a flaky link, a busy device)."""


class InfeasibleError(ValueError):
    """The point cannot run here (does not fit, unsupported): a result, not a crash."""


#: One failed attempt at a point (kind ``failure`` in the lake).
FAILURE_SCHEMA = pa.schema(
    [
        ("key", pa.string()),  # point key @ run id: every run's failure is kept
        ("point_key", pa.string()),
        ("result_kind", pa.string()),
        ("status", pa.string()),  # error | timeout | lost
        ("error_type", pa.string()),
        ("message", pa.string()),
        ("traceback", pa.string()),
        ("run_id", pa.string()),
        ("time", pa.float64()),
    ]
)


@dataclass
class ChunkOutcome:
    """Result rows (ok, infeasible, oom) and failures (bugs) of one chunk."""

    results: Optional[pa.Table]
    failures: List[Dict[str, str]] = field(default_factory=list)


def classify(exc: BaseException) -> str:
    """'transient', 'infeasible', 'oom' or 'error'."""
    if isinstance(exc, (TransientError, ConnectionError)):
        return "transient"
    if isinstance(exc, InfeasibleError):
        return STATUS_INFEASIBLE
    if isinstance(exc, MemoryError) or type(exc).__name__ == "OutOfMemoryError":
        return STATUS_OOM
    return "error"


def status_rows(points: pa.Table, schema: pa.Schema, status: str, reason: Optional[str]) -> pa.Table:
    """Rows of ``schema`` for ``points`` that carry only the point and its status."""
    n = points.num_rows
    columns = []
    for f in schema:
        if f.name == "status":
            columns.append(pa.array([status] * n, f.type))
        elif f.name == "reason":
            columns.append(pa.array([reason] * n, f.type))
        elif f.name in points.column_names:
            columns.append(points.column(f.name).cast(f.type))
        else:
            columns.append(pa.nulls(n, f.type))
    return pa.Table.from_arrays(columns, schema=schema)


def _failure(points: pa.Table, exc: BaseException) -> List[Dict[str, str]]:
    text = "".join(traceback.format_exception(exc))
    return [dict(point_key=key, status="error", error_type=type(exc).__name__, message=str(exc), traceback=text)
            for key in points.column("key").to_pylist()]


def _one_point(body: Callable, point: pa.Table, context: Any, schema: pa.Schema) -> ChunkOutcome:
    try:
        return ChunkOutcome(body(point, context))
    except BaseException as exc:  # noqa: BLE001 - sorted below, bugs kept with their traceback
        kind = classify(exc)
        if kind == "transient" or isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        if kind == "error":
            return ChunkOutcome(None, _failure(point, exc))
        return ChunkOutcome(status_rows(point, schema, kind, f"{type(exc).__name__}: {exc}"))


def run_chunk(body: Callable[[pa.Table, Any], pa.Table], points: pa.Table, context: Any,
              schema: pa.Schema) -> ChunkOutcome:
    """Run ``body(points, context)``; on an exception, run each point alone and sort.

    Transient exceptions propagate (the caller retries the chunk). Returned result rows
    follow ``schema``, which must have ``key``, ``status`` and ``reason`` columns.
    """
    try:
        return ChunkOutcome(body(points, context))
    except BaseException as exc:  # noqa: BLE001
        if classify(exc) == "transient" or isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
    results, failures = [], []
    for i in range(points.num_rows):
        outcome = _one_point(body, points.slice(i, 1), context, schema)
        if outcome.results is not None:
            results.append(outcome.results.cast(schema))
        failures.extend(outcome.failures)
    return ChunkOutcome(pa.concat_tables(results) if results else None, failures)
