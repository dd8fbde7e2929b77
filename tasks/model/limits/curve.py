"""Where a utilisation-against-compute curve turns: the training FLOP beyond which the best
achievable utilisation stays under a share of its small-run level (the data-movement limit),
and the FLOP beyond which no layout finishes within the duration (the wall). Erdil and
Schneider-Joseph (arXiv 2411.01137) call them the point where data movement "begins to
significantly lower hardware utilization" and the "latency wall".

Their wall is one of latency: a step can last no less than its chain of kernel launches and
collective latency steps, and a run no less than its steps times that. Beside the wall the step
model sets, ``floor_wall_flop`` asks their question of the runs found: the FLOP beyond which
the latency floor alone of each point's fastest run (``latency_s``: every kernel and
collective moving no bytes and doing no FLOPs, ``tasks.model.step.comm.latency_floor``) times
its steps outlasts the duration. What lies between the two walls is what the step model
charges beyond latency: bandwidth, pipeline bubbles and compute at the finest splits."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, List, Optional, Sequence

from tasks.model.terms.train_time import SECONDS_PER_DAY

__all__ = ["Thresholds", "thresholds", "floor_days", "floor_fits", "curve_thresholds"]


@dataclass(frozen=True)
class Thresholds:
    """``plateau``: the utilisation of the curve's smallest run that finishes; ``drop_flop``:
    the FLOP beyond which utilisation stays under ``drop`` x plateau (log-linear between the
    last point at or above that level and the next; a point that does not finish counts as
    0), so that one point dipping under it on the grid's coarse device counts does not set
    it; ``wall_flop``: the geometric midpoint between the last run that finishes and the
    first after it that does not; ``floor_wall_flop``: the same for the runs' latency floors
    (``floor_fits``), from the same first finishing run. None where the curve does not get
    there within its grid (or, for ``floor_wall_flop``, where no floors were given)."""

    plateau: float
    drop: float
    drop_flop: Optional[float]
    wall_flop: Optional[float]
    floor_wall_flop: Optional[float] = None


def _crossing(x0: float, y0: float, x1: float, y1: float, level: float) -> float:
    """The x (FLOP) where the line through (log x0, y0), (log x1, y1) meets ``level``."""
    if y0 == y1:
        return x1
    share = (y0 - level) / (y0 - y1)
    return 10 ** (math.log10(x0) + share * (math.log10(x1) - math.log10(x0)))


def _first_break(flop: Sequence[float], holds: Sequence[bool]) -> Optional[float]:
    """The geometric midpoint of the first neighbours (in increasing ``flop``) of which the
    first ``holds`` and the second does not; None where there are none."""
    return next((math.sqrt(a * b) for a, b, ok, next_ok in zip(flop, flop[1:], holds, holds[1:]) if ok and not next_ok),
                None)


def floor_days(latency_s: Optional[float], steps: float) -> Optional[float]:
    """Days a run's latency floor per step (s) takes over its ``steps``; None for a run without
    a floor (None or NaN: no layout)."""
    if latency_s is None or not math.isfinite(latency_s):
        return None
    return latency_s * float(steps) / SECONDS_PER_DAY


def floor_fits(latency_s: Sequence[Optional[float]], steps: Sequence[float],
               duration_days: Sequence[float]) -> List[bool]:
    """Whether each run's latency floor over its steps (``floor_days``) fits within its
    duration (days); a run without a floor does not."""
    return [(d := floor_days(lat, n)) is not None and d <= days
            for lat, n, days in zip(latency_s, steps, duration_days)]


def thresholds(flop: Sequence[float], utilization: Sequence[float], finished: Sequence[bool],
               drop: float, floor_fit: Optional[Sequence[bool]] = None) -> Thresholds:
    """The curve's ``Thresholds`` (class docstring), its points in increasing ``flop``; a point
    that does not finish has no utilisation (``utilization`` is read only where ``finished``);
    ``floor_fit``: ``floor_fits`` of the same points, for ``floor_wall_flop``."""
    order = sorted(range(len(flop)), key=lambda i: flop[i])
    points = [(flop[i], utilization[i], finished[i]) for i in order]
    first = next((i for i, p in enumerate(points) if p[2]), None)
    if first is None:
        return Thresholds(plateau=0.0, drop=drop, drop_flop=None, wall_flop=None)
    plateau = points[first][1]
    level = drop * plateau
    values = [(x, y if ok else 0.0) for x, y, ok in points[first:]]
    last_above = max(i for i, (_, y) in enumerate(values) if y >= level)
    drop_flop = None
    if last_above + 1 < len(values):
        (x0, y0), (x1, y1) = values[last_above], values[last_above + 1]
        drop_flop = _crossing(x0, y0, x1, y1, level)
    xs = [x for x, _, _ in points[first:]]
    wall_flop = _first_break(xs, [ok for _, _, ok in points[first:]])
    floor_wall = None if floor_fit is None else _first_break(xs, [bool(floor_fit[i]) for i in order[first:]])
    return Thresholds(plateau=plateau, drop=drop, drop_flop=drop_flop, wall_flop=wall_flop, floor_wall_flop=floor_wall)


def curve_thresholds(curve: Any, drop: float) -> Thresholds:
    """``thresholds`` of one scenario's ``limits`` rows, ``curve``: anything whose columns
    ``flop``, ``utilization``, ``status``, ``latency_s``, ``steps`` and ``duration_days`` read
    as sequences by name (a DataFrame); a run finishes where its status is "ok"."""
    def column(name: str) -> list:
        return list(curve[name])

    return thresholds(column("flop"), column("utilization"), [s == "ok" for s in column("status")], drop,
                      floor_fits(column("latency_s"), column("steps"), column("duration_days")))
